"""What a run's results cost: the size of a long run's series and of its
report, and the time `collapsar report` takes for it.

One local run of 50 instances for DURATION (default 10 minutes): 20 iperf3
clients each sending 2 Mbit/s (paced TCP) to a server of their own across
two edge switches and a core link whose rate an event changes every minute,
5 wl-clients sending 20 requests a second through a wl-node each, the
in-run probe every second.  Then, per series file, its size and rows;
`collapsar report` --repeat times (median and range of its wall time) and
the page's size; `--json`'s size.  Needs root; bandwidth-only (no netem).

    python bench/report_bench.py                      # the closing note's figures
    python bench/report_bench.py --duration 30s --repeat 1   # a quick look
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "collapsar.cli"]
PAIRS = 20
CHAINS = 5


def topology(duration_s: int) -> str:
    events = "\n".join(
        f"  - {{at: {t}s, link: [edge-a, core], set: {{bandwidth: {'25Mbps' if (t // 60) % 2 else '40Mbps'}}}}}"
        for t in range(60, duration_s, 60)
    )
    return f"""\
experiment: {{name: report-bench}}
services:
  c:
    command: [sh, -c, "sleep 1; exec iperf3 -c s${{COLLAPSAR_INSTANCE#c}} -t {duration_s} -b 2M"]
    replicas: {PAIRS}
  s: {{command: [iperf3, -s], replicas: {PAIRS}}}
  wc:
    command: [sh, -c, "sleep 1; exec wl-client --to n${{COLLAPSAR_INSTANCE#wc}} -C 1ms -r 20 -n {duration_s * 20}"]
    replicas: {CHAINS}
  n: {{command: [wl-node], replicas: {CHAINS}}}
bridges: [edge-a, core, edge-b]
links:
  - {{from: c, to: edge-a, bandwidth: 10Mbps}}
  - {{from: wc, to: edge-a, bandwidth: 10Mbps}}
  - {{from: edge-a, to: core, bandwidth: 40Mbps}}
  - {{from: core, to: edge-b, bandwidth: 100Mbps}}
  - {{from: edge-b, to: s, bandwidth: 10Mbps}}
  - {{from: edge-b, to: n, bandwidth: 10Mbps}}
events:
{events}
"""


def kib(path: Path) -> float:
    return path.stat().st_size / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", default="600s", help="The run's length (default: 600s)")
    parser.add_argument("--repeat", type=int, default=3, help="Reports made, for the median time (default: 3)")
    args = parser.parse_args()
    duration_s = int(re.fullmatch(r"(\d+)s", args.duration).group(1))
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        experiment = Path(tmp) / "bench.yaml"
        experiment.write_text(topology(duration_s))
        argv = ["run", str(experiment), "--duration", args.duration, "--probe-every", "1s", "--status-port", "-1"]
        started = time.monotonic()
        run = subprocess.run([*CLI, *argv, "--run-dir", tmp], capture_output=True, text=True)
        print(f"run: exit {run.returncode} in {time.monotonic() - started:.0f} s")
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:])
            return 1
        run_dir = Path(tmp) / re.search(r"^run ([0-9a-f]{6}):", run.stdout, re.M).group(1)
        print(f"{'file':<24} {'KiB':>9} {'rows':>9}")
        total = 0.0
        for path in sorted((run_dir / "series").iterdir()):
            rows = sum(1 for _ in path.open()) - 1
            total += kib(path)
            print(f"series/{path.name:<17} {kib(path):>9.0f} {rows:>9}")
        print(f"{'series/ in all':<24} {total:>9.0f}")
        times = []
        for _ in range(args.repeat):
            started = time.monotonic()
            subprocess.run([*CLI, "report", str(run_dir)], check=True, capture_output=True)
            times.append(time.monotonic() - started)
        figures = subprocess.run([*CLI, "report", str(run_dir), "--json"], check=True, capture_output=True).stdout
        print(f"report.html: {kib(run_dir / 'report.html'):.0f} KiB; --json: {len(figures) / 1024:.0f} KiB")
        print(
            f"collapsar report: median {statistics.median(times):.2f} s "
            f"(min {min(times):.2f}, max {max(times):.2f}, {args.repeat} runs, the CLI's start included)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
