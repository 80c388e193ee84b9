"""The `events:` block: each entry read into one or more `Pending` events.

This stage checks each event on its own (keys, times, names, units) and
expands the sugar: `flap` into alternating link leaves and joins, `partition`
with `until` into a start and a heal.  What is present at which time is
checked afterwards, in time order, by `presence.resolve`.
"""

from __future__ import annotations

from dataclasses import dataclass

from collapsar import parse_common as pc
from collapsar.model import instance_parts
from collapsar.parse_common import Elements, Report
from collapsar.parse_link_props import PROP_KEYS, PropValues, read_props
from collapsar.parse_links import LINK_KEYS, read_direction
from collapsar.presence import Pending, fmt_time
from collapsar.units import parse_duration_us
from collapsar.yamlsrc import Node

TARGETS = ("service", "instance", "bridge", "link", "partition")
SERVICE_ACTIONS = ("join", "leave", "crash", "disconnect", "reconnect")
MAX_FLAP_CHANGES = 10_000


@dataclass
class _Event:
    """One entry being read: its node, time and message label."""

    node: Node
    at_us: int
    label: str

    @property
    def line(self) -> int:
        return self.node.line


def parse_events(report: Report, node: Node | None, elements: Elements) -> list[Pending]:
    items = pc.section_list(report, node, "events", "events like - {at: 10s, service: web, action: leave}")
    pending: list[Pending] = []
    for item in items:
        if pc.mapping(report, item, "event") is None:
            continue
        targets = [key for key in TARGETS if key in item.value]
        if len(targets) != 1:
            if targets:
                report.add(item.line, f"event: names both {targets[0]!r} and {targets[1]!r}; write one event for each")
            else:
                report.add(item.line, "event: needs one of service, instance, bridge, link or partition")
            continue
        kind = targets[0]
        label = _label(kind, item.value[kind])
        at_node = pc.required(report, item, "at", label)
        at_us = _time(report, at_node, f"{label}: at") if at_node else None
        reader = _READERS[kind]
        event = _Event(item, at_us if at_us is not None else 0, label)
        result = reader(report, event, elements)
        if at_us is not None and result:
            pending.extend(result)
        if len(pending) > pc.MAX_EVENTS:
            # Checked as they expand: a few aliased flap events in a tiny
            # file would otherwise build hundreds of thousands first.
            report.add(
                item.line,
                f"events: expand to more than {pc.MAX_EVENTS} changes here "
                "(each flap change and each repeat through a YAML alias counts); "
                "make flap intervals longer or the timeline shorter",
            )
            break
    return pending


def _label(kind: str, target: Node) -> str:
    if (
        kind == "link"
        and target.is_list
        and len(target.value) == 2
        and all(end.is_scalar and end.text for end in target.value)
    ):
        return f"link {target.value[0].text[:70]} -> {target.value[1].text[:70]}"
    if kind in ("service", "instance", "bridge") and target.is_scalar and target.text:
        return f"{kind} {target.text[:70]}"
    return kind


def _time(report: Report, node: Node, label: str) -> int | None:
    if isinstance(node.text, str) and node.text.strip().startswith("-"):
        report.add(node.line, f"{label}: a time cannot be negative, got {pc.describe(node)}")
        return None
    return pc.unit(report, node, label, parse_duration_us)


def _action(report: Report, event: _Event, choices: tuple[str, ...]) -> str | None:
    node = pc.required(report, event.node, "action", event.label)
    return pc.choice(report, node, f"{event.label}: action", choices) if node else None


def _split_instance(name: str, elements: Elements) -> str | None:
    """The service an instance name belongs to, or None."""
    if name in elements.services:
        return name
    parts = instance_parts(name) if len(name) <= 63 else None
    return parts[0] if parts is not None and parts[0] in elements.services else None


def _unknown(report: Report, node: Node, label: str, name: str, elements: Elements, wanted: str) -> None:
    if name in elements.declared and name not in elements.where:
        return  # already reported where it is defined
    if wanted != "bridge" and name in elements.bridges:
        report.add(node.line, f"{label}: {name!r} is a bridge; write bridge: {name}")
    elif wanted == "bridge" and name in elements.services:
        report.add(node.line, f"{label}: {name!r} is a service; write service: {name}")
    else:
        pool = elements.bridges if wanted == "bridge" else elements.services
        report.add(node.line, f"{label}: unknown {wanted} {name[:70]!r}{pc.did_you_mean(name, pool)}")


