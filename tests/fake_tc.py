"""The one fake TCAL tree of the tests: the contract of collapsar.tcal's
trees (collapsar.tcal.contract.ShapingTree), kept in memory.  It checks its
inputs as strictly as the real tree is documented to (unknown destinations,
delay without netem), so a manager bug shows up in the unit tier rather than
in the kernel tier.  Unit tests read its calls (a change is recorded as the
fields it sets, by name); the multi-manager harness (share_peer.py) reads
its classes."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping, Sequence

from collapsar.egress import EgressBucket
from collapsar.errors import CollapsarError
from collapsar.tcal.bucket import TbfParams, tbf_params
from collapsar.tcal.contract import ShapingChange
from collapsar.tcal.plan import Shaping
from collapsar.trafficclasses import TrafficClasses


class FakeTree:
    """Records every call; rejects what the real TcTree rejects."""

    made: list[FakeTree] = []

    def __init__(
        self,
        ifname: str,
        netns: str | None = None,
        wire_overhead: bool = True,
        netem: bool = True,
        bucket: EgressBucket | None = None,
        classes: TrafficClasses | None = None,
    ):
        self.ifname, self.netns, self.netem, self.wire_overhead = ifname, netns, netem, wire_overhead
        self.bucket, self.classes = bucket, classes  # recorded: the real tree's policy above and below its classes
        self.bucket_sent = 0
        self.bucket_params: TbfParams | None = None  # set by setup, as TcTree does
        self.shapings: dict[str, Shaping] = {}
        self.cut_ips: set[str] = set()
        self.calls: list[tuple] = []
        self.is_setup = False
        self.all_cut = False
        self.groups: dict[str, Hashable] = {}  # setup's grouping hint, recorded
        FakeTree.made.append(self)

    def _check_netem(self, shaping: Shaping) -> None:
        if not self.netem and shaping.needs_netem:
            raise CollapsarError(f"destination {shaping.dst_ip}: needs netem")

    def _need(self, dst_ip: str) -> None:
        if dst_ip not in self.shapings:
            raise CollapsarError(f"destination {dst_ip}: not in the tree")

    def setup(self, shapings: Sequence[Shaping], groups: Mapping[str, Hashable] | None = None) -> None:
        assert not self.is_setup, "setup twice"
        self.groups = dict(groups or {})
        for s in shapings:
            self._check_netem(s)
            self.shapings[s.dst_ip] = s
        self.is_setup = True
        if self.bucket is not None:
            self.bucket_params = tbf_params(self.bucket, wire_overhead=self.wire_overhead)
        self.calls.append(("setup", tuple(s.dst_ip for s in shapings)))

    def add(self, shaping: Shaping) -> None:
        assert self.is_setup
        if shaping.dst_ip in self.shapings:
            raise CollapsarError(f"destination {shaping.dst_ip}: already in the tree")
        self._check_netem(shaping)
        self.shapings[shaping.dst_ip] = shaping
        self.calls.append(("add", shaping.dst_ip))

    def change_many(self, changes: Mapping[str, ShapingChange]) -> None:
        for ip, change in changes.items():
            self._need(ip)
            new = dataclasses.replace(self.shapings[ip], **change.values())
            self._check_netem(new)
            self.shapings[ip] = new
        self.calls.append(("change_many", {ip: change.values() for ip, change in changes.items()}))

    def change_groups(self, groups: Sequence[tuple[Sequence[str], ShapingChange]]) -> None:
        """Recorded as the change_many it amounts to."""
        self.change_many({ip: change for ips, change in groups for ip in ips})

    def change(self, dst_ip: str, **values: object) -> None:
        self.change_many({dst_ip: ShapingChange.of(**values)})

    def activate(self, dst_ips: Iterable[str]) -> int:
        """Every destination has a class of its own here, as in TcTree; the call is recorded."""
        ips = tuple(dst_ips)
        for ip in ips:
            self._need(ip)
        self.calls.append(("activate", ips))
        return 0

    def cut(self, dst_ip: str) -> None:
        self._need(dst_ip)
        self.cut_ips.add(dst_ip)
        self.calls.append(("cut", dst_ip))

    def restore(self, dst_ip: str) -> None:
        self._need(dst_ip)
        self.cut_ips.discard(dst_ip)
        self.calls.append(("restore", dst_ip))

    def cut_all(self) -> None:
        assert not self.all_cut, "cut_all twice"
        self.all_cut = True
        self.calls.append(("cut_all",))

    def restore_all(self) -> None:
        assert self.all_cut, "restore_all without cut_all"
        self.all_cut = False
        self.calls.append(("restore_all",))

    def passes(self, dst_ip: str) -> bool:
        """Would a packet to dst_ip get through (what the kernel's tree decides)?"""
        return dst_ip in self.shapings and dst_ip not in self.cut_ips and not self.all_cut

    def remove(self, dst_ip: str) -> None:
        self._need(dst_ip)
        del self.shapings[dst_ip]
        self.calls.append(("remove", dst_ip))

    def bucket_sent_bytes(self) -> int | None:
        """The bucket's counter, as a test sets it in `bucket_sent` (None without a bucket)."""
        return None if self.bucket is None else self.bucket_sent

    def teardown(self) -> None:
        self.calls.append(("teardown",))
