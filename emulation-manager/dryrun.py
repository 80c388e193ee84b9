"""`collapsar run --dry-run`: the per-instance tc plan at t=0, nothing created.

Addresses are those a real run would give (they depend only on instance
order and the subnet); namespace and interface names carry a placeholder
run id, since a real run draws a fresh one.
"""

from __future__ import annotations

from collapsar.manager.addressing import plan_network
from collapsar.manager.core import needs_netem
from collapsar.manager.experiment import all_instances, launches, paths_from, timeline_paths
from collapsar.model import Experiment

PLACEHOLDER_RUN_ID = "000000"


def describe_run(experiment: Experiment, timeline, subnet: str) -> list[str]:
    from collapsar.tcal import Shaping
    from collapsar.tcal.plan import plan_tree

    instances = all_instances(timeline)
    plan = plan_network(PLACEHOLDER_RUN_ID, instances, subnet)
    runnable = launches(experiment, instances, plan)
    netem = needs_netem(timeline_paths(timeline))
    first = timeline.steps[0].state
    present = set(first.instances)
    lines = [
        f"dry run of {experiment.source}: {len(instances)} instances on bridge {plan.bridge}, "
        f"subnet {plan.subnet}, leaves: {'netem' if netem else 'pfifo (no delay/jitter/loss)'}, "
        f"{len(timeline.steps) - 1} timeline steps after t=0"
    ]
    for net in plan.instances:
        launch = runnable.get(net.instance)
        when = "at t=0" if net.instance in present else "on a later join"
        command = " ".join(launch.argv) if launch else "(no command)"
        lines.append(
            f"instance {net.instance}: {net.ip}/{net.prefixlen} on {net.netns}/{net.ifname}, starts {when}: {command}"
        )
        shapings, cut = [], []
        for dst, path in paths_from(first, net.instance, instances).items():
            if path is None:
                cut.append(dst)
                continue
            shapings.append(
                Shaping(
                    plan.ip_of()[dst], path.rate_bps, path.delay_us, path.jitter_us, path.distribution, path.loss_ratio
                )
            )
        tree = plan_tree(shapings, wire_overhead=experiment.settings.wire_overhead, netem=netem)
        lines += [f"  {line}" for line in tree.describe()]
        if cut:
            lines.append(f"  cut at t=0 (blackhole): {', '.join(cut)}")
    return lines
