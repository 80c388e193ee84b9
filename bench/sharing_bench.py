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
import tempfile
import time

from sharing_real_runs import aeron_traffic, convergence
from sharing_support import BENCH_KEY, PERIODS_PER_S, M

from collapsar.manager.sharing.metadata import Codec, FlowReport, Message, SendPolicy
from collapsar.manager.sharing.model import Flow, share


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
