"""wl-node/wl-client against DistWalk's dw_node/dw_client, side by side on loopback.

DistWalk is not part of this repository: point --distwalk at a DistWalk
source tree (its src/Makefile builds dw_node and dw_client); the benchmark
builds it into a directory of its own (--build-dir, outside this checkout)
and never copies anything back.

Cases (every one open-loop at a fixed rate, the same command line for both
tools but for their binaries and address syntax):

  c0-1k      -C 0 at 1,000 req/s
  c0-10k     -C 0 at 10,000 req/s
  chain      -C 1ms -F NODE2 -C 1ms at 200 req/s (two nodes; CPU-time compute)

Placement as bench/workload_bench.py: nodes on CPU 0, the client on CPU 1.
Each run starts fresh nodes for one tool and one case; the tools alternate
within a run (and which goes first alternates from run to run), so a change
in the machine's load hits both alike. Latencies come from each client's
per-request records (-o FILE.csv, integer microseconds: the same resolution
for both) and the percentiles are computed here, by one function (nearest
rank), for both. A figure is the median over --runs runs; the ratio is
wl / dw (below 1.0: wl is faster).

On a shared machine the p99 is mostly the neighbours' (a CFS wake-up behind
another process's slice): --rt runs every node and client of both tools as
SCHED_FIFO 10, so that what remains is the tools' own.

usage: python bench/distwalk_bench.py --distwalk DISTWALK_SRC [--build-dir DIR] [--runs 5]
           [--cases c0-1k,c0-10k,chain] [--seconds 3] [--rt] [--json FILE]
"""

import argparse
import csv
import json
import math
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
WL_BUILD = ROOT / "workload-node" / "build"
NODE_CPU, CLIENT_CPU = "0", "1"
PRIO: list[str] = []  # --rt: ["chrt", "-f", "10"] for nodes and clients of both tools

CASES = {
    # name: (rate, nodes, ops with {NODE2} standing for the second node)
    "c0-1k": (1000, 1, ["-C", "0"]),
    "c0-10k": (10000, 1, ["-C", "0"]),
    "chain": (200, 2, ["-C", "1ms", "-F", "{NODE2}", "-C", "1ms"]),
}


def build_distwalk(src, build_dir):
    """dw_node and dw_client built from a copy of DISTWALK_SRC/src in build_dir."""
    build_dir = pathlib.Path(build_dir)
    if ROOT in build_dir.resolve().parents or build_dir.resolve() == ROOT:
        sys.exit(f"--build-dir {build_dir}: must be outside this checkout ({ROOT})")
    target = build_dir / "src"
    if not (target / "dw_node").exists() or not (target / "dw_client").exists():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(pathlib.Path(src) / "src", target)
        subprocess.run(
            ["make", "-C", str(target), "-j2", "dw_node", "dw_client"], check=True, stdout=subprocess.DEVNULL
        )
    return target


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, log, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"node exited {proc.returncode}: {pathlib.Path(log).read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"node did not listen on {port}: {pathlib.Path(log).read_text()[-2000:]}")


class Tool:
    def __init__(self, name, node, client):
        self.name, self.node, self.client = name, node, client

    def node_cmd(self, port, storage):
        if self.name == "wl":
            return [str(self.node), "-b", f"127.0.0.1:{port}", "-s", storage]
        return [str(self.node), "-b", f"127.0.0.1:{port}", "-s", f"file={storage}"]

    def target(self, port):
        return f"127.0.0.1:{port}"


def start_node(tool, workdir, index):
    port = free_port()
    log = workdir / f"{tool.name}-node{index}.log"
    storage = str(workdir / f"{tool.name}-node{index}.data")
    cmd = [*PRIO, "taskset", "-c", NODE_CPU, *tool.node_cmd(port, storage)]
    with open(log, "w") as out:
        # DistWalk's node reads its calibration file from HOME; give it the work dir.
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, cwd=workdir, env={**os.environ, "HOME": str(workdir)})
    try:
        wait_listening(port, proc, log)
    except Exception:
        stop(proc)
        raise
    return proc, port


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own child, by PID
            proc.wait()


