"""Host limits per instance in local mode: `cpus`, `cpuset`, `cpu-speed`
and `memory` through a control group per instance (cgroups.py: which
hierarchy, which files; collapsar.cpuspeed: the quota of cpus and
cpu-speed).  Only instances whose service sets one of the keys get groups.

At run start, before anything exists, `RunGroups.plan` detects the
hierarchies and refuses, with the fix, what this host cannot limit: a
controller it lacks, CPUs it does not have, a share of CPU below the
kernel's floor or above its CPUs.  Once the network is up, `create` makes
the run's group in each hierarchy needed and one per limited instance
under it, each journaled before its mkdir (kind `cgroup`: controller,
instance, path), and writes the limits.

A command joins its groups before it runs: the supervisor's prefix runs
`sh`, which writes its own pid into each group's cgroup.procs and then
execs `ip netns exec NETNS COMMAND`, so the command and every child it
makes (born in its parent's groups) run inside them from their first
instruction.  The groups are removed with the rest of the journal, after
the processes (cleanup.plan_cleanup), at the end of the run or by
`collapsar cleanup`, which believes a `cgroup` record only if its path is
the one it derives itself (`record_problem`).

OOM: the kernel counts the OOM killer's kills per memory group.  A command
that ends on its own, unsuccessfully, after the count rose past what it
was when the command started, was killed by it (or lost a child to it):
its exit is `oom-killed`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from collapsar.cpuspeed import DOCKER_CPUS_PERIOD_US, MIN_CPU_SHARE, cpu_bandwidth, describe_speed, slowed
from collapsar.errors import EnvironmentProblem, RunError
from collapsar.manager.local.cgroups import (
    CONTROLLERS,
    Layout,
    controllers_for,
    detect,
    host_cpus,
    limit_writes,
    oom_kills,
)
from collapsar.manager.local.rundir import Journal
from collapsar.model import Experiment, Service, service_of
from collapsar.resources import format_cpu_list, keys_set

# Joins each group given before `--`, then execs the rest (see the module doc).
JOIN_SCRIPT = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || '
    '{ echo "collapsar: cannot join the control group $1" >&2; exit 125; }; shift; done; shift; exec "$@"'
)


def _controllers(service: Service) -> list[str]:
    return controllers_for(cpu_bandwidth(service), service.cpuset, service.memory_bytes)


def _key_of(service: Service, controller: str) -> str:
    if controller == "cpu":
        return "cpu-speed" if slowed(service) else "cpus"
    return controller


def _where(service: Service) -> str:
    return f"{service.where}: " if service.where else ""


class RunGroups:
    """The control groups of one local run (see the module doc)."""

    def __init__(self, run_id: str, layout: Layout, limited: dict[str, Service]):
        self.run_id, self.layout, self.limited = run_id, layout, limited
        needed = {c for service in limited.values() for c in _controllers(service)}
        self.controllers = [c for c in CONTROLLERS if c in needed]
        self._oom_at_start: dict[str, int | None] = {}

    @classmethod
    def plan(
        cls, experiment: Experiment, instances: list[str], run_id: str, layout: Layout | None = None
    ) -> RunGroups | None:
        """None when no service sets a limit (nothing is detected then)."""
        limited = {}
        for instance in instances:
            service = experiment.service(service_of(experiment, instance))
            if keys_set(service):
                limited[instance] = service
        if not limited:
            return None
        layout = layout or detect()
        for service in {s.name: s for s in limited.values()}.values():
            check_service(layout, service)
        return cls(run_id, layout, limited)

    # ---- creation -------------------------------------------------------------

    def create(self, journal: Journal, say: Callable[[str], None]) -> None:
        """Every group, journaled first, with its limits written (see the module doc)."""
        v2 = [c for c in self.controllers if self.layout.version(c) == 2]
        if v2:
            enabled = _enable(self.layout.hierarchies[v2[0]].mount, v2)
            if enabled:
                say(
                    f"cgroup v2: enabled {', '.join(enabled)} for the groups under "
                    f"{self.layout.hierarchies[v2[0]].mount} (left enabled, as systemd would)"
                )
        for controller in self.layout.distinct(self.controllers):
            group = self._make(journal, controller, None)
            if self.layout.version(controller) == 2:
                _enable(group, v2, top=False)
        for instance, service in self.limited.items():
            for controller in self.layout.distinct(_controllers(service)):
                self._make(journal, controller, instance)
            for write in limit_writes(self.layout, cpu_bandwidth(service), service.cpuset, service.memory_bytes):
                group = self.layout.group(write.controller, self.run_id, instance)
                if write.optional and not (group / write.file).exists():
                    continue
                _write(group / write.file, write.value, instance)
        say(
            f"limits: {len(self.limited)} instance(s) in their own control groups, "
            f"{self.layout.describe(self.controllers)}"
        )

    def _make(self, journal: Journal, controller: str, instance: str | None) -> Path:
        group = self.layout.group(controller, self.run_id, instance)
        journal.record("cgroup", controller=controller, instance=instance, path=str(group))
        try:
            os.mkdir(group, 0o755)
        except OSError as error:
            raise RunError(f"cannot make the control group {group}: {error.strerror}") from None
        if self.layout.version(controller) == 1 and (group / "cpuset.cpus").exists():
            # A new v1 cpuset (cpuset mounted here, maybe with others) admits
            # no process until it has CPUs and memory nodes: its parent's.
            for name in ("cpuset.cpus", "cpuset.mems"):
                _write(group / name, _read(group.parent / name), instance or self.run_id)
        return group

    # ---- the commands' side ---------------------------------------------------------

    def join_argv(self, instance: str) -> list[str]:
        """The prefix that puts a command into its groups before it runs ([]: none)."""
        service = self.limited.get(instance)
        if service is None:
            return []
        procs = [
            str(self.layout.group(c, self.run_id, instance) / "cgroup.procs")
            for c in self.layout.distinct(_controllers(service))
        ]
        return ["sh", "-c", JOIN_SCRIPT, "collapsar-join", *procs, "--"]

    def started(self, instance: str) -> None:
        """Before an instance's command starts: its group's OOM count so far."""
        if instance in self.limited and self.limited[instance].memory_bytes is not None:
            self._oom_at_start[instance] = self._oom_kills(instance)

    def oom_killed(self, instance: str) -> bool:
        """The OOM killer killed in this instance's memory group since its command started."""
        if instance not in self._oom_at_start:
            return False
        now, before = self._oom_kills(instance), self._oom_at_start[instance]
        return now is not None and now > (before or 0)

    def _oom_kills(self, instance: str) -> int | None:
        return oom_kills(self.layout, self.layout.group("memory", self.run_id, instance))


