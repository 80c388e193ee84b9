"""Fakes for the manager's unit tests: a timeline with the contract of
collapsar.timeline, and a TCAL tree with the contract of collapsar.tcal.
They check their inputs as strictly as the real ones are documented to, so a
manager bug shows up as a failure here rather than in the kernel tier."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from collapsar.errors import CollapsarError
from collapsar.model import Path
from collapsar.tcal.plan import Shaping


def path(
    src: str,
    dst: str,
    delay_us: int = 0,
    rate_bps: int | None = 10_000_000,
    loss_ratio: float = 0.0,
    jitter_us: int = 0,
) -> Path:
    return Path(src, dst, delay_us, jitter_us, loss_ratio, rate_bps, (1,))


@dataclass
class FakeState:
    instances: list[str]
    table: dict[tuple[str, str], Path] = field(default_factory=dict)  # (src, dst) -> path
    disconnected: set[str] = field(default_factory=set)

    def path(self, src: str, dst: str) -> Path | None:
        return self.table.get((src, dst))

    def paths(self, sources=None):
        names = self.instances if sources is None else list(sources)
        for src in names:
            for dst in self.instances:
                if (src, dst) in self.table:
                    yield self.table[(src, dst)]

    def status(self, instance: str) -> str:
        return "disconnected" if instance in self.disconnected else "up"


@dataclass
class FakeStep:
    at_us: int
    events: tuple
    state: FakeState
    changed: set[tuple[str, str]]


@dataclass
class FakeTimeline:
    steps: list[FakeStep]


def full_mesh(instances: list[str], **props) -> dict[tuple[str, str], Path]:
    return {(a, b): path(a, b, **props) for a in instances for b in instances if a != b}


def timeline_of(states: list[tuple[int, tuple, FakeState]]) -> FakeTimeline:
    """Steps with `changed` computed as the real timeline defines it."""
    steps, prev = [], None
    for at_us, events, state in states:
        if prev is None:
            changed = set(state.table)
        else:
            keys = set(prev.table) | set(state.table)
            changed = {k for k in keys if prev.table.get(k) != state.table.get(k)}
        steps.append(FakeStep(at_us, events, state, changed))
        prev = state
    return FakeTimeline(steps)


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


def test_fake_tree_rejects_unknown_destination_like_the_real_one():
    tree = FakeTree("eth0", netem=False)
    tree.setup([Shaping("10.0.0.2", 1000)])
    with pytest.raises(CollapsarError, match="10.0.0.9: not in the tree"):
        tree.cut("10.0.0.9")
    with pytest.raises(CollapsarError, match="needs netem"):
        tree.change("10.0.0.2", delay_us=5)


def test_timeline_of_marks_changed_pairs_only():
    a = FakeState(["x", "y"], full_mesh(["x", "y"]))
    b = FakeState(["x", "y"], {**full_mesh(["x", "y"]), ("x", "y"): path("x", "y", rate_bps=5)})
    timeline = timeline_of([(0, (), a), (1000, (), b)])
    assert timeline.steps[1].changed == {("x", "y")}
    assert timeline.steps[0].changed == {("x", "y"), ("y", "x")}
