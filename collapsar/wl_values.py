"""Values of the workload form (collapsar.parse_workload), read from YAML and
spelled as wl-node and wl-client read them.

Each reader checks one value with its line, through collapsar.units where a
unit applies, and returns the text for the argv; on a problem it reports and
returns a placeholder ("?"), and the form's argv is dropped.  wl-client's own
suffixes differ from this language's (its `m` is a million microseconds, its
`k` of bytes is 1024), so values are spelled in units both read alike.
"""

from __future__ import annotations

import re
from fractions import Fraction

from collapsar import parse_common as pc
from collapsar.parse_common import Report
from collapsar.units import parse_duration_us, parse_size_bytes
from collapsar.yamlsrc import Node

# name: (wl-client's spelling, required keys, optional keys); `mean` is wl's `avg`.
DISTRIBUTIONS = {
    "uniform": ("unif", ("min", "max"), ()),
    "exponential": ("exp", ("mean",), ("min", "max")),
    "normal": ("norm", ("mean", "std"), ("min", "max")),
    "lognormal": ("lognorm", ("mean", "std"), ("min", "max")),
    "gamma": ("gamma", ("mean", "std"), ("min", "max")),
}
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*(s|min)\s*$")
_PER_US = {"s": 1_000_000, "min": 60_000_000}


def amount(report: Report, node: Node, label: str, kind: str) -> str:
    """A duration or size, or a distribution of them (`{distribution: exponential, mean: 1ms}`)."""
    if not node.is_mapping:
        return duration(report, node, label, zero=True) if kind == "duration" else size(report, node, label)
    pc.check_keys(report, node, ("distribution", "mean", "std", "min", "max"), label)
    name_node = pc.required(report, node, "distribution", label)
    name = pc.choice(report, name_node, f"{label}: distribution", tuple(DISTRIBUTIONS)) if name_node else None
    if name is None:
        return "?"
    spelled, required, optional = DISTRIBUTIONS[name]
    parts = []
    for key in ("mean", "std", "min", "max"):
        if key not in node.value:
            if key in required:
                report.add(node.line, f"{label}: the {name} distribution needs {' and '.join(required)}")
                return "?"
            continue
        if key not in required + optional:
            report.add(
                node.key_lines[key],
                f"{label}: the {name} distribution takes {' and '.join(required + optional)}, not {key}",
            )
            continue
        value = node.value[key]
        text = (
            duration(report, value, f"{label}: {key}", zero=True)
            if kind == "duration"
            else size(report, value, f"{label}: {key}")
        )
        parts.append(f"{'avg' if key == 'mean' else key}={text}")
    return f"{spelled}:{','.join(parts)}"


def duration(report: Report, node: Node, label: str, zero: bool = False) -> str:
    duration_us = pc.unit(report, node, label, parse_duration_us)
    if duration_us is None:
        return "?"
    if duration_us == 0 and not zero:
        report.add(node.line, f"{label}: expected a duration above zero, got {pc.describe(node)}")
    return wl_time(duration_us)


def wl_time(duration_us: int) -> str:
    """A duration as wl-client reads it.  Only s, ms and us: its `m` means a
    million microseconds, not minutes."""
    for unit, factor in (("s", 1_000_000), ("ms", 1000)):
        if duration_us and duration_us % factor == 0:
            return f"{duration_us // factor}{unit}"
    return f"{duration_us}us" if duration_us else "0"


def size(report: Report, node: Node, label: str) -> str:
    size_bytes = pc.unit(report, node, label, parse_size_bytes)
    return "?" if size_bytes is None else wl_bytes(size_bytes)


def wl_bytes(size_bytes: int) -> str:
    """A size as wl-client reads it: its k, m and g are KiB, MiB and GiB."""
    for unit, factor in (("g", 2**30), ("m", 2**20), ("k", 2**10)):
        if size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return str(size_bytes)


def text(report: Report, node: Node, label: str) -> str:
    value = pc.text(report, node, label)
    return "?" if value is None else value


def count(report: Report, node: Node, label: str, low: int, high: int) -> str:
    value = pc.integer(report, node, label, low, high)
    return "?" if value is None else str(value)


def rate(report: Report, node: Node, label: str) -> Fraction | None:
    """Requests per second, exactly: `200/s`, `30/min`."""
    match = _RATE.match(node.text) if node.is_scalar and isinstance(node.text, str) else None
    if match is None or Fraction(match.group(1)) == 0:
        report.add(
            node.line,
            f"{label}: expected requests per second or minute above zero, like "
            f"200/s or 30/min, got {pc.describe(node)}",
        )
        return None
    return Fraction(match.group(1)) * 1_000_000 / _PER_US[match.group(2)]


def decimal(per_s: Fraction) -> str:
    if per_s.denominator == 1:
        return str(per_s.numerator)
    return f"{float(per_s):.9g}"


def probability(report: Report, node: Node, label: str) -> str:
    written = node.text if node.is_scalar and isinstance(node.text, str) else ""
    try:
        value = float(written[:-1]) / 100 if written.endswith("%") else float(written)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        report.add(node.line, f"{label}: expected a probability like 0.3 or 30%, got {pc.describe(node)}")
        return "?"
    return f"{value:.9g}"


def target(report: Report, node: Node, label: str) -> str:
    """An instance or service name, optionally with a port: `db`, `db-2:7000`."""
    written = node.text if node.is_scalar and isinstance(node.text, str) else None
    name, _, port = (written or "").partition(":")
    if written is None or not pc.is_valid_name(name) or (port and not (port.isdigit() and 1 <= int(port) <= 65535)):
        report.add(
            node.line,
            f"{label}: expected an instance name, optionally with a port (db, db-2:7000), got {pc.describe(node)}",
        )
        return "?"
    return written
