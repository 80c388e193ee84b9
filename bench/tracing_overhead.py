"""What tracing costs wl-node and wl-client: the same open-loop load with
spans off and on, p50 and p99 latency side by side, and the CPU time and
bytes the spans take.

Variants, interleaved run by run (every run starts its own nodes; only one
variant's processes are alive at a time), each figure the median of --runs
runs with the 1-minute load average recorded next to it:

  off        no --trace
  on         every node and the client write spans (--trace, files on disk)
  unbatched  as on, from a build with -DWL_TRACE_BATCH=0: one span per line,
             each line with its own resource header (what batching saves)

Scenarios: `direct` (client -> node, -C 0: request, serve, compute spans)
and `hop` (client -> node -> node, -F NODE2 -C 0: request, serve, forward,
forward.send, serve, compute). Placement as bench/workload_bench.py: nodes
on CPU 0, client on CPU 1. CPU time is the processes' user + system time
over the run (/proc and wait4), per request.

usage: python bench/tracing_overhead.py [--runs 5] [--rate 10000] [--seconds 2]
           [--scenarios direct,hop] [--rt] [--json FILE]
"""

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

from workload_support import BUILD, ROOT, Node, Variant

UNBATCHED = BUILD / "unbatched"
VARIANTS = ("off", "on", "unbatched")


def cpu_s(pid):
    """User + system CPU seconds of a live process."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_client(variant, args, workdir):
    """(summary, CPU seconds) of one wl-client run; its output goes to files, not pipes."""
    cmd = [*variant.prio, "taskset", "-c", variant.client_cpus, str(variant.build / "wl-client"), *args, "--json"]
    out_path, err_path = workdir / "client.out", workdir / "client.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(list(map(str, cmd)), stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # our own child, with its rusage
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"wl-client exited {proc.returncode}: {err_path.read_text()}")
    return json.loads(out_path.read_text().strip().splitlines()[-1]), usage.ru_utime + usage.ru_stime


def one_run(variant, traced, scenario, rate, seconds):
    n = int(rate * seconds)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="wl-tracing-"))
    trace = (lambda name: ["--trace", workdir / f"{name}.jsonl"]) if traced else (lambda name: [])
    try:
        with contextlib.ExitStack() as stack:
            back = stack.enter_context(Node(variant, trace("back"))) if scenario == "hop" else None
            front = stack.enter_context(Node(variant, trace("front")))
            nodes = [front] + ([back] if back else [])
            chain = ["-F", back.addr, "-C", "0"] if back else ["-C", "0"]
            before = sum(cpu_s(x.proc.pid) for x in nodes)
            summary, client_cpu = run_client(
                variant, ["--to", front.addr, *chain, "-r", rate, "-n", n, *trace("client")], workdir
            )
            node_cpu = sum(cpu_s(x.proc.pid) for x in nodes) - before
            load = os.getloadavg()[0]
        files = list(workdir.glob("*.jsonl"))  # complete: the nodes have exited
        spans = sum(f.read_bytes().count(b'"spanId"') for f in files)
        return {
            "p50": summary["latency_us"]["p50"],
            "p99": summary["latency_us"]["p99"],
            "throughput_rps": summary["throughput_rps"],
            "ok": summary["ok"],
            "node_cpu_us_per_req": node_cpu * 1e6 / n,
            "client_cpu_us_per_req": client_cpu * 1e6 / n,
            "trace_bytes_per_req": sum(f.stat().st_size for f in files) / n,
            "spans_per_req": spans / n,
            "load": load,
        }
    finally:
        shutil.rmtree(workdir)


def median(runs):
    keys = [k for k in runs[0] if k != "load"]
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["load_avg"] = [round(min(r["load"] for r in runs), 2), round(max(r["load"] for r in runs), 2)]
    return out


def table(report):
    lines = [
        "| scenario | variant | p50 | p99 | node CPU / req | client CPU / req | trace bytes / req "
        "| spans / req | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario, variants in report["scenarios"].items():
        for name, f in variants.items():
            lines.append(
                f"| {scenario} | {name} | {f['p50']:.1f} us | {f['p99']:.1f} us"
                f" | {f['node_cpu_us_per_req']:.2f} us | {f['client_cpu_us_per_req']:.2f} us"
                f" | {f['trace_bytes_per_req']:.0f} | {f['spans_per_req']:.1f}"
                f" | {f['load_avg'][0]}-{f['load_avg'][1]} |"
            )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs per figure; the median is reported (default 5)")
    ap.add_argument("--rate", type=float, default=10000, help="offered requests/s (default 10000)")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of one run (default 2)")
    ap.add_argument("--scenarios", default="direct,hop", help="direct, hop or both (default direct,hop)")
    ap.add_argument("--rt", action="store_true", help="run nodes and client as SCHED_FIFO 10 (chrt)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    scenarios = args.scenarios.split(",")
    if not scenarios or any(s not in ("direct", "hop") for s in scenarios):
        ap.error(f"--scenarios: '{args.scenarios}' is not direct, hop or direct,hop")
    make = ["make", "-C", str(ROOT / "workload-node")]
    subprocess.run([*make, "all"], check=True, capture_output=True)
    subprocess.run(
        [*make, f"BUILD={UNBATCHED.relative_to(ROOT / 'workload-node')}", "CFLAGS=-DWL_TRACE_BATCH=0", "all"],
        check=True,
        capture_output=True,
    )
    builds = {"off": BUILD, "on": BUILD, "unbatched": UNBATCHED}
    variants = {name: Variant(name, builds[name], "default", args.rt, "split") for name in VARIANTS}
    report = {
        "rate": args.rate,
        "seconds": args.seconds,
        "runs": args.runs,
        "rt": args.rt,
        "load_avg_start": os.getloadavg(),
        "scenarios": {},
    }
    for scenario in scenarios:
        runs = {name: [] for name in VARIANTS}
        for i in range(args.runs):
            for name in VARIANTS:
                r = one_run(variants[name], name != "off", scenario, args.rate, args.seconds)
                runs[name].append(r)
                print(
                    f"  {scenario} run {i + 1}/{args.runs} {name:>9}: p50 {r['p50']:6.1f}  p99 {r['p99']:7.1f} us"
                    f"  node CPU {r['node_cpu_us_per_req']:5.2f} us/req  (load {r['load']:.2f})",
                    file=sys.stderr,
                )
        report["scenarios"][scenario] = {name: median(runs[name]) for name in VARIANTS}
    report["load_avg_end"] = os.getloadavg()
    print(json.dumps(report, indent=1))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print("\n" + table(report), file=sys.stderr)


if __name__ == "__main__":
    main()
