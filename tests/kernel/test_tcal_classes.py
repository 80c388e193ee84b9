"""Traffic classes (collapsar.tcal.classes) on this host's kernel: which
child each packet joins, what strict priority and weights give under a
saturated path, and that changes, removal, activation and teardown handle
the children.

Rates are read from the children's own byte counters (tc -s class) over a
window while the floods run: htb counts frame bytes, and a class's rate is
the frame share of the wire rate (the TCAL charges Ethernet's overhead), so
a 20 Mbit/s path passes 20 x 1514/1538 = 19.69 Mbit/s of frames.
"""

from __future__ import annotations

import statistics
import subprocess
import time

import pytest
from tcal_traffic import Iperf, classes, run, tc_json

from collapsar.impairments import Extras, Queue
from collapsar.tcal import Shaping
from collapsar.tcal.active import ActiveTcTree
from collapsar.tcal.classes import ClassLayout
from collapsar.trafficclasses import PROTOCOLS, Match, TrafficClass, TrafficClasses

FRAME_SHARE = 1514 / 1538
CLASSES = TrafficClasses.of(
    [
        TrafficClass("rpc", 0, 1, (Match(dst_port=7000), Match(dscp=46), Match(protocol=PROTOCOLS["icmp"]))),
        TrafficClass("light", 1, 1, (Match(dst_port=5301),)),
        TrafficClass("heavy", 1, 3, (Match(dst_port=5302), Match(src_port=6001, protocol=PROTOCOLS["udp"]))),
        TrafficClass("rest", 2),
    ]
)
NAMES = [c.name for c in CLASSES.classes]


def children(ns: str, dev: str, parent_minor: int) -> dict[str, dict]:
    """Traffic class name -> its child class's statistics, for one destination's class."""
    layout = ClassLayout(CLASSES, wire_overhead=True)
    by_handle = classes(ns, dev)
    return {name: by_handle[f"1:{minor:x}"] for name, minor in zip(NAMES, layout.child_minors(parent_minor))}


def sent(ns: str, dev: str, parent_minor: int) -> dict[str, tuple[int, int]]:
    """Traffic class name -> (packets, bytes) its child has sent."""
    return {n: (c["packets"], c["bytes"]) for n, c in children(ns, dev, parent_minor).items()}


SENDER = """
import socket, sys
ip, count, tos, sport, dport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
if sport:
    s.bind(("0.0.0.0", sport))
for _ in range(count):
    s.sendto(b"x" * 100, (ip, dport))
"""


def send(ns: str, ip: str, count: int, tos: int = 0, sport: int = 0, dport: int = 9) -> None:
    run("python3", "-c", SENDER, ip, str(count), str(tos), str(sport), str(dport), ns=ns)


def test_each_packet_joins_the_first_class_that_fits(tree_factory):
    pair, tree = tree_factory(n_dst=1, classes=CLASSES)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, rate_bps=None)])
    minor = tree._dests[ip].minor
    kinds = {q["handle"]: q["kind"] for q in tc_json(pair.src_ns, "qdisc", "show", "dev", pair.src_if)}
    for name, child in children(pair.src_ns, pair.src_if, minor).items():
        assert child["parent"] == f"1:{minor:x}", name
        assert kinds[child["leaf"]] == "pfifo", name  # the leaf the class would have had
    before = sent(pair.src_ns, pair.src_if, minor)
    send(pair.src_ns, ip, 7, dport=7000)  # rpc by port
    send(pair.src_ns, ip, 5, tos=46 << 2, dport=5302)  # EF: rpc, though its port is heavy's (first class wins)
    send(pair.src_ns, ip, 11, dport=5301)  # light
    send(pair.src_ns, ip, 13, dport=5302)  # heavy by destination port
    send(pair.src_ns, ip, 17, sport=6001)  # heavy by source port
    send(pair.src_ns, ip, 19, tos=8 << 2)  # no class matches: rest
    run("ping", "-n", "-q", "-c", "3", "-i", "0.2", ip, ns=pair.src_ns)  # ICMP: rpc (echo and nothing else)
    after = sent(pair.src_ns, pair.src_if, minor)
    got = {name: after[name][0] - before[name][0] for name in NAMES}
    assert got == {"rpc": 7 + 5 + 3, "light": 11, "heavy": 13 + 17, "rest": 19}
    assert (after["light"][1] - before["light"][1]) == 11 * (100 + 8 + 20 + 14)


