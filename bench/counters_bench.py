"""Cost of the eBPF per-destination counters, seen from Python.

Read cost for 1, 10, 100 and 1000 destinations (median over many reads) in
the dict form (`read()`) and the array form (`read_array()`), and the time to
load, verify and attach the program (and to detach it).  Needs root: it makes
two network namespaces of its own, sends one UDP datagram to each destination
through a veth so the map holds exactly that many entries, and deletes both
namespaces afterwards.

    python bench/counters_bench.py [--json] [--reads 2000] [--attaches 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from collapsar.tcal.counters import Counters

DEST_COUNTS = (1, 10, 100, 1000)


def sh(*argv: str, ns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True)


class Namespaces:
    """A sender and a receiver namespace joined by a veth; the sender routes
    10.200.0.0/16 through the receiver, so datagrams to those addresses leave
    without ARP and the receiver just drops them."""

    def __init__(self) -> None:
        tag = os.getpid() % 100000
        self.src, self.dst = f"cxbs{tag}", f"cxbd{tag}"
        self.made: list[str] = []

    def __enter__(self) -> Namespaces:
        for ns in (self.src, self.dst):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
        sh("ip", "link", "add", "veth0", "netns", self.src, "type", "veth", "peer", "name", "veth1", "netns", self.dst)
        sh("ip", "link", "set", "veth0", "up", ns=self.src)
        sh("ip", "link", "set", "veth1", "up", ns=self.dst)
        sh("ip", "addr", "add", "10.199.0.1/16", "dev", "veth0", ns=self.src)
        sh("ip", "addr", "add", "10.199.1.1/16", "dev", "veth1", ns=self.dst)
        sh("ip", "route", "add", "10.200.0.0/16", "via", "10.199.1.1", ns=self.src)
        return self

    def __exit__(self, *exc) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def send(self, n: int) -> None:
        dsts = [f"10.200.{i // 250}.{i % 250 + 1}" for i in range(n)]
        code = (
            "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "for ip in sys.argv[1:]: s.sendto(b'x',(ip,9))"
        )
        sh(sys.executable, "-c", code, *dsts, ns=self.src)


def median_us(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000


def bench_reads(nss: Namespaces, reads: int) -> list[dict]:
    rows = []
    for n in DEST_COUNTS:
        with Counters("veth0", nss.src) as c:
            nss.send(n)
            got = len(c.read())
            if got != n:
                raise SystemExit(f"expected {n} destinations in the map, read {got}")
            rows.append(
                {
                    "destinations": n,
                    "read_dict_us": median_us(c.read, reads),
                    "read_array_us": median_us(c.read_array, reads),
                }
            )
    return rows


def bench_attach(nss: Namespaces, attaches: int) -> dict:
    attach_ms, detach_ms = [], []
    for _ in range(attaches):
        c = Counters("veth0", nss.src)
        t0 = time.perf_counter()
        c.attach()
        t1 = time.perf_counter()
        c.detach()
        t2 = time.perf_counter()
        attach_ms.append((t1 - t0) * 1000)
        detach_ms.append((t2 - t1) * 1000)
    return {"attach_ms": statistics.median(attach_ms), "detach_ms": statistics.median(detach_ms), "cycles": attaches}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark the eBPF per-destination counters.")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--reads", type=int, default=2000, help="reads per destination count (default 2000)")
    ap.add_argument("--attaches", type=int, default=20, help="attach/detach cycles (default 20)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("counters_bench needs root (CAP_BPF, CAP_NET_ADMIN)", file=sys.stderr)
        return 3
    with Namespaces() as nss:
        result = {
            "reads": bench_reads(nss, args.reads),
            "attach": bench_attach(nss, args.attaches),
            "kernel": os.uname().release,
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"kernel {result['kernel']}, median of {args.reads} reads")
    print(f"{'destinations':>12}  {'read() us':>10}  {'read_array() us':>15}")
    for row in result["reads"]:
        print(f"{row['destinations']:>12}  {row['read_dict_us']:>10.1f}  {row['read_array_us']:>15.1f}")
    a = result["attach"]
    print(
        f"attach (load + verify + tc filter): {a['attach_ms']:.2f} ms, "
        f"detach: {a['detach_ms']:.2f} ms (median of {a['cycles']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
