"""`--dry-run` prints what a run installs: for every instance, the plan the
dry run describes is what a run's emulation core hands its tree at t=0,
destination by destination, placeholders for unreachable ones included."""

from fake_tc import FakeTree

from collapsar.manager.addressing import plan_network
from collapsar.manager.core import EmulationCore, needs_netem
from collapsar.manager.dryrun import PLACEHOLDER_RUN_ID, core_plans, describe_run, guards_at_start
from collapsar.manager.experiment import all_instances, paths_from, timeline_paths
from collapsar.parser import parse_text
from collapsar.tcal import Shaping, plan_tree
from collapsar.timeline import build_timeline

# a and b reach each other; b has two replicas, one link with every netem
# field; c joins later (no path at t=0), d has no link at all.
TEXT = """
experiment: {name: dry}
services:
  a: {command: [sleep, '1']}
  b: {command: [sleep, '1'], replicas: 2}
  c: {command: [sleep, '1'], replicas: 0}
  d: {command: [sleep, '1']}
bridges: [s1]
links:
  - {from: a, to: s1, latency: 2ms, bandwidth: 10Mbps}
  - {from: b, to: s1, latency: 1ms, jitter: 500us, distribution: pareto, loss: 1%, up: 5Mbps, down: 20Mbps}
  - {from: c, to: s1, latency: 3ms}
events:
  - {at: 1s, service: c, action: join}
"""
SUBNET = "10.9.0.0/24"


def test_the_dry_run_plan_is_what_install_hands_the_tree():
    experiment = parse_text(TEXT, "dry.yaml")
    timeline = build_timeline(experiment)
    instances = all_instances(timeline)
    network = plan_network(PLACEHOLDER_RUN_ID, instances, SUBNET)
    netem = needs_netem(timeline_paths(timeline))
    assert netem and instances == ["a", "b", "b-2", "d", "c"]
    guarded, future = guards_at_start(timeline, instances)
    assert guarded == {"c", "d"}  # c joins at 1 s, d has no link: no one reaches either
    plans = core_plans(timeline, network, netem, True, future)
    lines = describe_run(experiment, timeline, SUBNET)
    ip_of, first = network.ip_of(), timeline.steps[0].state
    for net in network.instances:  # as a local run brings them up
        core = EmulationCore(net.instance, net.ifname, net.netns, ip_of, FakeTree, Shaping, netem, True)
        core.install(paths_from(first, net.instance, instances), None, guarded, future.get(net.instance))
        tree, plan = core.tree, plans[net.instance]
        installed = list(tree.shapings.values())
        assert tree.calls[0] == ("setup", tuple(s.dst_ip for s in plan.shapings))
        for planned, made in zip(plan.shapings, installed, strict=True):
            assert planned == made, net.instance
        if plan.whole_cut:  # an instance absent at t=0: its whole tree is cut, in one node
            assert tree.all_cut and tree.cut_ips == set() and set(plan.cut) == set(instances) - {net.instance}
        else:  # c and d are their guards' to cut, not the tree's
            assert tree.cut_ips == set() and not tree.all_cut
        at = lines.index(next(line for line in lines if line.startswith(f"instance {net.instance}:")))
        at += lines[at + 1].startswith("  guarded at t=0")
        printed = plan_tree(installed, wire_overhead=True, netem=netem).describe()
        assert lines[at + 1 : at + 1 + len(printed)] == [f"  {line}" for line in printed]
    # The placeholders a run cuts at t=0 are in the plan: d, and c before it joins.
    assert plans["a"].cut == ("d", "c")
    assert [s.dst_ip for s in plans["a"].shapings] == [ip_of[n] for n in ("b", "b-2", "d", "c")]
    assert plans["c"].cut == ("a", "b", "b-2", "d") and plans["c"].whole_cut and not plans["a"].whole_cut
    assert not [line for line in lines if line.startswith("  cut at t=0 (blackhole)")]
    # c's class in a's tree is made with the path it gets at its join (no change then).
    assert plans["a"].shapings[3] == Shaping.of(ip_of["c"], timeline.steps[1].state.path("a", "c").props)
    for name, veth in (("c", "cx000000v5"), ("d", "cx000000v4")):
        at = lines.index(next(line for line in lines if line.startswith(f"instance {name}:")))
        assert lines[at + 1] == (
            f"  guarded at t=0: no one reaches it, its packets are dropped at its bridge port "
            f"({veth}, eBPF) until a step gives it a path; the other trees keep its class"
        )
    # Every netem field of the b link reaches a's class for b (one hop each way).
    to_b = plans["a"].shapings[0]
    assert (to_b.delay_us, to_b.jitter_us, to_b.distribution, to_b.loss_ratio, to_b.rate_bps) == (
        3000,
        500,
        "pareto",
        0.01,
        10_000_000,
    )
