"""Kernel tier: root and network namespaces on this host's kernel.

`make_netns_pair` / `netns_pair` give a sender namespace and a receiver
namespace joined by a veth pair (tests/netns_helpers.py, shared with the VM
tier); the receiver carries `n_dst` addresses so classification by
destination can be tested with one link.  `tree_factory` adds a TcTree on
the sender's side."""

import os

import pytest
from netns_helpers import NetnsPair, make_netns_pair  # noqa: F401 (a fixture)

from collapsar.tcal import TcTree


@pytest.fixture(autouse=True, scope="session")
def _need_root():
    if os.geteuid() != 0:
        pytest.fail("tests/kernel needs root (CAP_NET_ADMIN); run as root or set COLLAPSAR_SKIP_KERNEL=1")


@pytest.fixture
def netns_pair(make_netns_pair) -> NetnsPair:
    return make_netns_pair()


@pytest.fixture
def tree_factory(make_netns_pair):
    """`tree_factory(n_dst=3, **TcTree options)`: a namespace pair and a
    TcTree (not set up, netem off by default) on its sender side; torn down
    after the test."""
    made = []

    def make(n_dst=3, **kwargs):
        pair = make_netns_pair(n_dst=n_dst)
        kwargs.setdefault("netem", False)
        tree = TcTree(pair.src_if, pair.src_ns, **kwargs)
        made.append(tree)
        return pair, tree

    yield make
    for tree in made:
        tree.teardown()