def describe_limits(service: Service) -> str:
    """'cpus 1, cpuset 1, cpu-speed 0.5 on 1 core(s): quota ..., memory 64 MiB' ('': none)."""
    parts = []
    if service.cpus is not None:
        parts.append(f"cpus {service.cpus:g}")
    if service.cpuset is not None:
        parts.append(f"cpuset {format_cpu_list(service.cpuset)}")
    speed = describe_speed(service)
    if speed is not None:
        parts.append(speed)
    if service.memory_bytes is not None:
        parts.append(f"memory {service.memory_bytes / 2**20:g} MiB")
    return ", ".join(parts)


def check_service(layout: Layout, service: Service) -> None:
    """Refuse (EnvironmentProblem, with the fix) a limit this host cannot apply."""
    for controller in _controllers(service):
        if not layout.has(controller):
            raise EnvironmentProblem(
                f"{_where(service)}service {service.name}: {_key_of(service, controller)} needs the {controller} "
                f"cgroup controller, which this host does not offer (no cgroup v1 hierarchy has it, and "
                f"{'no cgroup2 mount' if layout.v2_mount is None else f'{layout.v2_mount}/cgroup.controllers'}"
                f"{'' if layout.v2_mount is None else ' lacks it'})",
                f"mount it (cgroup v1: `mount -t cgroup -o {controller} cgroup /sys/fs/cgroup/{controller}`; "
                f"cgroup v2: a kernel with the controller and no v1 hierarchy holding it), or remove the key",
            )
    if service.cpus is not None:
        _check_cpus(service, service.cpus)
    if cpu_bandwidth(service) is not None:
        _check_bandwidth(layout, service)
    if service.cpuset is not None:
        have = host_cpus(layout) or ()
        missing = [cpu for cpu in service.cpuset if cpu not in have]
        if missing:
            raise EnvironmentProblem(
                f"{_where(service)}service {service.name}: cpuset {format_cpu_list(service.cpuset)}: this host "
                f"has no CPU {format_cpu_list(missing)} (its CPUs: {format_cpu_list(have) or 'none'})",
                f"choose CPUs among {format_cpu_list(have) or 'those of a host that has them'}",
            )


