"""Time parse + collapse + full timeline on scale-free topologies.

    python bench/topology_bench.py [--runs 5] [--json] [--cases 1000:all,4000:quarter]

Each case is `ELEMENTS:SHARE`: a scale-free experiment of that many services +
bridges with 20 link events (bench/scalefree.py), and paths from every
instance (`all`) or from one instance in four (`quarter`, one host's share).
Each case runs in a fresh interpreter so that its peak memory (ru_maxrss,
which includes Python and numpy themselves) is its own.  The timed part is
`parse_text` on the YAML text + `build_timeline` (which collapses t=0 and
applies every event); the median of `--runs` runs is reported, as wall-clock
and as CPU time of the process (the two differ when the machine is busy).
Targets on a 2-core machine: 1000:all under 2 s, 4000:quarter under 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS_S = {"1000:all": 2.0, "4000:quarter": 5.0}
DEFAULT_CASES = "1000:all,2000:all,2000:quarter,4000:quarter"


def worker(elements: int, share: str, runs: int) -> dict:
    """One case, in this process: returns the measurements as a dict."""
    sys.path.insert(0, HERE)
    from scalefree import generate

    from collapsar.parser import parse_text
    from collapsar.timeline import build_timeline

    text = generate(elements)
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    parse_s, timeline_s, wall_s, cpu_s = [], [], [], []
    experiment = timeline = None
    for _ in range(runs):
        experiment = timeline = None  # measure one timeline at a time
        cpu0, wall0 = time.process_time(), time.perf_counter()
        experiment = parse_text(text, f"scalefree-{elements}.yaml")
        wall1 = time.perf_counter()
        names = [service.name for service in experiment.services]
        sources = names[::4] if share == "quarter" else None
        timeline = build_timeline(experiment, sources)
        wall2 = time.perf_counter()
        cpu_s.append(time.process_time() - cpu0)
        parse_s.append(wall1 - wall0)
        timeline_s.append(wall2 - wall1)
        wall_s.append(wall2 - wall0)
    first = timeline.steps[0].state
    return {
        "case": f"{elements}:{share}",
        "elements": elements,
        "share": share,
        "bridges": len(experiment.bridges),
        "instances": len(first.instances),
        "sources": len(first.sources),
        "links": len(first.links),
        "pairs": int(first.exists().sum()),
        "steps": len(timeline.steps),
        "changed_after_t0": sum(len(step.changed) for step in timeline.steps[1:]),
        "runs": runs,
        "parse_s": statistics.median(parse_s),
        "timeline_s": statistics.median(timeline_s),
        "total_s": statistics.median(wall_s),
        "cpu_s": statistics.median(cpu_s),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "baseline_rss_mib": baseline_kib / 1024,
    }


def run_case(case: str, runs: int) -> dict:
    elements, share = case.split(":")
    if share not in ("all", "quarter"):
        raise SystemExit(f"case {case!r}: expected SHARE all or quarter")
    output = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", elements, share, str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(output)
    result["target_s"] = TARGETS_S.get(case)
    return result


def print_table(results: list[dict]) -> None:
    header = ("case", "sources", "pairs", "parse s", "timeline s", "total s", "cpu s", "peak MiB", "target")
    rows = [header]
    for r in results:
        target = (
            "-"
            if r["target_s"] is None
            else (f"<{r['target_s']:g}s " + ("ok" if r["total_s"] < r["target_s"] else "MISSED"))
        )
        rows.append(
            (
                r["case"],
                str(r["sources"]),
                str(r["pairs"]),
                f"{r['parse_s']:.2f}",
                f"{r['timeline_s']:.2f}",
                f"{r['total_s']:.2f}",
                f"{r['cpu_s']:.2f}",
                f"{r['peak_rss_mib']:.0f}",
                target,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    runs = results[0]["runs"] if results else 0
    load = os.getloadavg()[0]
    print(f"median of {runs} runs; 20 link events; load average {load:.1f} on {os.cpu_count()} CPUs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Runs per case (median reported)")
    parser.add_argument("--cases", default=DEFAULT_CASES, help="Comma-separated ELEMENTS:SHARE")
    parser.add_argument("--json", action="store_true", help="Print the results as JSON")
    parser.add_argument("--worker", nargs=3, metavar=("ELEMENTS", "SHARE", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        elements, share, runs = args.worker
        print(json.dumps(worker(int(elements), share, int(runs))))
        return 0
    results = []
    for case in args.cases.split(","):
        print(f"running {case} ...", file=sys.stderr)
        results.append(run_case(case, args.runs))
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
