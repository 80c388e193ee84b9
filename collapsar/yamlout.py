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

import yaml

from collapsar.errors import CollapsarError
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
from collapsar.parse_links import KEY_OF_FIELD
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
        lines.extend(f"  - {_flow(_event(event))}" for event in experiment.events)
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
    if service.memory_bytes is not None:
        lines.append(f"    memory: {_size(service.memory_bytes)}")
    return lines


def _value(name: str, value: int | float | str) -> str:
    """A shaping field's value as the language writes it, exactly (a *_us field holds an int)."""
    if name.endswith("_us"):
        return format_duration_us(int(value))
    return repr(value) if name == "loss_ratio" else str(value)


def _props(up: LinkProps, down: LinkProps | None, what: str) -> dict[str, str]:
    if down is not None and any(getattr(up, name) != getattr(down, name) for name in KEY_OF_FIELD):
        raise CollapsarError(
            f"{what}: latency, jitter and loss differ between directions, which the language cannot express"
        )
    items: dict[str, str] = {}
    for name, key in KEY_OF_FIELD.items():
        value = getattr(up, name)
        if value != getattr(_DEFAULT, name):
            items[key] = _value(name, value)
    if down is None or up.rate_bps == down.rate_bps:
        if up.rate_bps is not None:
            items["bandwidth"] = format_rate_bps(up.rate_bps)
    else:
        for key, rate in (("up", up.rate_bps), ("down", down.rate_bps)):
            if rate is not None:
                items[key] = format_rate_bps(rate)
    return items


def _link(spec: LinkSpec) -> dict[str, str]:
    items = {"from": quote(spec.a), "to": quote(spec.b)}
    items.update(_props(spec.up, spec.down, f"link {spec.a} -> {spec.b}"))
    if spec.down is None:
        items["direction"] = "one-way"
    return items


def _changes(event: LinkSetEvent) -> dict[str, str]:
    items: dict[str, str] = {}
    for name, key in KEY_OF_FIELD.items():
        if name not in event.up and name not in event.down:
            continue
        if event.down and event.up.get(name) != event.down.get(name):
            raise CollapsarError(
                f"link {event.a} -> {event.b}: a set that changes {key} differently per direction cannot be expressed"
            )
        items[key] = _value(name, event.up[name])
    up, down = event.up.get("rate_bps"), event.down.get("rate_bps")
    if up is not None and up == down:
        items["bandwidth"] = format_rate_bps(int(up))
    else:
        for key, rate in (("up", up), ("down", down)):
            if rate is not None:
                items[key] = format_rate_bps(int(rate))
    return items


def _event(event: Event) -> dict[str, str]:
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
        items["set"] = _flow(_changes(event))
    elif isinstance(event, PartitionEvent):
        groups = [_names(sorted(group)) for group in event.groups]
        items["partition"] = "[" + ", ".join(groups) + "]"
        if event.action == "heal":
            items["action"] = "heal"
    return items
