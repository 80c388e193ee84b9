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
import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "workload-node" / "build"
PINGPONG_SRC = ROOT / "bench" / "pingpong.c"
PINGPONG = BUILD / "bench-pingpong"
LISTEN_RE = re.compile(r"listening on tcp://[0-9.]+:(\d+)")
MODES = {"default": [], "busy": ["--busy-poll"], "hybrid": ["--busy-poll-for", "1ms"], "idle": ["--idle-poll"]}
RATES = [
    1000,
    2000,
    5000,
    10000,
    20000,
    30000,
    40000,
    50000,
    60000,
    70000,
    80000,
    90000,
    100000,
    120000,
    150000,
    200000,
]


class Variant:
    def __init__(self, label, build, mode, rt, placement):
        self.label, self.build, self.mode = label, pathlib.Path(build), mode
        self.node_cpu, self.client_cpus = "0", ("0" if placement == "shared" else "1")
        self.prio = ["chrt", "-f", "10"] if rt else []
        self.polls = mode in ("busy", "hybrid")  # the floor polls too


class Node:
    def __init__(self, variant, extra=()):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="wl-node-", suffix=".log", delete=False)
        self.storage = tempfile.NamedTemporaryFile(prefix="wl-node-", suffix=".data", delete=False).name
        cmd = [
            *variant.prio,
            "taskset",
            "-c",
            variant.node_cpu,
            str(variant.build / "wl-node"),
            "-b",
            "127.0.0.1:0",
            "-s",
            self.storage,
            *MODES[variant.mode],
            *extra,
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        for _ in range(3000):
            found = LISTEN_RE.findall(pathlib.Path(self.log.name).read_text())
            if found:
                self.port = int(found[0])
                self.addr = f"127.0.0.1:{self.port}"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        text = pathlib.Path(self.log.name).read_text()
        self.stop()
        raise RuntimeError(f"wl-node did not start (exit {self.proc.returncode}): {text}")

    def rss_kib(self):
        status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # our own child, by PID
                self.proc.wait()
        os.unlink(self.storage)
        os.unlink(self.log.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def client(variant, *args, cpus=None, timeout=300):
    cmd = [
        *variant.prio,
        "taskset",
        "-c",
        cpus or variant.client_cpus,
        str(variant.build / "wl-client"),
        *map(str, args),
        *MODES[variant.mode],
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(results, loads):
    keys = ("p50", "p90", "p99", "p99_9", "mean", "max")
    return {
        "throughput_rps": statistics.median(r["throughput_rps"] for r in results),
        "ok_ratio": statistics.median(r["ok"] / max(r["requests"], 1) for r in results),
        **{k: statistics.median(r["latency_us"][k] for r in results) for k in keys},
        # Latency runs from the actual send: how late the sender was is part of the picture.
        **(
            {"send_late_p99": statistics.median(r["send_lateness_us"]["p99"] for r in results)}
            if all("send_lateness_us" in r for r in results)
            else {}
        ),
        "load_avg": [round(min(loads), 2), round(max(loads), 2)],
    }


def interleaved(variants, runs, measure, summary=summarize, node=True):
    """measure(variant, node) -> one run's figures; each variant's node (node=False: none)
    is started per run, alone; summary(figures of the runs, load averages) per variant."""
    results = {v.label: [] for v in variants}
    loads = {v.label: [] for v in variants}
    for _ in range(runs):
        for v in variants:
            with Node(v) if node else contextlib.nullcontext() as started:
                loads[v.label].append(os.getloadavg()[0])
                results[v.label].append(measure(v, started))
    return {v.label: summary(results[v.label], loads[v.label]) for v in variants}


def build_pingpong():
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-Wall", "-o", str(PINGPONG), str(PINGPONG_SRC)], check=True)


def floor(variants, runs, rate, seconds=2.0):
    """The kernel's round trip alone (bench/pingpong.c), placed and polling like each variant."""

    def measure(v, _):
        cmd = [
            *v.prio,
            str(PINGPONG),
            "--server-cpu",
            v.node_cpu,
            "--client-cpu",
            v.client_cpus,
            "--rate",
            str(rate),
            "-n",
            str(int(rate * seconds)),
            *(["--spin"] if v.polls else []),
        ]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout)

    def summary(results, loads):
        return {
            "p50": statistics.median(r["p50_us"] for r in results),
            "p99": statistics.median(r["p99_us"] for r in results),
            "load_avg": [round(min(loads), 2), round(max(loads), 2)],
        }

    return interleaved(variants, runs, measure, summary, node=False)


def at_rate(rate, seconds=2.0, pairs=1):
    n = max(int(rate * seconds / pairs), 200)
    return lambda v, node: client(v, "--to", node.addr, "-C", "0", "-r", rate / pairs, "-n", n, "--nt", pairs)


def peak(pairs):
    """Offer far more than can be served: the open-loop sender sends back to back."""
    n = 300_000 // pairs
    return lambda v, node: client(
        v,
        "--to",
        node.addr,
        "-C",
        "0",
        "-r",
        1_000_000,
        "-n",
        n,
        "--nt",
        pairs,
        "--timeout",
        "30s",
        cpus="0-1" if pairs > 1 else None,
    )


def curve(variants, runs, quick):
    rates = RATES[::2] if quick else RATES
    points = {v.label: [] for v in variants}
    active = list(variants)
    for rate in rates:
        if not active:
            break
        figures = interleaved(active, runs, at_rate(rate, seconds=1.0 if quick else 2.0))
        for v in list(active):
            point = dict(figures[v.label], offered_rps=rate)
            points[v.label].append(point)
            print(
                f"  {v.label:>16} {rate:>7} req/s offered: {point['throughput_rps']:>9.0f} achieved"
                f"  p50 {point['p50']:7.1f}  p99 {point['p99']:9.1f} us  sent late p99 "
                f"{point.get('send_late_p99', float('nan')):7.1f} us  (load {point['load_avg'][1]})",
                file=sys.stderr,
            )
            if point["throughput_rps"] < 0.95 * rate:
                active.remove(v)  # saturated
    return points


def forward_cost(variant, runs):
    direct, hop = [], []
    loads = []
    for _ in range(runs):
        with Node(variant) as first, Node(variant) as second:
            loads.append(os.getloadavg()[0])
            direct.append(client(variant, "--to", first.addr, "-C", "0", "-r", 1000, "-n", 3000))
            hop.append(client(variant, "--to", first.addr, "-F", second.addr, "-r", 1000, "-n", 3000))
    base, fwd = summarize(direct, loads), summarize(hop, loads)
    return {
        "p50_direct_us": base["p50"],
        "p50_one_hop_us": fwd["p50"],
        "hop_cost_us": fwd["p50"] - base["p50"],
        "load_avg": base["load_avg"],
    }


def tcp_mem_pages():
    for line in pathlib.Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            return int(line.split("mem")[1].split()[0])
    return 0


def idle_connection_memory(variant, count=2000):
    socks = []
    with Node(variant) as node:
        try:
            client(variant, "--to", node.addr, "-n", 10)  # warm the worker up before measuring
            rss0, mem0 = node.rss_kib(), tcp_mem_pages()
            for _ in range(count):
                socks.append(socket.create_connection(("127.0.0.1", node.port)))
            time.sleep(0.5)
            rss1, mem1 = node.rss_kib(), tcp_mem_pages()
        finally:
            for s in socks:
                s.close()
    return {
        "connections": count,
        "node_rss_bytes_per_conn": (rss1 - rss0) * 1024 / count,
        "kernel_tcp_bytes_per_conn": (mem1 - mem0) * 4096 / count,
    }


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
