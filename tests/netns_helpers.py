"""Network namespaces for the root tiers (tests/kernel on this host, tests/vm in the VM).

A `NetnsFactory` makes sender/receiver namespace pairs joined by a veth pair
and records every namespace it made, so `cleanup()` deletes exactly those, by
name, never by pattern.  The receiver carries `n_dst` addresses so
classification by destination can be tested over one link.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import dataclass

import pytest

_counter = itertools.count()


def sh(*argv: str, ns: str | None = None, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """Run a command (inside namespace `ns` if given), capturing its text output."""
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


class NetnsFactory:
    """Makes namespace pairs and remembers them for `cleanup()`."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def make(self, n_dst: int = 1, mtu: int = 1500) -> NetnsPair:
        # The pid keeps concurrent test runs apart; the counter, pairs in one run.
        tag = f"{os.getpid() % 100000}x{next(_counter)}"
        pair = NetnsPair(
            f"cxs{tag}", f"cxd{tag}", "veth0", "veth1", "10.199.0.1", [f"10.199.1.{i + 1}" for i in range(n_dst)]
        )
        for ns in (pair.src_ns, pair.dst_ns):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        sh(
            "ip",
            "link",
            "add",
            pair.src_if,
            "netns",
            pair.src_ns,
            "type",
            "veth",
            "peer",
            "name",
            pair.dst_if,
            "netns",
            pair.dst_ns,
        )
        for ns, ifname in ((pair.src_ns, pair.src_if), (pair.dst_ns, pair.dst_if)):
            sh("ip", "link", "set", ifname, "mtu", str(mtu), "up", ns=ns)
        sh("ip", "addr", "add", f"{pair.src_ip}/16", "dev", pair.src_if, ns=pair.src_ns)
        for ip in pair.dst_ips:
            sh("ip", "addr", "add", f"{ip}/16", "dev", pair.dst_if, ns=pair.dst_ns)
        return pair

    def cleanup(self) -> None:
        while self.made:
            sh("ip", "netns", "del", self.made.pop(), check=False)


@pytest.fixture
def make_netns_pair():
    """A factory fixture: `make_netns_pair(n_dst=3)`; everything it made is
    deleted after the test.  Root tiers import it into their conftest."""
    factory = NetnsFactory()
    yield factory.make
    factory.cleanup()
