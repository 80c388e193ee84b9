"""`collapsar trace RUNDIR [--json]`: where a run's latency goes.

Merges the spans every wl-node and wl-client of the run wrote
(RUNDIR/workload/*.spans.jsonl) and prints, per client instance, its
requests by status and latency percentiles, then, per stretch of the run
with the same configured network, a breakdown of a request's time along its
critical path (through fan-outs and quorums): network per hop next to the
RTT the topology configured then, compute, storage and waiting
(collapsar.tracing).  `--json` prints one object with `clients` and
`breakdown` (collapsar.tracing.report says what every field means).

A RUNDIR that does not exist, has no spans, or holds a span file that is not
the workload tools' OTLP/JSON is refused in one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUNDIR", help="Run directory of a run whose workload traced")
    parser.add_argument(
        "--json", action="store_true", help="Print one JSON object (clients, breakdown) instead of tables"
    )


def run(args: argparse.Namespace) -> int:
    from collapsar.tracing.critical import critical_paths
    from collapsar.tracing.expect import expectation
    from collapsar.tracing.load import RunDirError, read_run
    from collapsar.tracing.report import summarize, table_lines

    inputs = read_run(args.run_dir, _progress() if sys.stderr.isatty() else None)
    paths = critical_paths(inputs.spans)
    if len(paths.requests) == 0:
        raise RunDirError(
            f"{args.run_dir}: {len(inputs.spans)} spans but no client 'request' span; "
            f"expected the spans of a run with wl-client instances"
        )
    exp, notes = expectation(inputs)
    notes = inputs.notes + notes
    if paths.duplicate_ids:
        notes.append(f"{paths.duplicate_ids} spans share a (trace, span id) with another: links may be wrong")
    summary = {"run_dir": str(inputs.run_dir), **summarize(paths, inputs.spans, exp, inputs.t0_ns), "notes": notes}
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for line in table_lines(summary):
        print(line)
    for note in notes:
        print(f"note: {note}")
    return 0


def _progress():
    """A progress line on the terminal, at most every half second."""
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            sys.stderr.write(f"\rreading spans: {done / 1e6:.0f} of {total / 1e6:.0f} MB")
            sys.stderr.flush()

    return show
