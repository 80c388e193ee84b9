"""Running wl-node and wl-client for the loopback benchmarks (workload_bench.py,
tracing_overhead.py): a variant (build, mode, placement, SCHED_FIFO or not),
a node started on a free loopback port and stopped by PID, one client run's
JSON summary, and variants measured interleaved run by run with the load
average recorded next to each figure."""

import contextlib
import json
import os
import pathlib
import re
import signal
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "workload-node" / "build"
LISTEN_RE = re.compile(r"listening on tcp://[0-9.]+:(\d+)")
MODES = {"default": [], "busy": ["--busy-poll"], "hybrid": ["--busy-poll-for", "1ms"], "idle": ["--idle-poll"]}


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
