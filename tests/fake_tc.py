"""The one fake TCAL tree of the tests: the contract of collapsar.tcal's
TcTree, kept in memory.  It checks its inputs as strictly as the real tree is
documented to (unknown destinations, delay without netem), so a manager bug
shows up in the unit tier rather than in the kernel tier.  Unit tests read
its calls; the multi-manager harness (share_peer.py) reads its classes."""

from __future__ import annotations

import dataclasses

from collapsar.errors import CollapsarError
from collapsar.tcal.plan import Shaping


class FakeTree:
    """Records every call; rejects what the real TcTree rejects."""

    made: list[FakeTree] = []

    def __init__(self, ifname: str, netns: str | None = None, wire_overhead: bool = True, netem: bool = True):
        self.ifname, self.netns, self.netem = ifname, netns, netem
        self.shapings: dict[str, Shaping] = {}
        self.cut_ips: set[str] = set()
        self.calls: list[tuple] = []
        self.is_setup = False
        FakeTree.made.append(self)

    def _check_netem(self, shaping: Shaping) -> None:
        if not self.netem and (shaping.delay_us or shaping.jitter_us or shaping.loss_ratio):
            raise CollapsarError(f"destination {shaping.dst_ip}: needs netem")

    def _need(self, dst_ip: str) -> None:
        if dst_ip not in self.shapings:
            raise CollapsarError(f"destination {dst_ip}: not in the tree")

    def setup(self, shapings):
        assert not self.is_setup, "setup twice"
        for s in shapings:
            self._check_netem(s)
            self.shapings[s.dst_ip] = s
        self.is_setup = True
        self.calls.append(("setup", tuple(s.dst_ip for s in shapings)))

    def add(self, shaping):
        assert self.is_setup
        if shaping.dst_ip in self.shapings:
            raise CollapsarError(f"destination {shaping.dst_ip}: already in the tree")
        self._check_netem(shaping)
        self.shapings[shaping.dst_ip] = shaping
        self.calls.append(("add", shaping.dst_ip))

    def change_many(self, changes):
        for ip, fields in changes.items():
            self._need(ip)
            new = dataclasses.replace(self.shapings[ip], **fields)
            self._check_netem(new)
            self.shapings[ip] = new
        self.calls.append(("change_many", {ip: dict(f) for ip, f in changes.items()}))

    def change(self, dst_ip, **fields):
        self.change_many({dst_ip: fields})

    def cut(self, dst_ip):
        self._need(dst_ip)
        self.cut_ips.add(dst_ip)
        self.calls.append(("cut", dst_ip))

    def restore(self, dst_ip):
        self._need(dst_ip)
        self.cut_ips.discard(dst_ip)
        self.calls.append(("restore", dst_ip))

    def remove(self, dst_ip):
        self._need(dst_ip)
        del self.shapings[dst_ip]
        self.calls.append(("remove", dst_ip))

    def teardown(self):
        self.calls.append(("teardown",))
