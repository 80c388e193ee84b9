"""Loopback benchmark of wl-node/wl-client (release build, make -C workload-node).

Figures (each the median of --runs runs), node and client pinned to
different cores with taskset:
  - `-C 0` p50 at 1k and 10k req/s
  - the highest rate whose p99 stays under 100 us
  - peak req/s from one and from two client thread pairs
  - the latency-vs-rate curve from 1k req/s to saturation
  - the cost of one forward hop (p50 with -F minus p50 without)
  - memory per idle connection (node RSS and kernel TCP memory)

usage: python bench/workload_bench.py [--runs 3] [--quick] [--busy-poll] [--rt] [--json FILE]
On a 2-core box the client and the node share the machine: the client's two
threads (sender, receiver) and the node's worker compete for 2 cores, which
is what caps the peak rate.
"""

import argparse
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
LISTEN_RE = re.compile(r"listening on tcp://[0-9.]+:(\d+)")


class Node:
    def __init__(self, cpu, extra=()):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="wl-node-", suffix=".log", delete=False)
        self.storage = tempfile.NamedTemporaryFile(prefix="wl-node-", suffix=".data", delete=False).name
        cmd = [*RT, "taskset", "-c", str(cpu), str(BUILD / "wl-node"), "-b", "127.0.0.1:0", "-s", self.storage, *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        for _ in range(500):
            found = LISTEN_RE.findall(pathlib.Path(self.log.name).read_text())
            if found:
                self.port = int(found[0])
                self.addr = f"127.0.0.1:{self.port}"
                return
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"wl-node did not start: {pathlib.Path(self.log.name).read_text()}")

    def rss_kib(self):
        status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.storage)
        os.unlink(self.log.name)


RT = []  # ["chrt", "-f", "10"] with --rt


CLIENT_EXTRA = []  # ["--busy-poll"] with --busy-poll


