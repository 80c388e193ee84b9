"""`collapsar trace` on a million spans: time and peak memory.

Writes a run directory with --spans spans in the workload tools' exact
format (tests/span_files.py, 64 spans to a line as a node writes them):
client -> front (compute, forward) -> db (compute) requests, 7 spans each,
one every 0.1 ms of run time, with a `set` event halfway that raises
front -- db's latency (so the breakdown has two segments).  Then runs
`collapsar trace RUNDIR --json` --repeat times as a child process and
reports the median wall time and peak RSS (the child's own ru_maxrss),
with the spread.  Keep the directory with --dir to skip writing it again.

    python bench/trace_bench.py                  # 1M spans, 3 runs
    python bench/trace_bench.py --spans 200000 --repeat 5 --json figures.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from span_files import RunFiles, chain  # noqa: E402

SPANS_PER_REQUEST = 7
EVERY_MS = 0.1
EXPERIMENT = """\
experiment: {name: trace-bench}
services:
  client: {command: [wl-client, --to, front]}
  front: {command: [wl-node]}
  db: {command: [wl-node]}
links:
  - {from: client, to: front, latency: 10ms}
  - {from: front, to: db, latency: 5ms}
events:
  - {at: AT, link: [front, db], set: {latency: 15ms}}
"""


def write_run(run_dir: Path, spans: int) -> None:
    requests = spans // SPANS_PER_REQUEST
    half_ms = requests * EVERY_MS / 2
    files = RunFiles(run_dir, batch=64)
    started = time.monotonic()
    for i in range(requests):
        at = i * EVERY_MS
        chain(files, at, rtt1_ms=20.4 + (i % 7) * 0.1, rtt2_ms=10.3 if at < half_ms else 30.3, queue1_us=i % 3 * 50)
    event = [
        {
            "index": 0,
            "label": "link front -- db set",
            "scheduled_us": int(half_ms * 1000),
            "applied_us": int(half_ms * 1000) + 200,
            "adhoc": False,
        }
    ]
    files.close(EXPERIMENT.replace("AT", f"{half_ms:.0f}ms"), event)
    size = sum(p.stat().st_size for p in (run_dir / "workload").iterdir())
    print(f"wrote {requests * SPANS_PER_REQUEST} spans ({size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s")


def one_run(run_dir: Path) -> tuple[float, float, dict]:
    """Wall seconds, peak RSS in MiB, and the summary of one `collapsar trace --json`."""
    with tempfile.TemporaryFile() as out:
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "collapsar.cli", "trace", str(run_dir), "--json"], stdout=out, cwd=ROOT
        )
        _, status, usage = os.wait4(child.pid, 0)
        took = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"collapsar trace exited {child.returncode}")
        out.seek(0)
        return took, usage.ru_maxrss / 1024, json.loads(out.read())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="Spans to write (7 per request)")
    parser.add_argument("--repeat", type=int, default=3, help="Runs of collapsar trace; the median is reported")
    parser.add_argument("--dir", type=Path, help="Run directory to write (or reuse if it has spans)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="Also write the figures to FILE as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as scratch:
        run_dir = args.dir or Path(scratch) / "run"
        if not (run_dir / "workload").is_dir():
            write_run(run_dir, args.spans)
        runs = [one_run(run_dir) for _ in range(args.repeat)]
    times, rss = [r[0] for r in runs], [r[1] for r in runs]
    summary = runs[-1][2]
    load = os.getloadavg()[0]
    print(
        f"collapsar trace --json: {summary['spans']} spans, {summary['requests']} requests, "
        f"{len(summary['breakdown'])} breakdown rows"
    )
    print(f"time: median {statistics.median(times):.2f} s (runs {', '.join(f'{t:.2f}' for t in times)})")
    print(f"peak RSS: median {statistics.median(rss):.0f} MiB (runs {', '.join(f'{r:.0f}' for r in rss)})")
    print(f"load average (1 min) at the end: {load:.1f}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "spans": summary["spans"],
                    "requests": summary["requests"],
                    "time_s": times,
                    "peak_rss_mib": rss,
                    "median_time_s": statistics.median(times),
                    "median_peak_rss_mib": statistics.median(rss),
                    "load_1min": load,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
