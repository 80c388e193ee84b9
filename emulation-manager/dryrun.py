"""`collapsar run --dry-run`: the per-instance tc plan at t=0, nothing created.

Each instance's tree is the plan of the emulation core a run would make for
it (`EmulationCore.plan`: a class per destination, placeholders for those
with no path), laid out as the TCAL lays it out (`plan_tree`), so the dry
run prints what a run installs.  Instances no one reaches at t=0 are shown
guarded, as a local run guards them (`guards_at_start`): their classes in
the other trees are made with the path they will first have, not cut.
Addresses are those a real run would give (they depend only on instance
order and the subnet); namespace and interface names carry a placeholder
run id, since a real run draws a fresh one.
"""

from __future__ import annotations

from collapsar.linktraces.compile import describe as describe_trace
from collapsar.manager.addressing import NetworkPlan, plan_network
from collapsar.manager.core import EmulationCore, InstallPlan, needs_netem
from collapsar.manager.experiment import all_instances, launches, paths_from, timeline_paths
from collapsar.manager.local.limits import describe_limits
from collapsar.manager.play.player import first_paths, plan_step
from collapsar.model import Experiment, Path, service_of

PLACEHOLDER_RUN_ID = "000000"


def guards_at_start(timeline, instances: list[str]) -> tuple[set[str], dict[str, dict[str, Path]]]:
    """What a local run guards at t=0 (no one reaches them: absent or
    disconnected; collapsar.tcal.guard), and per source the first path each
    of them will have, which its class is made with (LocalRun._guard_first)."""
    steps = timeline.steps
    guarded = steps[0].state.cut_off(instances)
    plans = [plan_step(steps[i - 1].state, steps[i], None) for i in range(1, len(steps))]
    return guarded, first_paths(plans, guarded)


def core_plans(
    timeline, network: NetworkPlan, netem: bool, wire_overhead: bool, future: dict[str, dict[str, Path]]
) -> dict[str, InstallPlan]:
    """instance -> what its emulation core installs at t=0: the plan of the
    core a run makes for it (its tree is made by install, never called here)."""
    from collapsar.tcal import Shaping, TcTree

    instances, ip_of = [net.instance for net in network.instances], network.ip_of()
    first = timeline.steps[0].state
    plans = {}
    for net in network.instances:
        core = EmulationCore(net.instance, net.ifname, net.netns, ip_of, TcTree, Shaping, netem, wire_overhead)
        plans[net.instance] = core.plan(paths_from(first, net.instance, instances), future.get(net.instance))
    return plans


def describe_run(experiment: Experiment, timeline, subnet: str) -> list[str]:
    from collapsar.tcal.bucket import describe as describe_bucket
    from collapsar.tcal.bucket import tbf_params
    from collapsar.tcal.classes import ClassLayout
    from collapsar.tcal.plan import plan_tree

    instances = all_instances(timeline)
    network = plan_network(PLACEHOLDER_RUN_ID, instances, subnet)
    runnable = launches(experiment, instances, network)
    netem = needs_netem(timeline_paths(timeline))
    wire_overhead = experiment.settings.wire_overhead
    present = set(timeline.steps[0].state.instances)
    guarded, future = guards_at_start(timeline, instances)
    plans = core_plans(timeline, network, netem, wire_overhead, future)
    lines = [
        f"dry run of {experiment.source}: {len(instances)} instances on bridge {network.bridge}, "
        f"subnet {network.subnet}, leaves: {'netem' if netem else 'pfifo (no delay/jitter/loss)'}, "
        f"{len(timeline.steps) - 1} timeline steps after t=0"
    ]
    if experiment.traces:
        changed = sum(len(step.changed) for step in timeline.steps[1:])
        lines += [describe_trace(trace) for trace in experiment.traces]
        lines.append(f"timeline: {changed} path changes after t=0, each prepared before t=0")
    for net in network.instances:
        launch = runnable.get(net.instance)
        when = "at t=0" if net.instance in present else "on a later join"
        command = " ".join(launch.argv) if launch else "(no command)"
        lines.append(
            f"instance {net.instance}: {net.ip}/{net.prefixlen} on {net.netns}/{net.ifname}, starts {when}: {command}"
        )
        limits = describe_limits(experiment.service(service_of(experiment, net.instance)))
        if limits:
            lines.append(f"  limits, in its own control groups (local/limits.py): {limits}")
        if net.instance in guarded:
            lines.append(
                f"  guarded at t=0: no one reaches it, its packets are dropped at its bridge port "
                f"({net.host_veth}, eBPF) until a step gives it a path; the other trees keep its class"
            )
        setup = plans[net.instance]
        service = experiment.service(service_of(experiment, net.instance))
        if service.egress is not None:
            lines.append(f"  egress {service.egress.describe()}")
            lines.append(f"  {describe_bucket(tbf_params(service.egress, wire_overhead=wire_overhead))}")
        if service.traffic_classes is None:
            tree = plan_tree(setup.shapings, wire_overhead=wire_overhead, netem=netem)
            lines += [f"  {line}" for line in tree.describe()]
        else:
            classes = ClassLayout(service.traffic_classes, wire_overhead=wire_overhead)
            tree = plan_tree(setup.shapings, wire_overhead=wire_overhead, netem=netem, last_minor=classes.last_parent)
            lines += [f"  {line}" for line in tree.describe(classes.describe())]
        cut = [dst for dst in setup.cut if dst not in guarded]  # those guarded are cut by their guards
        if setup.whole_cut:
            lines.append(f"  cut at t=0, every path (u32 node 800::1 -> blackhole): {', '.join(setup.cut)}")
        elif cut:
            lines.append(f"  cut at t=0 (blackhole): {', '.join(cut)}")
    return lines
