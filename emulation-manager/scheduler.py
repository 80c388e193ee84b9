"""Fire callbacks at absolute times on the monotonic clock, and log how late.

Deadlines are absolute (t0 + at_us), never "sleep the gap since the last
one", so lateness does not accumulate over a run.  The wait sleeps until
shortly before the deadline, then sleeps in tiny steps: a plain sleep of the
whole gap overshoots by the timer slack, a pure spin would burn a core.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

SPIN_WINDOW_NS = 2_000_000  # wake this early, then close in on the deadline
REALTIME_PRIORITY = 10  # SCHED_FIFO, low among real-time tasks: above every normal one


def try_realtime() -> bool:
    """Put the calling thread under SCHED_FIFO if allowed (root).

    On a loaded machine a normal thread waking from its sleep waits for a
    core behind every runnable task: measured here at load 10 on 2 cores,
    lateness p99 was 30 ms under SCHED_OTHER.  The thread only sleeps and
    applies short steps, so real-time priority cannot starve the host.
    SCHED_RESET_ON_FORK: commands started by a join event must not inherit it."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(REALTIME_PRIORITY))
    except OSError:  # EPERM without CAP_SYS_NICE: run at normal priority
        return False
    return True


@dataclass(frozen=True)
class Fired:
    """One entry of the event log (times relative to the run's t0)."""

    index: int
    label: str
    scheduled_us: int
    started_us: int  # when the callback began
    applied_us: int  # when its first phase returned: the emulated state is in force
    done_us: int  # when its follow-up (e.g. starting joined commands) returned
    error: str | None = None

    @property
    def lateness_us(self) -> int:
        """How long after its time the step was in force."""
        return self.applied_us - self.scheduled_us

    def as_dict(self) -> dict:
        return {"index": self.index, "label": self.label, "scheduled_us": self.scheduled_us,
                "started_us": self.started_us, "applied_us": self.applied_us,
                "done_us": self.done_us, "lateness_us": self.lateness_us, "error": self.error}


def percentile(values: list[int], fraction: float) -> int:
    """Nearest-rank percentile (no interpolation: it is a value that occurred)."""
    if not values:
        raise ValueError("percentile of nothing")
    ordered = sorted(values)
    rank = max(1, -(-int(round(fraction * 1000)) * len(ordered) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


class Scheduler:
    def __init__(self, entries: list[tuple[int, str, Callable[[], None]]],
                 clock_ns: Callable[[], int] = time.monotonic_ns, realtime: bool = True):
        """entries: (at_us, label, callback), in any order; ties keep their order.
        realtime: start() asks for SCHED_FIFO on its thread (see try_realtime)."""
        self.realtime = realtime
        self.is_realtime = False
        self._entries = sorted(enumerate(entries), key=lambda item: (item[1][0], item[0]))
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self.log: list[Fired] = []
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
            ready.set()
            go.wait()
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
        for index, (at_us, label, callback) in self._entries:
            if not self._wait_until(t0_ns + at_us * 1000):
                break
            started = self._clock_ns()
            error, follow_up = None, None
            try:
                follow_up = callback()
            except Exception as exc:  # logged, and reported by the caller
                error = f"{type(exc).__name__}: {exc}"
            applied = self._clock_ns()
            if callable(follow_up):
                try:
                    follow_up()
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
            self.log.append(Fired(index, label, at_us, rel(started), rel(applied),
                                  rel(self._clock_ns()), error))
        return self.log
