"""The sharing benchmark's real runs, as root (sharing_bench.py --convergence
and --aeron-traffic; what they measure is described there): convergence of
the sharing loop in `collapsar run` on a dumbbell, and the Aeron metadata
bytes per host of managers in namespaces (share_peer.py)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sharing_support import PERIODS_PER_S, SHARE_PEER, M

CONVERGENCE_TOPOLOGY = """\
experiment: {{name: dumbbell-convergence}}
services:
  ra: {{command: [iperf3, -s, -1]}}
  rb: {{command: [iperf3, -s, -1]}}
  a: {{command: [sh, -c, "sleep 0.5; iperf3 -c ra -t 14"]}}
  b: {{command: [sh, -c, "sleep 4.5; iperf3 -c rb -t 5"]}}
bridges: [left, right]
links:
  - {{from: a, to: left, bandwidth: 100Mbps}}
  - {{from: b, to: left, bandwidth: 100Mbps}}
  - {{from: right, to: ra, bandwidth: 100Mbps}}
  - {{from: right, to: rb, bandwidth: 100Mbps}}
  - {{from: left, to: right, bandwidth: {link_mbps}Mbps}}
"""


def _settled(series, start, target, tolerance, hold=20, smooth=1):
    """Periods from `start` until the `smooth`-period moving average of
    `series` stays within `tolerance` of `target` for `hold` periods."""
    avg = [
        sum(series[max(0, i - smooth + 1) : i + 1]) / len(series[max(0, i - smooth + 1) : i + 1])
        for i in range(len(series))
    ]
    for p in range(start, len(avg) - hold + 1):
        if all(abs(x - target) <= tolerance * target for x in avg[p : p + hold]):
            return p - start
    return None


def convergence_run(gain: float, link_mbps: int = 20, window: int | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        topology = Path(tmp) / "db.yaml"
        topology.write_text(CONVERGENCE_TOPOLOGY.format(link_mbps=link_mbps))
        trace = Path(tmp) / "trace.jsonl"
        env = {**os.environ, "COLLAPSAR_SHARE_TRACE": str(trace), "COLLAPSAR_SHARE_INCREASE_GAIN": str(gain)}
        if window:
            env["COLLAPSAR_SHARE_WINDOW_PERIODS"] = str(window)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "collapsar.cli",
                "run",
                str(topology),
                "--run-dir",
                tmp,
                "--subnet",
                "10.80.0.0/24",
                "--status-port",
                "-1",
                "--grace",
                "1s",
            ],
            check=True,
            capture_output=True,
            env=env,
            timeout=120,
        )
        periods = [json.loads(line) for line in trace.read_text().splitlines()]

    def series(name, field, idle):
        return [next((f[field] or idle for f in p["flows"] if f["src"] == name), idle) for p in periods]

    link = link_mbps * M
    measured = {n: series(n, "measured_bps", 0) for n in ("a", "b")}
    allowed = {n: series(n, "allowed_bps", link) for n in ("a", "b")}
    b_on = [i for i, x in enumerate(measured["b"]) if x > 0]
    start = b_on[0]
    end = b_on[-1]
    # b's stop: right after the last period it still sent at 70% of its share
    # (TCP's dips while both run must not count as a stop).
    stop = max(i for i in range(start, end + 1) if measured["b"][i] >= 0.7 * link / 2) + 1

    def worst(*values):
        return None if None in values else max(values)

    # The model: both allowed rates at half the link (5%); the traffic: both
    # measured rates, averaged over 5 periods (TCP's own sawtooth), within 10%.
    result = {
        "start_model": worst(*(_settled(allowed[n][:end], start, link / 2, 0.05, 15) for n in ("a", "b"))),
        "start_traffic": worst(*(_settled(measured[n][:end], start, link / 2, 0.10, 15, 5) for n in ("a", "b"))),
        "stop_model": _settled(allowed["a"], stop, link, 0.05),
        "stop_traffic": _settled(measured["a"], stop, link, 0.10, 20, 5),
    }
    # Oscillation: while both run and after the model settled, how often a's
    # allowed rate moved by more than 10% from one period to the next.
    steady = allowed["a"][start + (result["start_model"] or 0) : stop]
    result["moves_per_s_shared"] = round(
        sum(1 for x, y in zip(steady, steady[1:]) if abs(y - x) > 0.1 * x) / max(1, len(steady)) * PERIODS_PER_S, 2
    )
    return result


def convergence(variants=((0.25, 4), (0.5, 4), (1.0, 4), (0.5, 2)), repeats=3) -> dict:
    """variants: (increase gain, measurement window in periods)."""
    runs: dict[tuple, list[dict]] = {v: [] for v in variants}
    for _ in range(repeats):
        for gain, window in variants:  # interleaved: load drifts hit every variant alike
            runs[(gain, window)].append(convergence_run(gain, window=window))
    out = {}
    for (gain, window), results in runs.items():
        key = f"gain {gain}, window {window}"
        out[key] = {
            key: statistics.median([r[key] if r[key] is not None else 999 for r in results]) for key in results[0]
        }
        out[key]["runs"] = results
    return out


def aeron_traffic_run(n_instances: int, noise: float, hosts: int = 4, seconds: float = 4.0) -> dict:
    from share_peer import PeerNetwork

    half = n_instances // 2
    lines = ["experiment: {name: traffic}", "services:"]
    lines += [f"  s{i}: {{command: [x]}}\n  r{i}: {{command: [x]}}" for i in range(half)]
    lines += ["bridges: [left, right]", "links:"]
    lines += [f"  - {{from: s{i}, to: left, latency: 2ms, bandwidth: 100Mbps}}" for i in range(half)]
    lines += [f"  - {{from: right, to: r{i}, latency: 2ms, bandwidth: 100Mbps}}" for i in range(half)]
    lines += ["  - {from: left, to: right, latency: 5ms, bandwidth: 1Gbps}"]
    names = [n for i in range(half) for n in (f"s{i}", f"r{i}")]
    with tempfile.TemporaryDirectory() as tmp:
        topology = Path(tmp) / "traffic.yaml"
        topology.write_text("\n".join(lines) + "\n")
        wants = [arg for i in range(half) for arg in ("--wants", f"s{i}:r{i}=80Mbps")]
        network = PeerNetwork(f"cxtb{os.getpid() % 10000}", hosts, "10.232.0", 40107)
        procs = []
        try:
            for k in range(hosts):
                own = ",".join(names[k::hosts])
                base = [
                    sys.executable,
                    str(SHARE_PEER),
                    str(topology),
                    "--own",
                    own,
                    *wants,
                    "--duration",
                    "600",
                    "--noise",
                    str(noise),
                ]
                procs.append(
                    subprocess.Popen(
                        network.argv(k, base, f"{tmp}/aeron-{k}"),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            for proc in procs:
                proc.stdout.readline()  # {"driver_pid": ...}: this manager's Aeron is up
            time.sleep(2.0)  # publications connected, flows active
            before = [network.tx_bytes(k) for k in range(hosts)]
            time.sleep(seconds)
            after = [network.tx_bytes(k) for k in range(hosts)]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()  # the manager's atexit closes its client, then its driver
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            network.close()
    per_host = [(a - b) / seconds for a, b in zip(after, before)]
    return {"per_host_Bps": round(statistics.median(per_host))}


def aeron_traffic(repeats: int = 3) -> dict:
    out = {}
    for n in (10, 40, 160):
        for label, noise in (("steady", 0.03), ("changing", 0.5)):
            runs = [aeron_traffic_run(n, noise)["per_host_Bps"] for _ in range(repeats)]
            out[f"{n}/{label}"] = {"median_Bps": statistics.median(runs), "runs": runs}
    return out