def client(cpus, *args, timeout=300):
    cmd = [*RT, "taskset", "-c", cpus, str(BUILD / "wl-client"), *map(str, args), *CLIENT_EXTRA, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_of(runs, fn):
    results = [fn() for _ in range(runs)]
    keys = ("p50", "p90", "p99", "mean", "max")
    return {
        "throughput_rps": statistics.median(r["throughput_rps"] for r in results),
        "ok_ratio": statistics.median(r["ok"] / max(r["requests"], 1) for r in results),
        **{k: statistics.median(r["latency_us"][k] for r in results) for k in keys},
    }


def at_rate(node, rate, runs, seconds=2.0, pairs=1, extra=()):
    n = max(int(rate * seconds / pairs), 200)
    return median_of(runs, lambda: client("1", "--to", node.addr, "-C", "0", "-r", rate / pairs, "-n", n,
                                          "--nt", pairs, *extra))


def peak(node, pairs, runs):
    """Offer far more than can be served: the open-loop sender sends back to back."""
    n = 300_000 // pairs
    return median_of(runs, lambda: client("0-1" if pairs > 1 else "1", "--to", node.addr, "-C", "0",
                                          "-r", 1_000_000, "-n", n, "--nt", pairs, "--timeout", "30s"))


def curve(node, runs, quick):
    rates = [1000, 2000, 5000, 10000, 20000, 30000, 40000, 50000, 60000, 70000, 80000, 100000, 120000, 150000]
    if quick:
        rates = rates[::2]
    points = []
    for rate in rates:
        point = at_rate(node, rate, runs, seconds=1.0 if quick else 2.0)
        point["offered_rps"] = rate
        points.append(point)
        print(f"  {rate:>7} req/s offered: {point['throughput_rps']:>9.0f} achieved  p50 {point['p50']:7.1f} us"
              f"  p99 {point['p99']:9.1f} us", file=sys.stderr)
        if point["throughput_rps"] < 0.95 * rate:
            break  # saturated
    return points


def forward_cost(runs):
    first, second = Node(0), Node(0)
    try:
        base = median_of(runs, lambda: client("1", "--to", first.addr, "-C", "0", "-r", 1000, "-n", 3000))
        hop = median_of(runs, lambda: client("1", "--to", first.addr, "-F", second.addr, "-r", 1000, "-n", 3000))
    finally:
        first.stop()
        second.stop()
    return {"p50_direct_us": base["p50"], "p50_one_hop_us": hop["p50"], "hop_cost_us": hop["p50"] - base["p50"]}


def tcp_mem_pages():
    for line in pathlib.Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            return int(line.split("mem")[1].split()[0])
    return 0


def idle_connection_memory(count=2000):
    node = Node(0)
    socks = []
    try:
        client("1", "--to", node.addr, "-n", 10)  # warm the worker up before measuring
        rss0, mem0 = node.rss_kib(), tcp_mem_pages()
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", node.port))
            s.sendall(b"")
            socks.append(s)
        time.sleep(0.5)
        rss1, mem1 = node.rss_kib(), tcp_mem_pages()
    finally:
        for s in socks:
            s.close()
        node.stop()
    return {"connections": count, "node_rss_bytes_per_conn": (rss1 - rss0) * 1024 / count,
            "kernel_tcp_bytes_per_conn": (mem1 - mem0) * 4096 / count}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported (default 3)")
    ap.add_argument("--quick", action="store_true", help="fewer curve points, shorter runs")
    ap.add_argument("--busy-poll", action="store_true", help="run the node and the client receivers with --busy-poll")
    ap.add_argument("--rt", action="store_true",
                    help="run node and client as SCHED_FIFO 10 (chrt), so that other load on a shared box"
                         " does not preempt them; measures the code rather than the neighbours")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.rt:
        RT.extend(["chrt", "-f", "10"])
    if args.busy_poll:
        CLIENT_EXTRA.append("--busy-poll")
    subprocess.run(["make", "-C", str(ROOT / "workload-node"), "all"], check=True, capture_output=True)
    report = {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg(), "busy_poll": args.busy_poll, "rt": args.rt}
    node = Node(0, ["--busy-poll"] if args.busy_poll else [])
    try:
        print("p50 at fixed rates", file=sys.stderr)
        report["at_1k"] = at_rate(node, 1000, args.runs, seconds=3)
        report["at_10k"] = at_rate(node, 10000, args.runs)
        print("latency vs rate", file=sys.stderr)
        report["curve"] = curve(node, args.runs, args.quick)
        under = [p["offered_rps"] for p in report["curve"]
                 if p["p99"] < 100 and p["throughput_rps"] >= 0.95 * p["offered_rps"]]
        report["max_rate_p99_under_100us"] = max(under) if under else 0
        print("peak", file=sys.stderr)
        report["peak_1_pair"] = peak(node, 1, args.runs)
        report["peak_2_pairs"] = peak(node, 2, args.runs)
    finally:
        node.stop()
    print("forward hop, idle connections", file=sys.stderr)
    report["forward"] = forward_cost(args.runs)
    report["idle_memory"] = idle_connection_memory()
    report["load_avg_end"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"\np50 @1k {report['at_1k']['p50']:.1f} us, @10k {report['at_10k']['p50']:.1f} us; "
          f"p99<100us up to {report['max_rate_p99_under_100us']} req/s; peak {report['peak_1_pair']['throughput_rps']:.0f}"
          f" (1 pair) / {report['peak_2_pairs']['throughput_rps']:.0f} (2 pairs) req/s; "
          f"hop +{report['forward']['hop_cost_us']:.1f} us; idle conn "
          f"{report['idle_memory']['node_rss_bytes_per_conn']:.0f} B node + "
          f"{report['idle_memory']['kernel_tcp_bytes_per_conn']:.0f} B kernel", file=sys.stderr)


if __name__ == "__main__":
    main()
