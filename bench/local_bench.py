"""Local mode benchmark: time from `collapsar run` to "all instances up", and
the manager's CPU per instance per second at the default 50 ms period.

Each case writes a star topology of N services (each `sleep`, bandwidth-only
links so it runs without sch_netem), starts `collapsar run --duration`, waits
for "all up" and for the eBPF counters (with sharing, the default, the
commands start only once they are attached, so "all up" includes them),
reads the manager's own CPU time from /proc between two points of the steady
state and the host memory the run holds (MemAvailable before and once up),
then SIGTERMs the run and times its teardown.  Per stage of the bring-up
(the run's bringup.json, emulation-manager/run/stages.py): its wall time and
`growth`, the last quarter's per-instance cost over the first quarter's (1.0:
flat).  `--tree full|active|auto` is passed to the run (docs/scale.md).
Needs root.  Reports medians of --repeat runs; `--json` for scripts.

    python bench/local_bench.py --sizes 10 50 200 --repeat 3
    python bench/local_bench.py --sizes 400 1000 --repeat 3
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

CLI = [sys.executable, "-m", "collapsar.cli"]
TICKS = os.sysconf("SC_CLK_TCK")


def topology(n: int) -> str:
    lines = ["experiment: {name: bench}", "services:"]
    lines += [f"  n{i}: {{command: [sleep, '3600']}}" for i in range(1, n + 1)]
    lines += ["bridges: [sw]", "links:"]
    lines += [f"  - {{from: n{i}, to: sw, bandwidth: 100Mbps}}" for i in range(1, n + 1)]
    return "\n".join(lines) + "\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime, this process only


def mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no MemAvailable in /proc/meminfo")


STAGES = ("network", "shaping", "counters", "commands")


def one_run(n: int, steady_s: float, workdir: Path, tree: str) -> dict:
    path = workdir / f"bench-{n}.yaml"
    path.write_text(topology(n))
    mem_before = mem_available_bytes()
    began = time.monotonic()
    proc = subprocess.Popen(
        [
            *CLI,
            "run",
            str(path),
            "--duration",
            f"{int(steady_s + 600)}s",
            "--run-dir",
            str(workdir / "runs"),
            "--status-port",
            "-1",
            "--tree",
            tree,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    up_s = reported_ms = counters_s = run_id = None
    # With sharing (the default) the commands start once the counters are
    # attached, so "counters attached" comes first; without, it comes after.
    for line in proc.stdout:
        if line.startswith("run ") and run_id is None:
            run_id = line.split()[1].rstrip(":")
        if line.startswith("all "):
            up_s = time.monotonic() - began
            reported_ms = float(line.split(" in ")[1].split(" ms")[0])
        elif line.startswith("counters attached"):
            counters_s = time.monotonic() - began
        if up_s is not None and counters_s is not None:
            break
    if up_s is None or counters_s is None:
        raise SystemExit(f"run of {n} instances failed: {proc.stderr.read()}")
    time.sleep(1.0)  # let start-up work settle
    mem_held = mem_before - mem_available_bytes()
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(steady_s)
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    proc.terminate()
    down_began = time.monotonic()
    rest, err = proc.communicate(timeout=600)
    down_s = time.monotonic() - down_began
    if proc.returncode != 0:
        raise SystemExit(f"run of {n} instances ended with {proc.returncode}: {err}")
    cpu_per_instance_s = (cpu1 - cpu0) / (t1 - t0) / n
    stages = {row["stage"]: row for row in json.loads((workdir / "runs" / str(run_id) / "bringup.json").read_text())}
    return {
        "instances": n,
        "up_s": up_s,
        "manager_up_ms": reported_ms,
        "counters_s": counters_s,
        "teardown_s": down_s,
        "cpu_ms_per_instance_s": cpu_per_instance_s * 1000,
        "memory_kib_per_instance": mem_held / n / 1024,
        **{f"{name}_s": stages[name]["wall_s"] for name in STAGES if name in stages},
        **{f"{name}_growth": stages[name]["growth"] for name in STAGES if stages.get(name, {}).get("growth")},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 200])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steady", type=float, default=5.0, help="Seconds of steady state measured")
    parser.add_argument("--tree", choices=("auto", "full", "active"), default="auto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("local_bench needs root")
    rows = []
    with tempfile.TemporaryDirectory(prefix="cx-bench-") as tmp:
        for n in args.sizes:
            runs = [one_run(n, args.steady, Path(tmp), args.tree) for _ in range(args.repeat)]
            rows.append(
                {key: (statistics.median(r[key] for r in runs) if key != "instances" else n) for key in runs[0]}
                | {"runs": args.repeat}
            )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{'instances':>9} {'to all up (s)':>14} {'manager up (ms)':>16} {'counters (s)':>13} "
        f"{'teardown (s)':>13} {'CPU ms/instance/s':>18} {'KiB/instance':>13}   (medians of {args.repeat})"
    )
    for r in rows:
        print(
            f"{r['instances']:>9} {r['up_s']:>14.2f} {r['manager_up_ms']:>16.0f} {r['counters_s']:>13.2f} "
            f"{r['teardown_s']:>13.2f} {r['cpu_ms_per_instance_s']:>18.3f} {r['memory_kib_per_instance']:>13.0f}"
        )
    print(f"\nbring-up stages, wall s (growth: last quarter's per-instance cost / first quarter's), --tree {args.tree}")
    print(f"{'instances':>9} " + " ".join(f"{name:>20}" for name in STAGES))
    for r in rows:
        cells = [
            f"{r.get(f'{name}_s', float('nan')):>9.2f} ({r.get(f'{name}_growth', float('nan')):>5.2f}x)"
            for name in STAGES
        ]
        print(f"{r['instances']:>9} " + " ".join(f"{c:>20}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
