"""Kernel tier: root and network namespaces on this host's kernel.

`make_netns_pair` / `netns_pair` give a sender namespace and a receiver
namespace joined by a veth pair (tests/netns_helpers.py, shared with the VM
tier); the receiver carries `n_dst` addresses so classification by
destination can be tested with one link."""

import os

import pytest

from netns_helpers import NetnsPair, make_netns_pair  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True, scope="session")
def _need_root():
    if os.geteuid() != 0:
        pytest.fail("tests/kernel needs root (CAP_NET_ADMIN); run as root or set COLLAPSAR_SKIP_KERNEL=1")


@pytest.fixture
def netns_pair(make_netns_pair) -> NetnsPair:
    return make_netns_pair()
