"""An `Experiment` printed back as Collapsar YAML.

The output is meant to be read and edited by hand (one link or event per
line, units spelled out) and to parse back into an equal experiment:
`parse_text(to_yaml(x))` equals `x` apart from the `where` fields.  So every
value is printed exactly (`1500us`, not `1.5ms` rounded), and events are
printed as resolved: sugar is already expanded, and an event that acts on
some instances names them (`instance: [web-2, web-4]`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from collapsar.egress import EgressBucket
from collapsar.impairments import EXTRA_FIELDS, NO_EXTRAS, Background, Queue
from collapsar.model import (
    DEFAULT_PERIOD_US,
    BridgeEvent,
    Event,
    Experiment,
    LinkEvent,
    LinkProps,
    LinkSetEvent,
    LinkSpec,
    PartitionEvent,
    Service,
    ServiceEvent,
)
from collapsar.parse_link_props import EXTRA_FIELD_OF_KEY, FIELD_OF_KEY
from collapsar.resources import format_cpu_list
from collapsar.trafficclasses import TrafficClass
from collapsar.units import format_duration_us, format_rate_bps

_PLAIN = re.compile(r"^(?:[A-Za-z0-9_./]|-(?=[A-Za-z0-9]))[A-Za-z0-9_./@+=-]*$")
_RESOLVER = yaml.resolver.Resolver()
_DEFAULT = LinkProps()  # a field at its default is left out


def quote(text: str) -> str:
    """A plain scalar when YAML reads it back as this same string, else quoted."""
    if _PLAIN.match(text) and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == "tag:yaml.org,2002:str":
        return text
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _flow(items: dict[str, str]) -> str:
    return "{" + ", ".join(f"{key}: {value}" for key, value in items.items()) + "}"


def _names(names) -> str:
    return "[" + ", ".join(quote(name) for name in names) + "]"


def _time(at_us: int) -> str:
    return format_duration_us(at_us) if at_us else "0"


def _size(size_bytes: int) -> str:
    for unit, factor in (("t", 2**40), ("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return str(size_bytes)


def to_yaml(experiment: Experiment) -> str:
    settings = experiment.settings
    lines = ["experiment:", f"  name: {quote(settings.name)}"]
    if settings.period_us != DEFAULT_PERIOD_US:
        lines.append(f"  period: {format_duration_us(settings.period_us)}")
    if settings.path_metric != "latency":
        lines.append(f"  paths: {settings.path_metric}")
    if settings.seed:
        lines.append(f"  seed: {settings.seed}")
    if not settings.wire_overhead:
        lines.append("  wire-overhead: false")
    lines.append("services:")
    for service in experiment.services:
        lines.extend(_service(service))
    if experiment.bridges:
        lines.append(f"bridges: {_names(bridge.name for bridge in experiment.bridges)}")
    if experiment.links:
        lines.append("links:")
        lines.extend(f"  - {_flow(_link(spec))}" for spec in experiment.links)
    if experiment.events:
        lines.append("events:")
        # A set on a one-way link writes its changes without up/down: which
        # links are one-way may change as joins create new ones.
        one_way = {spec.key: spec.down is None for spec in experiment.links}
        for event in experiment.events:
            if isinstance(event, LinkEvent) and event.spec is not None:
                one_way[event.spec.key] = event.spec.down is None
            lines.append(f"  - {_flow(_event(event, one_way))}")
    return "\n".join(lines) + "\n"


def _service(service: Service) -> list[str]:
    lines = [f"  {quote(service.name)}:"]
    if service.command:
        lines.append(f"    command: {_names(service.command)}")
    if service.image is not None:
        lines.append(f"    image: {quote(service.image)}")
    if service.replicas != 1:
        lines.append(f"    replicas: {service.replicas}")
    if service.env:
        env = {key: quote(value) for key, value in service.env.items()}
        lines.append(f"    env: {_flow(env)}")
    if service.workdir is not None:
        lines.append(f"    workdir: {quote(service.workdir)}")
    if service.cpus is not None:
        lines.append(f"    cpus: {service.cpus!r}")
    if service.cpuset is not None:
        lines.append(f"    cpuset: {quote(format_cpu_list(service.cpuset))}")
    if service.cpu_speed is not None:
        lines.append(f"    cpu-speed: {service.cpu_speed!r}")
    if service.memory_bytes is not None:
        lines.append(f"    memory: {_size(service.memory_bytes)}")
    if service.egress is not None:
        lines.append(f"    egress: {_egress(service.egress)}")
    if service.traffic_classes is not None:
        lines.append("    traffic-classes:")
        lines.extend(f"      - {_traffic_class(c)}" for c in service.traffic_classes.classes)
    return lines


def _traffic_class(klass: TrafficClass) -> str:
    items = {"name": quote(klass.name), "priority": str(klass.priority), "weight": str(klass.weight)}
    if not klass.matches:
        return _flow(items)
    fields = ("dscp", "protocol", "src_port", "dst_port")
    entries = [
        _flow({f.replace("_", "-"): str(getattr(m, f)) for f in fields if getattr(m, f) is not None})
        for m in klass.matches
    ]
    return _flow(items)[:-1] + f", match: [{', '.join(entries)}]}}"


def _egress(bucket: EgressBucket) -> str:
    if bucket.credits:
        assert bucket.peak_bps is not None
        items = {"baseline": format_rate_bps(bucket.rate_bps), "burst-rate": format_rate_bps(bucket.peak_bps)}
        return _flow({**items, "credits": str(bucket.burst_bytes)})
    items = {"rate": format_rate_bps(bucket.rate_bps), "burst": str(bucket.burst_bytes)}
    if bucket.peak_bps is not None:
        items["peak"] = format_rate_bps(bucket.peak_bps)
    if bucket.peak_burst_bytes is not None:
        items["peak-burst"] = str(bucket.peak_burst_bytes)
    return _flow(items)


def _value(name: str, value: int | float | str) -> str:
    """A shaping field's value as the language writes it, exactly (a *_us field holds an int)."""
    if name.endswith("_us"):
        return format_duration_us(int(value))
    if name == "rate_bps":
        return format_rate_bps(int(value))
    return repr(value) if name == "loss_ratio" else str(value)


