"""`collapsar collapse FILE [--at TIME] [--json] [--from INSTANCE]`: the path table.

Prints the collapsed path between every pair of instances present at that
time (the state after every event at or before it).  `--json` prints a list
of objects with `src`, `dst`, `latency_ms`, `jitter_ms`, `loss`,
`bandwidth_bps` (null when no link limits the path), `links` (the
unidirectional link ids crossed, in order) and `distribution`.  The table
ends with a line per link that follows a trace: its file, what it sets and
its steps, and a line per service with an egress token bucket or traffic
classes (the JSON is the paths alone).
"""

from __future__ import annotations

import argparse
import json
import sys

from collapsar import impairments
from collapsar.errors import CollapsarError, UnitError

_HEADER = ("SRC", "DST", "LATENCY", "JITTER", "LOSS", "BANDWIDTH", "LINKS")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="Experiment file (YAML)")
    parser.add_argument("--at", default="0s", metavar="TIME", help="Time into the run, like 0s, 1500ms or 2m")
    parser.add_argument("--json", action="store_true", help="Print a JSON list of paths")
    parser.add_argument(
        "--from", dest="source", metavar="INSTANCE", help="Only paths from this instance (default: all instances)"
    )


def run(args: argparse.Namespace) -> int:
    from collapsar.linktraces.compile import describe as describe_trace
    from collapsar.parser import parse_file
    from collapsar.timeline import build_timeline
    from collapsar.units import parse_duration_us

    try:
        at_us = parse_duration_us(args.at)
    except UnitError as error:
        raise CollapsarError(f"--at: {error}") from None
    experiment = parse_file(args.file)
    sources = [args.source] if args.source else None
    state = build_timeline(experiment, sources).state_at(at_us)
    paths = list(state.paths())
    if args.json:
        json.dump([_as_json(path) for path in paths], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    _print_table(paths)
    missing = len(state.unreachable())
    print(
        f"{len(paths)} paths at {args.at} between {len(state.instances)} instances"
        + (f"; {missing} pairs unreachable" if missing else "")
    )
    for trace in experiment.traces:
        print(describe_trace(trace))
    for service in experiment.services:  # what shapes an instance's egress beyond its paths
        if service.egress is not None:
            print(f"service {service.name}: egress {service.egress.describe()}")
        if service.traffic_classes is not None:
            print(f"service {service.name}: traffic classes: {'; '.join(service.traffic_classes.describe())}")
    return 0


def _as_json(path) -> dict:
    return {
        "src": path.src,
        "dst": path.dst,
        "latency_ms": path.delay_us / 1000,
        "jitter_ms": path.jitter_us / 1000,
        "loss": path.loss_ratio,
        "bandwidth_bps": path.rate_bps,
        "links": list(path.link_ids),
        "distribution": path.distribution,
        **impairments.as_json(path.extras),
    }


def _row(path) -> tuple[str, ...]:
    from collapsar.units import format_rate_bps

    return (
        path.src,
        path.dst,
        f"{path.delay_us / 1000:g}ms",
        f"{path.jitter_us / 1000:g}ms",
        f"{path.loss_ratio * 100:.4g}%",
        "unlimited" if path.rate_bps is None else format_rate_bps(path.rate_bps),
        ",".join(str(link) for link in path.link_ids),
        impairments.describe(path.extras),
    )


def _print_table(paths) -> None:
    body = [_row(path) for path in paths]
    # The last column (burst loss, reordering, queue, ...) only when a path has any.
    other = any(row[-1] for row in body)
    rows = [row if other else row[:-1] for row in [(*_HEADER, "OTHER"), *body]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        # Text columns left, numbers right, the last column unpadded.
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        cells += [row[i].rjust(widths[i]) for i in range(2, 6)]
        cells += [row[i].ljust(widths[i]) for i in range(6, len(row) - 1)]
        print("  ".join([*cells, row[-1]]))
