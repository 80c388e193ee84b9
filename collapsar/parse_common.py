"""Small checks shared by the YAML parser modules.

Each helper reads one value from a `Node`, converts it, and on bad input adds
one `Problem` at that value's line and returns None, so that parsing goes on
and the user sees every problem of a file at once.  `label` is the message
prefix naming the place (`service web: replicas`, `link s1 -> s2: latency`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from collapsar.errors import Problem, TopologyError, UnitError, Where
from collapsar.model import Bridge, Service
from collapsar.yamlsrc import Node

T = TypeVar("T")
Choice = TypeVar("Choice", bound=str)

MAX_INSTANCES = 10_000  # per service, so that a typo like 1e6 does not eat the machine
MAX_TOTAL_INSTANCES = 10_000  # in the whole experiment, joins included
MAX_EVENTS = 100_000  # after expansion (flap, and events repeated through YAML aliases)
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_MAX_MESSAGE = 300


class Report:
    """The problems found so far in one file."""

    def __init__(self, source: str):
        self.source = source
        self.problems: list[Problem] = []

    def add(self, line: int, message: str) -> None:
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        self.problems.append(Problem(Where(self.source, line), message))

    def where(self, line: int) -> Where:
        return Where(self.source, line)

    def raise_if_any(self) -> None:
        if self.problems:
            # In file order, as an editor would walk them; stable within a line.
            ordered = sorted(self.problems, key=lambda p: p.where.line if p.where else 0)
            raise TopologyError(ordered)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe(node: Node) -> str:
    """How a value reads in a message: '10 parsecs', a list, a mapping."""
    if node.is_mapping:
        return "a mapping"
    if node.is_list:
        return "a list"
    if node.value is None:
        return "nothing"
    text = node.text if node.text is not None else str(node.value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


def check_keys(report: Report, node: Node, allowed: Iterable[str], label: str) -> None:
    allowed = list(allowed)
    for key in node.value:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f" (expected one of: {', '.join(allowed)})"
            report.add(node.key_lines[key], f"{label}: unknown key {key!r}{hint}")


def mapping(report: Report, node: Node | None, label: str) -> dict[str, Node] | None:
    if node is None:
        return None
    if not node.is_mapping:
        report.add(node.line, f"{label}: expected a mapping of key: value, got {describe(node)}")
        return None
    return node.value


def section_list(report: Report, node: Node | None, label: str, example: str) -> list[Node]:
    """The items of a top-level list section; an absent or empty section has none."""
    if node is None or (node.is_scalar and node.value is None):
        return []
    if not node.is_list:
        report.add(node.line, f"{label}: expected a list of {example}, got {describe(node)}")
        return []
    return node.value


def required(report: Report, parent: Node, key: str, label: str) -> Node | None:
    node = parent.value.get(key)
    if node is None or (node.is_scalar and node.value is None):
        line = parent.key_lines.get(key, parent.line)
        report.add(line, f"{label}: missing {key!r}")
        return None
    return node


def text(report: Report, node: Node, label: str) -> str | None:
    """A non-empty string; numbers and booleans are taken as written (`-t 10`)."""
    if not node.is_scalar or node.value is None:
        report.add(node.line, f"{label}: expected a string, got {describe(node)}")
        return None
    value = node.text if node.text is not None else str(node.value)
    if not value.strip():
        report.add(node.line, f"{label}: expected a string, got an empty one")
        return None
    if "\0" in value:
        # A command, an environment value or a path ends at a NUL in the
        # kernel: what would run is not what the file says.
        report.add(node.line, f"{label}: a NUL character (\\0) is not allowed, got {value[:70]!r}")
        return None
    return value


def name(report: Report, node: Node, label: str) -> str | None:
    value = text(report, node, label)
    if value is not None and not _NAME.match(value):
        report.add(
            node.line,
            f"{label}: {value[:70]!r} is not a valid name: use letters, "
            "digits and '-', not starting or ending with '-', at most 63 characters",
        )
        return None
    return value


def read_input(path: str | os.PathLike) -> tuple[str, bytes]:
    """The file's name as given and its bytes; an unreadable file is a TopologyError."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            return source, handle.read()
    except OSError as error:
        raise TopologyError([Problem(None, f"{source}: cannot read: {error.strerror}")]) from error


def default_name(source: str) -> str:
    """An experiment's name when the file gives none: its file name, made DNS-safe."""
    if source.startswith("<"):
        return "experiment"  # "<memory>", "<stdin>"
    stem = os.path.splitext(os.path.basename(source))[0]
    stem = re.sub(r"[^A-Za-z0-9-]+", "-", stem).strip("-")[:63].strip("-")
    return stem if is_valid_name(stem) else "experiment"


def is_valid_name(value: str) -> bool:
    return bool(_NAME.match(value))


def integer(report: Report, node: Node, label: str, low: int, high: int) -> int | None:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        report.add(node.line, f"{label}: expected a whole number from {low} to {high}, got {describe(node)}")
        return None
    return value


def boolean(report: Report, node: Node, label: str) -> bool | None:
    if not isinstance(node.value, bool):
        report.add(node.line, f"{label}: expected true or false, got {describe(node)}")
        return None
    return node.value


def choice(report: Report, node: Node, label: str, choices: tuple[Choice, ...]) -> Choice | None:
    value = node.value if node.is_scalar else None
    if not isinstance(value, str) or value not in choices:
        shown = describe(node)
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        report.add(node.line, f"{label}: expected {' or '.join(choices)}, got {shown}{hint}")
        return None
    return choices[choices.index(value)]  # the choice itself, typed as the choices are (a Literal)


def unit(report: Report, node: Node, label: str, parse: Callable[[object], T]) -> T | None:
    """Run one of `collapsar.units`' parsers; its message gets the place."""
    if not node.is_scalar:
        report.add(node.line, f"{label}: expected a single value, got {describe(node)}")
        return None
    try:
        return parse(node.value)
    except UnitError as error:
        report.add(node.line, f"{label}: {error}")
        return None


@dataclass
class Elements:
    """The named elements of an experiment: one namespace for all of them."""

    services: dict[str, Service] = field(default_factory=dict)
    bridges: dict[str, Bridge] = field(default_factory=dict)
    where: dict[str, Where] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)  # also names rejected as invalid
