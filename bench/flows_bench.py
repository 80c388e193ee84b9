"""Short flows and RTT under load: Collapsar against the hop-by-hop reference network.

    python bench/flows_bench.py --vm --repeat 3

A dumbbell (four clients on sw1, servers on sw2; sw1 - sw2 10 Mbit/s and
20 ms each way, every other link 100 Mbit/s and 1 ms: 44 ms of RTT) run
through Collapsar (`collapsar run`) and through tests/reference_net.py
(a namespace per node, htb + netem + a BDP queue per hop), as
bench/fidelity_bench.py does, one VM boot for all runs.  Per run:
- `one` fetches 10 KB, 100 KB and 1 MB (bench/flowtime.py: connect, ask,
  read to the last byte) one at a time, 8 rounds;
- `eight` fetches the same sizes 8 at once, 2 rounds, after `one` is done;
- then `bulk` pushes TCP to `sink` for 20 s across the bottleneck while
  `bulk` itself and its neighbour `pinger` ping `srv` every 200 ms, from
  7 s before the load to its end: the RTT idle, and under load seen from
  the sender (its own queue) and from another host behind the same
  bottleneck (in the reference, the shared queue at sw1; in Collapsar,
  where each instance's paths are shaped at its own interface, none).
The table gives, per system, the median over runs of each run's median
(and p90) completion time per size and concurrency, and the ping medians
per phase, with the model's floor: the transfer's bytes at the path's rate
plus the handshake and slow start's round trips are not modelled; the two
systems are set side by side, with their ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))
sys.path.insert(2, str(ROOT / "tests"))
from fidelity_bench import GUEST_ENV, SYSTEMS, bench_main, bench_options, run_collapsar, run_reference  # noqa: E402

from collapsar.errors import CollapsarError  # noqa: E402

DEFAULT_OUT = ROOT / "artifacts" / "flows"
SIZES = (10_000, 100_000, 1_000_000)
PORT = 7070
PING_INTERVAL_S = 0.2
LOAD_START_S, LOAD_S = 52.0, 20.0  # bulk's iperf3, timed from t=0 (after the transfers)
PING_START_S = LOAD_START_S - 7.0
SETTLE_S = 3.0  # left out of the loaded phase at its start


def scenario() -> str:
    flowtime = ROOT / "bench" / "flowtime.py"
    end = LOAD_START_S + LOAD_S + 4
    count = int((end - 2 - PING_START_S) / PING_INTERVAL_S)
    ping = f"sleep {PING_START_S:g}; exec ping -D -n -i {PING_INTERVAL_S} -c {count} -W 2 srv"
    load = f"(sleep {LOAD_START_S:g}; iperf3 -c sink -t {LOAD_S:g} > /dev/null) &"
    return f"""\
experiment: {{name: flows-bench}}
services:
  srv: {{command: [sh, -c, "timeout {end:g} python3 {flowtime} serve {PORT}; true"]}}
  sink: {{command: [iperf3, -s, -1]}}
  one: {{command: [sh, -c, "sleep 2; exec python3 {flowtime} fetch srv {PORT} --repeat 8 --gap 0.3"]}}
  eight: {{command: [sh, -c, "sleep 24; exec python3 {flowtime} fetch srv {PORT} --repeat 2 --parallel 8 --gap 0.5"]}}
  bulk: {{command: [sh, -c, "{load} {ping}"]}}
  pinger: {{command: [sh, -c, "{ping}"]}}
bridges: [sw1, sw2]
links:
  - {{from: sw1, to: sw2, latency: 20ms, bandwidth: 10Mbps}}
  - {{from: one, to: sw1, latency: 1ms, bandwidth: 100Mbps}}
  - {{from: eight, to: sw1, latency: 1ms, bandwidth: 100Mbps}}
  - {{from: bulk, to: sw1, latency: 1ms, bandwidth: 100Mbps}}
  - {{from: pinger, to: sw1, latency: 1ms, bandwidth: 100Mbps}}
  - {{from: srv, to: sw2, latency: 1ms, bandwidth: 100Mbps}}
  - {{from: sink, to: sw2, latency: 1ms, bandwidth: 100Mbps}}
