"""`collapsar report RUNDIR [-o FILE] [--json]`: one page of a run's results,
or of a set of runs (`collapsar run --repeat N`, `--sweep`: SETDIR).

Reads the run directory of a local run (its series, event log, flow table,
workload records and spans, the experiment as run and what produced it:
collapsar.report.figures) and writes one self-contained HTML file with the
topology graph and the plots (collapsar.report.page), by default
RUNDIR/report.html.  `--json` prints the same figures as one JSON object
instead.  The file is written next to its final name and renamed into
place, so an old report, or a symlink planted where it goes, is replaced,
never written through.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from collapsar.errors import CollapsarError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUNDIR", help="Run directory of a local run (collapsar run prints it)")
    parser.add_argument("-o", "--output", metavar="FILE", help="Where to write the page (default: RUNDIR/report.html)")
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON object, write no page")
    parser.add_argument("--flows", type=int, default=None, metavar="N", help="Draw the N busiest flows (default: 40)")


def run(args: argparse.Namespace) -> int:
    from collapsar.dashboard import report_assets
    from collapsar.report import figures as report_figures
    from collapsar.report.page import render
    from collapsar.report.sets import build_set, is_set
    from collapsar.runfiles import REPORT_FILE, RunFiles, write_replacing

    if args.flows is not None and args.flows < 1:
        raise CollapsarError(f"--flows {args.flows}: expected a number of flows of at least 1")
    started = time.monotonic()
    with RunFiles(args.run_dir) as files:
        if is_set(files):
            figures = build_set(files)
        else:
            figures = report_figures.build(files, flows=args.flows or report_figures.MAX_FLOWS)
    if args.json:
        json.dump(figures, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    script, style = report_assets()
    page = render(figures, script, style)
    output = Path(args.output) if args.output else Path(args.run_dir) / REPORT_FILE
    write_replacing(output, page)
    print(f"report: {output} ({len(page.encode()) / 1024:.0f} KiB in {time.monotonic() - started:.2f} s)")
    return 0
