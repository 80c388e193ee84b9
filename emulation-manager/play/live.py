"""A timeline player whose future can be replaced while it runs.

`Player` (collapsar.manager.play.player) plays one precomputed timeline from t=0
to the end.  An ad-hoc link change at run time (the control API) changes the
future: from that moment on, every later step must carry the change too,
unless a later event sets the same property again.  Rather than patching
precomputed states, the control side rebuilds the whole timeline with the
change as one more `set` event, and `LivePlayer.replace` swaps it in:

  pause the running segment (its thread finishes the step it is in, if any)
  -> base = the new timeline's state at the last step applied so far
  -> a new `Player` over (base, every later step), on the same t=0.

Steps that came due during the pause fire at once and their lateness says
so in the event log.  Each segment's log is kept: the event log is the
concatenation, renumbered, with the ad-hoc steps marked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import SimpleNamespace

from collapsar.manager.experiment import all_instances, paths_from
from collapsar.manager.play.player import (
    Player,
    describe_event,
    first_paths,
    guard_changes,
    lineages,
    set_all_paths,
)
from collapsar.manager.play.scheduler import Fired, try_realtime
from collapsar.model import Path


@dataclass(frozen=True)
class LiveFired(Fired):
    """An event-log entry that knows whether it came from the control API."""

    adhoc: bool = False

    def as_dict(self) -> dict:
        return {**super().as_dict(), "adhoc": self.adhoc}


class LivePlayer:
    """Same surface as `Player` (start, stop, log, pending, last_start_us),
    plus `start(t0_ns)` on a given t=0 and `replace(timeline, ...)`."""

    def __init__(self, timeline, actuator, local: set[str] | None = None):
        self.timeline = timeline
        self.actuator = actuator
        self.local = local
        self.t0_ns: int | None = None
        self._history: list[LiveFired] = []
        self._adhoc: dict[int, str] = {}  # at_us -> label of the ad-hoc change
        self._lock = threading.Lock()  # one replace at a time, and none after stop
        self._log_lock = threading.Lock()
        self.stopped = False
        self._segment = Player(timeline, actuator, local)
        # While a change is applied (pause .. replace/resume), the stopped
        # segment: what it had not fired yet is what the status reports as
        # pending and upcoming, not the empty stand-in.
        self._paused: Player | None = None
        self._marked: tuple[Player, list[LiveFired]] = (self._segment, [])
        self.last_start_us = self._segment.last_start_us

    # ---- the Player surface ---------------------------------------------------

    @property
    def started(self) -> bool:
        return self.t0_ns is not None

    def start(self, t0_ns: int | None = None) -> int:
        """Start playing; returns t=0 (monotonic ns).  With `t0_ns`, the
        timeline runs on that t=0 (used when a segment is swapped in)."""
        if t0_ns is None:
            t0_ns = self._segment.start()
            self.t0_ns = t0_ns
        else:
            self._run_segment(t0_ns)
        return t0_ns

    def _run_segment(self, t0_ns: int) -> None:
        if self.stopped:
            return
        scheduler = self._segment.scheduler

        def body() -> None:
            if scheduler.realtime:
                scheduler.is_realtime = try_realtime()
            scheduler.run(t0_ns)

        self.t0_ns = scheduler.t0_ns = t0_ns
        scheduler.thread = threading.Thread(target=body, name="timeline", daemon=True)
        scheduler.thread.start()

    def lineages(self) -> dict[str, dict[str, Hashable]]:
        """Each pair's bulk changes over the timeline (player.lineages)."""
        return lineages(self._segment.plans)

    def first_paths(self, dsts: AbstractSet[str]) -> dict[str, dict[str, Path]]:
        """src -> dst -> the first path each of `dsts` gets (player.first_paths)."""
        return first_paths(self._segment.plans, dsts)

    def stop(self) -> None:
        with self._lock:  # a change being applied finishes first; none starts after
            self.stopped = True
            self._segment.stop()

    @property
    def log(self) -> list[LiveFired]:
        with self._log_lock:  # read by the status loop while a change may swap segments
            segment, marked = self._segment, self._marked
            fired = segment.log
            if marked[0] is not segment:  # a new segment: its entries are marked afresh
                marked = self._marked = (segment, [])
            if len(marked[1]) < len(fired):  # mark only what fired since the last call
                marked[1].extend(self._mark(fired[len(marked[1]) :], len(self._history) + len(marked[1])))
            return self._history + marked[1]

    @property
    def pending(self) -> int:
        with self._log_lock:
            segment = self._paused or self._segment
        return segment.pending

    def upcoming(self, limit: int = 50) -> list[dict]:
        """The next steps still to fire: time and what they do."""
        with self._log_lock:
            segment = self._paused or self._segment
        steps = segment.timeline.steps[1 + len(segment.log) :]
        return [
            {"at_us": step.at_us, "label": "; ".join(describe_event(e) for e in step.events)} for step in steps[:limit]
        ]

    @property
    def last_at_us(self) -> int:
        return self.timeline.steps[-1].at_us if self.timeline.steps else 0

    def _mark(self, fired: list[Fired], first_index: int) -> list[LiveFired]:
        out = []
        for offset, entry in enumerate(fired):
            adhoc = self._adhoc.get(entry.scheduled_us)
            label = entry.label if adhoc is None else f"ad-hoc: {adhoc}"
            out.append(
                LiveFired(**{**entry.__dict__, "index": first_index + offset, "label": label}, adhoc=adhoc is not None)
            )
        return out

    # ---- swapping the future ----------------------------------------------------

    def now_us(self) -> int:
        """Experiment time; 0 until started."""
        if self.t0_ns is None:
            return 0
        return (time.monotonic_ns() - self.t0_ns) // 1000

    def pause(self) -> int:
        """Stop the running segment; returns the time of the last step applied
        (-1 before start: nothing but the t=0 shaping is in force)."""
        if self.t0_ns is None:
            return -1
        self._segment.stop()
        history = self.log
        with self._log_lock:  # history and segment change together: no entry counted twice
            self._history = history
            self._paused = self._segment
            self._segment = Player(
                SimpleNamespace(steps=self.timeline.steps[:1]), self.actuator, self.local
            )  # empty until replace/resume
        return max((entry.scheduled_us for entry in self._history), default=0)

    def replace(self, timeline, applied_at_us: int, adhoc_at_us: int, label: str) -> None:
        """Play `timeline` from after `applied_at_us` (what `pause` returned).

        Before start (`applied_at_us` -1), the change goes straight onto the
        t=0 shaping, compared path by path with what the old timeline set."""
        old = self.timeline
        self.timeline = timeline
        self._adhoc[adhoc_at_us] = label
        if applied_at_us < 0:
            self._apply_diff(old.steps[0].state, timeline.steps[0].state)
            with self._log_lock:
                self._segment = Player(timeline, self.actuator, self.local)
                self._paused = None
                # Part of the t=0 shaping, so no step of its own: log it here.
                self._history.append(LiveFired(len(self._history), f"ad-hoc: {label}", 0, 0, 0, 0, adhoc=True))
            return
        self.resume(applied_at_us)

    def resume(self, applied_at_us: int) -> None:
        """Play the current timeline's steps after `applied_at_us`, planned
        against the step in force then (also: after a refused change)."""
        if applied_at_us < 0:
            return
        steps = self.timeline.steps
        base = steps[max(i for i, step in enumerate(steps) if step.at_us <= applied_at_us)]
        later = tuple(step for step in steps if step.at_us > applied_at_us)
        with self._log_lock:
            self._segment = Player(SimpleNamespace(steps=(base, *later)), self.actuator, self.local)
            self._paused = None
        assert self.t0_ns is not None  # pause() gives a time >= 0 only once started
        self._run_segment(self.t0_ns)

    def _apply_diff(self, before, after) -> None:
        instances = all_instances(self.timeline)
        changes: dict[str, dict[str, Path | None]] = {}
        for src in instances:
            if self.local is not None and src not in self.local:
                continue
            old, new = paths_from(before, src, instances), paths_from(after, src, instances)
            changed = {dst: path for dst, path in new.items() if old.get(dst) != path}
            if changed:
                changes[src] = changed
        # Who no one reaches is known only where every source is (as in plan_step).
        cut_off, reached = guard_changes(before, after, changes) if self.local is None else ([], [])
        set_all_paths(self.actuator, changes, cut_off, reached)

    @property
    def lock(self) -> threading.Lock:
        return self._lock
