"""TCAL benchmark: goodput accuracy, class-change speed, setup time.

    sudo python bench/tcal_bench.py [--runs 3] [--seconds 5] [--json]

- goodput error against a real Ethernet link (TCP with timestamps at MTU 1500
  delivers rate x 1448/1538) at 1, 10, 100 and 1000 Mbit/s, with the wire
  overhead modelled (the default) and without it, median of --runs;
- the time for 1000 class rate changes in one `change_many` (target < 50 ms):
  wall clock and this process's CPU time (on a busy host the wall clock also
  counts time spent waiting for a core);
- the time to set up a tree of 1000 destinations.

Everything runs in network namespaces made here and deleted by name at the
end.  This host has no sch_netem, so trees use pfifo leaves (netem=False).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernel"))
from tcal_traffic import ETHERNET_GOODPUT_RATIO, Iperf  # noqa: E402  (shared with the kernel tests)

from collapsar.tcal import Shaping, ShapingChange, TcTree  # noqa: E402

RATES_BPS = [1_000_000, 10_000_000, 100_000_000, 1_000_000_000]
N_DESTS = 1000


class Pair:
    """Sender and receiver namespaces joined by a veth pair."""

    def __init__(self, tag: str):
        self.src, self.dst = f"cxbs{tag}", f"cxbd{tag}"
        self.dst_ip = "10.199.1.1"
        cmds = [
            f"ip netns add {self.src}",
            f"ip netns add {self.dst}",
            f"ip link add veth0 netns {self.src} type veth peer name veth1 netns {self.dst}",
            f"ip -n {self.src} link set lo up",
            f"ip -n {self.dst} link set lo up",
            f"ip -n {self.src} link set veth0 up",
            f"ip -n {self.dst} link set veth1 up",
            f"ip -n {self.src} addr add 10.199.0.1/16 dev veth0",
            f"ip -n {self.dst} addr add {self.dst_ip}/16 dev veth1",
        ]
        try:
            for cmd in cmds:
                subprocess.run(cmd.split(), check=True, capture_output=True)
        except subprocess.CalledProcessError:
            self.close()
            raise

    def close(self) -> None:
        for ns in (self.src, self.dst):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def goodput_errors(runs: int, seconds: int) -> list[dict]:
    rows = []
    pair = Pair(f"{os.getpid()}g")
    try:
        with Iperf(pair.dst, pair.dst_ip) as server:
            for rate in RATES_BPS:
                row = {"rate_bps": rate, "ideal_bps": rate * ETHERNET_GOODPUT_RATIO}
                # Below 10 Mbit/s the receiver's per-second intervals are lumpy
                # (+/-50% at 1 Mbit/s): measure proportionally longer, up to 20 s.
                run_s = min(20, max(seconds, round(seconds * 10_000_000 / rate)))
                row["run_seconds"] = run_s
                for label, overhead in (("ours", True), ("no_overhead", False)):
                    tree = TcTree("veth0", pair.src, wire_overhead=overhead, netem=False)
                    tree.setup([Shaping(pair.dst_ip, rate)])
                    try:
                        samples = [server.goodput_bps(pair.src, run_s) for _ in range(runs)]
                    finally:
                        tree.teardown()
                    row[f"{label}_bps"] = statistics.median(samples)
                    row[f"{label}_error"] = row[f"{label}_bps"] / row["ideal_bps"] - 1
                    row[f"{label}_spread"] = (max(samples) - min(samples)) / row["ideal_bps"]
                rows.append(row)
    finally:
        pair.close()
    return rows


def change_and_setup_times(runs: int) -> dict:
    pair = Pair(f"{os.getpid()}c")
    ips = [f"10.{50 + i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(N_DESTS)]
    setup_s, wall_s, cpu_s = [], [], []
    try:
        for _ in range(3):
            tree = TcTree("veth0", pair.src, netem=False)
            t0 = time.perf_counter()
            tree.setup([Shaping(ip, 10_000_000) for ip in ips])
            setup_s.append(time.perf_counter() - t0)
            if len(setup_s) == 3:
                for k in range(runs):
                    rates = {ip: 1_000_000 * (2 + (i + k) % 97) for i, ip in enumerate(ips)}
                    changes = {ip: ShapingChange.of(rate_bps=rate) for ip, rate in rates.items()}
                    w0, c0 = time.perf_counter(), time.process_time()
                    tree.change_many(changes)
                    wall_s.append(time.perf_counter() - w0)
                    cpu_s.append(time.process_time() - c0)
            tree.teardown()
    finally:
        pair.close()
    return {
        "setup_1000_ms": statistics.median(setup_s) * 1e3,
        "change_1000_wall_ms": statistics.median(wall_s) * 1e3,
        "change_1000_cpu_ms": statistics.median(cpu_s) * 1e3,
        "change_runs": runs,
        "load_average_1min": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="TCAL benchmark (needs root).")
    parser.add_argument("--runs", type=int, default=3, help="runs per goodput figure (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds per iperf3 run (default: %(default)s)")
    parser.add_argument("--change-runs", type=int, default=9, help="1000-change batches timed (default: %(default)s)")
    parser.add_argument("--skip-goodput", action="store_true", help="only time changes and setup")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("tcal_bench needs root (network namespaces, traffic control)", file=sys.stderr)
        return 1
    result = {"timing": change_and_setup_times(args.change_runs)}
    if not args.skip_goodput:
        result["goodput"] = goodput_errors(args.runs, args.seconds)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    if "goodput" in result:
        print(f"{'rate':>10} {'ideal Mbit/s':>13} {'ours':>9} {'error':>8} {'no overhead':>12} {'error':>8}")
        for r in result["goodput"]:
            print(
                f"{r['rate_bps'] / 1e6:>6g} Mb/s {r['ideal_bps'] / 1e6:>13.3f} {r['ours_bps'] / 1e6:>9.3f} "
                f"{r['ours_error']:>+8.2%} {r['no_overhead_bps'] / 1e6:>12.3f} {r['no_overhead_error']:>+8.2%}"
            )
    t = result["timing"]
    print(
        f"1000 class changes: {t['change_1000_wall_ms']:.1f} ms wall, {t['change_1000_cpu_ms']:.1f} ms CPU "
        f"(median of {t['change_runs']}; load average {t['load_average_1min']:.1f})"
    )
    print(f"setup of 1000 destinations: {t['setup_1000_ms']:.0f} ms (median of 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
