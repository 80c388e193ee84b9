"""What both trace formats share: a parsed trace (`Trace`), its resampled
steps (`TraceStep`), the problems of one file (`Problems`) and the bounds
every trace file is held to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from collapsar.errors import Problem, TopologyError, Where

MAX_TRACE_BYTES = 32 << 20
MAX_CSV_ROWS = 100_000
MAX_MAHIMAHI_LINES = 4_000_000
MAX_TRACE_TIME_US = 24 * 3600 * 10**6  # a day: a trace's rows (or one repetition of it) end before
MAX_PROBLEMS = 10  # a garbage file says what is wrong with its first rows, not with a million

Values = dict[str, int | float]  # LinkProps field -> value


@dataclass(frozen=True)
class TraceStep:
    """One step of a resampled trace: the values it sets, and the line of
    the file in force at its start (where a problem with it is reported)."""

    values: Values
    line: int


class Problems:
    """The problems of one trace file, at most MAX_PROBLEMS of them."""

    def __init__(self, name: str):
        self.name = name
        self.found: list[Problem] = []

    def add(self, line: int, message: str) -> None:
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(Problem(Where(self.name, line), message))
        elif len(self.found) == MAX_PROBLEMS:
            self.found.append(Problem(Where(self.name, line), f"more than {MAX_PROBLEMS} bad rows; stopped here"))

    @property
    def full(self) -> bool:
        return len(self.found) > MAX_PROBLEMS

    def raise_if_any(self) -> None:
        if self.found:
            raise TopologyError(self.found)


class Trace:
    """A parsed trace file; `fields` are the LinkProps fields it sets."""

    format: Literal["csv", "mahimahi"]
    fields: tuple[str, ...]

    def play_steps(self, step_us: int) -> int:
        """How many steps one play of the file lasts."""
        raise NotImplementedError

    def steps(self, step_us: int, count: int) -> tuple[list[TraceStep], int]:
        """`count` steps from the file's start, repeating it past its end;
        and how many steps had to be raised from a rate of zero."""
        raise NotImplementedError