def _service(report: Report, event: _Event, elements: Elements) -> list[Pending] | None:
    node = event.node.value["service"]
    pc.check_keys(report, event.node, ("at", "service", "action", "amount"), event.label)
    name = pc.text(report, node, event.label)
    action = _action(report, event, SERVICE_ACTIONS)
    amount_node = event.node.value.get("amount")
    amount = None
    if amount_node is not None:
        amount = pc.integer(report, amount_node, f"{event.label}: amount", 1, pc.MAX_INSTANCES)
        if amount is None:
            return None
    if name is None:
        return None
    service = _split_instance(name, elements)
    if service is None:
        _unknown(report, node, event.label, name, elements, "service")
        return None
    if action is None:
        return None
    if service != name:  # one instance, named like web-2
        if amount_node is not None:
            report.add(
                amount_node.line,
                f"{event.label}: amount does not apply to one "
                f"instance; write service: {service} to pick {amount} of them",
            )
            return None
        return _instances(report, event, action, service, (name,))
    return [Pending(event.at_us, "service", action, event.line, event.label, service=service, amount=amount)]


def _instance(report: Report, event: _Event, elements: Elements) -> list[Pending] | None:
    node = event.node.value["instance"]
    pc.check_keys(report, event.node, ("at", "instance", "action"), event.label)
    action = _action(report, event, SERVICE_ACTIONS)
    items = node.value if node.is_list else [node]
    names: list[str] = []
    services: set[str] = set()
    for item in items:
        name = pc.text(report, item, event.label)
        service = _split_instance(name, elements) if name else None
        if name and service is None:
            report.add(
                item.line,
                f"{event.label}: {name[:70]!r} is not an instance of a "
                "service (instances are named web, web-2, web-3, ...)",
            )
        if name is None or service is None:
            return None
        names.append(name)
        services.add(service)
    if len(services) != 1 or len(set(names)) != len(names):
        what = "the same instance twice" if len(services) == 1 else "instances of two services"
        report.add(node.line, f"{event.label}: names {what}; one event acts on distinct instances of one service")
        return None
    if action is None:
        return None
    return _instances(report, event, action, services.pop(), tuple(names))


def _instances(
    report: Report, event: _Event, action: str, service: str, names: tuple[str, ...]
) -> list[Pending] | None:
    if action == "join":
        report.add(
            event.line, f"{event.label}: join creates new instances with the next free names; write service: {service}"
        )
        return None
    return [Pending(event.at_us, "instance", action, event.line, event.label, service=service, instances=names)]


def _bridge(report: Report, event: _Event, elements: Elements) -> list[Pending] | None:
    node = event.node.value["bridge"]
    pc.check_keys(report, event.node, ("at", "bridge", "action"), event.label)
    name = pc.text(report, node, event.label)
    action = _action(report, event, ("join", "leave"))
    if name is not None and name not in elements.bridges:
        _unknown(report, node, event.label, name, elements, "bridge")
        return None
    if name is None or action is None:
        return None
    return [Pending(event.at_us, "bridge", action, event.line, event.label, bridge=name)]


def _pair(report: Report, node: Node, label: str, elements: Elements) -> tuple[str, str] | None:
    if not node.is_list or len(node.value) != 2:
        report.add(node.line, f"{label}: expected the two ends of a link like [s1, s2], got {pc.describe(node)}")
        return None
    names = [pc.text(report, end, label) for end in node.value]
    for end, name in zip(node.value, names):
        if name is not None and name not in elements.where:
            if name not in elements.declared:
                report.add(end.line, f"{label}: unknown element {name[:70]!r}{pc.did_you_mean(name, elements.where)}")
            return None
    first, second = names
    if first is None or second is None:
        return None
    return (first, second)


def _link(report: Report, event: _Event, elements: Elements) -> list[Pending] | None:
    fields = event.node.value
    modes = [key for key in ("action", "set", "flap") if key in fields]
    allowed = ["at", "link", *modes] if modes else ["at", "link", "action", "set", "flap"]
    if modes == ["action"]:
        allowed += [key for key in LINK_KEYS if key not in ("from", "to")]
    pc.check_keys(report, event.node, allowed, event.label)
    pair = _pair(report, fields["link"], event.label, elements)
    if len(modes) != 1:
        what = "only one of" if modes else "one of"
        report.add(event.line, f"{event.label}: needs {what} action (join or leave), set or flap")
        return None
    if pair is None:
        return None
    mode = modes[0]
    if mode == "set":
        changes = _set_values(report, fields["set"], f"{event.label}: set")
        if changes is None:
            return None
        return [Pending(event.at_us, "set", "set", event.line, event.label, pair=pair, changes=changes)]
    if mode == "flap":
        return _flap(report, event, pair)
    action = _action(report, event, ("join", "leave"))
    written = [key for key in (*PROP_KEYS, "direction") if key in fields]
    if action == "leave" and written:
        report.add(
            fields[written[0]].line,
            f"{event.label}: {written[0]} only goes with a join (a join with properties creates a new link)",
        )
        return None
    new_link = None
    if action == "join" and written:
        values = read_props(report, event.node, event.label)
        one_way = read_direction(report, event.node, event.label)
        if values is None or one_way is None:
            return None
        new_link = (values, one_way)
    if action is None:
        return None
    return [Pending(event.at_us, "link", action, event.line, event.label, pair=pair, new_link=new_link)]


