"""The hop-by-hop reference network (tests/reference_net.py) on this host's kernel.

No sch_netem here, so rates and queues only: a dumbbell of two clients and
two servers, 100 Mbit/s edges and a 10 Mbit/s core.  A real Ethernet link
gives TCP 1448 payload bytes per 1538 wire bytes (94.15% of its rate); the
reference charges that overhead as Collapsar does, so one flow through the
core gets 9.415 Mbit/s, and two flows together fill it.  Goodput is the
receiver's, over 8 s after omitting 2 s of slow start.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from reference_net import NETNS_ETC, NETNS_RUN, ReferenceNet
from reference_plan import MIN_QUEUE_PKTS, plan_reference
from tcal_traffic import ETHERNET_GOODPUT_RATIO

from collapsar.errors import CollapsarError
from collapsar.parser import parse_text

CORE_BPS = 10_000_000
FRAME_SHARE = 1514 / 1538
DUMBBELL = """\
experiment: {name: reference-dumbbell}
services:
  s1: {command: [iperf3, -s, -p, "5301"]}
  s2: {command: [iperf3, -s, -p, "5302"]}
  c1: {command: [sleep, "3600"]}
  c2: {command: [sleep, "3600"]}
  late: {command: [ping, -n, -c, "1", -W, "5", s2], replicas: 0}
bridges: [left, right]
links:
  - {from: c1, to: left, bandwidth: 100Mbps}
  - {from: c2, to: left, bandwidth: 100Mbps}
  - {from: late, to: left, bandwidth: 100Mbps}
  - {from: right, to: s1, bandwidth: 100Mbps}
  - {from: right, to: s2, bandwidth: 100Mbps}
  - {from: left, to: right, bandwidth: 10Mbps}
events:
  - {at: 1s, service: late, action: join}
