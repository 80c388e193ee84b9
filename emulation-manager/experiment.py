"""What local mode reads from an experiment and its timeline: which instances
exist over the whole run, what each one runs (and with which PATH: the
built workload tools appended, programs.py), and every path it will ever
need (to decide whether netem is needed at all)."""

from __future__ import annotations

from collections.abc import Iterator

from collapsar.errors import CollapsarError
from collapsar.manager.addressing import NetworkPlan
from collapsar.manager.local.supervisor import Launch
from collapsar.manager.programs import instance_path
from collapsar.model import Experiment, Path, service_of


def all_instances(timeline) -> list[str]:
    """Every instance present at any step, in order of first appearance: an
    instance that joins later gets its namespace and address up front, so
    joining costs only a process start."""
    seen: dict[str, None] = {}
    for step in timeline.steps:
        for name in step.state.instances:
            seen.setdefault(name, None)
    return list(seen)


def launches(experiment: Experiment, instances: list[str], plan: NetworkPlan) -> dict[str, Launch]:
    """instance -> what to run; instances of services without a command get
    none (they exist on the network only).  A service with only an image
    cannot run in local mode: say so before anything is created."""
    ip_of = plan.ip_of()
    result = {}
    for instance in instances:
        service = experiment.service(service_of(experiment, instance))
        if not service.command:
            if service.image:
                where = f"{service.where}: " if service.where else ""
                raise CollapsarError(
                    f"{where}service {service.name}: local mode runs commands, and this "
                    f"service has only an image ({service.image}); add a `command` "
                    f"or use the compose mode"
                )
            continue
        env = {
            **service.env,
            "PATH": instance_path(service.env.get("PATH")),
            "COLLAPSAR_INSTANCE": instance,
            "COLLAPSAR_SERVICE": service.name,
            "COLLAPSAR_IP": ip_of[instance],
            "COLLAPSAR_RUN_ID": plan.run_id,
        }
        result[instance] = Launch(instance, tuple(service.command), env, service.workdir)
    return result


def paths_from(state, src: str, instances: list[str]) -> dict[str, Path | None]:
    """dst -> path from `src` for every other instance (None: no path)."""
    found: dict[str, Path | None] = {dst: None for dst in instances if dst != src}
    if src in state.instances:
        for path in state.paths([src]):
            found[path.dst] = path
    return found


def timeline_paths(timeline) -> Iterator[Path]:
    """Every path at t=0 and every path a later step changes to."""
    steps = timeline.steps
    if not steps:
        return
    yield from steps[0].state.paths()
    for step in steps[1:]:
        for src, dst in step.changed:
            path = step.state.path(src, dst)
            if path is not None:
                yield path
