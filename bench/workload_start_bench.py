"""Time from `collapsar run` to the first workload request, local mode.

The topology has N instances: N/2 wl-node services and N/2 wl-client
services, client i sending to node i (-C 0 at 100 req/s) over a star of
bandwidth-only links, so it runs without sch_netem. The clock starts just
before `collapsar run` is started; the first request is the earliest
`request` span in the run's trace directory (RUNDIR/workload/, the spans'
wall-clock start times), so the figure holds everything a user waits for:
parsing, the program lookup, the chain checks, namespaces and shaping, the
commands' start and the client's connect. Also reported: when the run said
"all instances up" and when the last client sent its first request. Needs
root. Medians of --repeat runs.

    python bench/workload_start_bench.py --instances 50 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from collapsar.tracing.load import REQUEST, read_spans

CLI = [sys.executable, "-m", "collapsar.cli"]


def topology(n: int) -> str:
    pairs = n // 2
    lines = ["experiment: {name: wlstart}", "services:"]
    for i in range(1, pairs + 1):
        lines.append(f"  d{i}: {{command: [wl-node]}}")
        lines.append(
            f"  c{i}: {{command: [wl-client, --to, d{i}, -C, '0', -r, '100', -n, '300',"
            f" --retry-num, '100', --retry-period, 10ms]}}"
        )
    lines += ["bridges: [sw]", "links:"]
    for i in range(1, pairs + 1):
        lines.append(f"  - {{from: d{i}, to: sw, bandwidth: 100Mbps}}")
        lines.append(f"  - {{from: c{i}, to: sw, bandwidth: 100Mbps}}")
    return "\n".join(lines) + "\n"


def first_requests(trace_dir: pathlib.Path) -> list[float]:
    """Per client instance, the wall-clock start (s) of its first request span
    (read as `collapsar trace` reads them)."""
    spans, _ = read_spans(sorted(trace_dir.glob("*.spans.jsonl")))
    requests = spans.name == REQUEST
    firsts = []
    for code in np.unique(spans.inst[requests]):
        firsts.append(int(spans.start[requests & (spans.inst == code)].min()) / 1e9)
    return firsts


def one_run(n: int, workdir: pathlib.Path, index: int) -> dict:
    path = workdir / f"wlstart-{n}.yaml"
    path.write_text(topology(n))
    runs = workdir / f"runs-{index}"
    began = time.time()
    proc = subprocess.Popen(
        [*CLI, "run", str(path), "--duration", "8s", "--run-dir", str(runs), "--status-port", "-1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    all_up = None
    for line in proc.stdout:
        if all_up is None and line.startswith("all ") and " instances up in " in line:
            all_up = time.time() - began
    if proc.wait() != 0:
        raise RuntimeError(f"collapsar run exited {proc.returncode}")
    trace_dirs = list(runs.glob("*/workload"))
    if len(trace_dirs) != 1:
        raise RuntimeError(f"expected one trace directory under {runs}, found {trace_dirs}")
    firsts = first_requests(trace_dirs[0])
    if len(firsts) != n // 2:
        raise RuntimeError(f"{len(firsts)} of {n // 2} clients sent a request")
    return {
        "first_request_s": min(firsts) - began,
        "last_client_first_request_s": max(firsts) - began,
        "all_up_s": all_up,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=50, help="instances, an even number (50)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.instances < 2 or args.instances % 2:
        ap.error(f"--instances {args.instances}: expected an even number of at least 2")
    results = []
    with tempfile.TemporaryDirectory(prefix="collapsar-wlstart-") as tmp:
        for i in range(args.repeat):
            r = one_run(args.instances, pathlib.Path(tmp), i)
            results.append(r)
            print(
                f"run {i + 1}: first request {r['first_request_s']:.2f} s, every client's first "
                f"{r['last_client_first_request_s']:.2f} s, all up {r['all_up_s']:.2f} s",
                file=sys.stderr,
            )
    med = {k: statistics.median(r[k] for r in results) for k in results[0]}
    print(
        f"{args.instances} instances, median of {args.repeat}: first request {med['first_request_s']:.2f} s "
        f"after `collapsar run`, every client's first {med['last_client_first_request_s']:.2f} s, "
        f"all up {med['all_up_s']:.2f} s"
    )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"median": med, "runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
