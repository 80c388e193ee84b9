"""CSV link traces: a header row (`time`, then any of `bandwidth`, `latency`,
`loss`, each optionally with its unit after an underscore), one row per
change, resampled onto steps by their time-weighted mean."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from collapsar.errors import UnitError
from collapsar.linktraces.base import MAX_CSV_ROWS, MAX_TRACE_TIME_US, Problems, Trace, TraceStep, Values
from collapsar.units import parse_duration_us, parse_link_delay_us, parse_loss_ratio, parse_rate_bps

# The link keys a CSV trace may have as columns, each with the LinkProps field it sets.
COLUMN_FIELDS = {"bandwidth": "rate_bps", "latency": "delay_us", "loss": "loss_ratio"}
_PARSERS: dict[str, Callable[[object], int | float]] = {
    "time": parse_duration_us,
    "bandwidth": parse_rate_bps,
    "latency": parse_link_delay_us,
    "loss": parse_loss_ratio,
}
_HEADER_UNITS = {"percent": "%", "ratio": ""}  # loss's units, named as a header can
_PLAIN_NUMBER = re.compile(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


class CsvTrace(Trace):
    format = "csv"

    def __init__(self, fields: tuple[str, ...], rows: list[tuple[int, Values, int]]):
        self.fields = fields
        self.rows = rows  # (time_us, values, line), every value filled in

    @classmethod
    def parse(cls, name: str, header: tuple[int, str], lines: Iterator[tuple[int, str]]) -> CsvTrace:
        problems = Problems(name)
        header_line, _ = header
        columns = _columns(problems, *header)
        problems.raise_if_any()
        rows: list[tuple[int, Values, int]] = []
        for count, (number, line) in enumerate(lines, 1):
            if count > MAX_CSV_ROWS:
                problems.add(number, f"more than {MAX_CSV_ROWS} rows; use a coarser trace")
                break
            row = _row(problems, number, line, columns, rows[-1] if rows else None)
            if row is not None:
                rows.append(row)
            if problems.full:
                break
        if not rows and not problems.found:
            problems.add(header_line, "no rows after the header")
        problems.raise_if_any()
        fields = tuple(COLUMN_FIELDS[key] for key, _ in columns[1:])
        return cls(fields, rows)

    def play_steps(self, step_us: int) -> int:
        return self.rows[-1][0] // step_us + 1

    def steps(self, step_us: int, count: int) -> tuple[list[TraceStep], int]:
        period = self._period(step_us)
        return [period[k % len(period)] for k in range(count)], 0

    def _period(self, step_us: int) -> list[TraceStep]:
        """One play, resampled: each step's time-weighted mean of the rows."""
        rows, end = self.rows, self.play_steps(step_us) * step_us
        result, first = [], 0
        for start in range(0, end, step_us):
            stop = start + step_us
            while first + 1 < len(rows) and rows[first + 1][0] <= start:
                first += 1
            last = first
            while last + 1 < len(rows) and rows[last + 1][0] < stop:
                last += 1
            if first == last:  # one row covers the step: its values exactly
                values = dict(rows[first][1])
            else:
                values = {field: _mean(rows, first, last, start, stop, field) for field in self.fields}
            result.append(TraceStep(values, rows[first][2]))
        return result


def _mean(rows: list[tuple[int, Values, int]], first: int, last: int, start: int, stop: int, field: str):
    total = 0.0
    for index in range(first, last + 1):
        begins = max(rows[index][0], start)
        ends = stop if index == last else rows[index + 1][0]
        total += rows[index][1][field] * (ends - begins)
    mean = total / (stop - start)
    return mean if field == "loss_ratio" else int(round(mean))


def _columns(problems: Problems, line: int, header: str) -> list[tuple[str, str | None]]:
    """The header's columns: (key, the unit text its plain-number cells
    take, or None when each cell writes its own unit)."""
    columns: list[tuple[str, str | None]] = []
    for cell in (cell.strip() for cell in header.split(",")):
        key, underscore, unit = cell.partition("_")
        if (key == "time") != (not columns) or key not in _PARSERS:
            expected = "time" if not columns else " or ".join(COLUMN_FIELDS)
            problems.add(line, f"column {cell[:40]!r}: expected {expected} (a unit may follow, as in time_s)")
            return columns
        if key in (known for known, _ in columns):
            problems.add(line, f"column {key!r} is written twice")
            return columns
        suffix = _HEADER_UNITS.get(unit) if key == "loss" else unit
        if underscore and (not unit or suffix is None or not _unit_known(key, suffix)):
            problems.add(line, f"column {cell[:40]!r}: unknown unit {unit[:20]!r} for {key}")
            return columns
        columns.append((key, suffix if underscore else None))
    if len(columns) == 1:
        problems.add(line, "expected time and at least one of bandwidth, latency, loss")
    return columns


def _unit_known(key: str, unit: str) -> bool:
    try:
        _PARSERS[key]("1" + unit)
    except UnitError:
        return False
    return True


def _row(problems: Problems, number: int, line: str, columns, previous) -> tuple[int, Values, int] | None:
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) != len(columns):
        names = ", ".join(key for key, _ in columns)
        problems.add(number, f"expected {len(columns)} cells ({names}), got {len(cells)}")
        return None
    values: Values = {}
    for (key, unit), cell in zip(columns, cells):
        if not cell:
            if previous is None:
                problems.add(number, f"{key}: empty in the first row, which must give every column")
                return None
            continue
        if unit is not None and not _PLAIN_NUMBER.match(cell):
            problems.add(number, f"{key}: expected a plain number (the header gives the unit), got {cell[:40]!r}")
            return None
        try:
            values[key] = _PARSERS[key](cell if unit is None else cell + unit)
        except UnitError as error:
            problems.add(number, f"{key}: {error}")
            return None
    at_us = values.pop("time", None)
    if not isinstance(at_us, int):
        problems.add(number, "time: empty; every row needs its time")
        return None
    if _bad_time(problems, number, at_us, previous[0] if previous else None):
        return None
    filled = dict(previous[1]) if previous else {}
    filled.update({COLUMN_FIELDS[key]: value for key, value in values.items()})
    return at_us, filled, number


def _bad_time(problems: Problems, number: int, at_us: int, before_us: int | None) -> bool:
    if before_us is None and at_us != 0:
        problems.add(number, f"the first row must be at time 0, got {at_us}us")
    elif before_us is not None and at_us <= before_us:
        problems.add(number, f"time {at_us}us does not come after the row before ({before_us}us)")
    elif at_us > MAX_TRACE_TIME_US:
        problems.add(number, f"time {at_us}us is past a day, the longest a trace may run")
    else:
        return False
    return True
