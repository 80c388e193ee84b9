"""Link properties as written, for both directions or for one, and their checks.

Shared by the `links:` block (`collapsar.parse_links`) and by link events
(`collapsar.parse_events` reads them, `collapsar.presence` applies them).

A property key beside `from` and `to` applies to both directions.  `up` is
the direction from `from` to `to` (in an event, from the first name of
`link:` to the second) and `down` the one back; each is either a rate, as it
always was (`up: 50Mbps`), or a mapping of the same keys for that direction
only (`up: {latency: 30ms, loss: 1%}`).  A key is written in one place: for
both directions or per direction, never both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from collapsar import parse_common as pc
from collapsar.model import DISTRIBUTIONS, LinkProps
from collapsar.parse_common import Report
from collapsar.units import format_duration_us, parse_link_delay_us, parse_loss_ratio, parse_rate_bps
from collapsar.yamlsrc import Node

Direction = Literal["up", "down"]
DIRECTIONS: tuple[Direction, ...] = ("up", "down")
# The keys that shape one direction, each with the LinkProps field it sets.
FIELD_OF_KEY = {
    "latency": "delay_us",
    "jitter": "jitter_us",
    "distribution": "distribution",
    "loss": "loss_ratio",
    "bandwidth": "rate_bps",
}
DIRECTION_KEYS = tuple(FIELD_OF_KEY)
PROP_KEYS = (*DIRECTION_KEYS, *DIRECTIONS)
_PARSERS = {
    "latency": parse_link_delay_us,
    "jitter": parse_link_delay_us,
    "loss": parse_loss_ratio,
    "bandwidth": parse_rate_bps,
}


@dataclass
class Written:
    """What is written for one direction, or for both: values by key
    (`latency` in us, `loss` a ratio, `bandwidth` in bit/s), and each key's line."""

    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def shaping(self) -> dict[str, Any]:
        """The values by LinkProps field name (what a LinkSetEvent carries)."""
        return {FIELD_OF_KEY[key]: value for key, value in self.values.items()}

    def line(self, keys: Iterable[str], fallback: int) -> int:
        """Where a problem of the first of `keys` that is written is reported."""
        return next((self.lines[key] for key in keys if key in self.lines), fallback)

    def joined(self, other: Written) -> Written:
        return Written({**self.values, **other.values}, {**self.lines, **other.lines})


@dataclass
class PropValues:
    """Link properties as written: for both directions, and under `up` and `down`."""

    both: Written = field(default_factory=Written)
    up: Written = field(default_factory=Written)
    down: Written = field(default_factory=Written)

    def under(self, direction: Direction) -> Written:
        """What is written under `up` or `down` alone."""
        return self.up if direction == "up" else self.down

    def toward(self, direction: Direction) -> Written:
        """Everything written that applies to `direction` (no key is in both places)."""
        return self.both.joined(self.under(direction))

    def reversed(self) -> PropValues:
        """The same properties seen from the other end of the link."""
        return PropValues(self.both, self.down, self.up)


def read_props(report: Report, node: Node, label: str) -> PropValues | None:
    """Read the property keys of `node` (a mapping); None if any is invalid."""
    values = PropValues()
    ok = _read_keys(report, node, DIRECTION_KEYS, label, values.both)
    for direction in DIRECTIONS:
        item = node.value.get(direction)
        if item is not None:
            ok = _read_direction(report, item, f"{label}: {direction}", values.under(direction)) and ok
    return values if _given_once(report, node, values, label) and ok else None


def _read_keys(report: Report, node: Node, keys: Iterable[str], label: str, into: Written) -> bool:
    ok = True
    for key in keys:
        item = node.value.get(key)
        if item is None:
            continue
        value: object
        if key == "distribution":
            value = pc.choice(report, item, f"{label}: distribution", DISTRIBUTIONS)
        else:
            value = pc.unit(report, item, f"{label}: {key}", _PARSERS[key])
        if value is None:
            ok = False
        else:
            into.values[key], into.lines[key] = value, item.line
    return ok


def _read_direction(report: Report, node: Node, label: str, into: Written) -> bool:
    """`up: 50Mbps` (a rate, as always) or `up: {latency: 30ms, ...}`."""
    if node.is_scalar and node.value is not None:
        rate = pc.unit(report, node, label, parse_rate_bps)
        if rate is not None:
            into.values["bandwidth"], into.lines["bandwidth"] = rate, node.line
        return rate is not None
    if not node.is_mapping:
        report.add(
            node.line,
            f"{label}: expected a rate like 10Mbps, or the properties of this "
            f"direction like {{latency: 10ms, bandwidth: 10Mbps}}, got {pc.describe(node)}",
        )
        return False
    pc.check_keys(report, node, DIRECTION_KEYS, label)
    if not node.value:
        report.add(node.line, f"{label}: expected at least one of {', '.join(DIRECTION_KEYS)}")
        return False
    return _read_keys(report, node, DIRECTION_KEYS, label, into)


def _given_once(report: Report, node: Node, values: PropValues, label: str) -> bool:
    """No key is written both for both directions and for one; the first clash is reported."""
    for direction in DIRECTIONS:
        written = values.under(direction)
        for key in DIRECTION_KEYS:
            if key in values.both.values and key in written.values:
                if node.value[direction].is_scalar:
                    message = "use either bandwidth (both directions) or up/down, not both"
                else:
                    message = f"use either {key} (both directions) or {key} under {direction}, not both"
                report.add(written.lines[key], f"{label}: {message}")
                return False
    return True


def check_props(
    report: Report, written: dict[Direction, Written], props: dict[Direction, LinkProps], label: str, line: int
) -> bool:
    """Each direction's jitter (`props`, of a link as written or as a `set`
    leaves it) has a latency to vary around and does not exceed it, and a
    distribution `written` for it has a jitter to shape.  A message names
    the direction only when the directions differ in what is checked; the
    first problem is reported."""
    checked = {(p.delay_us, p.jitter_us, "distribution" in written[d].values) for d, p in props.items()}
    same = len(checked) == 1
    for direction, shaping in props.items():
        where = label if same else f"{label}: {direction}"
        if not _check_direction(report, written[direction], shaping, where, line):
            return False
    return True


def _check_direction(report: Report, written: Written, props: LinkProps, label: str, fallback: int) -> bool:
    line = written.line(("jitter", "latency"), fallback)
    if props.jitter_lacks_delay:
        report.add(line, f"{label}: jitter needs a latency")
        return False
    if "distribution" in written.values and not props.jitter_us:
        report.add(written.lines["distribution"], f"{label}: distribution needs a jitter")
        return False
    # Jitter above the delay would make netem clip negative delays to zero,
    # which silently changes both the mean and the distribution.
    if props.jitter_us > props.delay_us:
        report.add(
            line,
            f"{label}: jitter ({format_duration_us(props.jitter_us)}) must not exceed "
            f"the latency ({format_duration_us(props.delay_us)}); delays below zero "
            "would be clipped",
        )
        return False
    return True
