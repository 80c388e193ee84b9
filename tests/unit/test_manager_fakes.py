"""Fakes for the manager's unit tests: a timeline with the contract of
collapsar.timeline (the TCAL tree's fake is tests/fake_tc.py).  They check
their inputs as strictly as the real ones are documented to, so a manager bug
shows up as a failure here rather than in the kernel tier."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from fake_tc import FakeTree

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

    def cut_off(self, candidates) -> set[str]:
        """As NetworkState.cut_off: those no other instance has a path to."""
        return {dst for dst in candidates if not any(self.path(src, dst) for src in self.instances if src != dst)}


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