def _keys(fields: Mapping[str, Any]) -> dict[str, str]:
    """Shaping fields (and the extras' fields) as the keys that set them, in
    the language's order; a loss chain is written as the chain itself."""
    items = {key: _value(name, fields[name]) for key, name in FIELD_OF_KEY.items() if name in fields}
    model = fields.get("loss_model")
    if model is not None:
        items["loss"] = _flow(
            {
                "to-bad": repr(model.to_bad),
                "to-good": repr(model.to_good),
                "loss-in-bad": repr(model.loss_in_bad),
                "loss-in-good": repr(model.loss_in_good),
            }
        )
    for key, name in EXTRA_FIELD_OF_KEY.items():
        if name in fields and fields[name] is not None:
            items[key] = _extra(fields[name])
    return items


def _extra(value: Any) -> str:
    """An extra's value as the language writes it: a ratio, true/false, a queue."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Queue):
        return str(value.packets) if value.packets is not None else format_duration_us(value.time_us or 0)
    if isinstance(value, Background):
        items = {"mean": format_rate_bps(value.mean_bps), "sd": format_rate_bps(value.sd_bps) if value.sd_bps else "0"}
        items["every"] = format_duration_us(value.every_us)
        if value.rtt_us is not None:
            items["rtt"] = format_duration_us(value.rtt_us)
        return _flow(items)
    return repr(value)


def _by_direction(up: Mapping[str, Any], down: Mapping[str, Any]) -> dict[str, str]:
    """The shaping fields of a link's two directions as written: what they
    share for both, the rest under up and down; a rate alone as `up: 5Mbps`.
    A field absent from one side is that side's default (for a link) or
    unchanged (for a set)."""
    shared = {name: value for name, value in up.items() if name in down and down[name] == value}
    apart = {
        "up": {name: value for name, value in up.items() if name not in shared},
        "down": {name: value for name, value in down.items() if name not in shared},
    }
    items = _keys(shared)
    rates_only = all(set(fields) <= {"rate_bps"} for fields in apart.values())
    for direction, fields in apart.items():
        if fields:
            items[direction] = _value("rate_bps", fields["rate_bps"]) if rates_only else _flow(_keys(fields))
    return items


def _written(props: LinkProps) -> dict[str, Any]:
    """The fields of a link's direction (its extras' too) that differ from the defaults."""
    fields = {name: getattr(props, name) for name in FIELD_OF_KEY.values()}
    written = {name: value for name, value in fields.items() if value is not None and value != getattr(_DEFAULT, name)}
    extras = {name: getattr(props.extras, name) for name in EXTRA_FIELDS}
    written.update((name, value) for name, value in extras.items() if value != getattr(NO_EXTRAS, name))
    return written


def _link(spec: LinkSpec) -> dict[str, str]:
    items = {"from": quote(spec.a), "to": quote(spec.b)}
    if spec.down is None:
        items.update(_keys(_written(spec.up)))
        items["direction"] = "one-way"
    else:
        items.update(_by_direction(_written(spec.up), _written(spec.down)))
    return items


def _changes(event: LinkSetEvent, one_way: bool) -> dict[str, str]:
    return _keys(event.up) if one_way else _by_direction(event.up, event.down)


def _event(event: Event, one_way: Mapping[frozenset[str], bool]) -> dict[str, str]:
    items = {"at": _time(event.at_us)}
    if isinstance(event, ServiceEvent):
        if event.action == "join":
            items.update(service=quote(event.service), action="join")
            if len(event.targets) != 1:
                items["amount"] = str(len(event.targets))
        else:
            targets = event.targets
            items["instance"] = quote(targets[0]) if len(targets) == 1 else _names(targets)
            items["action"] = event.action
    elif isinstance(event, BridgeEvent):
        items.update(bridge=quote(event.bridge), action=event.action)
    elif isinstance(event, LinkEvent):
        items.update(link=_names((event.a, event.b)), action=event.action)
        if event.spec is not None:
            items.update(_link(event.spec))
            del items["from"], items["to"]
    elif isinstance(event, LinkSetEvent):
        items["link"] = _names((event.a, event.b))
        items["set"] = _flow(_changes(event, one_way.get(frozenset((event.a, event.b)), False)))
    elif isinstance(event, PartitionEvent):
        groups = [_names(sorted(group)) for group in event.groups]
        items["partition"] = "[" + ", ".join(groups) + "]"
        if event.action == "heal":
            items["action"] = "heal"
    return items
