"""Bandwidth accuracy (the Kollaps paper's Table 2): the goodput of one TCP
flow through a link of each rate, against what a real Ethernet link of that
rate gives.

One `collapsar run --repeat N --sweep 'links[c,s].bandwidth=R1,R2,...'`
(the set is the benchmark's own harness): a client and a server joined by
one link, `iperf3 -c s -t SECONDS -O 2 -J` (the first 2 s, slow start,
omitted).  Per rate, from each run's iperf3 report (the receiver's bits per
second): mean and 95% interval over the runs, next to the goodput of an
Ethernet link of that rate at MTU 1500 (TCP payload 1448 of 1538 bytes on
the wire: preamble, header, FCS and gap counted, as the TCAL counts them),
and the error.  Needs root; bandwidth only, so no sch_netem.

    python bench/bandwidth_bench.py                       # 128 kbit/s to 10 Gbit/s, 3 runs each
    python bench/bandwidth_bench.py --rates 1Mbps 1Gbps --repeat 2 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collapsar.report.aggregate import stats  # noqa: E402
from collapsar.units import parse_rate_bps  # noqa: E402

GOODPUT_SHARE = 1448 / 1538
RATES = (
    "128Kbps 256Kbps 512Kbps 1Mbps 2Mbps 5Mbps 10Mbps 20Mbps 50Mbps 100Mbps 200Mbps 500Mbps 1Gbps 2Gbps 5Gbps 10Gbps"
).split()


def topology(seconds: int) -> str:
    return f"""\
experiment: {{name: bandwidth-bench}}
services:
  c: {{command: [sh, -c, "sleep 0.5; exec iperf3 -c s -t {seconds} -O 2 -J"]}}
  s: {{command: [iperf3, -s, --one-off]}}
links:
  - {{from: c, to: s, bandwidth: 1Mbps}}
"""


def goodput_bps(run_dir: Path) -> float | None:
    try:
        report = json.loads((run_dir / "logs" / "c.out").read_text())
        return float(report["end"]["sum_received"]["bits_per_second"])
    except (OSError, ValueError, KeyError):
        return None


def human(bps: float) -> str:
    for scale, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
        if bps >= scale:
            return f"{bps / scale:.4g} {unit}"
    return f"{bps:.4g} bit/s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", nargs="+", default=RATES, help="Link rates (default: 128Kbps to 10Gbps)")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per rate (default: 3)")
    parser.add_argument("--seconds", type=int, default=8, help="iperf3's measured time per run (default: 8)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bandwidth-bench-") as tmp:
        experiment = Path(tmp) / "bench.yaml"
        experiment.write_text(topology(args.seconds + 2))
        argv = [sys.executable, "-m", "collapsar.cli", "run", str(experiment), "--repeat", str(args.repeat)]
        argv += ["--sweep", "links[c,s].bandwidth=" + ",".join(args.rates), "--status-port", "-1", "--run-dir", tmp]
        done = subprocess.run(argv, capture_output=True, text=True)
        match = re.search(r"^set (set-[0-9a-f]{6}):", done.stdout, re.M)
        if done.returncode != 0 or match is None:
            print(done.stdout[-3000:], done.stderr[-3000:])
            return 1
        set_dir = Path(tmp) / match.group(1)
        runs = json.loads((set_dir / "set.json").read_text())["runs"]
        print(f"one TCP flow (iperf3, {args.seconds} s after 2 s omitted), {args.repeat} runs per rate")
        print(f"{'link rate':>10}  {'Ethernet goodput':>16}  {'measured (mean ± 95% CI)':>28}  {'error':>7}")
        for rate in args.rates:
            got = [goodput_bps(set_dir / r["run_id"]) for r in runs if r["value"] == rate and r["exit_code"] == 0]
            summary = stats(got)
            ideal = parse_rate_bps(rate) * GOODPUT_SHARE
            if summary is None:
                print(f"{rate:>10}  {human(ideal):>16}  {'no result':>28}")
                continue
            half = (summary["ci95"][1] - summary["ci95"][0]) / 2 if summary["ci95"] else 0.0
            measured = f"{human(summary['mean'])} ± {human(half)}"
            print(f"{rate:>10}  {human(ideal):>16}  {measured:>28}  {100 * (summary['mean'] / ideal - 1):>+6.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
