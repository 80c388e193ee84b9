"""A set of runs (`collapsar run --repeat N [--sweep ...]`) as figures.

A set directory holds its runs' directories and `set.json`, which the set
writes after each run:

  experiment   the file the runs were made from
  repeat       runs per value
  sweep        {path, values} or null
  runs         per run: run_id, value (the sweep's, or null), repeat (1..N),
               exit_code, error (the first line of a failure, or null)

`build_set` makes each completed run's figures (collapsar.report.figures)
and aggregates them per value (collapsar.report.aggregate); a run that
failed is listed and left out.  `table_lines` is what the set prints at
its end.
"""

from __future__ import annotations

import re

from collapsar.report import aggregate as agg
from collapsar.report import figures
from collapsar.runfiles import RunDirError, RunFiles

SET_FILE = "set.json"
_RUN_ID = re.compile(r"^[0-9a-f]{6}$")


def is_set(files: RunFiles) -> bool:
    return files.exists(SET_FILE)


def _runs(record: dict, where: str) -> list[dict]:
    runs = record.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and _RUN_ID.match(str(r.get("run_id"))) for r in runs):
        raise RunDirError(f"{where}: expected a list of runs with six-hex-digit run ids (a set's set.json)")
    return runs


def build_set(files: RunFiles) -> dict:
    """The figures of every run of the set and their aggregate per value."""
    record = files.json(SET_FILE)
    if record is None:
        raise RunDirError(f"{files.path}/{SET_FILE}: not readable ({'; '.join(files.notes) or 'not an object'})")
    runs = _runs(record, f"{files.path}/{SET_FILE}")
    sweep = record.get("sweep")
    values = (sweep or {}).get("values") or [None]
    notes = []
    variants = []
    for value in values:
        mine = [r for r in runs if r.get("value") == value]
        done = [r for r in mine if r.get("exit_code") == 0]
        run_figures = []
        for run in done:
            with RunFiles(run["run_id"], within=files) as run_files:
                # The aggregate takes no latency breakdown: its spans are not read.
                run_figures.append(figures.build(run_files, with_breakdown=False))
                notes += [f"run {run['run_id']}: {note}" for note in run_files.notes]
        variants.append(
            {
                "value": value,
                "runs": [r["run_id"] for r in done],
                "failed": [
                    {"run_id": r["run_id"], "exit_code": r.get("exit_code"), "error": r.get("error")}
                    for r in mine
                    if r not in done
                ],
                "aggregate": agg.aggregate(run_figures) if run_figures else None,
            }
        )
    return {
        "kind": "set",
        "experiment": record.get("experiment"),
        "repeat": record.get("repeat"),
        "sweep": sweep,
        "variants": variants,
        "notes": notes,
    }


def _mean_ci(summary: dict | None, unit: float = 1.0, fmt: str = "{:.3g}") -> str:
    if summary is None:
        return "-"
    mean = fmt.format(summary["mean"] / unit)
    if summary["ci95"] is None:
        return f"{mean} (1 run)"
    half = (summary["ci95"][1] - summary["ci95"][0]) / 2 / unit
    return f"{mean} ± {fmt.format(half)}"


def table_lines(figures_of_set: dict) -> list[str]:
    """Per value: each flow's stretches (measured rate, mean ± the 95% CI's
    half-width), each client's latency, the events' lateness."""
    lines = ["over the runs that completed: mean ± half-width of its 95% confidence interval"]
    sweep = figures_of_set["sweep"]
    for variant in figures_of_set["variants"]:
        head = f"{sweep['path']}={variant['value']}: " if sweep else ""
        lines.append(
            f"{head}{len(variant['runs'])} runs completed"
            + (f", {len(variant['failed'])} failed" if variant["failed"] else "")
        )
        aggregate = variant["aggregate"]
        if aggregate is None:
            continue
        for flow in aggregate["flows"]:
            for segment in flow["segments"]:
                if segment["measured_bps"] is None:
                    continue
                end = "end" if segment["end_s"] is None else f"{segment['end_s']:.1f}"
                rate = segment["configured_bps"]
                configured = "unlimited" if rate is None else f"{rate / 1e6:g} Mbit/s"
                lines.append(
                    f"  {flow['src']} -> {flow['dst']}  {segment['start_s']:.1f}-{end} s  measured "
                    f"{_mean_ci(segment['measured_bps'], 1e6)} Mbit/s (configured {configured})"
                )
        for client in aggregate["workload"]:
            lines.append(
                f"  {client['client']}  p50 {_mean_ci(client['p50_ms'])} ms, p99 {_mean_ci(client['p99_ms'])} ms, "
                f"ok {_mean_ci(client['ok'], fmt='{:.4g}')}"
            )
        if aggregate["lateness"]["p99_ms"] is not None:
            lines.append(f"  event lateness p99 {_mean_ci(aggregate['lateness']['p99_ms'])} ms")
    return lines
