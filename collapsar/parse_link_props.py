"""Link properties as written, for both directions or for one, and their checks.

Shared by the `links:` block (`collapsar.parse_links`) and by link events
(`collapsar.parse_events` reads them, `collapsar.presence` applies them).

A property key beside `from` and `to` applies to both directions.  `up` is
the direction from `from` to `to` (in an event, from the first name of
`link:` to the second) and `down` the one back; each is either a rate, as it
always was (`up: 50Mbps`), or a mapping of the same keys for that direction
only (`up: {latency: 30ms, loss: 1%}`).  A key is written in one place: for
both directions or per direction, never both.

Beyond delay, jitter, loss and rate (`collapsar.impairments` says what each
does and how it composes along a path): `loss` as a mapping (burst loss),
`reorder`, `duplicate`, `corrupt`, `in-order` and `queue`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from collapsar import parse_common as pc
from collapsar.errors import UnitError
from collapsar.impairments import Background, LossModel, Queue
from collapsar.model import DISTRIBUTIONS, LinkProps
from collapsar.parse_common import Report
from collapsar.units import (
    format_duration_us,
    parse_burst,
    parse_duration_us,
    parse_link_delay_us,
    parse_loss_ratio,
    parse_probability,
    parse_rate_bps,
    parse_rate_or_zero,
)
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
# The keys of the extras (collapsar.impairments.Extras), each with its field.
EXTRA_FIELD_OF_KEY = {
    "reorder": "reorder_ratio",
    "duplicate": "duplicate_ratio",
    "corrupt": "corrupt_ratio",
    "in-order": "in_order",
    "queue": "queue",
    "background": "background",
}
DIRECTION_KEYS = (*FIELD_OF_KEY, *EXTRA_FIELD_OF_KEY)
PROP_KEYS = (*DIRECTION_KEYS, *DIRECTIONS)
_PARSERS = {
    "latency": parse_link_delay_us,
    "jitter": parse_link_delay_us,
    "bandwidth": parse_rate_bps,
    "reorder": parse_probability,
    "duplicate": parse_probability,
    "corrupt": parse_probability,
}
# A burst loss: a rate with its mean burst or its correlation, or the chain itself.
LOSS_KEYS = ("rate", "burst", "correlation", "to-bad", "to-good", "loss-in-bad", "loss-in-good")
_LOSS_EXPECTED = "a loss like 1%, or a burst loss like {rate: 1%, burst: 3} or {to-bad: 1%, to-good: 30%}"
BACKGROUND_KEYS = ("mean", "sd", "every", "rtt")
_BACKGROUND_EXPECTED = "background traffic like {mean: 4Mbps, sd: 2Mbps, every: 5s}"
MIN_BACKGROUND_EVERY_US = 100_000  # two sharing periods at the most common period
_QUEUE_EXPECTED = "a queue in packets like 100, or a time at the link's rate like 20ms"
MAX_QUEUE_PKTS = 1_000_000
MAX_QUEUE_US = 60 * 10**6


@dataclass
class Written:
    """What is written for one direction, or for both: values by key
    (`latency` in us, `loss` a ratio, `bandwidth` in bit/s), and each key's line."""

    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def shaping(self) -> dict[str, Any]:
        """The values by field name, LinkProps' and its extras' (what a
        LinkSetEvent carries, and `LinkProps.changed` applies): `loss` sets
        both the rate and the model, so a plain loss clears a burst model."""
        fields: dict[str, Any] = {}
        for key, value in self.values.items():
            if key == "loss":
                fields["loss_ratio"], fields["loss_model"] = value
            else:
                fields[FIELD_OF_KEY.get(key) or EXTRA_FIELD_OF_KEY[key]] = value
        return fields

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