def flood(ns: str, ip: str, port: int, rate: str, seconds: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, "iperf3", "-c", ip, "-p", str(port), "-u", "-b", rate, "-l", "1472"]
        + ["-t", str(seconds), "-w", "4M"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def child_rates_bps(pair, minor: int, settle_s: float, window_s: float) -> dict[str, float]:
    time.sleep(settle_s)
    first, t0 = sent(pair.src_ns, pair.src_if, minor), time.monotonic()
    time.sleep(window_s)
    last, t1 = sent(pair.src_ns, pair.src_if, minor), time.monotonic()
    return {name: (last[name][1] - first[name][1]) * 8 / (t1 - t0) for name in NAMES}


@pytest.mark.parametrize(
    "offered,expected_share",
    [
        ({5301: "30M", 5302: "30M"}, {"light": 0.25, "heavy": 0.75}),  # one priority: by weight, 1 to 3
        ({7000: "8M", 5302: "30M"}, None),  # strict: rpc takes what it offers, heavy the rest
    ],
    ids=["weights", "strict"],
)
def test_a_saturated_path_serves_priorities_first_and_weights_in_proportion(tree_factory, offered, expected_share):
    pair, tree = tree_factory(n_dst=1, classes=CLASSES)
    ip = pair.dst_ips[0]
    rate_bps = 20_000_000
    tree.setup([Shaping(ip, rate_bps=rate_bps)])
    minor = tree._dests[ip].minor
    servers = [Iperf(pair.dst_ns, ip, port) for port in offered]
    floods = [flood(pair.src_ns, ip, port, rate, 8) for port, rate in offered.items()]
    try:
        rates = child_rates_bps(pair, minor, settle_s=2.0, window_s=4.0)
        assert all(f.poll() is None for f in floods), "a flood ended early"
    finally:
        for f in floods:
            f.kill()
            f.wait()
        for server in servers:
            server.close()
    total = rate_bps * FRAME_SHARE
    print({name: round(r / 1e6, 3) for name, r in rates.items()}, f"path {total / 1e6:.3f} Mbit/s of frames")
    assert sum(rates.values()) == pytest.approx(total, rel=0.03)
    if expected_share is not None:
        for name, share in expected_share.items():
            assert rates[name] == pytest.approx(share * total, rel=0.08), name
    else:
        offered_frames = 8e6 * (1472 + 42) / 1472  # iperf3's rate is of payload
        assert rates["rpc"] == pytest.approx(offered_frames, rel=0.04)
        assert rates["heavy"] == pytest.approx(total - offered_frames, rel=0.06)


def test_a_higher_class_does_not_wait_behind_a_full_lower_one(tree_factory):
    """A ping (rpc: ICMP) through a path whose heavy class holds a full
    100-packet queue: without classes it waits 123 ms (test_tcal_queue)."""
    pair, tree = tree_factory(n_dst=1, classes=CLASSES)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, rate_bps=10_000_000, extras=Extras(queue=Queue(packets=100)))])
    minor = tree._dests[ip].minor
    servers = [Iperf(pair.dst_ns, ip, 5302)]
    bulk = flood(pair.src_ns, ip, 5302, "60M", 10)
    try:
        deadline = time.monotonic() + 5
        while children(pair.src_ns, pair.src_if, minor)["heavy"]["qlen"] < 95:
            assert time.monotonic() < deadline, "the flood did not fill the heavy class's queue"
            time.sleep(0.05)
        out = run("ping", "-n", "-c", "60", "-i", "0.05", "-W", "2", ip, ns=pair.src_ns, check=False, timeout=30)
        backlog = children(pair.src_ns, pair.src_if, minor)["heavy"]["qlen"]
        assert bulk.poll() is None, "the flood ended before the pings did"
    finally:
        bulk.kill()
        bulk.wait()
        for server in servers:
            server.close()
    rtts = sorted(float(p.split("=")[1].split()[0]) for p in out.split() if p.startswith("time="))
    print(
        f"ping beside a full heavy queue ({backlog} packets): median {statistics.median(rtts):.2f} ms, "
        f"max {rtts[-1]:.2f} ms over {len(rtts)}"
    )
    assert len(rtts) == 60
    assert backlog >= 90
    # It waits at most for the frame on the wire (1.23 ms at 10 Mbit/s) and the burst htb lent before it.
    assert statistics.median(rtts) <= 2.5
    assert rtts[int(0.9 * 59)] <= 4.0


