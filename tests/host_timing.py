"""How well this host itself keeps time, measured alongside a timing test.

On a virtual machine whose host is oversubscribed, a halted virtual CPU can
wait milliseconds, at times hundreds, for the hypervisor to run it again
when its timer fires.  Measured on this project's development VM at idle:
a SCHED_FIFO thread waking every 1 ms was late by up to 24-670 ms within
4 s; with both CPUs kept busy (never halted), by at most 1-10 ms.  No code
inside the guest can be more punctual than the guest's own wake-ups, so a
test of Collapsar's punctuality states its bound on top of what
`HostTimer` saw during the same run: on a quiet host that is the bound
itself.

HostTimer runs cyclictest (Debian's rt-tests: one SCHED_FIFO thread per
CPU, at the timeline thread's priority, waking every `interval_us`) for the
length of a `with` block.  `quietest` repeats a measurement, up to a few
times, until the host was quiet during one, and hands back the quietest:
bursts of such stalls come and go, and a measurement taken through one
measures the host.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

PRIORITY = 10  # the timeline thread's (collapsar.manager.play.scheduler.REALTIME_PRIORITY)
HISTOGRAM_US = 50_000  # buckets of 1 us up to here; later wake-ups count as overflows
QUIET_P99_US = 1_000  # a host that woke 99% of the time within this and never later than
QUIET_MAX_US = 20_000  # this (an idle bare-metal machine: tens of us) counts as quiet


@dataclass
class HostWakeups:
    samples: int
    p99_us: int  # HISTOGRAM_US + 1 when beyond the histogram
    max_us: int

    def __str__(self) -> str:
        return f"host wake-ups: {self.samples} samples, p99 {self.p99_us} us, max {self.max_us} us"

    @property
    def quiet(self) -> bool:
        return self.p99_us <= QUIET_P99_US and self.max_us <= QUIET_MAX_US


class HostTimer:
    """with HostTimer() as timer: ...; then timer.result (HostWakeups)."""

    def __init__(self, interval_us: int = 1000):
        self.interval_us = interval_us
        self.result: HostWakeups | None = None
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> HostTimer:
        tool = shutil.which("cyclictest")
        if tool is None:
            raise RuntimeError("cyclictest not found: apt-get install rt-tests (deps/apt-test.txt)")
        self._proc = subprocess.Popen(
            [
                tool,
                "--threads",
                "--affinity",
                "--priority",
                str(PRIORITY),
                "--interval",
                str(self.interval_us),
                "--distance",
                "0",
                "--quiet",
                "--histogram",
                str(HISTOGRAM_US),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        return self

    def __exit__(self, *exc) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGINT)
        out, _ = self._proc.communicate(timeout=30)
        self.result = parse_histogram(out)


def parse_histogram(text: str) -> HostWakeups:
    """cyclictest --histogram output: one row per microsecond with a count per
    thread, then '# Max Latencies:' and '# Histogram Overflows:' lines."""
    counts: dict[int, int] = {}
    overflows = max_us = 0
    for line in text.splitlines():
        if line[:1].isdigit():
            us, *per_thread = line.split()
            counts[int(us)] = sum(map(int, per_thread))
        elif line.startswith("# Max Latencies:"):
            max_us = max(map(int, re.findall(r"\d+", line)))
        elif line.startswith("# Histogram Overflows:"):
            overflows = sum(map(int, re.findall(r"\d+", line)))
    samples = sum(counts.values()) + overflows
    if not samples:
        raise RuntimeError(f"cyclictest measured nothing; its output began: {text[:200]!r}")
    seen, p99 = 0, HISTOGRAM_US + 1
    for us in sorted(counts):
        seen += counts[us]
        if seen >= 0.99 * samples:
            p99 = us
            break
    return HostWakeups(samples, p99, max_us)


def quietest(measure: Callable[[], T], attempts: int = 3) -> tuple[T, HostWakeups]:
    """measure() under a HostTimer, again while the host was not quiet, at
    most `attempts` times; the result taken on the quietest host (by p99,
    then max), with that host's figures."""
    runs = []
    for _ in range(attempts):
        with HostTimer() as timer:
            result = measure()
        runs.append((result, timer.result))
        if timer.result.quiet:
            break
    return min(runs, key=lambda run: (run[1].p99_us, run[1].max_us))