def read_props(report: Report, node: Node, label: str, other_keys: tuple[str, ...] = ()) -> PropValues | None:
    """Read the property keys of `node` (a mapping); None if any is invalid.
    `other_keys` may also appear under `up` and `down`; their reader reads
    them (the `links:` block's `trace`, collapsar.linktraces)."""
    values = PropValues()
    ok = _read_keys(report, node, DIRECTION_KEYS, label, values.both)
    for direction in DIRECTIONS:
        item = node.value.get(direction)
        if item is not None:
            into = values.under(direction)
            ok = _read_direction(report, item, f"{label}: {direction}", into, other_keys) and ok
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
        elif key == "loss":
            value = _loss(report, item, f"{label}: loss")
        elif key == "in-order":
            value = pc.boolean(report, item, f"{label}: in-order")
        elif key == "queue":
            value = _queue(report, item, f"{label}: queue")
        elif key == "background":
            value = _background(report, item, f"{label}: background")
        else:
            value = pc.unit(report, item, f"{label}: {key}", _PARSERS[key])
        if value is None:
            ok = False
        else:
            into.values[key], into.lines[key] = value, item.line
    return ok


def _loss(report: Report, node: Node, label: str) -> tuple[float, LossModel | None] | None:
    """`loss: 1%` (Bernoulli), or a mapping: a burst loss (LOSS_KEYS)."""
    if node.is_scalar:
        ratio = pc.unit(report, node, label, parse_loss_ratio)
        return None if ratio is None else (ratio, None)
    if not node.is_mapping or not node.value:
        report.add(node.line, f"{label}: expected {_LOSS_EXPECTED}, got {pc.describe(node)}")
        return None
    pc.check_keys(report, node, LOSS_KEYS, label)
    values: dict[str, float] = {}
    for key in LOSS_KEYS:
        item = node.value.get(key)
        if item is None:
            continue
        value = pc.unit(report, item, f"{label}: {key}", parse_burst if key == "burst" else parse_probability)
        if value is None:
            return None
        values[key] = value
    if "rate" in values:
        return _rate_loss(report, node, label, values)
    return _chain_loss(report, node, label, values)


def _rate_loss(
    report: Report, node: Node, label: str, values: dict[str, float]
) -> tuple[float, LossModel | None] | None:
    """{rate, burst} or {rate, correlation}: the simple Gilbert chain."""
    rate = values["rate"]
    chain = [key for key in ("to-bad", "to-good", "loss-in-bad", "loss-in-good") if key in values]
    if chain:
        report.add(
            node.value[chain[0]].line,
            f"{label}: use either rate (with burst or correlation) or to-bad and to-good, not both",
        )
        return None
    if "burst" in values and "correlation" in values:
        report.add(node.value["correlation"].line, f"{label}: burst and correlation say the same thing; use one")
        return None
    if rate == 0.0 or ("burst" not in values and not values.get("correlation")):
        return rate, None
    if rate == 1.0:
        report.add(node.value["rate"].line, f"{label}: a loss of 100% has no bursts; use loss: 100%")
        return None
    if "correlation" in values:
        if values["correlation"] == 1.0:
            report.add(
                node.value["correlation"].line,
                f"{label}: correlation must be below 100% (at 100% the first packet decides all)",
            )
            return None
        return rate, LossModel.correlated(rate, values["correlation"])
    burst, shortest = values["burst"], rate / (1.0 - rate)
    if burst < shortest:
        report.add(
            node.value["burst"].line,
            f"{label}: bursts of {burst:g} packets on average cannot lose {rate * 100:.6g}% of the packets; "
            f"expected a burst of at least {shortest:.6g}",
        )
        return None
    return rate, LossModel.bursts(rate, burst)


def _chain_loss(
    report: Report, node: Node, label: str, values: dict[str, float]
) -> tuple[float, LossModel | None] | None:
    """{to-bad, to-good, loss-in-bad, loss-in-good}: a Gilbert-Elliott chain."""
    for key in ("to-bad", "to-good"):
        if key not in values:
            report.add(
                node.line,
                f"{label}: expected rate (with burst or correlation), or both to-bad and to-good; {key} is missing",
            )
            return None
    if values["to-good"] == 0.0 and values["to-bad"] > 0.0:
        report.add(
            node.value["to-good"].line,
            f"{label}: to-good must be above 0 (the chain would stay in its bad state for good)",
        )
        return None
    model = LossModel(
        values["to-bad"], values["to-good"], values.get("loss-in-bad", 1.0), values.get("loss-in-good", 0.0)
    )
    return model.rate, model