"""


def transfers(logs: Path) -> dict[str, list[float]]:
    """'size/parallel' -> completion times (s); a failed transfer is an error."""
    out: dict[str, list[float]] = {}
    for client in ("one", "eight"):
        for line in (logs / f"{client}.out").read_text().splitlines():
            row = json.loads(line)
            if "error" in row:
                raise CollapsarError(f"{client}: a transfer failed: {row}")
            out.setdefault(f"{row['size']}/{row['parallel']}", []).append(row["s"])
    return out


PING_LINE = re.compile(r"^\[(\d+\.\d+)\] .* time=([0-9.]+) ms")


def pings(logs: Path, node: str) -> dict[str, list[float]]:
    """RTTs (ms) by phase: idle (before the load), loaded (its settled part)."""
    text = (logs / f"{node}.out").read_text()
    return ping_phases(text, node, PING_START_S, LOAD_START_S - 1, (LOAD_START_S + SETTLE_S, LOAD_START_S + LOAD_S - 1))


def ping_phases(
    text: str, node: str, start_s: float, idle_until_s: float, loaded: tuple[float, float]
) -> dict[str, list[float]]:
    """A `ping -D` log's RTTs (ms): those sent before `idle_until_s` (idle)
    and within `loaded` (s from t=0).  Times are the ping's own wall clock,
    placed by its first reply (sent `start_s` after t=0)."""
    rows = [(float(m[1]), float(m[2])) for m in map(PING_LINE.match, text.splitlines()) if m]
    if not rows:
        raise CollapsarError(f"{node}: no ping replies")
    first = rows[0][0]
    out: dict[str, list[float]] = {"idle": [], "loaded": []}
    for at, rtt in rows:
        t = start_s + at - first
        if t < idle_until_s:
            out["idle"].append(rtt)
        elif loaded[0] <= t < loaded[1]:
            out["loaded"].append(rtt)
    return out


def measure(args) -> int:
    from collapsar.tcal import check_kernel

    check_kernel(need_netem=True)
    args.out.mkdir(parents=True, exist_ok=True)
    file = args.out / "flows.yaml"
    file.write_text(scenario())
    raw: dict = {"runs": []}
    for number in range(args.repeat):
        for system in SYSTEMS:
            started = time.monotonic()
            where = args.out / f"{system}-{number + 1}"
            logs = (run_collapsar if system == "collapsar" else run_reference)(file, where)
            run = {"system": system, "run": number + 1, "took_s": time.monotonic() - started}
            run["transfers"] = transfers(logs)
            run["pings"] = {node: pings(logs, node) for node in ("bulk", "pinger")}
            raw["runs"].append(run)
            print(f"{system} run {number + 1} of {args.repeat}: {run['took_s']:.0f} s", flush=True)
            (args.out / "raw.json").write_text(json.dumps(raw, indent=1))
    return 0


def p90(values: list[float]) -> float:
    """The 90th percentile (nearest rank below)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def summarise(raw: dict) -> str:
    def per_run(system: str, pick) -> list[float]:
        return [pick(run) for run in raw["runs"] if run["system"] == system]

    def cell(values: list[float], scale: float = 1000.0) -> str:
        return f"{statistics.median(values) * scale:8.1f} [{min(values) * scale:7.1f},{max(values) * scale:7.1f}]"

    runs = sum(run["system"] == "collapsar" for run in raw["runs"])
    lines = [
        f"completion time, ms: median over {runs} run(s) of each run's median (p90), [min, max] over runs",
        f"{'transfer':>16} | {'collapsar median':>25} {'p90':>7} | {'reference median':>25} {'p90':>7} | ratio",
    ]
    for parallel in (1, 8):
        for size in SIZES:
            key = f"{size}/{parallel}"
            meds = {s: per_run(s, lambda r, key=key: statistics.median(r["transfers"][key])) for s in SYSTEMS}
            p90s = {s: per_run(s, lambda r, key=key: p90(r["transfers"][key])) for s in SYSTEMS}
            ratio = statistics.median(meds["collapsar"]) / statistics.median(meds["reference"])
            columns = [f"{cell(meds[s])} {statistics.median(p90s[s]) * 1000:7.1f}" for s in SYSTEMS]
            lines.append(f"{size // 1000:>6} KB x {parallel:<6} | {columns[0]} | {columns[1]} | {ratio:5.2f}")
    lines.append("ping RTT to srv, ms: median over runs of each run's median [min, max] (configured RTT 44 ms)")
    lines.append(f"{'from, phase':>16} | {'collapsar':>25} | {'reference':>25}")
    for node in ("bulk", "pinger"):
        for phase in ("idle", "loaded"):
            pick = lambda r, node=node, phase=phase: statistics.median(r["pings"][node][phase])  # noqa: E731
            cells = [cell(per_run(s, pick), 1.0) for s in SYSTEMS]
            lines.append(f"{node + ', ' + phase:>16} | {cells[0]:>25} | {cells[1]:>25}")
    took = {s: sum(r["took_s"] for r in raw["runs"] if r["system"] == s) for s in SYSTEMS}
    lines.append("run time: " + ", ".join(f"{s} {t:.0f} s" for s, t in took.items()))
    return "\n".join(lines)


def in_vm(args) -> int:
    from collapsar.vm import run_in_vm

    args.out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--measure-only", "--repeat", str(args.repeat)]
    argv += ["--out", str(args.out.resolve())]
    return run_in_vm(argv, [args.out], 600 + args.repeat * 2 * 300, env=GUEST_ENV, cwd=str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_options(parser, DEFAULT_OUT)
    args = parser.parse_args(argv)
    return bench_main(args, "flows_bench", in_vm, measure, lambda raw: (summarise(raw), {}))


if __name__ == "__main__":
    sys.exit(main())
