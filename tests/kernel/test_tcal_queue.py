"""A path's queue size (`queue:`) on this host's kernel: the leaf's limit, and
what it does to the delay a packet waits behind a saturated bottleneck.

A UDP flood of full frames at six times the class's rate (two streams, so
that a sender stalled for a moment by a busy host seldom lets the queue
drain) keeps the queue full; UDP, because a queue counts what the kernel
queues, and a TCP sender's GSO super-packets (up to 16 frames each at this
rate) count once each (see docs/language.md, "Queue"); a ping sent
through the same class then waits behind the whole queue: Q full frames,
each taking 1538 bytes of wire time at the rate (1.2304 ms at 10 Mbit/s; the
TCAL charges Ethernet's wire overhead).  The ping's reply path is unshaped.
"""

from __future__ import annotations

import statistics
import subprocess

import pytest
from tcal_traffic import run, tc_json

from collapsar.impairments import Extras, Queue
from collapsar.tcal import Shaping, TcTree
from collapsar.tcal.active import ActiveTcTree

RATE_BPS = 10_000_000
FRAME_MS = 1538 * 8 / RATE_BPS * 1000  # one full frame's wire time


def leaf_limit(ns: str, dev: str, kind: str = "pfifo") -> list[int]:
    return sorted(q["options"]["limit"] for q in tc_json(ns, "qdisc", "show", "dev", dev) if q["kind"] == kind)


def leaf_qlen(ns: str, dev: str, limit: int) -> int:
    """Packets now waiting in the pfifo leaf of this limit (tc -s)."""
    for q in tc_json(ns, "-s", "qdisc", "show", "dev", dev):
        if q["kind"] == "pfifo" and q["options"]["limit"] == limit:
            return int(q.get("qlen", 0))
    raise AssertionError(f"no pfifo leaf of limit {limit} on {dev}")


