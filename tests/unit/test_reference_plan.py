"""The reference network's plan (tests/reference_plan.py), without root."""

from __future__ import annotations

import pytest
from reference_plan import MIN_QUEUE_PKTS, plan_reference, queue_pkts

from collapsar.errors import CollapsarError
from collapsar.parser import parse_text

CHAIN = """\
experiment: {name: chain}
services:
  c: {command: [sleep, "1"]}
  s: {command: [sleep, "1"]}
  j: {command: [echo, hi], replicas: 0, env: {A: b}}
bridges: [b1, b2]
links:
  - {from: c, to: b1, latency: 5ms, bandwidth: 4Mbps}
  - {from: b1, to: b2, latency: 10ms, jitter: 1ms, loss: 1%, up: 2Mbps, down: 3Mbps}
  - {from: b2, to: s, latency: 20ms}
  - {from: j, to: b1, bandwidth: 1Mbps, queue: 20ms}
events:
  - {at: 2s, service: j, action: join}
"""


def plan(text: str = CHAIN):
    return plan_reference(parse_text(text, "chain.yaml"), "u1")


def hop(p, src: str, dst: str):
    (found,) = [h for h in p.hops if (h.src, h.dst) == (src, dst)]
    return found


def test_the_bdp_rule():
    # 10 Mbit/s x 70 ms = 87.5 KB = 56.9 wire frames of 1538 B.
    assert queue_pkts(10_000_000, 70_000, wire_overhead=True) == 57
    assert queue_pkts(10_000_000, 70_000, wire_overhead=False) == 58  # 1514-byte frames
    assert queue_pkts(1_000_000, 70_000, wire_overhead=True) == MIN_QUEUE_PKTS == 10


def test_nodes_addresses_and_hosts():
    p = plan()
    assert [(n.name, n.kind, n.ip) for n in p.nodes.values()] == [
        ("b1", "bridge", "10.213.0.2"),
        ("b2", "bridge", "10.213.0.3"),
        ("c", "instance", "10.213.0.4"),
        ("s", "instance", "10.213.0.5"),
        ("j", "instance", "10.213.0.6"),
    ]
    assert p.netns("c") == "cxref-u1-c"
    assert "10.213.0.5\ts\n" in p.hosts_text()


def test_each_direction_keeps_its_link_and_the_queue_follows_the_longest_round_trip():
    p = plan()
    up, down = hop(p, "b1", "b2"), hop(p, "b2", "b1")
    assert (up.props.rate_bps, down.props.rate_bps) == (2_000_000, 3_000_000)
    assert (up.props.delay_us, up.props.jitter_us, up.props.loss_ratio) == (10_000, 1_000, 0.01)
    # c <-> s: 35 ms each way; j <-> s the same; c <-> j 10 ms each way.
    assert up.rtt_us == down.rtt_us == 70_000
    assert up.queue_pkts == queue_pkts(2_000_000, 70_000, True) == MIN_QUEUE_PKTS + 2
    assert hop(p, "b2", "s").queue_pkts is None  # no rate: no queue of ours
    # `queue: 20ms` at 1 Mbit/s in 1514-byte frames, as Collapsar counts it.
    assert hop(p, "j", "b1").queue_pkts == 2


def test_link_ids_and_routes_follow_collapsar():
    p = plan()
    # The joiner's links come last, as in the experiment's own run.
    assert [(h.link_id, h.src, h.dst) for h in p.hops][-2:] == [(6, "j", "b1"), (7, "b1", "j")]
    routes = {(r.node, r.dst_ip): (r.via_ip, r.ifname, r.table) for r in p.routes}
    s, b1, b2 = p.ip("s"), p.ip("b1"), p.ip("b2")
    assert routes[("c", s)] == (b1, "l0", 0)
    assert routes[("b1", s)] == (b2, "l1", 0)
    assert routes[("b2", s)] == (s, "l2", 0)
    assert routes[("b1", p.ip("j"))] == (p.ip("j"), "l3", 0)
    assert not any(r.node in ("b1", "b2") and r.dst_ip in (b1, b2) for r in p.routes)


def test_launches_at_zero_and_at_the_join():
    p = plan()
    assert [(x.instance, x.at_us, x.argv, x.env) for x in p.launches] == [
        ("c", 0, ("sleep", "1"), ()),
        ("s", 0, ("sleep", "1"), ()),
        ("j", 2_000_000, ("echo", "hi"), (("A", "b"),)),
    ]


@pytest.mark.parametrize(
    "extra,message",
    [
        ("  - {at: 3s, service: s, action: leave}", "chain.yaml:14: service leave event: the reference network plays"),
        ("  - {at: 3s, link: [b1, b2], set: {latency: 1ms}}", "chain.yaml:14: linkset set event"),
    ],
)
def test_refuses_other_events(extra, message):
    with pytest.raises(CollapsarError, match=message):
        plan(CHAIN + extra + "\n")


def test_refuses_what_it_does_not_model():
    bursty = CHAIN.replace("loss: 1%", "loss: {rate: 1%, burst: 3}")
    with pytest.raises(CollapsarError, match=r"chain.yaml:\d+: link b1 -> b2: up: burst loss: not modelled"):
        plan(bursty)
    limited = CHAIN.replace('c: {command: [sleep, "1"]}', 'c: {command: [sleep, "1"], cpus: 1}')
    with pytest.raises(CollapsarError, match=r"chain.yaml:3: service c: cpus: not enforced"):
        plan(limited)


def test_sources_that_tie_differently_get_their_own_tables():
    from types import SimpleNamespace

    from reference_plan import Hop, Node, plan_routes

    from collapsar.model import LinkProps

    nodes = {
        n: Node(n, "instance" if n in "ABD" else "bridge", f"ns-{n}", f"10.213.0.{i + 2}")
        for i, n in enumerate("ABDXPQ")
    }
    links = {1: ("A", "X"), 2: ("B", "X"), 3: ("X", "P"), 4: ("X", "Q"), 5: ("P", "D"), 6: ("Q", "D")}
    hops = {i: Hop(i, a, b, f"l{i}", LinkProps(), 0, None) for i, (a, b) in links.items()}
    # A and B both cross X to reach D, but their shortest-path trees leave X differently.
    paths = [
        SimpleNamespace(src="A", dst="D", link_ids=(1, 3, 5)),
        SimpleNamespace(src="B", dst="D", link_ids=(2, 4, 6)),
    ]
    routes = {(r.node, r.table, r.src_ip): (r.dst_ip, r.via_ip, r.ifname) for r in plan_routes(paths, hops, nodes)}
    d = nodes["D"].ip
    assert routes[("X", 100, nodes["A"].ip)] == (d, nodes["P"].ip, "l3")
    assert routes[("X", 101, nodes["B"].ip)] == (d, nodes["Q"].ip, "l4")
    assert routes[("A", 0, None)] == (d, nodes["X"].ip, "l1")
    assert routes[("P", 0, None)] == (d, d, "l5")
    assert not [key for key in routes if key[0] == "X" and key[1] == 0]


def test_the_congestion_control_is_set_where_tcp_ends():
    from reference_net import _sysctls

    assert plan().congestion_control is None
    chosen = plan(CHAIN.replace("{name: chain}", "{name: chain, congestion-control: reno}"))
    assert chosen.congestion_control == "reno"
    assert "net.ipv4.tcp_congestion_control=reno" in _sysctls("instance", "reno")
    assert not [s for s in _sysctls("bridge", "reno") if "congestion" in s]  # bridges only forward
    assert not [s for s in _sysctls("instance", None) if "congestion" in s]  # the host's default
