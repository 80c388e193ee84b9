"""Local mode's instances: commands in the namespaces the run made.

The run's network (netns.py) gives every instance its namespace before t=0;
this runtime starts each instance's command there under `ip netns exec`
through the supervisor, which reaps, escalates a leave's SIGTERM to SIGKILL
after the grace period and records every pid in the journal first.  An
instance with limits joins its control groups first (limits.py), and a
command of it that the OOM killer ends exits `oom-killed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collapsar.manager.addressing import NetworkPlan
from collapsar.manager.local.limits import RunGroups
from collapsar.manager.local.rundir import Journal
from collapsar.manager.local.supervisor import Exit, Launch, Supervisor


@dataclass(frozen=True)
class Namespace:
    instance: str
    ip: str
    pid: int
    running: bool = True  # the namespace is there for the whole run, process or not


class NamespaceRuntime:
    mode = "local"

    def __init__(self, plan: NetworkPlan, launches: dict[str, Launch], groups: RunGroups | None = None):
        self.plan, self.launches, self.groups = plan, launches, groups
        self.supervisor: Supervisor | None = None  # once the network is up (open)

    def open(self, log_paths: Callable[[str], tuple[Path, Path]], journal: Journal, grace_s: float) -> None:
        nets = self.plan.by_instance()
        groups = self.groups
        self.supervisor = Supervisor(
            log_paths,
            # setpriv first: SIGKILL when the manager dies (see supervisor.py),
            # armed before ip's setup work, which the signal then survives
            # (exec); then into the instance's control groups, if it has any.
            prefix=lambda inst: [
                *("setpriv", "--pdeathsig", "KILL", "--"),
                *(groups.join_argv(inst) if groups else ()),
                *("ip", "netns", "exec", nets[inst].netns),
            ],
            on_start=lambda inst, pid, st: journal.record("process", instance=inst, pid=pid, start_time=st),
            grace_s=grace_s,
            ended_by=lambda inst: "oom-killed" if groups and groups.oom_killed(inst) else None,
        )

    def _supervisor(self) -> Supervisor:
        if self.supervisor is None:
            raise RuntimeError("the run's commands are started only once its network is up")
        return self.supervisor

    def discover(self) -> dict[str, Namespace]:
        pids = self.pids()
        return {net.instance: Namespace(net.instance, net.ip, pids.get(net.instance, 0)) for net in self.plan.instances}

    def start(self, instance: str) -> None:
        launch = self.launches.get(instance)
        if launch is not None:  # an instance without a command has only its network
            supervisor = self._supervisor()
            supervisor.finish_now(instance)  # a rejoin within a leave's grace period
            if self.groups is not None:
                self.groups.started(instance)
            supervisor.start(launch)

    def stop(self, instance: str, grace_s: float) -> None:
        self._supervisor().stop(instance)  # the supervisor was given grace_s (open)

    def kill(self, instance: str) -> None:
        self._supervisor().kill(instance)

    def exits(self) -> list[Exit]:
        return self._supervisor().poll()

    def running(self) -> list[str]:
        return self._supervisor().running()

    def pids(self) -> dict[str, int]:
        return {} if self.supervisor is None else self.supervisor.pids()

    def close(self) -> list[Exit]:
        if self.supervisor is None:
            return []
        try:
            return self.supervisor.stop_all()
        finally:
            self.supervisor.close()