def rtt_under_flood_ms(pair, ip: str, packets: int) -> list[float]:
    """Pings sent while a flood keeps the leaf full: the flood runs longer
    than the pings and is stopped after them (a flood timed to outlast them
    ended early on a loaded CI host, and half the pings met an empty queue),
    and the first ping leaves once the leaf is seen full."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", pair.dst_ns, "iperf3", "-s", "-1", "-B", ip, "-p", "5302"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    flood = None
    try:
        for _ in range(50):  # until the server listens
            flood = subprocess.Popen(
                ["ip", "netns", "exec", pair.src_ns, "iperf3", "-c", ip, "-p", "5302", "-u", "-b", "30M", "-P", "2"]
                + ["-l", "1472", "-t", "60", "-w", "4M"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                flood.wait(timeout=0.3)
            except subprocess.TimeoutExpired:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert flood is not None and flood.poll() is None, "the flood did not start"
        full = False
        for _ in range(100):  # the queue fills
            if leaf_qlen(pair.src_ns, pair.src_if, packets) >= packets - 2:
                full = True
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert full, f"the flood did not fill the {packets}-packet leaf in 5 s"
        out = run("ping", "-n", "-c", "120", "-i", "0.025", "-W", "2", ip, ns=pair.src_ns, check=False, timeout=30)
        assert flood.poll() is None, f"the flood ended before the pings did: {flood.communicate()[0]}"
    finally:
        for proc in (server, flood):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return [float(part.split("=")[1].split()[0]) for part in out.split() if part.startswith("time=")]


@pytest.mark.parametrize(
    "queue,packets",
    [(Queue(packets=20), 20), (Queue(packets=100), 100), (Queue(time_us=20_000), 17), (None, 17)],
    ids=["20 packets", "100 packets", "20ms", "default"],
)
def test_a_full_queue_delays_by_its_size(tree_factory, queue, packets):
    """Without a `queue` a path without delay gets one burst: 20 ms at its rate."""
    pair, tree = tree_factory(n_dst=1)
    ip = pair.dst_ips[0]
    # A path's queue is in packets once composed (collapsar.impairments.compose);
    # a time here is what compose turns into packets at the rate.
    given = None if queue is None else Queue(packets=queue.packets_at(RATE_BPS, 1514))
    tree.setup([Shaping(ip, rate_bps=RATE_BPS, extras=Extras(queue=given))])
    assert leaf_limit(pair.src_ns, pair.src_if) == [0, packets]  # the blackhole's pfifo, then ours
    rtts = sorted(rtt_under_flood_ms(pair, ip, packets))
    expected = packets * FRAME_MS
    p50, p90 = statistics.median(rtts), rtts[int(0.9 * (len(rtts) - 1))]
    print(
        f"queue {packets} packets: RTT median {p50:.2f} p90 {p90:.2f} ms over {len(rtts)} pings (expected "
        f"{expected:.2f})"
    )
    assert len(rtts) >= 30  # a full queue drops many pings; enough come through
    # No ping waits behind more than the queue (a hard bound), and a full
    # queue's wait is what most see (a busy host's stalled sender lets the
    # queue drain now and then, so the median is the softer figure).
    assert rtts[-1] <= 1.05 * expected + 2.0
    assert 0.85 * expected <= p90
    assert 0.6 * expected <= p50


def test_a_queue_change_is_exact_both_ways(tree_factory):
    """The default sizing only grows (the sharing loop's rates come and go);
    a queue the user sets shrinks as well as grows."""
    pair, tree = tree_factory(n_dst=1)
    ip = pair.dst_ips[0]
    tree.setup([Shaping(ip, rate_bps=RATE_BPS, extras=Extras(queue=Queue(packets=200)))])
    assert leaf_limit(pair.src_ns, pair.src_if) == [0, 200]
    tree.change(ip, extras=Extras(queue=Queue(packets=30)))
    assert leaf_limit(pair.src_ns, pair.src_if) == [0, 30]
    tree.change(ip, extras=Extras())
    assert leaf_limit(pair.src_ns, pair.src_if) == [0, 17]  # the default without delay: 20 ms at 10 Mbit/s
    tree.change(ip, rate_bps=RATE_BPS // 2)
    assert leaf_limit(pair.src_ns, pair.src_if) == [0, 17]


@pytest.mark.parametrize("whole", [False, True], ids=["its own cut", "the whole tree cut"])
@pytest.mark.parametrize("kind", [TcTree, ActiveTcTree], ids=["full", "active"])
def test_a_path_that_comes_to_a_cut_class_gets_its_own_queue(make_netns_pair, kind, whole):
    """An instance that joins later has its tree made at t=0 with classes
    made only to be cut (unlimited: no rate yet); the path it gets when it
    joins sizes the queue afresh, where the sizing that only grows (for the
    sharing loop's rates under a running flow) kept the unlimited one: 1000
    packets where this path's own queue is 17 (20 ms at 10 Mbit/s).  Once
    the class carries traffic again, a lower rate keeps the room it has."""
    pair = make_netns_pair(n_dst=1)
    tree = kind(pair.src_if, pair.src_ns, netem=False)
    try:
        ip = pair.dst_ips[0]
        tree.setup([Shaping(ip, None)])  # the placeholder: no rate
        assert leaf_limit(pair.src_ns, pair.src_if) == [0, 1000]
        tree.cut_all() if whole else tree.cut(ip)
        tree.change(ip, rate_bps=RATE_BPS)
        tree.restore_all() if whole else tree.restore(ip)
        assert leaf_limit(pair.src_ns, pair.src_if) == [0, 17]
        tree.change(ip, rate_bps=RATE_BPS // 2)  # the sharing loop's cut: the room stays
        assert leaf_limit(pair.src_ns, pair.src_if) == [0, 17]
        tree.change(ip, rate_bps=RATE_BPS * 2)  # and grows with a faster path: 20 ms at 20 Mbit/s
        assert leaf_limit(pair.src_ns, pair.src_if) == [0, 34]
    finally:
        tree.teardown()
