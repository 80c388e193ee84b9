"""Sharing-model CPU per period and metadata traffic per host.

    python bench/sharing_bench.py            # both, human-readable
    python bench/sharing_bench.py --json     # the same figures as JSON

CPU: `sharing.share()` plus decoding the metadata that carries the flows, for
1000 active flows, median process CPU time over repeated runs, in two shapes:
a dumbbell-like tree (what the acceptance tests emulate) and random paths over
400 links (a stress case with hundreds of distinct bottlenecks).

Traffic: every instance's emulation core runs `SendPolicy` (send when the flow
set changes or a rate moves by more than 10%, else a heartbeat every 4 periods
of 50 ms) over simulated periods in which measured rates wobble by `--noise`;
each message is encoded for real.  Instances are spread evenly over `--hosts`
hosts; a host sends each of its cores' messages once to every other host.  Reported per host:
payload bytes/s and the wire estimate (Aeron's 32-byte frame header, 32-byte
alignment, 28 bytes of IPv4+UDP).  Aeron's own status messages are not counted.
Patterns: `pairs` (half the instances each send to one server across a shared
bottleneck, as in the Kollaps dumbbell: N/2 flows) and `all` (every instance
sends to every other: N(N-1) flows, the worst case).  These figures come from
the encoder and the real send policy, not from captured Aeron traffic.

Manager CPU per period (`--manager`): one `ShareLoop` tick end to end for
1000 active flows, 500 its own (counters in, overrides out to 25 in-memory
cores) and 500 decoded from 25 other cores' messages: measure, publish,
decode, share, congestion loss, apply.

Convergence (`--convergence`, root, runs `collapsar run` for real): a
dumbbell where TCP flow a runs alone, flow b joins it for 5 s, then stops;
the loop's per-period trace (COLLAPSAR_SHARE_TRACE) gives, from b's first
active period and from b's stop, the periods until the model settles (the
allowed rates within 5% of their share for the next 15-20 periods) and until
the traffic does (measured rates, averaged over 5 periods against TCP's own
sawtooth, within 10%), and how often a's allowed rate jumps by >10% per
second while both run (oscillation); interleaved runs per smoothing gain
(COLLAPSAR_SHARE_INCREASE_GAIN), medians reported (999: never settled).

Real Aeron traffic (`--aeron-traffic`, root): 4 managers (share_peer.py,
synthetic flows, each its own media driver in its own namespace on one
bridge) own a quarter of 10, 40, 160 instances each, half of them sending
one greedy flow each across a shared link; per host, the bytes its
namespace's interface transmitted per second mid-run (Aeron data, headers,
status messages and IP/UDP included), with measured rates wobbling by 3%
(`steady`) or 50% (`changing`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from collapsar.manager.sharing.metadata import Codec, FlowReport, Message, SendPolicy
from collapsar.manager.sharing.model import Flow, share

# The multi-manager harness and its fake tc tree live with the tests.
TESTS = Path(__file__).resolve().parent.parent / "tests"
SHARE_PEER = TESTS / "share_peer.py"
sys.path.insert(0, str(TESTS))
M = 1_000_000
PERIODS_PER_S = 20  # the default 50 ms period
BENCH_KEY = bytes(32)  # every manager of the bench shares it; what it is does not matter


def tree_flows(n_flows: int, rng: random.Random):
    """Clients under 10 edge switches, servers under 10 others, one core of 4 links."""
    links = {}
    clients, servers = 500, 100
    for c in range(clients):
        links[c] = rng.choice([10 * M, 100 * M])  # client access links
    for s in range(servers):
        links[clients + s] = 1000 * M  # server access links
    edge = clients + servers
    for e in range(20):
        links[edge + e] = 1000 * M  # edge uplinks
    core = edge + 20
    for k in range(4):
        links[core + k] = rng.choice([400 * M, 1000 * M])
    flows = []
    for i in range(n_flows):
        c, s = rng.randrange(clients), rng.randrange(servers)
        path = (c, edge + c % 10, core + (c + s) % 4, edge + 10 + s % 10, clients + s)
        flows.append(Flow(i, path, rng.randint(2, 200) * 1000, links[c], rng.randint(1, 120) * M))
    return flows, links


def random_flows(n_flows: int, rng: random.Random):
    links = {i: rng.choice([10 * M, 50 * M, 100 * M, 1000 * M]) for i in range(400)}
    flows = [
        Flow(
            i,
            tuple(rng.sample(range(400), rng.randint(2, 6))),
            rng.randint(1, 200) * 1000,
            rng.choice([None, 100 * M]),
            rng.randint(1, 200) * M,
        )
        for i in range(n_flows)
    ]
    return flows, links


def cpu_per_period(shape, n_flows=1000, runs=40, seed=1):
    flows, links = shape(n_flows, random.Random(seed))
    codec = Codec(0xBE1C, max(links) + 1, instances=n_flows + 1, key=BENCH_KEY)
    # The flows arrive as messages of 50 flows each (one per remote core).
    reports = [FlowReport(f.link_ids, f.demand_bps) for f in flows]
    wire = [codec.encode(Message(i, 1, tuple(reports[i : i + 50]))) for i in range(0, n_flows, 50)]
    samples = []
    for run in range(runs + 3):
        start = time.process_time()
        for data in wire:
            codec.decode(data)
        share(flows, links)
        if run >= 3:  # warm-up runs
            samples.append(time.process_time() - start)
    return {
        "median_ms": round(1e3 * statistics.median(samples), 2),
        "p90_ms": round(1e3 * sorted(samples)[int(0.9 * len(samples))], 2),
    }


def wire_bytes(payload: int) -> int:
    return (payload + 32 + 31) // 32 * 32 + 28


def metadata_rate(n_instances, hosts=4, pattern="pairs", noise=0.03, seconds=5, seed=1):
    rng = random.Random(seed)
    n_links = 3 * n_instances
    codec = Codec(0xBE1C, n_links, instances=n_instances, key=BENCH_KEY)
    # One flow per (src, dst); path: src access, shared core link, dst access.
    if pattern == "pairs":
        half = n_instances // 2
        flows = {c: [(c, 2 * n_instances, half + c)] for c in range(half)}
    else:
        flows = {
            s: [(s, 2 * n_instances + (s + d) % n_instances, n_instances + d) for d in range(n_instances) if d != s]
            for s in range(n_instances)
        }
    base = {s: {links: rng.randint(5, 50) * M for links in paths} for s, paths in flows.items()}
    policies = {s: SendPolicy() for s in flows}
    payload = wire = 0
    for period in range(seconds * PERIODS_PER_S):
        for sender, rates in base.items():
            measured = {links: int(rate * (1 + rng.uniform(-noise, noise))) for links, rate in rates.items()}
            if policies[sender].should_send(measured, period):
                data = codec.encode(Message(sender, period, tuple(FlowReport(link, r) for link, r in measured.items())))
                payload += len(data)
                wire += wire_bytes(len(data))
    # Every message leaves its host once per other host; per host = total / hosts.
    factor = (hosts - 1) / hosts / seconds
    return {"payload_Bps": round(payload * factor), "wire_Bps": round(wire * factor)}


def manager_cpu_per_period(runs=40):
    from share_peer import SyntheticHost

    from collapsar.manager.sharing.bus import MetadataBus
    from collapsar.manager.sharing.loop import ShareLoop, ShareSettings

    n_src, n_dst = 50, 20  # 50 x 20 = 1000 flows over one core link
    lines = ["experiment: {name: bench}", "services:"]
    lines += [f"  s{i}: {{command: [x]}}" for i in range(n_src)] + [f"  d{j}: {{command: [x]}}" for j in range(n_dst)]
    lines += ["bridges: [left, right]", "links:"]
    lines += [f"  - {{from: s{i}, to: left, latency: {1 + i % 7}ms, bandwidth: 100Mbps}}" for i in range(n_src)]
    lines += [f"  - {{from: right, to: d{j}, latency: 1ms, bandwidth: 100Mbps}}" for j in range(n_dst)]
    # 10 Gbit/s: every flow stays limited by its source's access link (5 Mbit/s
    # each), well above the 1% activity threshold, so all 1000 stay active.
    lines += ["  - {from: left, to: right, latency: 5ms, bandwidth: 10Gbps}"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    owned = [f"s{i}" for i in range(n_src // 2)]
    wants = {(f"s{i}", f"d{j}"): 50 * M for i in range(n_src) for j in range(n_dst)}
    host = SyntheticHost(f.name, owned, wants, key=BENCH_KEY)
    remote = SyntheticHost(f.name, [f"s{i}" for i in range(n_src // 2, n_src)], wants, key=BENCH_KEY)
    os.unlink(f.name)
    state = host.timeline.steps[0].state

    class Wire:
        inbox: list = []

        def offer(self, payload):
            return 1

        def poll(self):
            out, Wire.inbox = Wire.inbox, []
            return out

    bus = MetadataBus(host.codec, {n: host.sender_ids[n] for n in owned}, Wire(), routes=host.routes)
    loop = ShareLoop(owned, host.cores, bus, netem=True, settings=ShareSettings())
    samples = []
    for period in range(1, runs + 4):
        # The other manager's 25 cores each send their 20 flows (changing
        # rates: every message goes out, the worst case for decoding).
        reports = {}
        for (src, dst), _ in remote.wants.items():
            path = remote.cores[src].configured()[dst]
            rate = int(40 * M * (1 + 0.2 * ((period + hash(dst)) % 3)))
            reports.setdefault(src, []).append(FlowReport(path.link_ids, rate, period % 2 == 0))
        Wire.inbox = [remote.codec.encode(Message(remote.sender_ids[s], period, tuple(r))) for s, r in reports.items()]
        counters = host.advance(0.05)
        start = time.process_time()
        loop.tick(int(period * 50e6), counters, state)
        if period > 3:
            samples.append(time.process_time() - start)
    flows = len(loop.last["flows"])
    return {
        "flows": flows,
        "median_ms": round(1e3 * statistics.median(samples), 2),
        "p90_ms": round(1e3 * sorted(samples)[int(0.9 * len(samples))], 2),
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--hosts", type=int, default=4, help="hosts the instances spread over (default: 4)")
    parser.add_argument(
        "--noise", type=float, default=0.03, help="relative wobble of measured rates per period (default: 0.03)"
    )
    parser.add_argument("--manager", action="store_true", help="only the ShareLoop CPU per period")
    parser.add_argument(
        "--convergence", action="store_true", help="only convergence in real runs (root; about 20 s per run)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per gain for --convergence")
    parser.add_argument(
        "--aeron-traffic",
        action="store_true",
        help="only real Aeron metadata bytes per host (root; 4 managers in namespaces)",
    )
    args = parser.parse_args()
    if args.manager or args.convergence or args.aeron_traffic:
        result = {"load_average": os.getloadavg()}
        if args.manager:
            result["manager_cpu_1000_flows"] = manager_cpu_per_period()
        if args.convergence:
            result["convergence"] = convergence(repeats=args.repeats)
        if args.aeron_traffic:
            result["aeron_metadata_per_host"] = aeron_traffic(args.repeats)
        print(json.dumps(result, indent=2))
        return 0
    result = {
        "cpu_1000_flows": {"tree": cpu_per_period(tree_flows), "random_400_links": cpu_per_period(random_flows)},
        "metadata_per_host": {
            f"{pattern}/{n}": {
                "steady": metadata_rate(n, args.hosts, pattern, args.noise),
                "changing_every_period": metadata_rate(n, args.hosts, pattern, 0.5),
            }
            for pattern in ("pairs", "all")
            for n in (10, 40, 160)
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for shape, figures in result["cpu_1000_flows"].items():
        print(f"CPU per period, 1000 flows, {shape}: median {figures['median_ms']} ms, p90 {figures['p90_ms']} ms")
    for key, figures in result["metadata_per_host"].items():
        steady, busy = figures["steady"], figures["changing_every_period"]
        print(
            f"metadata per host, {key} instances on {args.hosts} hosts: steady {steady['wire_Bps'] / 1e3:.1f} kB/s "
            f"(payload {steady['payload_Bps'] / 1e3:.1f}), changing every period {busy['wire_Bps'] / 1e3:.1f} kB/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