def read_latencies(tool, path):
    """Microseconds of the requests that got a reply, from the client's -o CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if tool.name == "wl":  # send_us,latency_us,status,thread,session with a header
        head = rows[0]
        lat, status = head.index("latency_us"), head.index("status")
        # microseconds with three decimals: truncated to whole ones, as DistWalk's are
        return [int(float(r[lat])) for r in rows[1:] if r and r[status] == "OK"]
    return [int(r[1]) for r in rows if r and r[0].lstrip("-").isdigit()]  # t,elapsed,req_id,thr_id,sess_id


def nearest_rank(sorted_values, q):
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def one_run(tool, case, seconds, workdir):
    rate, nnodes, ops = CASES[case]
    nodes = []
    try:
        for i in range(nnodes):
            nodes.append(start_node(tool, workdir, i))
        ops = [o.replace("{NODE2}", tool.target(nodes[-1][1])) for o in ops]
        n = int(rate * seconds)
        out = workdir / f"{tool.name}-{case}.csv"
        out.unlink(missing_ok=True)
        cmd = [
            *PRIO,
            "taskset",
            "-c",
            CLIENT_CPU,
            str(tool.client),
            "--to",
            tool.target(nodes[0][1]),
            *ops,
            "-r",
            str(rate),
            "-n",
            str(n),
            "-o",
            str(out),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 60, cwd=workdir)
        if done.returncode != 0:
            raise RuntimeError(f"{tool.name} client exited {done.returncode}: {done.stderr[-2000:]}")
        lat = sorted(read_latencies(tool, out))
        if len(lat) < 0.99 * n:
            raise RuntimeError(f"{tool.name} {case}: {len(lat)} replies of {n}")
        return {
            "p50": nearest_rank(lat, 0.50),
            "p99": nearest_rank(lat, 0.99),
            "replies": len(lat),
            "load": os.getloadavg()[0],
        }
    finally:
        for proc, _ in nodes:
            stop(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distwalk", required=True, help="a DistWalk source tree (with src/Makefile)")
    ap.add_argument("--build-dir", default=os.path.join(tempfile.gettempdir(), "collapsar-distwalk-build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument(
        "--rt",
        action="store_true",
        help="nodes and clients of both tools as SCHED_FIFO 10: CFS neighbours cannot delay them",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.rt:
        PRIO.extend(["chrt", "-f", "10"])
    cases = args.cases.split(",")
    for c in cases:
        if c not in CASES:
            sys.exit(f"--cases: unknown case '{c}' (expected some of {', '.join(CASES)})")
    dw_src = build_distwalk(args.distwalk, args.build_dir)
    tools = [
        Tool("wl", WL_BUILD / "wl-node", WL_BUILD / "wl-client"),
        Tool("dw", dw_src / "dw_node", dw_src / "dw_client"),
    ]
    for t in tools:
        for b in (t.node, t.client):
            if not b.exists():
                sys.exit(f"{b}: not built (make -C workload-node for wl)")
    results = {c: {t.name: [] for t in tools} for c in cases}
    with tempfile.TemporaryDirectory(prefix="collapsar-dwbench-") as tmp:
        workdir = pathlib.Path(tmp)
        for run in range(args.runs):
            order = tools if run % 2 == 0 else tools[::-1]
            for case in cases:
                for tool in order:
                    r = one_run(tool, case, args.seconds, workdir)
                    results[case][tool.name].append(r)
                    print(
                        f"run {run + 1} {case:>7} {tool.name}: p50 {r['p50']} us, p99 {r['p99']} us "
                        f"(load {r['load']:.2f})",
                        file=sys.stderr,
                    )
    report = {}
    print("| case | wl p50 | dw p50 | p50 wl/dw | wl p99 | dw p99 | p99 wl/dw | load avg |")
    print("|---|---|---|---|---|---|---|---|")
    for case in cases:
        fig = {
            name: {k: statistics.median(r[k] for r in runs) for k in ("p50", "p99")}
            for name, runs in results[case].items()
        }
        loads = [r["load"] for runs in results[case].values() for r in runs]
        ratio = {k: fig["wl"][k] / fig["dw"][k] for k in ("p50", "p99")}
        report[case] = {
            "wl": fig["wl"],
            "dw": fig["dw"],
            "ratio": ratio,
            "runs": results[case],
            "load_avg": [round(min(loads), 2), round(max(loads), 2)],
        }
        print(
            f"| {case} | {fig['wl']['p50']} us | {fig['dw']['p50']} us | {ratio['p50']:.3f} | "
            f"{fig['wl']['p99']} us | {fig['dw']['p99']} us | {ratio['p99']:.3f} | "
            f"{min(loads):.2f}-{max(loads):.2f} |"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
