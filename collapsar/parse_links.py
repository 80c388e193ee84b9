"""The `links:` block, and the link properties that events reuse.

A link joins two elements (services or bridges).  It is two-way unless
`direction: one-way`; `up` is the rate from `from` to `to`, `down` the rate
back, `bandwidth` both.  Latency, jitter and loss apply to each direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from collapsar import parse_common as pc
from collapsar.model import DISTRIBUTIONS, JitterDistribution, LinkProps, LinkSpec
from collapsar.parse_common import Elements, Report
from collapsar.units import format_duration_us, parse_link_delay_us, parse_loss_ratio, parse_rate_bps
from collapsar.yamlsrc import Node

PROP_KEYS = ("latency", "jitter", "distribution", "loss", "bandwidth", "up", "down")
LINK_KEYS = ("from", "to", *PROP_KEYS, "direction")
# The key that sets each shaping field of both directions (LinkProps); the
# rate is per direction: `bandwidth`, or `up` and `down`.
KEY_OF_FIELD = {"delay_us": "latency", "jitter_us": "jitter", "distribution": "distribution", "loss_ratio": "loss"}
_PARSERS = {
    "latency": parse_link_delay_us,
    "jitter": parse_link_delay_us,
    "loss": parse_loss_ratio,
    "bandwidth": parse_rate_bps,
    "up": parse_rate_bps,
    "down": parse_rate_bps,
}


@dataclass
class PropValues:
    """Link properties as written, each None when absent; `lines` says where."""

    latency: int | None = None
    jitter: int | None = None
    distribution: JitterDistribution | None = None
    loss: float | None = None
    bandwidth: int | None = None
    up: int | None = None
    down: int | None = None
    lines: dict[str, int] = field(default_factory=dict)

    def shaping(self) -> dict[str, Any]:
        """The shaping fields written here but the rate, by LinkProps field name."""
        written = {name: getattr(self, key) for name, key in KEY_OF_FIELD.items()}
        return {name: value for name, value in written.items() if value is not None}

    def jitter_line(self, fallback: int) -> int:
        """Where a problem of the jitter is reported: at the jitter, else at the latency."""
        return self.lines.get("jitter", self.lines.get("latency", fallback))


def read_props(report: Report, node: Node, label: str) -> PropValues | None:
    """Read the property keys of `node` (a mapping); None if any is invalid."""
    values = PropValues()
    ok = True
    for key in PROP_KEYS:
        item = node.value.get(key)
        if item is None:
            continue
        values.lines[key] = item.line
        value: object
        if key == "distribution":
            value = pc.choice(report, item, f"{label}: distribution", DISTRIBUTIONS)
        else:
            value = pc.unit(report, item, f"{label}: {key}", _PARSERS[key])
        ok = ok and value is not None
        setattr(values, key, value)
    if values.bandwidth is not None and (values.up is not None or values.down is not None):
        other = "up" if values.up is not None else "down"
        report.add(values.lines[other], f"{label}: use either bandwidth (both directions) or up/down, not both")
        ok = False
    return values if ok else None


def check_jitter(report: Report, values: PropValues, props: LinkProps, label: str, line: int) -> bool:
    """The jitter of `props` (a link as written, or as a `set` written as
    `values` leaves it) has a latency to vary around, and a distribution
    written in `values` has a jitter to shape."""
    if props.jitter_lacks_delay:
        report.add(line, f"{label}: jitter needs a latency")
        return False
    if values.distribution is not None and not props.jitter_us:
        report.add(values.lines["distribution"], f"{label}: distribution needs a jitter")
        return False
    return True


def check_delays(report: Report, line: int, label: str, delay_us: int, jitter_us: int) -> bool:
    """Jitter above the delay would make netem clip negative delays to zero,
    which silently changes both the mean and the distribution: reject it."""
    if jitter_us > delay_us:
        report.add(
            line,
            f"{label}: jitter ({format_duration_us(jitter_us)}) must not exceed "
            f"the latency ({format_duration_us(delay_us)}); delays below zero "
            "would be clipped",
        )
        return False
    return True


def build_spec(report: Report, a: str, b: str, values: PropValues, one_way: bool, label: str, where) -> LinkSpec | None:
    """A whole new link from its written properties."""
    common = LinkProps(**values.shaping())
    line = values.jitter_line(0)
    if not check_jitter(report, values, common, label, line):
        return None
    if one_way and values.down is not None:
        report.add(values.lines["down"], f"{label}: a one-way link has no down direction; use up or bandwidth")
        return None
    if not check_delays(report, line, label, common.delay_us, common.jitter_us):
        return None
    both = values.bandwidth
    up = replace(common, rate_bps=both if both is not None else values.up)
    down = None if one_way else replace(common, rate_bps=both if both is not None else values.down)
    return LinkSpec(a, b, up, down, where)


def read_direction(report: Report, node: Node, label: str) -> bool | None:
    """True for a one-way link."""
    item = node.value.get("direction")
    if item is None:
        return False
    value = pc.choice(report, item, f"{label}: direction", ("both", "one-way"))
    return None if value is None else value == "one-way"


def element(report: Report, node: Node, label: str, elements: Elements) -> str | None:
    value = pc.text(report, node, label)
    if value is not None and value not in elements.where:
        if value in elements.declared:
            return None  # its own definition is already reported
        hint = pc.did_you_mean(value, elements.where)
        report.add(node.line, f"{label}: unknown element {value[:70]!r}{hint}")
        return None
    return value


def link_label(node: Node, index: int) -> str:
    ends = [node.value.get(key) for key in ("from", "to")]
    if all(end is not None and end.is_scalar and end.text for end in ends):
        return f"link {ends[0].text[:70]} -> {ends[1].text[:70]}"
    return f"link {index + 1}"


def parse_links(report: Report, node: Node | None, elements: Elements) -> list[LinkSpec]:
    items = pc.section_list(report, node, "links", "links like - {from: a, to: b, latency: 5ms}")
    links: list[LinkSpec] = []
    first_line: dict[frozenset[str], int] = {}
    for index, item in enumerate(items):
        label = link_label(item, index) if item.is_mapping else f"link {index + 1}"
        if pc.mapping(report, item, label) is None:
            continue
        pc.check_keys(report, item, LINK_KEYS, label)
        ends = [pc.required(report, item, key, label) for key in ("from", "to")]
        names = [
            element(report, end, f"{label}: {key}", elements) if end else None for end, key in zip(ends, ("from", "to"))
        ]
        one_way = read_direction(report, item, label)
        values = read_props(report, item, label)
        a, b = names
        if a is None or b is None or one_way is None or values is None:
            continue
        if a == b:
            report.add(item.line, f"{label}: a link needs two different ends")
            continue
        key = frozenset((a, b))
        if key in first_line:
            report.add(item.line, f"{label}: a link between {a} and {b} already exists (line {first_line[key]})")
            continue
        spec = build_spec(report, a, b, values, one_way, label, report.where(item.line))
        if spec is not None:
            first_line[key] = item.line
            links.append(spec)
    return links
