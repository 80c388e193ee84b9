"""Traffic classes with netem leaves, on Debian's stock kernel: each class
of a path has its own netem (the path's delay) under its own htb child
(collapsar.tcal.classes), so a ping in the priority class crosses a path
whose bulk class holds a full queue in the path's delay and nothing more.

5 Mbit/s, 10 ms, a 50-packet queue: the bulk class's packets wait 50 x 2.46
ms = 123 ms behind each other (test_tcal_queue on the host measures that
without classes); the ping waits for the frame on the wire at most.  The
reply path is unshaped; this emulated machine adds up to EXCESS_MS."""

from __future__ import annotations

import json
import statistics
import subprocess
import time

from netns_helpers import sh

from collapsar.impairments import Extras, Queue
from collapsar.tcal import Shaping, TcTree
from collapsar.trafficclasses import PROTOCOLS, Match, TrafficClass, TrafficClasses

CLASSES = TrafficClasses.of(
    [TrafficClass("ping", 0, 1, (Match(protocol=PROTOCOLS["icmp"]),)), TrafficClass("bulk", 1, 1)]
)
DELAY_MS, RATE_BPS, QUEUE = 10, 5_000_000, 50
EXCESS_MS = 5.0


def netems(pair) -> list[dict]:
    shown = sh("tc", "-j", "-s", "qdisc", "show", "dev", pair.src_if, ns=pair.src_ns).stdout
    return [q for q in json.loads(shown) if q["kind"] == "netem"]


def test_a_ping_class_crosses_a_full_bulk_class_in_the_paths_delay(netns_pair, record_property):
    pair = netns_pair
    ip = pair.dst_ips[0]
    tree = TcTree(pair.src_if, netns=pair.src_ns, classes=CLASSES)
    server = subprocess.Popen(
        ["ip", "netns", "exec", pair.dst_ns, "iperf3", "-s", "-1", "-B", ip, "-p", "5302"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    flood = None
    try:
        shaping = Shaping(ip, RATE_BPS, delay_us=DELAY_MS * 1000, extras=Extras(queue=Queue(packets=QUEUE)))
        tree.setup([shaping])
        leaves = netems(pair)
        # The blackhole's, then one per class, each with the path's delay.
        delays = [round(q["options"].get("delay", {}).get("delay", 0) * 1000) for q in leaves]  # s; none: 0
        assert sorted(delays) == [0, DELAY_MS, DELAY_MS]
        time.sleep(2.0)  # the server listens (slow to start in this VM)
        flood = subprocess.Popen(
            ["ip", "netns", "exec", pair.src_ns, "iperf3", "-c", ip, "-p", "5302", "-u", "-b", "15M"]
            + ["-l", "1400", "-t", "40"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while max(q.get("qlen", 0) for q in netems(pair)) < QUEUE:
            assert time.monotonic() < deadline and flood.poll() is None, "the flood did not fill the bulk class"
            time.sleep(0.2)
        out = sh("ping", "-n", "-c", "40", "-i", "0.1", "-W", "2", ip, ns=pair.src_ns, check=False).stdout
        backlog = max(q.get("qlen", 0) for q in netems(pair))
        assert flood.poll() is None, "the flood ended before the pings did"
    finally:
        for proc in (flood, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        tree.teardown()
    rtts = sorted(float(p.split("=")[1].split()[0]) for p in out.split() if p.startswith("time="))
    median = statistics.median(rtts)
    record_property("figures", f"ping beside a full bulk class ({backlog} packets): median {median:.2f} ms")
    assert len(rtts) == 40
    assert backlog >= QUEUE
    frame_ms = 1538 * 8 / RATE_BPS * 1000
    assert DELAY_MS <= rtts[0] and median <= DELAY_MS + frame_ms + EXCESS_MS, rtts
