"""Fire callbacks at absolute times on the monotonic clock, and log how late.

Deadlines are absolute (t0 + at_us), never "sleep the gap since the last
one", so lateness does not accumulate over a run.  The wait sleeps until
shortly before the deadline, then sleeps in tiny steps: a plain sleep of the
whole gap overshoots by the timer slack, a pure spin would burn a core.

Each callback runs inside a PreparedStep (collapsar.tcal.prepared), which
puts what it queued in force at the deadline in one call without the
interpreter lock; a player whose actuator only queues has its steps prepared
ahead (prepare_ahead_ns), so none of their Python runs at the deadline.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

from collapsar.tcal.prepared import PreparedStep, preload

SPIN_WINDOW_NS = 2_000_000  # wake this early, then close in on the deadline
MAX_LEAD_NS = 250_000_000  # the longest a step is prepared ahead (the hold, and so the sharing loop, waits that long)
# Steps prepared together (see Scheduler.group) are prepared at most this
# long before the first of them fires.
MAX_GROUP_LEAD_NS = 2 * MAX_LEAD_NS
LEAD_HISTORY = 8  # steps whose preparation times set the next step's lead
# A step's weight: Player gives 100 per source whose paths it changes and 1
# per path.  Until the run's own heavy steps say how long a unit takes on
# this host, the guess is 2.5 us (a 400-instance run on this 2-core VM, its
# sharing loop running: 1-2.5 us).
NS_PER_WEIGHT = 2_500
MIN_LEARNED_WEIGHT = 1_000  # lighter steps are mostly fixed costs: they teach nothing
REALTIME_PRIORITY = 10  # SCHED_FIFO, low among real-time tasks: above every normal one


def try_realtime() -> bool:
    """Put the calling thread under SCHED_FIFO if allowed (root).

    On a loaded machine a normal thread waking from its sleep waits for a
    core behind every runnable task: measured here at load 10 on 2 cores,
    lateness p99 was 30 ms under SCHED_OTHER.  The thread only sleeps and
    applies short steps, so real-time priority cannot starve the host.
    SCHED_RESET_ON_FORK: commands started by a join event must not inherit it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(REALTIME_PRIORITY))
    except OSError:  # EPERM without CAP_SYS_NICE: run at normal priority
        return False
    return True


@dataclass(frozen=True)
class Fired:
    """One entry of the event log (times relative to the run's t0)."""

    index: int
    label: str
    scheduled_us: int
    started_us: int  # when the deadline was reached and the prepared step began to fire
    applied_us: int  # when its first phase returned: the emulated state is in force
    done_us: int  # when its follow-up (e.g. starting joined commands) returned
    error: str | None = None
    prepared_us: int | None = None  # when its preparation ended (before started_us when prepared ahead)

    @property
    def lateness_us(self) -> int:
        """How long after its time the step was in force."""
        return self.applied_us - self.scheduled_us

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "label": self.label,
            "scheduled_us": self.scheduled_us,
            "started_us": self.started_us,
            "applied_us": self.applied_us,
            "done_us": self.done_us,
            "lateness_us": self.lateness_us,
            "error": self.error,
            "prepared_us": self.prepared_us,
        }


N = TypeVar("N", int, float)