def _check_cpus(service: Service, cpus: float) -> None:
    if cpus < MIN_CPU_SHARE:
        raise EnvironmentProblem(
            f"{_where(service)}service {service.name}: cpus {cpus:g} is below the kernel's smallest "
            f"share of CPU time, {MIN_CPU_SHARE:g} (1 ms in each {DOCKER_CPUS_PERIOD_US // 1000} ms period)",
            f"set cpus to {MIN_CPU_SHARE:g} or more",
        )
    have = len(os.sched_getaffinity(0))
    if cpus > have:
        raise EnvironmentProblem(
            f"{_where(service)}service {service.name}: cpus {cpus:g} is more than the {have} CPUs this "
            f"host has, so it would limit nothing",
            f"set cpus to {have} or less, or run on a host with more CPUs",
        )


def _check_bandwidth(layout: Layout, service: Service) -> None:
    if layout.version("cpu") == 1 and not (layout.hierarchies["cpu"].mount / "cpu.cfs_quota_us").exists():
        raise EnvironmentProblem(
            f"{_where(service)}service {service.name}: {_key_of(service, 'cpu')} needs CFS bandwidth control, "
            f"which this kernel lacks (no cpu.cfs_quota_us in {layout.hierarchies['cpu'].mount})",
            "use a kernel built with CONFIG_CFS_BANDWIDTH, or remove the key",
        )


def _enable(group: Path, controllers: list[str], top: bool = True) -> list[str]:
    """Give child groups of `group` these v2 controllers; those it had to enable."""
    missing = [c for c in controllers if c not in _read(group / "cgroup.subtree_control").split()]
    for controller in missing:
        try:
            (group / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as error:
            raise EnvironmentProblem(
                f"cannot give the {controller} controller to the control groups under {group} ({error.strerror})",
                "run collapsar where the cgroup2 mount is the host's own root (not inside a container's cgroup "
                "namespace, whose root holds processes)"
                if top
                else "check that nothing else holds processes in that group",
            ) from None
    return missing


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write(path: Path, value: str, whose: str) -> None:
    try:
        path.write_text(value)
    except OSError as error:
        raise RunError(f"{whose}: cannot write {value!r} to {path}: {error.strerror}") from None


# ---- what cleanup may believe --------------------------------------------------------


def record_problem(record: dict, run_id: str, instances: set[str], layout: Layout) -> str | None:
    """Why a `cgroup` journal record is not run `run_id`'s own, or None.  A
    record of a controller this host does not mount is not checked: no group
    of it can exist, and none is removed (group_to_remove)."""
    controller, instance, path = record.get("controller"), record.get("instance"), record.get("path")
    said = f"cgroup record {path!r}"
    if controller not in CONTROLLERS:
        return f"{said}: controller {controller!r}; expected one of {', '.join(CONTROLLERS)}"
    if instance is not None and instance not in instances:
        return f"{said} (instance {instance}): the journal records no namespace for that instance"
    if not layout.has(controller):
        return None
    want = layout.group(str(controller), run_id, instance)
    if path != str(want):
        return f"{said}: not a control group of run {run_id}; expected {want}"
    return None


def group_to_remove(record: dict, run_id: str, layout: Layout) -> Path | None:
    """The group a checked record stands for, as derived here (never the record's path)."""
    controller = record["controller"]
    return layout.group(controller, run_id, record.get("instance")) if layout.has(controller) else None
