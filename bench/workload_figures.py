"""The figures of workload_bench.py (what each means is described there): the
kernel's floor (bench/pingpong.c), latency at a rate and its curve up to
saturation, peak throughput, one forward hop's cost and memory per idle
connection."""

import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time

from workload_support import BUILD, ROOT, Node, client, interleaved, summarize

PINGPONG_SRC = ROOT / "bench" / "pingpong.c"
PINGPONG = BUILD / "bench-pingpong"
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
