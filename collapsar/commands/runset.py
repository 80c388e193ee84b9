"""`collapsar run FILE --repeat N [--sweep PATH=V1,V2,...]`: a set of runs.

Runs the experiment N times (for each value of the swept property, with
`--sweep`: collapsar.sweep), one local run after the other, each a whole run
with its own run directory, all inside one set directory (SETDIR: BASE/
set-ID, BASE the --run-dir or /run/collapsar).  Every variant is parsed and
checked before the first run starts.  After each run SETDIR/set.json says
what ran and how it ended (collapsar.report.sets); at the end the runs that
completed are aggregated per value (means, spread, 95% confidence
intervals: collapsar.report.aggregate) into SETDIR/aggregate.json, a table
is printed, and `collapsar report SETDIR` draws the spread.

A run whose commands fail on their own (exit 6) is recorded and left out of
the aggregate, and the set goes on; any other failure (bad input, the
kernel, the environment) stops the set, as does Ctrl-C (the run under way
ends as a single run would, then nothing more starts).  Exit status: 0 when
every run ended well, otherwise the first failed run's.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from collapsar.errors import CollapsarError, InstanceFailure
from collapsar.model import Experiment
from collapsar.sweep import Sweep, variant
from collapsar.timeline import Timeline

if TYPE_CHECKING:
    from collapsar.manager.local.run import LocalOptions

STOPPED_BY_USER = ("SIGINT", "SIGTERM", "SIGHUP")  # a run's stop_reason when a signal ended it
MAX_RUNS = 1000


@dataclass
class Variant:
    value: str | None
    text: str | None  # None: the file as it is
    experiment: Experiment
    timeline: Timeline


def variants(path: str, sweep: Sweep | None, check: Callable[[Experiment], None]) -> list[Variant]:
    """Every variant parsed, collapsed and checked (`check`: the programs)."""
    from collapsar.parser import parse_file, parse_text
    from collapsar.timeline import build_timeline

    if sweep is None:
        experiment = parse_file(path)
        check(experiment)
        return [Variant(None, None, experiment, build_timeline(experiment))]
    text = Path(path).read_text()
    made = []
    for value in sweep.values:
        variant_text = variant(text, sweep, value)
        # Its problems name the variant: `FILE (PATH=VALUE):LINE: ...`
        experiment = parse_text(variant_text, source=f"{path} ({sweep.label(value)})", folder=os.path.dirname(path))
        check(experiment)
        made.append(Variant(value, variant_text, experiment, build_timeline(experiment)))
    return made


def make_set_dir(base: Path | None) -> Path:
    from collapsar.manager.addressing import new_run_id
    from collapsar.manager.local.rundir import checked_run_base

    path = checked_run_base(base) / f"set-{new_run_id()}"
    os.mkdir(path, 0o700)  # never one that is already there, nor a symlink
    return path


def run_set(
    file: str,
    repeat: int,
    sweep: Sweep | None,
    made: list[Variant],
    base: Path | None,
    options_for: Callable[[Path, str | None], LocalOptions],
) -> int:
    from collapsar.manager.local.run import LocalRun
    from collapsar.report.sets import SET_FILE, build_set, table_lines
    from collapsar.runfiles import RunFiles, write_replacing

    set_dir = make_set_dir(base)
    record: dict = {
        "experiment": file,
        "repeat": repeat,
        "sweep": None if sweep is None else {"path": sweep.path, "values": list(sweep.values)},
        "runs": [],
    }
    total = repeat * len(made)
    print(f"set {set_dir.name}: {total} runs, set directory {set_dir}", flush=True)
    interrupted = False
    for chosen in made:
        for k in range(1, repeat + 1):
            label = f"{sweep.label(chosen.value)}, " if sweep and chosen.value is not None else ""
            print(f"== {label}run {k} of {repeat} ==", flush=True)
            local = LocalRun(chosen.experiment, chosen.timeline, options_for(set_dir, chosen.text))
            entry = {"run_id": local.run_id, "value": chosen.value, "repeat": k, "exit_code": 0, "error": None}
            record["runs"].append(entry)
            try:
                local.run()
            except InstanceFailure as failure:
                entry["exit_code"], entry["error"] = failure.exit_code, failure.lines()[0]
                for line in failure.lines():
                    print(f"collapsar: {line}", file=sys.stderr)
            except CollapsarError as error:
                entry["exit_code"], entry["error"] = error.exit_code, error.lines()[0]
                write_replacing(set_dir / SET_FILE, json.dumps(record, indent=1))
                raise
            write_replacing(set_dir / SET_FILE, json.dumps(record, indent=1))
            if local.stop_reason in STOPPED_BY_USER:
                interrupted = True
                break
        if interrupted:
            print(f"set stopped by {local.stop_reason}: {len(record['runs'])} of {total} runs made", flush=True)
            break
    with RunFiles(set_dir) as files:
        figures = build_set(files)
    write_replacing(set_dir / "aggregate.json", json.dumps(figures, indent=1))
    for line in table_lines(figures):
        print(line)
    print(f"aggregate: {set_dir / 'aggregate.json'}; plots: collapsar report {set_dir}")
    return next((r["exit_code"] for r in record["runs"] if r["exit_code"]), 0)
