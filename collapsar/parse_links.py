"""The `links:` block: each entry read into a `LinkSpec`.

A link joins two elements (services or bridges).  It is two-way unless
`direction: one-way`.  Its properties (`collapsar.parse_link_props`) apply
to both directions, or under `up` (from `from` to `to`) and `down` (back) to
one: `up: 50Mbps` is the rate that way, `up: {latency: 30ms}` any property.
"""

from __future__ import annotations

from collapsar import parse_common as pc
from collapsar.errors import Where
from collapsar.model import LinkProps, LinkSpec
from collapsar.parse_common import Elements, Report
from collapsar.parse_link_props import DIRECTIONS, PROP_KEYS, Direction, PropValues, check_props, read_props
from collapsar.yamlsrc import Node

LINK_KEYS = ("from", "to", *PROP_KEYS, "direction")
# A `links:` entry's own key, beside them and under up/down: not in events
# (collapsar.linktraces reads it once the whole experiment is valid).
TRACE_KEY = "trace"


def build_spec(
    report: Report, a: str, b: str, values: PropValues, one_way: bool, label: str, where: Where
) -> LinkSpec | None:
    """A whole new link from its written properties."""
    if one_way and values.down.values:
        line = values.down.line(values.down.lines, where.line)
        report.add(line, f"{label}: a one-way link has no down direction; use up or bandwidth")
        return None
    directions: tuple[Direction, ...] = DIRECTIONS[:1] if one_way else DIRECTIONS
    written = {direction: values.toward(direction) for direction in directions}
    props = {direction: LinkProps().changed(written[direction].shaping()) for direction in directions}
    if not check_props(report, written, props, label, where.line):
        return None
    return LinkSpec(a, b, props["up"], props.get("down"), where)


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
        pc.check_keys(report, item, (*LINK_KEYS, TRACE_KEY), label)
        ends = [pc.required(report, item, key, label) for key in ("from", "to")]
        names = [
            element(report, end, f"{label}: {key}", elements) if end else None for end, key in zip(ends, ("from", "to"))
        ]
        one_way = read_direction(report, item, label)
        values = read_props(report, item, label, (TRACE_KEY,))
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
