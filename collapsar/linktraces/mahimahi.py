"""Mahimahi's delivery traces: one whole millisecond per line, each an
opportunity to deliver one 1500-byte packet, the file repeating every
last-timestamp milliseconds; a step's rate is the opportunities in it."""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

from collapsar.errors import Problem, TopologyError, Where
from collapsar.linktraces.base import MAX_MAHIMAHI_LINES, MAX_TRACE_TIME_US, Problems, Trace, TraceStep
from collapsar.units import MAX_RATE_BPS, format_rate_bps

PACKET_BITS = 1500 * 8  # what one delivery opportunity carries


class MahimahiTrace(Trace):
    format = "mahimahi"
    fields = ("rate_bps",)

    def __init__(self, name: str, times_ms: array, lines: array):
        self.name = name
        self.times_ms = times_ms  # sorted; one entry per delivery opportunity
        self.lines = lines
        self.period_ms = times_ms[-1]

    @classmethod
    def parse(cls, name: str, lines: Iterator[tuple[int, str]]) -> MahimahiTrace:
        problems = Problems(name)
        # Arrays of C ints, not lists: a file of 4 million lines is 32 MB here, not 300.
        times, numbers = array("l"), array("l")
        last = 0
        for count, (number, line) in enumerate(lines, 1):
            last = number
            if count > MAX_MAHIMAHI_LINES:
                problems.add(number, f"more than {MAX_MAHIMAHI_LINES} lines")
                break
            if not line.isdigit() or not line.isascii() or len(line) > 12:
                problems.add(number, f"expected a whole number of milliseconds, got {line[:40]!r}")
            elif times and int(line) < times[-1]:
                problems.add(number, f"{int(line)}ms comes before the line before ({times[-1]}ms)")
            elif int(line) * 1000 > MAX_TRACE_TIME_US:
                problems.add(number, f"{int(line)}ms is past a day, the longest a trace may run")
            else:
                times.append(int(line))
                numbers.append(number)
            if problems.full:
                break
        problems.raise_if_any()
        if times[-1] == 0:
            problems.add(last, "the last time must be above 0ms: it is how long the trace lasts")
            problems.raise_if_any()
        return cls(name, times, numbers)

    def play_steps(self, step_us: int) -> int:
        return -(-self.period_ms * 1000 // step_us)

    def steps(self, step_us: int, count: int) -> tuple[list[TraceStep], int]:
        step_ms = step_us // 1000
        result, empty = [], 0
        for k in range(count):
            start, stop = k * step_ms, (k + 1) * step_ms
            opportunities = self._upto(stop) - (self._upto(start) if start else 0)
            if not opportunities:  # htb cannot hold a rate of zero: one packet a step
                opportunities, empty = 1, empty + 1
            rate = round(opportunities * PACKET_BITS * 1000 / step_ms)
            first = bisect.bisect_right(self.times_ms, start % self.period_ms) if start else 0
            at = min(first, len(self.lines) - 1)
            if rate > MAX_RATE_BPS:
                where = Where(self.name, self.lines[at])
                message = f"{opportunities} packets in {step_ms}ms is faster than {format_rate_bps(MAX_RATE_BPS)}"
                raise TopologyError([Problem(where, message)])
            result.append(TraceStep({"rate_bps": rate}, self.lines[at]))
        return result, empty

    def _upto(self, t_ms: int) -> int:
        """Opportunities at or before `t_ms`, the file repeating."""
        period, times = self.period_ms, self.times_ms
        whole = t_ms // period  # repetitions whose every time is at or before t_ms
        return whole * len(times) + bisect.bisect_right(times, t_ms - whole * period)
