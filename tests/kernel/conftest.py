"""Kernel tier: root and network namespaces on this host's kernel.

`netns_pair` gives a sender namespace and a receiver namespace joined by a
veth pair; the receiver carries `n_dst` addresses so classification by
destination can be tested with one link.  Everything made here is recorded
and deleted by name after the test, never swept by pattern."""

import itertools
import os
import subprocess
from dataclasses import dataclass

import pytest

_counter = itertools.count()


def sh(*argv: str, ns: str | None = None, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run([*prefix, *argv], check=check, text=True, capture_output=True, **kwargs)


@dataclass
class NetnsPair:
    src_ns: str
    dst_ns: str
    src_if: str
    dst_if: str
    src_ip: str
    dst_ips: list[str]


@pytest.fixture(autouse=True, scope="session")
def _need_root():
    if os.geteuid() != 0:
        pytest.fail("tests/kernel needs root (CAP_NET_ADMIN); run as root or set COLLAPSAR_SKIP_KERNEL=1")


@pytest.fixture
def make_netns_pair():
    made: list[str] = []

    def make(n_dst: int = 1, mtu: int = 1500) -> NetnsPair:
        tag = f"{os.getpid() % 100000}x{next(_counter)}"
        pair = NetnsPair(f"cxs{tag}", f"cxd{tag}", "veth0", "veth1",
                         "10.199.0.1", [f"10.199.1.{i + 1}" for i in range(n_dst)])
        for ns in (pair.src_ns, pair.dst_ns):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "link", "add", pair.src_if, "netns", pair.src_ns, "type", "veth",
           "peer", "name", pair.dst_if, "netns", pair.dst_ns)
        sh("ip", "link", "set", pair.src_if, "mtu", str(mtu), "up", ns=pair.src_ns)
        sh("ip", "link", "set", pair.dst_if, "mtu", str(mtu), "up", ns=pair.dst_ns)
        sh("ip", "addr", "add", f"{pair.src_ip}/16", "dev", pair.src_if, ns=pair.src_ns)
        for ip in pair.dst_ips:
            sh("ip", "addr", "add", f"{ip}/16", "dev", pair.dst_if, ns=pair.dst_ns)
        return pair

    yield make
    for ns in reversed(made):
        sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def netns_pair(make_netns_pair) -> NetnsPair:
    return make_netns_pair()
