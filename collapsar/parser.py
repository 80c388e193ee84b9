"""The Collapsar topology language: YAML text -> validated `Experiment`.

`parse_text` and `parse_file` are the only entry points.  They collect every
problem in the file and raise one `TopologyError` listing them with
`file:line`; they never raise anything else, whatever the input.  This module
reads the `experiment`, `services` and `bridges` blocks; links live in
`parse_links`, events in `parse_events`, the time-ordered checks of events
(what is present when) in `presence`, and links that follow a trace file in
`linktraces`.  docs/language.md is the reference.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from typing import Any

from collapsar import parse_common as pc
from collapsar.cpuspeed import parse_cpu_speed, speed_problem
from collapsar.errors import Problem, TopologyError, Where
from collapsar.linktraces.compile import compile_traces
from collapsar.model import (
    CONGESTION_CONTROLS,
    DEFAULT_PERIOD_US,
    Bridge,
    CommandOrigin,
    Experiment,
    Service,
    ServiceEvent,
    Settings,
    instance_name,
    instance_parts,
)
from collapsar.parse_classes import read_traffic_classes
from collapsar.parse_common import Elements, Report, read_input
from collapsar.parse_egress import read_egress
from collapsar.parse_events import parse_events
from collapsar.parse_links import parse_links
from collapsar.parse_workload import compile_workload
from collapsar.presence import resolve
from collapsar.resources import parse_cpu_list
from collapsar.units import parse_duration_us, parse_size_bytes
from collapsar.yamlsrc import Node, load

TOP_KEYS = ("experiment", "services", "bridges", "links", "events")
SETTINGS_KEYS = ("name", "period", "paths", "seed", "wire-overhead", "in-order", "congestion-control")
SERVICE_KEYS = (
    "command",
    "workload",
    "image",
    "replicas",
    "env",
    "workdir",
    "cpus",
    "cpuset",
    "cpu-speed",
    "memory",
    "egress",
    "traffic-classes",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_file(path: str | os.PathLike) -> Experiment:
    """Read and parse one experiment file; the file name is kept as given."""
    source, data = read_input(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        byte = data[error.start]
        raise TopologyError(
            [Problem(Where(source, line), f"not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8")]
        ) from error
    return parse_text(text, source)


def parse_text(text: str, source: str = "<memory>", folder: str | None = None) -> Experiment:
    """Parse an experiment from YAML text; `source` names it in messages.
    Link trace files are read below `folder`, by default `source`'s folder
    (none for a source like <memory>)."""
    report = Report(source)
    if not isinstance(text, str):
        raise TopologyError([Problem(Where(source, 1), "expected YAML text")])
    root = load(text, source, report.problems)
    if root is None:
        report.raise_if_any()
    assert root is not None  # load() records a problem whenever it returns None
    return parse_tree(report, root, folder)


def parse_tree(report: Report, root: Node, folder: str | None = None) -> Experiment:
    """Validate an already loaded document (YAML, or XML translated to Nodes)."""
    source = report.source
    if not root.is_mapping:
        report.add(
            root.line,
            "expected a mapping with experiment, services, bridges, links "
            f"and events at the top, got {pc.describe(root)}",
        )
        report.raise_if_any()
    # Keys starting with x- are free for YAML anchors (link templates and such).
    templates = [key for key in root.value if key.startswith("x-")]
    pc.check_keys(report, root, (*TOP_KEYS, *templates), "top level")
    settings = _settings(report, root, source)
    services = _services(report, root)
    bridges = _bridges(report, root)
    elements = _elements(report, services, bridges)
    elements.declared = _declared(root)
    links = parse_links(report, root.value.get("links"), elements)
    pending = parse_events(report, root.value.get("events"), elements)
    # Checking what is present when only makes sense on a sound static
    # topology: a link that failed to parse would show up as "unknown" later.
    report.raise_if_any()
    events = resolve(report, pending, elements, links, settings.seed)
    report.raise_if_any()
    traced = compile_traces(report, root.value.get("links"), links, events, folder)
    _check_total_instances(report, root, services, traced.events)
    report.raise_if_any()
    return Experiment(
        settings, tuple(services), tuple(bridges), tuple(traced.links), tuple(traced.events), source, traced.traces
    )


def _check_total_instances(report: Report, root: Node, services: list[Service], events) -> None:
    """Every instance ever present, joins included, within MAX_TOTAL_INSTANCES."""
    initial = sum(service.replicas for service in services)
    present = set()
    if initial <= pc.MAX_TOTAL_INSTANCES:  # else naming them all is what the cap prevents
        present = {instance_name(s.name, i) for s in services for i in range(1, s.replicas + 1)}
    joined = {
        target
        for event in events
        if isinstance(event, ServiceEvent) and event.action == "join"
        for target in event.targets
    } - present
    total = initial + len(joined)
    if total > pc.MAX_TOTAL_INSTANCES:
        report.add(
            root.key_lines.get("services", 1),
            f"services: {total} instances in all "
            f"({initial} at the start, {len(joined)} joining later), more than the "
            f"{pc.MAX_TOTAL_INSTANCES} an experiment may have",
        )


# ---- experiment: ------------------------------------------------------------


def _settings(report: Report, root: Node, source: str) -> Settings:
    node = root.value.get("experiment")
    values: dict[str, Any] = {"name": pc.default_name(source)}  # Settings' keyword arguments
    if node is None or pc.mapping(report, node, "experiment") is None:
        return Settings(**values)
    pc.check_keys(report, node, SETTINGS_KEYS, "experiment")
    fields = node.value
    readers = {
        "name": ("name", lambda n, label: pc.name(report, n, label)),
        "period": ("period_us", lambda n, label: _period(report, n, label)),
        "paths": ("path_metric", lambda n, label: pc.choice(report, n, label, ("latency", "hops"))),
        "seed": ("seed", lambda n, label: pc.integer(report, n, label, 0, 2**63 - 1)),
        "wire-overhead": ("wire_overhead", lambda n, label: pc.boolean(report, n, label)),
        "in-order": ("in_order", lambda n, label: pc.boolean(report, n, label)),
        "congestion-control": (
            "congestion_control",
            lambda n, label: pc.choice(report, n, label, CONGESTION_CONTROLS),
        ),
    }
    for key, (field_name, read) in readers.items():
        if key in fields:
            value = read(fields[key], f"experiment: {key}")
            if value is not None:
                values[field_name] = value
    return Settings(**values, where=Where(source, node.line))


def _period(report: Report, node: Node, label: str) -> int | None:
    period_us = pc.unit(report, node, label, parse_duration_us)
    if period_us is not None and period_us < 1000:
        report.add(
            node.line,
            f"{label}: expected at least 1ms (default {DEFAULT_PERIOD_US // 1000}ms), got {pc.describe(node)}",
        )
        return None
    return period_us


# ---- services: --------------------------------------------------------------


def _services(report: Report, root: Node) -> list[Service]:
    node = root.value.get("services")
    if node is None or (node.is_scalar and node.value is None) or node.value == {}:
        line = root.key_lines.get("services", root.line)
        report.add(line, "services: an experiment needs at least one service")
        return []
    if pc.mapping(report, node, "services") is None:
        return []
    services = []
    for name, body in node.value.items():
        line = node.key_lines[name]
        label = f"service {name}"
        if not pc.is_valid_name(name):
            report.add(
                line,
                f"service {name[:70]!r}: not a valid name: use letters, digits "
                "and '-', not starting or ending with '-', at most 63 characters",
            )
            continue
        services.append(_service(report, name, body, label, line))
    return services


def _service(report: Report, name: str, body: Node, label: str, line: int) -> Service:
    where = Where(report.source, line)
    if body.is_scalar and body.value is None:
        report.add(line, f"{label}: needs a command (or an image for the Docker modes)")
        return Service(name, where=where)
    if pc.mapping(report, body, label) is None:
        return Service(name, where=where)
    pc.check_keys(report, body, SERVICE_KEYS, label)
    fields = body.value
    values: dict[str, Any] = {}  # Service's keyword arguments
    if "command" in fields and "workload" in fields:
        report.add(
            body.key_lines["workload"],
            f"{label}: use either command or workload (the YAML form of a wl-node or wl-client command), not both",
        )
    elif "command" in fields:
        values["command"] = _command(report, fields["command"], f"{label}: command")
        values["command_origin"] = CommandOrigin("command", report.where(body.key_lines["command"]))
    elif "workload" in fields:
        values["command"] = compile_workload(report, fields["workload"], f"{label}: workload")
        values["command_origin"] = CommandOrigin("workload", report.where(body.key_lines["workload"]))
    for key in ("image", "workdir"):
        if key in fields:
            values[key] = pc.text(report, fields[key], f"{label}: {key}")
    if values.get("workdir") and not values["workdir"].startswith("/"):
        report.add(
            fields["workdir"].line,
            f"{label}: workdir: expected an absolute path like /tmp, got {pc.describe(fields['workdir'])}",
        )
    if "replicas" in fields:
        values["replicas"] = pc.integer(report, fields["replicas"], f"{label}: replicas", 0, pc.MAX_INSTANCES)
    if "env" in fields:
        values["env"] = _env(report, fields["env"], f"{label}: env")
    if "cpus" in fields:
        values["cpus"] = _cpus(report, fields["cpus"], f"{label}: cpus")
    if "cpuset" in fields:
        values["cpuset"] = pc.unit(report, fields["cpuset"], f"{label}: cpuset", parse_cpu_list)
    if "memory" in fields:
        values["memory_bytes"] = pc.unit(report, fields["memory"], f"{label}: memory", parse_size_bytes)
    if "cpu-speed" in fields:
        values["cpu_speed"] = _cpu_speed(report, fields["cpu-speed"], values, label)
    if "egress" in fields:
        values["egress"] = read_egress(report, fields["egress"], f"{label}: egress")
    if "traffic-classes" in fields:
        values["traffic_classes"] = read_traffic_classes(report, fields["traffic-classes"], f"{label}: traffic-classes")
    if not (fields.get("command") or fields.get("workload") or fields.get("image")):
        report.add(line, f"{label}: needs a command (or an image for the Docker modes)")
    kept = {key: value for key, value in values.items() if value is not None}
    return Service(name, **kept, where=where)


def _command(report: Report, node: Node, label: str) -> tuple[str, ...] | None:
    """An argv list; a plain string is split like a shell would (no expansion)."""
    if node.is_list:
        words: list[str | None] = []
        for index, item in enumerate(node.value):
            word = pc.text(report, item, f"{label}[{index}]") if item.is_scalar else None
            if not item.is_scalar:
                report.add(item.line, f"{label}[{index}]: expected a string, got {pc.describe(item)}")
            words.append(word)
        if None in words:
            return None
        if not words:
            report.add(node.line, f"{label}: expected at least one word, got an empty list")
            return None
        return tuple(word for word in words if word is not None)
    line = pc.text(report, node, label)
    if line is None:
        return None
    try:
        split = shlex.split(line)
    except ValueError as error:
        report.add(
            node.line, f"{label}: cannot split {pc.describe(node)} into words: {str(error).lower()}; write it as a list"
        )
        return None
    return tuple(split)


def _env(report: Report, node: Node, label: str) -> dict[str, str] | None:
    if pc.mapping(report, node, label) is None:
        return None
    env = {}
    for key, value in node.value.items():
        if not _ENV_NAME.match(key):
            report.add(
                node.key_lines[key],
                f"{label}: {key[:70]!r} is not a valid variable "
                "name (letters, digits and '_', not starting with a digit)",
            )
        elif value.is_scalar and value.value is None:
            env[key] = ""
        else:
            word = pc.text(report, value, f"{label}: {key}")
            if word is not None:
                env[key] = word
    return env


def _cpu_speed(report: Report, node: Node, values: dict[str, Any], label: str) -> float | None:
    """A speed and the cores it applies to (collapsar.cpuspeed); a bad cpus
    or cpuset was reported already, so the cores are not checked then."""
    speed = pc.unit(report, node, f"{label}: cpu-speed", parse_cpu_speed)
    bad_cores = any(key in values and values[key] is None for key in ("cpus", "cpuset"))
    problem = None if speed is None or bad_cores else speed_problem(speed, values.get("cpus"), values.get("cpuset"))
    if problem:
        report.add(node.line, f"{label}: {problem}")
    return speed


def _cpus(report: Report, node: Node, label: str) -> float | None:
    value = node.value
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= 1024
    ):
        report.add(node.line, f"{label}: expected a number of CPUs above 0 like 0.5 or 2, got {pc.describe(node)}")
        return None
    return float(value)


# ---- bridges: and the shared namespace ---------------------------------------


def _bridges(report: Report, root: Node) -> list[Bridge]:
    items = pc.section_list(report, root.value.get("bridges"), "bridges", "names like [s1, s2]")
    bridges = []
    for item in items:
        name = pc.name(report, item, "bridges")
        if name is not None:
            bridges.append(Bridge(name, Where(report.source, item.line)))
    return bridges


def _declared(root: Node) -> set[str]:
    """Every name written under services or bridges, valid or not, so that a
    bad definition is reported once, not again at every use."""
    names: set[str] = set()
    services, bridges = root.value.get("services"), root.value.get("bridges")
    if services is not None and services.is_mapping:
        names.update(services.value)
    if bridges is not None and bridges.is_list:
        names.update(item.text for item in bridges.value if item.is_scalar and item.text)
    return names


def _elements(report: Report, services: list[Service], bridges: list[Bridge]) -> Elements:
    """Check that services, bridges and instances share one namespace cleanly."""
    elements = Elements()
    defined: list[Service | Bridge] = [*services, *bridges]
    for element in defined:
        kind = "service" if isinstance(element, Service) else "bridge"
        here = element.where
        assert here is not None  # every element read from a file carries its place
        first = elements.where.get(element.name)
        if first is not None:
            other = "service" if element.name in elements.services else "bridge"
            if other == kind:
                report.add(here.line, f"{kind} {element.name}: defined twice (first at line {first.line})")
            else:
                report.add(here.line, f"{kind} {element.name}: name already used by the {other} at line {first.line}")
            continue
        elements.where[element.name] = here
        if isinstance(element, Service):
            elements.services[element.name] = element
        else:
            elements.bridges[element.name] = element
    for name, where in elements.where.items():
        parts = instance_parts(name)
        if parts is not None and parts[0] in elements.services:
            base, index = parts
            kind = "service" if name in elements.services else "bridge"
            report.add(
                where.line,
                f"{kind} {name}: name collides with instance "
                f"{index} of service {base!r} (instances are named "
                f"{base}, {base}-2, {base}-3, ...)",
            )
    return elements