def percentile(values: Sequence[N], fraction: float) -> N:
    """Nearest-rank percentile (no interpolation: it is a value that occurred)."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, -(-int(round(fraction * 1000)) * len(ordered) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


class Scheduler:
    def __init__(
        self,
        entries: list[tuple[int, str, Callable[[], None]]],
        clock_ns: Callable[[], int] = time.monotonic_ns,
        realtime: bool = True,
        prepare_ahead_ns: int = 0,
        hold: AbstractContextManager | None = None,
        weights: Sequence[int] | None = None,
    ):
        """entries: (at_us, label, callback), in any order; ties keep their order.
        realtime: start() asks for SCHED_FIFO on its thread (see try_realtime).

        Each callback runs inside a PreparedStep (collapsar.tcal.prepared):
        what it sends to the kernel or signals is queued, and fired at the
        deadline in one call that does not need the interpreter lock.  With
        prepare_ahead_ns the callback runs that long before the deadline; it
        must then do nothing at once (only queue, or step.record), which
        is why it is off by default.  `hold` (a lock) is held from the
        preparation until the step has fired: whoever else changes the same
        trees takes it too.  Where preparing (waking, taking the hold, the
        callback) took longer than half the lead in one of the last
        LEAD_HISTORY light steps, the lead grows to twice that, up to MAX_LEAD_NS.
        `weights` (one per entry) say how much work each step's preparation
        is: a step much heavier than those before it (the first link change
        that moves 80,000 paths) is prepared twice its predicted time ahead,
        rather than late by the difference."""
        self.realtime = realtime
        self.prepare_ahead_ns = prepare_ahead_ns
        self._hold = hold if hold is not None else nullcontext()
        self.is_realtime = False
        self._entries = sorted(enumerate(entries), key=lambda item: (item[1][0], item[0]))
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self.log: list[Fired] = []
        self._preparations: collections.deque[int] = collections.deque(maxlen=LEAD_HISTORY)
        self._weights = list(weights) if weights is not None else [0] * len(entries)
        self._ns_per_weight: collections.deque[float] = collections.deque(maxlen=LEAD_HISTORY)
        self.t0_ns: int | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> int:
        """Run on a thread of its own; return t=0.

        t=0 is taken only once that thread runs (with its priority raised):
        on a loaded host a new thread can wait tens of ms for its first
        slice, which must not count against the first event."""
        ready, go = threading.Event(), threading.Event()

        def body() -> None:
            if self.realtime:
                self.is_realtime = try_realtime()
            preload()
            ready.set()
            go.wait()
            assert self.t0_ns is not None  # taken before go is set
            self.run(self.t0_ns)

        self.thread = threading.Thread(target=body, name="timeline", daemon=True)
        self.thread.start()
        ready.wait()
        self.t0_ns = self._clock_ns()
        go.set()
        return self.t0_ns

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    @property
    def pending(self) -> int:
        return len(self._entries) - len(self.log)

    def stop(self) -> None:
        self._stop.set()

    def _wait_until(self, deadline_ns: int) -> bool:
        """False if stopped before the deadline."""
        while True:
            remaining = deadline_ns - self._clock_ns()
            if remaining <= 0:
                return True
            if remaining > SPIN_WINDOW_NS:
                if self._stop.wait((remaining - SPIN_WINDOW_NS) / 1e9):
                    return False
            else:
                if self._stop.is_set():
                    return False
                time.sleep(min(remaining, 200_000) / 1e9)

    def lead_ns(self, weight: int = 0) -> int:
        """How long before its deadline a step of `weight` is prepared: the
        base lead, or twice the longest recent preparation (from the planned
        wake to sealed: a late wake, waiting for the hold or the interpreter
        lock, the callback) where a host is that slow, or twice the step's
        predicted preparation, up to MAX_LEAD_NS."""
        if not self.prepare_ahead_ns:
            return 0
        longest = max(self._preparations, default=0)
        predicted = weight * max(self._ns_per_weight, default=NS_PER_WEIGHT)
        return int(min(MAX_LEAD_NS, max(self.prepare_ahead_ns, 2 * longest, 2 * predicted)))

    def _learn(self, weight: int, preparation_ns: int) -> None:
        """A heavy step teaches the host's time per unit of weight; a light
        one how late this host wakes and gets the hold.  Kept apart, so one
        heavy step does not make the light ones after it take the hold (and
        stop the sharing loop) long before their time."""
        if weight >= MIN_LEARNED_WEIGHT:
            self._ns_per_weight.append(preparation_ns / weight)
        else:
            self._preparations.append(preparation_ns)

    def run(self, t0_ns: int) -> list[Fired]:
        """Fire every entry at t0 + at_us; returns the log.  A callback may
        return a follow-up callable, run right after the step is logged as
        applied: work that is a consequence of the new state rather than part
        of it (a joined instance's command takes 3-5 ms to fork and exec; its
        network is in place before).  A failing callback is logged with its
        error and the rest still fire: one bad event must not freeze the rest
        of the timeline."""
        self.t0_ns = t0_ns
        rel = lambda ns: (ns - t0_ns) // 1000  # noqa: E731
        first = 0
        while first < len(self._entries):
            group, wake_ns = self.group(first, t0_ns)
            first += len(group)
            if not self._wait_until(wake_ns):
                break
            for index, at_us, label, prepared, started, applied, error in self._apply(group, t0_ns, wake_ns):
                self.log.append(
                    Fired(index, label, at_us, rel(started), rel(applied), rel(self._clock_ns()), error, rel(prepared))
                )
        return self.log

    def group(self, first: int, t0_ns: int) -> tuple[list[int], int]:
        """The steps from `first` on to prepare together, and when to wake
        for them.  A step prepared after the one before it fired may not be
        ready by its own deadline: its lead (twice its predicted
        preparation) reaches back past that deadline (a link change that
        moves 80,000 paths 200 ms after a light step, when it takes 130-250
        ms to prepare).  Such a step is prepared right after the one before
        it, both before the first of them fires; the group wakes its leads'
        sum ahead of that (at most MAX_GROUP_LEAD_NS), and the hold (the
        sharing loop) waits until the last has fired."""
        deadline = lambda position: t0_ns + self._entries[position][1][0] * 1000  # noqa: E731
        lead = lambda position: self.lead_ns(self._weights[self._entries[position][0]])  # noqa: E731
        group, total = [first], lead(first)
        while group[-1] + 1 < len(self._entries):
            following = group[-1] + 1
            more = lead(following)
            if deadline(following) - more >= deadline(group[-1]) or total + more > MAX_GROUP_LEAD_NS:
                break
            group.append(following)
            total += more
        return group, deadline(first) - total

    def _apply(self, group: list[int], t0_ns: int, wake_ns: int) -> Iterator[tuple]:
        """Prepare the group's steps in order (each callback queues what it
        does), then fire each at its deadline and run its follow-up; yields
        per step (index, at_us, label, prepared_ns, started_ns, applied_ns,
        error) once it is done.  A callback that fails part-way still fires
        what it queued before: the state in force is then the one the trees
        hold."""
        with self._hold:
            steps = []
            for position in group:
                index, (at_us, label, callback) = self._entries[position]
                error, follow_up = None, None
                step = PreparedStep(t0_ns + at_us * 1000)
                with step:
                    try:
                        follow_up = callback()
                    except Exception as exc:  # logged, and reported by the caller
                        error = f"{type(exc).__name__}: {exc}"
                step.seal()
                prepared = self._clock_ns()
                self._learn(self._weights[index], prepared - wake_ns)
                wake_ns = prepared  # the next one's preparation starts here
                steps.append((index, at_us, label, step, prepared, error, follow_up))
            for index, at_us, label, step, prepared, error, follow_up in steps:
                started, applied, errors = step.fire()
                if errors and error is None:
                    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
                    error = f"{type(errors[0]).__name__}: {errors[0]}{more}"
                if callable(follow_up):
                    try:
                        follow_up()
                    except Exception as exc:
                        error = f"{type(exc).__name__}: {exc}"
                yield index, at_us, label, prepared, started, applied, error
