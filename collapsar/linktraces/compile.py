"""The `trace` key of a link: its bandwidth, latency or loss follow a file.

    - {from: phone, to: tower, latency: 20ms, trace: traces/lte.csv}
    - {from: phone, to: tower, up: {trace: up.mahi}, down: {trace: {file: down.mahi, step: 500ms}}}

`trace: FILE` or `trace: {file, step, at, loop, until}`, beside `from` and
`to` for both directions or under `up`/`down` for one.  FILE is relative to
the experiment file's folder and below it (`files` reads it, `csvtrace` and
`mahimahi` resample it onto `step`, 1s unless given, at least MIN_STEP_US).  Step k
is in force from `at + k * step`; without `loop` the file plays once and its
last step stays, with `loop` it repeats until `until`.

`compile_traces` turns every step into a `LinkSetEvent` of the fields that
change (a step at t=0 is folded into the link itself), so the timeline
(collapsar.timeline) re-collapses the paths across the link at each step as
it does for any `set` event.  It runs once the events are resolved: a `set`
event may not change, after the trace starts, a field the trace drives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from collapsar import parse_common as pc
from collapsar.errors import Problem, TopologyError, Where
from collapsar.linktraces.base import Trace, TraceStep
from collapsar.linktraces.files import parse_trace, read_trace_file
from collapsar.model import Event, LinkProps, LinkSetEvent, LinkSpec, LinkTrace
from collapsar.parse_common import Report
from collapsar.parse_link_props import DIRECTIONS, FIELD_OF_KEY, Direction, Written, check_props
from collapsar.parse_links import TRACE_KEY
from collapsar.presence import fmt_time
from collapsar.units import format_duration_us, parse_duration_us
from collapsar.yamlsrc import Node

TRACE_OPTIONS = ("file", "step", "at", "loop", "until")
DEFAULT_STEP_US = 1_000_000
# The finest step: the player applies a step of one changed link in well
# under a millisecond, but the sharing loop (50 ms) and the per-second
# series need a few of their periods per step (docs/language.md, `trace`).
MIN_STEP_US = 100_000
_KEY_OF_FIELD = {field: key for key, field in FIELD_OF_KEY.items()}
_DEFAULTS = LinkProps()


@dataclass(frozen=True)
class TraceKey:
    """One `trace` key as written, for the directions it covers."""

    file: str
    step_us: int
    at_us: int
    loop: bool
    until_us: int | None
    line: int
    directions: tuple[Direction, ...]


def link_traces(report: Report, item: Node, spec: LinkSpec, label: str) -> list[TraceKey]:
    """The trace keys of one `links:` entry (already a valid LinkSpec)."""
    both = item.value.get(TRACE_KEY)
    apart = {
        direction: node.value[TRACE_KEY]
        for direction in DIRECTIONS
        if (node := item.value.get(direction)) is not None and node.is_mapping and TRACE_KEY in node.value
    }
    own: tuple[Direction, ...] = ("up",) if spec.down is None else DIRECTIONS
    if both is not None and apart:
        direction = next(iter(apart))
        report.add(
            apart[direction].line, f"{label}: use either trace (both directions) or trace under {direction}, not both"
        )
        return []
    if "down" in apart and spec.down is None:
        report.add(apart["down"].line, f"{label}: a one-way link has no down direction; use trace or up")
        return []
    written = {own: both} if both is not None else {(d,): node for d, node in apart.items()}
    keys = []
    for directions, node in written.items():
        key = _read_key(report, node, f"{label}: trace", directions)
        if key is not None:
            keys.append(key)
    return keys


def _read_key(report: Report, node: Node, label: str, directions: tuple[Direction, ...]) -> TraceKey | None:
    if node.is_scalar:
        path = pc.text(report, node, label)
        return None if path is None else TraceKey(path, DEFAULT_STEP_US, 0, False, None, node.line, directions)
    if pc.mapping(report, node, label) is None:
        return None
    pc.check_keys(report, node, TRACE_OPTIONS, label)
    fields = node.value
    file_node = pc.required(report, node, "file", label)
    path = pc.text(report, file_node, f"{label}: file") if file_node is not None else None
    times = {
        key: pc.unit(report, fields[key], f"{label}: {key}", parse_duration_us) if key in fields else None
        for key in ("step", "at", "until")
    }
    loop = pc.boolean(report, fields["loop"], f"{label}: loop") if "loop" in fields else False
    step_us, at_us, until_us = times["step"], times["at"] or 0, times["until"]
    if step_us is not None and step_us < MIN_STEP_US:
        report.add(
            fields["step"].line,
            f"{label}: step: {format_duration_us(step_us)} is finer than the finest step, "
            f"{format_duration_us(MIN_STEP_US)}; the file is resampled onto the step, so write step: "
            f"{format_duration_us(MIN_STEP_US)} or more",
        )
        return None
    if loop and "until" not in fields:
        report.add(fields["loop"].line, f"{label}: loop needs an until (when the repeating stops)")
        return None
    if until_us is not None and until_us <= at_us:
        report.add(
            fields["until"].line, f"{label}: until ({fmt_time(until_us)}) must come after at ({fmt_time(at_us)})"
        )
        return None
    if path is None or loop is None or any(key in fields and times[key] is None for key in times):
        return None
    return TraceKey(path, step_us or DEFAULT_STEP_US, at_us, loop, until_us, node.line, directions)


@dataclass
class Compiled:
    """The links with any step at t=0 folded in, the events with every
    trace step merged in time order, and what each trace does."""

    links: list[LinkSpec]
    events: list[Event]
    traces: tuple[LinkTrace, ...]


def compile_traces(
    report: Report, node: Node | None, links: list[LinkSpec], events: list[Event], folder: str | None
) -> Compiled:
    """Read and compile every trace of the `links:` block `node`; a
    TopologyError lists what is wrong (FILE:LINE of the trace's row)."""
    items = node.value if node is not None and node.is_list else []
    by_line = {spec.where.line: index for index, spec in enumerate(links) if spec.where is not None}
    links, added, traces = list(links), [], []
    problems: list[Problem] = []
    files: dict[str, Trace] = {}
    for item in items:
        index = by_line.get(item.line)
        if index is None or not item.is_mapping:
            continue
        spec = links[index]
        label = f"link {spec.a} -> {spec.b}"
        for key in link_traces(report, item, spec, label):
            try:
                compiled = _compile(report, key, spec, label, events, folder, files)
            except TopologyError as error:
                problems.extend(error.problems)
                continue
            if compiled is not None:
                spec, steps, trace = compiled
                links[index] = spec
                added.extend(steps)
                traces.append(trace)
    if report.problems or problems:
        raise TopologyError([*sorted(report.problems, key=lambda p: p.where.line if p.where else 0), *problems])
    merged = sorted([*events, *added], key=lambda event: event.at_us)  # stable: the file's events first
    if len(merged) > pc.MAX_EVENTS:
        line = traces[0].where.line if traces[0].where else 1
        report.add(
            line,
            f"events: {len(merged)} changes with the traces' steps, more than {pc.MAX_EVENTS}; "
            "make a step longer or a trace shorter",
        )
        report.raise_if_any()
    return Compiled(links, merged, tuple(traces))


def _folder(report: Report, folder: str | None) -> str | None:
    if folder is not None:
        return folder
    return None if report.source.startswith("<") else os.path.dirname(report.source)


def _compile(
    report: Report,
    key: TraceKey,
    spec: LinkSpec,
    label: str,
    events: list[Event],
    folder: str | None,
    files: dict[str, Trace],
) -> tuple[LinkSpec, list[Event], LinkTrace] | None:
    """(the spec, its trace's events, the LinkTrace), or None with the
    problem in `report`; a problem of the file raises TopologyError."""
    base = _folder(report, folder)
    if base is None:
        where = f"{report.source} has none"
        report.add(key.line, f"{label}: trace: a trace file is read from the experiment file's folder; {where}")
        return None
    name = os.path.normpath(os.path.join(base, key.file))
    if name not in files:
        try:
            data = read_trace_file(base, key.file)
        except ValueError as error:
            report.add(key.line, f"{label}: trace {key.file[:80]}: {error}")
            return None
        files[name] = parse_trace(name, data)
    trace = files[name]
    if trace.format == "mahimahi" and key.step_us % 1000:
        report.add(key.line, f"{label}: trace: step: a Mahimahi trace counts whole milliseconds; got {key.step_us}us")
        return None
    count = _count(key, trace)
    if count > pc.MAX_EVENTS:
        report.add(key.line, f"{label}: trace: {count} steps, more than {pc.MAX_EVENTS}; make the step longer")
        return None
    if not _written_apart(report, key, spec, trace, label):
        return None
    steps, empty = trace.steps(key.step_us, count)
    spec, changes = _walk(key, spec, steps, trace, name, label, events)
    summary = LinkTrace(
        spec.a, spec.b, key.directions, name, trace.format, trace.fields, key.step_us, key.at_us, count,
        len(changes), key.loop, key.until_us, empty, report.where(key.line),
    )  # fmt: skip
    return spec, changes, summary


def _count(key: TraceKey, trace: Trace) -> int:
    """Steps played: the file once, or repeated; cut at `until`."""
    window = None if key.until_us is None else -(-(key.until_us - key.at_us) // key.step_us)
    once = trace.play_steps(key.step_us)
    return window if key.loop and window is not None else min(once, window or once)


def _props(spec: LinkSpec, direction: Direction) -> LinkProps:
    props = spec.up if direction == "up" else spec.down
    assert props is not None  # link_traces gives a one-way link no down trace
    return props


def _written_apart(report: Report, key: TraceKey, spec: LinkSpec, trace: Trace, label: str) -> bool:
    """A value written on the link for a field the trace sets from t=0 would never apply."""
    if key.at_us:
        return True
    for direction in key.directions:
        for field in trace.fields:
            if getattr(_props(spec, direction), field) != getattr(_DEFAULTS, field):
                name = _KEY_OF_FIELD[field]
                report.add(
                    key.line,
                    f"{label}: the trace sets {name} from t=0, so the {name} written on the link "
                    "never applies; remove it, or start the trace later with at",
                )
                return False
    return True


def _walk(
    key: TraceKey, spec: LinkSpec, steps: list[TraceStep], trace: Trace, name: str, label: str, events: list[Event]
) -> tuple[LinkSpec, list[Event]]:
    """Each step over the direction's props as they are then; the link
    with step 0 folded in when at t=0, and one event per step that changes."""
    current = {d: _props(spec, d) for d in key.directions}
    sets = _sets(key, spec, trace, events, label)
    problems = Report(name)
    out: list[Event] = []
    for k, step in enumerate(steps):
        at_us = key.at_us + k * key.step_us
        for later, direction, fields in sets:
            if later <= at_us:  # the file's own `set` events of other fields, in force by now
                current[direction] = current[direction].changed(fields)
        sets = [entry for entry in sets if entry[0] > at_us]
        new = {d: props.changed(step.values) for d, props in current.items()}
        if not check_props(problems, {d: Written() for d in new}, new, label, step.line):
            raise TopologyError(problems.problems)
        changes = {d: {f: v for f, v in step.values.items() if getattr(current[d], f) != v} for d in new}
        current = new
        if k == 0 and at_us == 0:
            spec = replace(spec, up=new.get("up", spec.up), down=new.get("down", spec.down))
        elif any(changes.values()):
            up, down = changes.get("up", {}), changes.get("down", {})
            out.append(LinkSetEvent(at_us, spec.a, spec.b, up, down, Where(name, step.line)))
    return spec, out


def _sets(
    key: TraceKey, spec: LinkSpec, trace: Trace, events: list[Event], label: str
) -> list[tuple[int, Direction, dict]]:
    """The file's `set` events on this link, per traced direction; one that
    changes a traced field once the trace has started is an error."""
    found = []
    for event in events:
        if not isinstance(event, LinkSetEvent) or frozenset((event.a, event.b)) != spec.key:
            continue
        forward = event.up if event.a == spec.a else event.down
        backward = event.down if event.a == spec.a else event.up
        for direction, fields in (("up", forward), ("down", backward)):
            if direction not in key.directions or not fields:
                continue
            clash = [field for field in trace.fields if field in fields]
            if clash and event.at_us >= key.at_us:
                line = event.where.line if event.where else key.line
                name = _KEY_OF_FIELD[clash[0]]
                raise TopologyError(
                    [
                        Problem(
                            Where(event.where.file if event.where else "", line),
                            f"{label}: cannot set {name} at {fmt_time(event.at_us)}: it follows the trace "
                            f"{key.file[:80]} from {fmt_time(key.at_us)}",
                        )
                    ]
                )
            found.append((event.at_us, direction, dict(fields)))
    return found


def describe(trace: LinkTrace) -> str:
    """One line for `collapsar collapse` and the dry run."""
    directions = "both directions" if len(trace.directions) == 2 else trace.directions[0]
    what = ", ".join(_KEY_OF_FIELD[field] for field in trace.fields)
    repeat = f", repeating until {fmt_time(trace.until_us or 0)}" if trace.loop else ""
    line = (
        f"link {trace.a} -> {trace.b} ({directions}) follows trace {trace.file} ({trace.format}: {what}): "
        f"{trace.steps} steps of {format_duration_us(trace.step_us)} from {fmt_time(trace.at_us)}{repeat}, "
        f"{trace.changes} link changes in the timeline"
    )
    if trace.empty_steps:
        line += f"; {trace.empty_steps} steps without a delivery opportunity run at one packet a step"
    return line