def _queue(report: Report, node: Node, label: str) -> Queue | None:
    """`queue: 100` (packets) or `queue: 20ms` (at the link's rate)."""
    value = node.value if node.is_scalar else None
    if isinstance(value, int) and not isinstance(value, bool):
        if 1 <= value <= MAX_QUEUE_PKTS:
            return Queue(packets=value)
        report.add(node.line, f"{label}: expected from 1 to {MAX_QUEUE_PKTS} packets, got {value}")
        return None
    try:
        time_us = parse_duration_us(value)
    except UnitError:
        report.add(node.line, f"{label}: expected {_QUEUE_EXPECTED}, got {pc.describe(node)}")
        return None
    if not 0 < time_us <= MAX_QUEUE_US:
        report.add(
            node.line,
            f"{label}: expected a time above 0 and up to {format_duration_us(MAX_QUEUE_US)}, got {pc.describe(node)}",
        )
        return None
    return Queue(time_us=time_us)


def _background(report: Report, node: Node, label: str) -> Background | None:
    """`background: {mean: 4Mbps, sd: 2Mbps, every: 5s, rtt: 20ms}` (`mean` required)."""
    if not node.is_mapping:
        report.add(node.line, f"{label}: expected {_BACKGROUND_EXPECTED}, got {pc.describe(node)}")
        return None
    if "mean" not in node.value:
        report.add(node.line, f"{label}: expected a mean rate (mean: 4Mbps); it is missing")
        return None
    pc.check_keys(report, node, BACKGROUND_KEYS, label)
    parsers = {"mean": parse_rate_bps, "sd": parse_rate_or_zero, "every": parse_duration_us, "rtt": parse_duration_us}
    values = {}
    for key, parse in parsers.items():
        if key in node.value:
            value = pc.unit(report, node.value[key], f"{label}: {key}", parse)
            if value is None:
                return None
            values[key] = value
    for key, low in (("every", MIN_BACKGROUND_EVERY_US), ("rtt", 1)):
        if key in values and values[key] < low:
            report.add(
                node.value[key].line,
                f"{label}: {key}: expected at least {format_duration_us(low)}, got {format_duration_us(values[key])}",
            )
            return None
    return Background(values["mean"], values.get("sd", 0), values.get("every", 1_000_000), values.get("rtt"))


def _read_direction(report: Report, node: Node, label: str, into: Written, other_keys: tuple[str, ...]) -> bool:
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
    pc.check_keys(report, node, (*DIRECTION_KEYS, *other_keys), label)
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
    checked = {
        (
            p.delay_us,
            p.jitter_us,
            "distribution" in written[d].values,
            "in-order" in written[d].values,
            bool(p.extras.reorder_ratio),
            p.extras.queue is not None and p.rate_bps is None,
            p.extras.background is not None and p.rate_bps is None,
        )
        for d, p in props.items()
    }
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
    extras = props.extras
    if extras.reorder_ratio and not props.delay_us:
        report.add(
            written.line(("reorder", "latency"), fallback),
            f"{label}: reorder needs a latency (a reordered packet is one sent without it)",
        )
        return False
    if "in-order" in written.values and not props.jitter_us:
        report.add(written.lines["in-order"], f"{label}: in-order needs a jitter")
        return False
    if extras.background is not None and props.rate_bps is None:
        report.add(
            written.line(("background",), fallback),
            f"{label}: background needs a bandwidth (it takes a share of the link's rate)",
        )
        return False
    if extras.queue is not None and props.rate_bps is None:
        report.add(
            written.line(("queue",), fallback), f"{label}: queue needs a bandwidth (the queue fills at the link's rate)"
        )
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
