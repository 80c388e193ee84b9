"""The `traffic-classes:` key of a service, read into a
`collapsar.trafficclasses.TrafficClasses`.

    traffic-classes:
      - name: rpc
        priority: 0
        match: {src-port: 7000}        # or a list: [{dscp: ef}, {dst-port: 53, protocol: udp}]
      - name: bulk
        priority: 1
        weight: 3                      # among classes of its priority
        match: {dscp: cs1}
      - name: rest                     # no match: traffic no other class takes
        priority: 1
"""

from __future__ import annotations

from collapsar import parse_common as pc
from collapsar.parse_common import Report
from collapsar.trafficclasses import (
    MAX_CLASSES,
    MAX_MATCHES,
    MAX_PRIORITY,
    MAX_WEIGHT,
    PROTOCOLS,
    Match,
    TrafficClass,
    TrafficClasses,
)
from collapsar.yamlsrc import Node

CLASS_KEYS = ("name", "priority", "weight", "match")
MATCH_KEYS = ("dscp", "protocol", "src-port", "dst-port")
_EXAMPLE = "a list of classes like [{name: rpc, priority: 0, match: {src-port: 7000}}, {name: rest, priority: 1}]"
# DSCP's names (RFC 2474 class selectors, RFC 2597 assured forwarding, RFC 3246 EF).
DSCP_NAMES = {
    **{f"cs{n}": 8 * n for n in range(8)},
    **{f"af{c}{d}": 8 * c + 2 * d for c in range(1, 5) for d in range(1, 4)},
    "ef": 46,
    "be": 0,
}


def read_traffic_classes(report: Report, node: Node, label: str) -> TrafficClasses | None:
    """The `traffic-classes:` list of a service; None (reported) if it is not valid."""
    if not node.is_list or not node.value:
        report.add(node.line, f"{label}: expected {_EXAMPLE}, got {pc.describe(node)}")
        return None
    if len(node.value) > MAX_CLASSES:
        report.add(node.value[MAX_CLASSES].line, f"{label}: at most {MAX_CLASSES} classes, got {len(node.value)}")
        return None
    classes: list[TrafficClass] = []
    names: set[str] = set()
    matches = 0
    for index, item in enumerate(node.value):
        where = f"{label}: class {index + 1}"
        klass = _class(report, item, where)
        if klass is None:
            continue
        if klass.name in names:
            report.add(item.value["name"].line, f"{where}: the name {klass.name!r} is taken by an earlier class")
            continue
        names.add(klass.name)
        matches += len(klass.matches)
        if matches > MAX_MATCHES:
            report.add(item.line, f"{label}: at most {MAX_MATCHES} match entries in all")
            return None
        classes.append(klass)
    if len(classes) != len(node.value):
        return None
    unmatched = [i for i, c in enumerate(classes) if not c.matches]
    if len(unmatched) > 1:
        report.add(
            node.value[unmatched[1]].line,
            f"{label}: class {classes[unmatched[1]].name!r} has no match, nor has "
            f"{classes[unmatched[0]].name!r}: only one class takes the unmatched traffic",
        )
        return None
    return TrafficClasses.of(classes)


def _class(report: Report, item: Node, where: str) -> TrafficClass | None:
    if not item.is_mapping:
        report.add(item.line, f"{where}: expected a mapping like {{name: rpc, priority: 0}}, got {pc.describe(item)}")
        return None
    pc.check_keys(report, item, CLASS_KEYS, where)
    name_node = pc.required(report, item, "name", where)
    priority_node = pc.required(report, item, "priority", where)
    if name_node is None or priority_node is None:
        return None
    name = pc.name(report, name_node, f"{where}: name")
    if name is not None:
        where = f"{where.rsplit(': ', 1)[0]}: class {name}"
    priority = pc.integer(report, priority_node, f"{where}: priority", 0, MAX_PRIORITY)
    weight: int | None = 1
    if "weight" in item.value:
        weight = pc.integer(report, item.value["weight"], f"{where}: weight", 1, MAX_WEIGHT)
    matches: list[Match | None] = []
    if "match" in item.value:
        matches = _matches(report, item.value["match"], f"{where}: match")
        if not matches:
            return None
    if name is None or priority is None or weight is None or None in matches:
        return None
    return TrafficClass(name, priority, weight, tuple(m for m in matches if m is not None))


def _matches(report: Report, node: Node, label: str) -> list[Match | None]:
    items = node.value if node.is_list else [node]
    if not items or not all(i.is_mapping and i.value for i in items):
        report.add(
            node.line,
            f"{label}: expected a mapping like {{dst-port: 5001}} or a list of them (any may fit), "
            f"got {pc.describe(node)}",
        )
        return []
    return [_match(report, item, label) for item in items]


def _match(report: Report, node: Node, label: str) -> Match | None:
    pc.check_keys(report, node, MATCH_KEYS, label)
    fields = node.value
    values: dict[str, int | None] = {}
    if "dscp" in fields:
        values["dscp"] = _dscp(report, fields["dscp"], f"{label}: dscp")
    if "protocol" in fields:
        values["protocol"] = _protocol(report, fields["protocol"], f"{label}: protocol")
    for key in ("src-port", "dst-port"):
        if key in fields:
            values[key.replace("-", "_")] = pc.integer(report, fields[key], f"{label}: {key}", 1, 65535)
    if not values or None in values.values() or any(k not in MATCH_KEYS for k in fields):
        return None
    has_port = "src_port" in values or "dst_port" in values
    if has_port and values.get("protocol") not in (None, PROTOCOLS["tcp"], PROTOCOLS["udp"]):
        report.add(fields["protocol"].line, f"{label}: a port match needs protocol tcp or udp (or none: either)")
        return None
    return Match(**values)


def _dscp(report: Report, node: Node, label: str) -> int | None:
    value = node.value
    if isinstance(value, str) and value.lower() in DSCP_NAMES:
        return DSCP_NAMES[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 63:
        return value
    report.add(
        node.line, f"{label}: expected a DSCP value from 0 to 63 or a name like ef, af41, cs1, got {pc.describe(node)}"
    )
    return None


def _protocol(report: Report, node: Node, label: str) -> int | None:
    value = node.value
    if isinstance(value, str) and value.lower() in PROTOCOLS:
        return PROTOCOLS[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return value
    report.add(node.line, f"{label}: expected tcp, udp, icmp or an IP protocol number 0-255, got {pc.describe(node)}")
    return None