def _set_values(report: Report, node: Node, label: str) -> PropValues | None:
    if pc.mapping(report, node, label) is None:
        return None
    pc.check_keys(report, node, PROP_KEYS, label)
    if not node.value:
        report.add(node.line, f"{label}: expected at least one of {', '.join(PROP_KEYS)}")
        return None
    return read_props(report, node, label)


def _flap(report: Report, event: _Event, pair: tuple[str, str]) -> list[Pending] | None:
    label = f"{event.label}: flap"
    node = event.node.value["flap"]
    if pc.mapping(report, node, label) is None:
        return None
    pc.check_keys(report, node, ("every", "until"), label)
    every_node, until_node = (pc.required(report, node, key, label) for key in ("every", "until"))
    every = pc.unit(report, every_node, f"{label}: every", parse_duration_us) if every_node is not None else None
    until = _time(report, until_node, f"{label}: until") if until_node is not None else None
    if every_node is not None and every == 0:
        report.add(every_node.line, f"{label}: every: expected a duration above zero")
        return None
    if every_node is None or until_node is None or not every or until is None:
        return None
    if until <= event.at_us:
        report.add(until_node.line, f"{label}: until ({fmt_time(until)}) must come after at ({fmt_time(event.at_us)})")
        return None
    changes = -(-(until - event.at_us) // every)
    if changes > MAX_FLAP_CHANGES:
        report.add(
            every_node.line,
            f"{label}: would change the link {changes} times; at most {MAX_FLAP_CHANGES} (make every longer)",
        )
        return None
    actions = ("leave", "join")
    result = [
        Pending(event.at_us + k * every, "link", actions[k % 2], event.line, label, pair=pair) for k in range(changes)
    ]
    if changes % 2:  # it is down after the last change: a flap always ends with the link up
        result.append(Pending(until, "link", "join", event.line, label, pair=pair))
    return result


def _partition(report: Report, event: _Event, elements: Elements) -> list[Pending] | None:
    label = event.label
    pc.check_keys(report, event.node, ("at", "partition", "until", "action"), label)
    groups = _groups(report, event.node.value["partition"], label, elements)
    action_node = event.node.value.get("action")
    action = pc.choice(report, action_node, f"{label}: action", ("start", "heal")) if action_node is not None else None
    until_node = event.node.value.get("until")
    until = _time(report, until_node, f"{label}: until") if until_node is not None else None
    if action == "heal" and until_node is not None:
        report.add(until_node.line, f"{label}: until goes with the start of a partition, not with a heal")
        return None
    if until is not None and until_node is not None and until <= event.at_us:
        report.add(until_node.line, f"{label}: until ({fmt_time(until)}) must come after at ({fmt_time(event.at_us)})")
        return None
    if groups is None or (action_node is not None and action is None) or (until_node is not None and until is None):
        return None
    result = [Pending(event.at_us, "partition", action or "start", event.line, label, groups=groups)]
    if until_node is not None and until is not None:
        result.append(Pending(until, "partition", "heal", event.line, label, groups=groups))
    return result


def _groups(report: Report, node: Node, label: str, elements: Elements) -> tuple[frozenset[str], ...] | None:
    if not node.is_list or len(node.value) < 2:
        report.add(
            node.line,
            f"{label}: expected two or more groups of services like [[client], [server, db]], got {pc.describe(node)}",
        )
        return None
    groups, seen, ok = [], {}, True
    for group_node in node.value:
        items = group_node.value if group_node.is_list else [group_node]
        if not items:
            report.add(group_node.line, f"{label}: a group needs at least one service")
            ok = False
        group = set()
        for item in items:
            name = pc.text(report, item, label)
            if name is None:
                ok = False
            elif name not in elements.services:
                _unknown(report, item, label, name, elements, "service")
                ok = False
            elif name in seen:
                report.add(item.line, f"{label}: service {name!r} is in two groups")
                ok = False
            else:
                seen[name] = item.line
                group.add(name)
        groups.append(frozenset(group))
    return tuple(groups) if ok else None


_READERS = {
    "service": _service,
    "instance": _instance,
    "bridge": _bridge,
    "link": _link,
    "partition": _partition,
}
