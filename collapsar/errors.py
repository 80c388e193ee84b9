"""The one exception tree of Collapsar.

Everything Collapsar raises on purpose is a `CollapsarError`; the CLI turns it
into one clear line per problem and a non-zero exit, and shows a traceback only
with `--debug`.  Anything else reaching the CLI is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass


class CollapsarError(Exception):
    """Base of every error Collapsar raises on purpose."""

    exit_code = 1

    def lines(self) -> list[str]:
        """The message as the lines the CLI prints on stderr."""
        return [str(self)]


@dataclass(frozen=True)
class Where:
    """A place in an input file: `file:line`, optionally naming the element."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, at one place."""

    where: Where | None
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class UnitError(CollapsarError):
    """A value that does not parse as the unit expected (no location yet).

    The parser catches it and re-raises it as a `TopologyError` with the place.
    """


class TopologyError(CollapsarError):
    """An experiment file is invalid; carries every problem found, in order."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class EnvironmentProblem(CollapsarError):
    """The machine lacks something Collapsar needs; the message names the fix."""

    exit_code = 3

    def __init__(self, problem: str, fix: str):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; fix: {fix}")


class KernelError(CollapsarError):
    """The kernel refused a traffic-control or BPF operation."""

    exit_code = 4


class RunError(CollapsarError):
    """A running experiment cannot go on (instance, process or state failure)."""

    exit_code = 5


class InstanceFailure(RunError):
    """Instances' commands failed on their own: exited with an error, or could
    not start, without the timeline or the run's end stopping them.  The run
    itself went to its end and was torn down; `lines` say which and why."""

    exit_code = 6

    def __init__(self, lines: list[str]):
        self._lines = list(lines)
        super().__init__("\n".join(self._lines))

    def lines(self) -> list[str]:
        return list(self._lines)
