"""CPU speed (`cpu-speed`) as it is achieved, measured as Buchert, Nussbaum
and Gustedt measure CPU emulators: microbenchmarks at several emulated
speeds and core counts, each repeated, the achieved slowdown against the
configured one with a 95% confidence interval.

Each configuration (speed 1, 0.5 and 0.25 on 1 core, `cpuset: "1"`, and on
2 cores, `cpuset: "0-1"`) is measured --repeat times, each time in a real
local-mode `collapsar run` of one instance that runs this file with
--worker: each benchmark once, writing its wall times to a JSON file.  The
configurations take turns (round robin), so that a change in the host's
other load falls on all of them alike, and each run waits for the host to
be idle first (up to a minute); the busiest host seen is printed.  The
work is SHA-256 over a 256 KiB buffer (hashlib releases the GIL on it, so
threads run in parallel), in units calibrated here, outside any limit, at
the host's full speed:

  cpu       one thread computes 0.25 s of work
  sleepy    20 times: sleep 50 ms, then compute 5 ms of work (the time
            measured is the computing only)
  threads   two threads compute 0.25 s of work each

A repetition's slowdown is its time over the median time at speed 1 with
the same cores; the configured slowdown is 1/speed.  The table gives the
median, the mean's 95% confidence interval (Student t, repeat - 1 degrees
of freedom) and the median's error against the configured slowdown.  This
host has 2 CPUs: 4 cores cannot be measured here (the VM tier's VM has 2
vCPUs of these too).  Holds /tmp/collapsar-kernel.lock while measuring, so
that kernel tests do not run meanwhile; other load still disturbs it.
Needs root.

    python bench/cpu_speed_bench.py --repeat 7
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI = [sys.executable, "-m", "collapsar.cli"]
LOCK = "/tmp/collapsar-kernel.lock"
BLOCK = b"\x5a" * 262144  # about 0.15 ms a unit here: the GIL is held a fraction of a percent of it
CPU_S, BURST_S, SLEEP_S, BURSTS = 0.25, 0.005, 0.050, 20
SPEEDS = (1.0, 0.5, 0.25)
CORES = {1: "1", 2: "0-1"}
CORES_ALL = os.sched_getaffinity(0)
BENCHMARKS = ("cpu", "sleepy", "threads")
# Two-sided 95% Student t quantiles by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def work(units: int) -> None:
    for _ in range(units):
        hashlib.sha256(BLOCK).digest()


def calibrate() -> float:
    """Units per second at full speed: the best of many short trials."""
    best = 0.0
    for _ in range(200):
        began = time.perf_counter()
        work(4)
        best = max(best, 4 / (time.perf_counter() - began))
    return best


def timed(units: int, threads: int = 1) -> float:
    began = time.perf_counter()
    if threads == 1:
        work(units)
    else:
        pool = [threading.Thread(target=work, args=(units,)) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    return time.perf_counter() - began


def sleepy(units: int) -> float:
    computing = 0.0
    for _ in range(BURSTS):
        time.sleep(SLEEP_S)
        computing += timed(units)
    return computing


def worker(rate: float, out: Path) -> None:
    """Inside the limited instance: each benchmark once."""
    cpu_units, burst_units = round(rate * CPU_S), round(rate * BURST_S)
    times = {"cpu": timed(cpu_units), "sleepy": sleepy(burst_units), "threads": timed(cpu_units, threads=2)}
    partial = out.with_suffix(".part")
    partial.write_text(json.dumps(times))
    partial.rename(out)


def busy_cpus(seconds: float = 0.5) -> float:
    """CPUs' worth of time the host spent on anything but idling, just now."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + fields[4]  # idle and iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    cpus = len(CORES_ALL)
    return cpus * (1 - (idle1 - idle0) / max(1, total1 - total0))


def wait_idle(limit_cpus: float = 0.15, patience_s: float = 60.0) -> float:
    """Wait for the host to be idle; how busy it was when we went on."""
    deadline = time.monotonic() + patience_s
    busy = busy_cpus()
    while busy > limit_cpus and time.monotonic() < deadline:
        busy = busy_cpus()
    return busy


def one_run(speed: float, cores: int, rate: float, tmp: Path, index: int) -> dict[str, float]:
    name = f"s{speed:g}-c{cores}-{index}".replace(".", "_")
    out, path = tmp / f"{name}.json", tmp / f"{name}.yaml"
    command = json.dumps([sys.executable, str(Path(__file__).resolve()), "--worker", str(rate), str(out)])
    path.write_text(
        "experiment: {name: cpu-speed-bench}\n"
        f'services:\n  bench: {{command: {command}, cpuset: "{CORES[cores]}", cpu-speed: {speed:g}}}\n'
        "links: []\n"
    )
    runs = tmp / f"{name}-runs"
    with (tmp / f"{name}.log").open("w") as log:
        proc = subprocess.Popen(
            [*CLI, "run", str(path), "--run-dir", str(runs), "--grace", "1s"], stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 600
            while not out.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name}: no results (see {tmp / f'{name}.log'})")
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(60)
    return json.loads(out.read_text())


def interval(values: list[float]) -> tuple[float, float]:
    mean, half = statistics.fmean(values), 0.0
    if len(values) > 1:
        half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def table(results: dict[tuple[float, int], dict[str, list[float]]]) -> list[str]:
    lines = [
        "| benchmark | cores | speed | configured slowdown | achieved (median) | 95% CI of the mean | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for bench in BENCHMARKS:
        for cores in CORES:
            base = statistics.median(results[(1.0, cores)][bench])
            for speed in SPEEDS:
                slowdowns = [t / base for t in results[(speed, cores)][bench]]
                median, (low, high) = statistics.median(slowdowns), interval(slowdowns)
                error = median * speed - 1
                lines.append(
                    f"| {bench} | {cores} | {speed:g} | {1 / speed:.2f} | {median:.3f} | "
                    f"[{low:.3f}, {high:.3f}] | {error:+.1%} |"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="Repetitions of each benchmark (default 7)")
    parser.add_argument("--json", metavar="FILE", help="Also write the raw times here")
    args = parser.parse_args()
    if args.repeat < 2:
        raise SystemExit("--repeat: at least 2 (a confidence interval needs two)")
    with open(LOCK, "w") as lock, tempfile.TemporaryDirectory(prefix="cpu-speed-bench-") as tmp:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rate = calibrate()
        print(f"calibrated: {rate:.0f} units/s of SHA-256 over 256 KiB at full speed", file=sys.stderr)
        results: dict[tuple[float, int], dict[str, list[float]]] = {
            (speed, cores): {name: [] for name in BENCHMARKS} for cores in CORES for speed in SPEEDS
        }
        busiest = 0.0
        for index in range(args.repeat):
            print(f"round {index + 1} of {args.repeat} ...", file=sys.stderr)
            for (speed, cores), times in results.items():
                busiest = max(busiest, wait_idle())
                for name, seconds in one_run(speed, cores, rate, Path(tmp), index).items():
                    times[name].append(seconds)
    if args.json:
        Path(args.json).write_text(json.dumps({f"{s:g}/{c}": r for (s, c), r in results.items()}, indent=1))
    print("\n".join(table(results)))
    print(f"\n{args.repeat} runs per row; the host's other load before a run was at most {busiest:.2f} CPUs")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(float(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