def test_changes_reach_every_class_and_removal_takes_the_children(tree_factory):
    pair, tree = tree_factory(n_dst=2, classes=CLASSES)
    a, b = pair.dst_ips
    tree.setup([Shaping(a, rate_bps=10_000_000), Shaping(b, rate_bps=10_000_000)])
    minor_a = tree._dests[a].minor
    tree.change(a, extras=Extras(queue=Queue(packets=30)))
    limits = children(pair.src_ns, pair.src_if, minor_a)
    qdiscs = {q["handle"]: q for q in tc_json(pair.src_ns, "qdisc", "show", "dev", pair.src_if)}
    assert [qdiscs[c["leaf"]]["options"]["limit"] for c in limits.values()] == [30] * 4
    before = classes(pair.src_ns, pair.src_if)
    tree.change(a, rate_bps=5_000_000)  # the destination's class alone: its children borrow whatever it has
    after = classes(pair.src_ns, pair.src_if)
    assert (before[f"1:{minor_a:x}"]["rate"], after[f"1:{minor_a:x}"]["rate"]) == (
        "9843Kbit",
        "4921Kbit",
    )  # 10 and 5 Mbit/s at the frame share
    assert all(after[h]["rate"] == before[h]["rate"] for h in after if h != f"1:{minor_a:x}")
    tree.remove(a)
    handles = set(classes(pair.src_ns, pair.src_if))
    layout = ClassLayout(CLASSES, wire_overhead=True)
    assert not handles & {f"1:{m:x}" for m in [minor_a, *layout.child_minors(minor_a)]}
    assert run("ping", "-n", "-q", "-c", "1", "-W", "1", a, ns=pair.src_ns, check=False).count(" 0 received") == 1
    tree.add(Shaping(a, rate_bps=None))
    before = sent(pair.src_ns, pair.src_if, tree._dests[a].minor)
    send(pair.src_ns, a, 4, dport=5301)
    after = sent(pair.src_ns, pair.src_if, tree._dests[a].minor)
    assert after["light"][0] - before["light"][0] == 4
    tree.teardown()
    assert classes(pair.src_ns, pair.src_if) == {}


def test_shared_classes_have_children_and_go_once_emptied(make_netns_pair):
    pair = make_netns_pair(n_dst=3)
    tree = ActiveTcTree(pair.src_if, pair.src_ns, netem=False, classes=CLASSES)
    try:
        tree.setup([Shaping(ip, rate_bps=10_000_000) for ip in pair.dst_ips])
        (shared_handle,) = tree.shared_classes
        shared_minor = int(shared_handle.split(":")[1], 16)
        before = sent(pair.src_ns, pair.src_if, shared_minor)
        send(pair.src_ns, pair.dst_ips[1], 6, dport=7000)
        assert sent(pair.src_ns, pair.src_if, shared_minor)["rpc"][0] - before["rpc"][0] == 6
        assert tree.activate(pair.dst_ips) == 3
        assert tree.shared_classes == {}
        assert shared_handle not in classes(pair.src_ns, pair.src_if)
        own = tree._dests[pair.dst_ips[2]].minor
        before = sent(pair.src_ns, pair.src_if, own)
        send(pair.src_ns, pair.dst_ips[2], 3, tos=46 << 2)
        assert sent(pair.src_ns, pair.src_if, own)["rpc"][0] - before["rpc"][0] == 3
    finally:
        tree.teardown()