"""


def experiment():
    return parse_text(DUMBBELL, "dumbbell.yaml")


@pytest.fixture(scope="module")
def dumbbell():
    with ReferenceNet(experiment()) as net:
        net.start()
        yield net


def iperf_bps(net: ReferenceNet, client: str, server: str, port: int, seconds: int = 8) -> float:
    argv = ["iperf3", "-c", server, "-p", str(port), "-t", str(seconds), "-O", "2", "-J"]
    for _ in range(50):  # the server may not listen yet
        report = json.loads(net.sh(client, *argv, timeout_s=seconds + 30, check=False).stdout or "{}")
        if "error" not in report or "refused" not in report["error"]:
            break
        time.sleep(0.1)
    assert "error" not in report, report.get("error")
    return report["end"]["sum_received"]["bits_per_second"]


def test_plan_sizes_the_core_queue_by_the_rule():
    plan = plan_reference(experiment(), "plan")
    core = [hop for hop in plan.hops if {hop.src, hop.dst} == {"left", "right"}]
    # No delay anywhere: the round trips are 0, so the floor holds.
    assert [(hop.props.rate_bps, hop.rtt_us, hop.queue_pkts) for hop in core] == [(CORE_BPS, 0, MIN_QUEUE_PKTS)] * 2


@pytest.mark.timing
def test_one_flow_gets_the_wire_share_of_the_core(dumbbell, record_property):
    ratio = iperf_bps(dumbbell, "c1", "s1", 5301) / CORE_BPS
    record_property("goodput_ratio", f"{ratio:.4f}")
    # 1448/1538 = 0.9415; above 0.955 (1448/1514) the wire overhead is missing.
    assert ETHERNET_GOODPUT_RATIO - 0.015 <= ratio <= ETHERNET_GOODPUT_RATIO + 0.006


def core_sent_bytes(net: ReferenceNet) -> tuple[float, int]:
    """(when, bytes) the core's htb class sent left -> right (veth l4): frame bytes,
    each segment of a GSO packet counted with its headers (a veth's rx_bytes counts
    them once per packet, 2-4% short here).  `when` is the middle of the read,
    which a busy host can be slow to start."""
    before = time.monotonic()
    out = net.sh("left", "tc", "-s", "class", "show", "dev", "l4").stdout
    return (before + time.monotonic()) / 2, int(re.search(r"Sent (\d+) bytes", out).group(1))


@pytest.mark.timing
def test_two_flows_fill_the_core(dumbbell, record_property):
    """Measured on the core itself, over a window both flows span: two iperf3
    means over their own windows would add up to more than the core whenever
    one flow starts late on a busy host and runs alone for a while."""
    flows = [
        dumbbell.popen(c, ["iperf3", "-c", s, "-p", p, "-t", "15", "-J"], stdout=subprocess.PIPE, text=True)
        for c, s, p in (("c1", "s1", "5301"), ("c2", "s2", "5302"))
    ]
    time.sleep(4)  # both connected, slow start over
    start, before = core_sent_bytes(dumbbell)
    time.sleep(8)
    end, after = core_sent_bytes(dumbbell)
    core_bps = (after - before) * 8 / (end - start)
    reports = [json.loads(flow.communicate(timeout=60)[0]) for flow in flows]
    assert [flow.returncode for flow in flows] == [0, 0], [r.get("error") for r in reports]
    # The core carries frames of 1514 bytes in 1538 bytes of wire time.
    fill = core_bps / (CORE_BPS * FRAME_SHARE)
    rates = [r["end"]["sum_received"]["bits_per_second"] for r in reports]
    record_property("core_fill", f"{fill:.4f}")
    record_property("flows_bps", " ".join(f"{r:.0f}" for r in rates))
    assert 0.97 <= fill <= 1.01
    # Same path, same RTT: neither flow starves (CUBIC over a 10-packet queue is not exactly fair).
    assert min(rates) >= 0.25 * sum(rates)


def test_routes_cross_the_bridges(dumbbell):
    ip = dumbbell.ip
    hops = [
        ("c1", ["ip", "route", "get", ip("s1")], f"via {ip('left')} dev l0"),
        ("left", ["ip", "route", "get", ip("s1"), "from", ip("c1"), "iif", "l0"], f"via {ip('right')} dev l4"),
        ("right", ["ip", "route", "get", ip("s1"), "from", ip("c1"), "iif", "l4"], f"via {ip('s1')} dev l2"),
        ("s1", ["ip", "route", "get", ip("c1")], f"via {ip('right')} dev l2"),
    ]
    for node, argv, expected in hops:
        assert expected in dumbbell.sh(node, *argv).stdout, (node, argv)
    # One frame per packet on every link (GSO packets would each count as one in the queues).
    for node, ifname in (("c1", "l0"), ("left", "l0"), ("left", "l4"), ("right", "l4"), ("s1", "l2")):
        assert " gso_max_segs 1 " in dumbbell.sh(node, "ip", "-d", "link", "show", "dev", ifname).stdout
    # Record route: each router writes its address; forward then back.
    out = dumbbell.sh("c1", "ping", "-n", "-c", "1", "-R", "s1").stdout
    recorded = re.findall(r"^\s*(?:RR:)?\s*(10\.213\.\d+\.\d+)$", out, re.MULTILINE)
    names = {ip(n): n for n in ("c1", "left", "right", "s1")}
    assert [names[a] for a in recorded] == ["c1", "left", "right", "s1", "s1", "right", "left", "c1"]


def test_names_resolve_and_a_join_starts_on_time():
    with ReferenceNet(experiment()) as net:
        assert f"{net.ip('s2')}\ts2" in (NETNS_ETC / net.netns("c1") / "hosts").read_text()
        codes = net.run(duration_s=3.0)
        assert 1.0 <= net.started_at_s["late"] <= 1.3
        assert max(net.started_at_s[name] for name in ("s1", "s2", "c1", "c2")) < 0.3
        # `late` pinged s2 by name, through both bridges, and exited.
        out, _ = net.log_paths("late")
        assert "1 received" in out.read_text()
        assert codes == {"s1": None, "s2": None, "c1": None, "c2": None, "late": 0}


def leftovers(net: ReferenceNet, pids: list[int]) -> list[str]:
    found = [ns for ns in (n.netns for n in net.plan.nodes.values()) if (NETNS_RUN / ns).exists()]
    found += [str(NETNS_ETC / n.netns) for n in net.plan.nodes.values() if (NETNS_ETC / n.netns).exists()]
    for pid in pids:
        try:
            os.kill(pid, 0)
            found.append(f"pid {pid}")
        except ProcessLookupError:
            pass
    return found


def test_teardown_after_an_interrupt_leaves_nothing():
    net = ReferenceNet(experiment())
    pids = []
    with pytest.raises(KeyboardInterrupt):
        with net:
            net.start()
            pids = [proc.pid for proc in net.started.values()]
            assert len(pids) == 4
            raise KeyboardInterrupt  # as Ctrl-C raises it
    assert leftovers(net, pids) == []
    net.teardown()  # again: nothing to do, no error


def test_refuses_a_namespace_it_did_not_make():
    net = ReferenceNet(experiment())
    theirs = net.netns("right")
    os.system(f"ip netns add {theirs}")
    try:
        with pytest.raises(CollapsarError, match=f"namespace {theirs} exists already"):
            net.__enter__()
        assert (NETNS_RUN / theirs).exists()
        assert [ns for ns in (n.netns for n in net.plan.nodes.values()) if (NETNS_RUN / ns).exists()] == [theirs]
    finally:
        os.system(f"ip netns del {theirs}")
    assert not Path(NETNS_ETC / theirs).exists()
