"""The round-trip time the topology configured between two instances at a
time of the run.

RTT(a, b, t) is the one-way delay of the collapsed path a -> b plus that of
b -> a, in the timeline step in force at t (collapsar.timeline, built from
RUNDIR/experiment.yaml).  A step is in force from its applied time in the
run's event log (RUNDIR/events.json, relative to t0), or from its scheduled
time where the log is missing or never reached it.  Times of spans are
lined up with t0 through RUNDIR/t0 (both CLOCK_REALTIME of the run's host).

An ad-hoc change (a link changed through the control API while running) is
not in the experiment file: from the first one on, no RTT is known, and a
note says so.  Only delays count: serialisation at the path's bandwidth and
queueing are in the measured network time, not in this figure.
"""

from __future__ import annotations

import bisect

import numpy as np

from collapsar.graph import RunGraph
from collapsar.parser import parse_file
from collapsar.timeline import Timeline, build_timeline
from collapsar.tracing.load import RunInputs


class Expectation:
    """Intervals of the run, each with the timeline step in force (None: unknown)."""

    def __init__(self, timeline: Timeline, starts_us: list[int], steps: list[int | None], known: set[str]):
        self.timeline = timeline
        self.starts_us = starts_us  # first is 0: what comes before t=0 is in step 0's interval
        self.steps = steps
        self.known = known
        self._rtt: dict[tuple[int, str, str], int | None] = {}

    def __len__(self) -> int:
        return len(self.starts_us)

    def interval_at(self, t_us: np.ndarray) -> np.ndarray:
        at = np.searchsorted(np.array(self.starts_us, np.int64), t_us, side="right") - 1
        return np.maximum(at, 0)

    def rtt_us(self, interval: int, a: str, b: str) -> int | None:
        key = (interval, a, b)
        if key not in self._rtt:
            self._rtt[key] = self._compute(interval, a, b)
        return self._rtt[key]

    def changes(self, interval: int, pairs: list[tuple[str, str]]) -> bool:
        """Whether a path between one of `pairs` (either way) changed as `interval` began."""
        step = self.steps[interval]
        if step is None:
            return interval == 0 or self.steps[interval - 1] is not None
        changed = self.timeline.steps[step].changed
        return any((a, b) in changed or (b, a) in changed for a, b in pairs)

    def _compute(self, interval: int, a: str, b: str) -> int | None:
        step = self.steps[interval]
        if step is None or a not in self.known or b not in self.known:
            return None
        state = self.timeline.steps[step].state
        there, back = state.path(a, b), state.path(b, a)
        if there is None or back is None:
            return None
        return there.delay_us + back.delay_us


def intervals(timeline: Timeline, events: list[dict] | None) -> tuple[list[int], list[int | None], float | None]:
    """(start of each interval in us, its step or None, time of the first ad-hoc change in s)."""
    applied: dict[int, int] = {}
    adhoc_us: int | None = None
    for event in events or ():
        at = event.get("applied_us")
        at = event["scheduled_us"] if not isinstance(at, int) else at
        if event.get("adhoc"):
            adhoc_us = at if adhoc_us is None else min(adhoc_us, at)
        else:
            applied[event["scheduled_us"]] = max(at, applied.get(event["scheduled_us"], at))
    starts: list[int] = [0]
    steps: list[int | None] = [0]
    for index, step in enumerate(timeline.steps[1:], start=1):
        at = max(applied.get(step.at_us, step.at_us), starts[-1])
        if adhoc_us is not None and at >= adhoc_us:
            break
        starts.append(at)
        steps.append(index)
    if adhoc_us is not None:
        where = bisect.bisect_right(starts, adhoc_us)
        starts, steps = starts[:where] + [adhoc_us], steps[:where] + [None]
    return starts, steps, None if adhoc_us is None else adhoc_us / 1e6


def expectation(inputs: RunInputs) -> tuple[Expectation | None, list[str]]:
    """The run's expectation, or None and a note saying why there is none."""
    if inputs.experiment is None:
        return None, [f"no {inputs.run_dir / 'experiment.yaml'}: configured RTTs are not shown"]
    if inputs.t0_ns is None:
        return None, [f"no {inputs.run_dir / 't0'} (the run never reached t=0): configured RTTs are not shown"]
    experiment = parse_file(inputs.experiment)
    seen = set(inputs.spans.instances)
    known = {name for name in RunGraph(experiment).instances if name in seen}
    notes = (
        [f"instances not in the experiment (no configured RTT): {', '.join(sorted(seen - known))}"]
        if seen - known
        else []
    )
    if not known:
        return None, notes
    timeline = build_timeline(experiment, sorted(known))
    starts, steps, adhoc_s = intervals(timeline, inputs.events)
    if inputs.events is None and len(timeline.steps) > 1:
        notes.append("no events.json: steps are taken to apply at their scheduled times")
    if adhoc_s is not None:
        notes.append(
            f"an ad-hoc link change at {adhoc_s:g}s is not in experiment.yaml: configured RTTs "
            f"from then on are not shown"
        )
    return Expectation(timeline, starts, steps, known), notes
