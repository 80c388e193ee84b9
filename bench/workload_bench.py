"""Loopback benchmark of wl-node/wl-client (release build, make -C workload-node).

Every figure is the median of --runs runs, and each figure records the
1-minute load average while it was measured: on a shared 2-core machine
the neighbours are part of the result. Variants (modes, and with --compare
an older build) are interleaved run by run, so that a change in the
machine's load hits all of them alike; only one variant's node runs at a
time.

Modes:
  default  node and client block in the kernel between events (epoll_wait,
           recv, clock_nanosleep): no core is burnt, each request pays the
           wake-ups
  busy     node --busy-poll and client --busy-poll: the node's worker and
           each client pair spin, never sleeping; a core each
  hybrid   node and client --busy-poll-for 1ms: they spin while traffic
           keeps coming (a request or reply within the last ms) and block
           once it stops; at 1k req/s and above this spins like busy
  idle     node and client --idle-poll: as default, but a SCHED_IDLE spinner
           on each of their CPUs keeps the CPUs from halting (idle=poll from
           user space), so a wake-up finds its CPU running

Figures per variant: `-C 0` p50/p99 at 1k and 10k req/s, the latency-vs-rate
curve from 1k req/s to saturation, the highest rate whose p99 stays under
100 us, peak req/s from one and two client pairs; once: one forward hop's
cost (default mode) and memory per idle connection.

The kernel's floor: at 1k and 10k req/s each variant is also measured
without wl-node and wl-client, by bench/pingpong.c: two processes placed
like the node and the client, echoing a 62-byte request with a 48-byte
reply over loopback TCP, blocking (or polling, for busy and hybrid), with
nothing else to do. What wl-node/wl-client measure above that floor is their
own cost; the floor itself is the machine's (its CPUs' wake-up latency, its
system calls, its loopback stack).

Placement (taskset): node on CPU 0; client on CPU 1 (--placement split, the
default) or on CPU 0 with the node (--placement shared: no cross-CPU wake-up,
but one core for everything); --placement split,shared runs both as separate
variants. --rt runs node and client as SCHED_FIFO 10 so
that CFS neighbours cannot delay them. Spinners need it on a shared machine:
under CFS a thread that never sleeps waits out every waking neighbour's
slice (measured: busy-mode p50 in the milliseconds at load 4), while a
blocked thread's wake-up preempts them. The price under --rt: the kernel
throttles real-time threads for 50 ms of every second (sched_rt_runtime_us),
which lands in the spinners' p99, and while they run the machine keeps only
5% of the two cores for everyone else (so prefer --quick for busy modes).

usage: python bench/workload_bench.py [--runs 3] [--modes default,busy] [--rt]
           [--placement split|shared|split,shared] [--compare OLD_BUILD_DIR] [--quick]
           [--json FILE]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

from workload_figures import at_rate, build_pingpong, curve, floor, forward_cost, idle_connection_memory, peak
from workload_support import BUILD, MODES, ROOT, Variant, interleaved


def max_rate_under(points, p99_us=100):
    ok = [p["offered_rps"] for p in points if p["p99"] < p99_us and p["throughput_rps"] >= 0.95 * p["offered_rps"]]
    return max(ok) if ok else 0


def late_at(points, rate):
    late = [p.get("send_late_p99") for p in points if p["offered_rps"] == rate]
    return f"{late[0]:.1f} us" if late and late[0] is not None else "-"


def table(report):
    lines = [
        "| variant | p50 @1k (floor) | p50 @10k (floor) | p99 @10k | p99<100us up to | sent late p99 there "
        "| peak 1 pair | peak 2 pairs | load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, f in report["variants"].items():
        loads = [x for key in ("at_1k", "at_10k", "peak_1_pair", "peak_2_pairs") for x in f[key]["load_avg"]]
        loads += [x for p in f["curve"] for x in p["load_avg"]]
        lines.append(
            f"| {label} | {f['at_1k']['p50']:.1f} us ({f['floor_1k']['p50']:.1f})"
            f" | {f['at_10k']['p50']:.1f} us ({f['floor_10k']['p50']:.1f})"
            f" | {f['at_10k']['p99']:.1f} us | {f['max_rate_p99_under_100us'] // 1000}k req/s"
            f" | {late_at(f['curve'], f['max_rate_p99_under_100us'])}"
            f" | {f['peak_1_pair']['throughput_rps'] / 1e3:.1f}k"
            f" | {f['peak_2_pairs']['throughput_rps'] / 1e3:.1f}k"
            f" | {min(loads):.1f}-{max(loads):.1f} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported (default 3)")
    ap.add_argument(
        "--modes", default="default,busy", help="comma-separated: default, busy, hybrid, idle (default: default,busy)"
    )
    ap.add_argument("--rt", action="store_true", help="run node and client as SCHED_FIFO 10 (chrt)")
    ap.add_argument(
        "--placement",
        default="split",
        help="client on CPU 1 (split) or on the node's CPU 0 (shared), or both: split,shared (default split)",
    )
    ap.add_argument("--compare", metavar="DIR", help="also run the wl-node/wl-client found in DIR (an older build)")
    ap.add_argument("--quick", action="store_true", help="every other curve point, 1 s runs")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"--modes: unknown mode(s) {unknown}; expected one of {', '.join(MODES)}")
    placements = args.placement.split(",")
    if not placements or any(p not in ("split", "shared") for p in placements):
        ap.error(f"--placement: '{args.placement}' is not split, shared or split,shared")
    subprocess.run(["make", "-C", str(ROOT / "workload-node"), "all"], check=True, capture_output=True)
    build_pingpong()
    builds = [("", BUILD)] + ([("before ", pathlib.Path(args.compare))] if args.compare else [])
    # An older build may predate a mode's options (hybrid): --compare runs it in default and busy only.
    variants = [
        Variant(f"{tag}{mode}" + (f"/{place}" if len(placements) > 1 else ""), path, mode, args.rt, place)
        for tag, path in builds
        for place in placements
        for mode in modes
        if not tag or mode in ("default", "busy")
    ]
    report = {
        "cpus": os.cpu_count(),
        "rt": args.rt,
        "placement": args.placement,
        "runs": args.runs,
        "load_avg_start": os.getloadavg(),
        "variants": {v.label: {} for v in variants},
    }

    def put(key, figures):
        for label, value in figures.items():
            report["variants"][label][key] = value

    print("p50 at 1k and 10k req/s", file=sys.stderr)
    put("at_1k", interleaved(variants, args.runs, at_rate(1000, seconds=3)))
    put("floor_1k", floor(variants, args.runs, 1000, seconds=3))
    put("at_10k", interleaved(variants, args.runs, at_rate(10000)))
    put("floor_10k", floor(variants, args.runs, 10000))
    print("latency vs rate", file=sys.stderr)
    put("curve", curve(variants, args.runs, args.quick))
    for f in report["variants"].values():
        f["max_rate_p99_under_100us"] = max_rate_under(f["curve"])
    print("peak", file=sys.stderr)
    put("peak_1_pair", interleaved(variants, args.runs, peak(1)))
    put("peak_2_pairs", interleaved(variants, args.runs, peak(2)))
    print("forward hop, idle connections (default mode)", file=sys.stderr)
    plain = Variant("default", BUILD, "default", args.rt, placements[0])
    report["forward"] = forward_cost(plain, args.runs)
    report["idle_memory"] = idle_connection_memory(plain)
    report["load_avg_end"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print("\n" + table(report), file=sys.stderr)
    print(
        f"forward hop +{report['forward']['hop_cost_us']:.1f} us (default mode); idle connection "
        f"{report['idle_memory']['node_rss_bytes_per_conn']:.0f} B node + "
        f"{report['idle_memory']['kernel_tcp_bytes_per_conn']:.0f} B kernel",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
