"""What a manager run needs from whatever makes its instances.

A run does the same things in every mode (collapsar.manager.run.skeleton):
shape each instance's egress, play the timeline, share bandwidth, serve its
status and tear down.  Where modes differ is only where an instance's
namespace comes from and how its process starts and stops; that is an
`InstanceRuntime`:

  namespaces  collapsar.manager.local.runtime: commands under `ip netns exec`
              in namespaces the run made (supervisor.py)
  Docker      collapsar.manager.container.runtime: containers, through the
              Docker API; namespaces are theirs, bound by name (nsbind.py)

Limits per instance (cpus, cpuset, cpu-speed, memory) belong to the runtime too, a
property of how an instance runs, not of the network: local mode's control
groups (collapsar.manager.local.limits), the engine's in container mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class Found(Protocol):
    """One instance as a runtime finds it on this host."""

    @property
    def instance(self) -> str: ...
    @property
    def ip(self) -> str | None: ...  # None: not known yet (a container without its address)
    @property
    def pid(self) -> int: ...  # 0: no process now
    @property
    def running(self) -> bool: ...


class Ended(Protocol):
    """A process that ended: which instance, and its exit status."""

    @property
    def instance(self) -> str: ...
    @property
    def returncode(self) -> int: ...  # negative: killed by that signal (subprocess convention)


@dataclass(frozen=True)
class Place:
    """Where one instance's network is, as far as this host knows."""

    instance: str
    netns: str | None  # a name the TCAL can enter (`ip netns` style); None: not on this host
    ip: str | None


class InstanceRuntime(Protocol):
    mode: str  # "local" or "container": the status API's `mode`

    def discover(self) -> Mapping[str, Found]:
        """The instances on this host now (running or not)."""
        ...

    def start(self, instance: str) -> None:
        """Start (or restart) the instance's process: a timeline join."""
        ...

    def stop(self, instance: str, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after grace_s: a timeline leave."""
        ...

    def kill(self, instance: str) -> None:
        """SIGKILL at once: a timeline crash."""
        ...

    def exits(self) -> Sequence[Ended]:
        """Processes that ended since the last call (never blocks)."""
        ...

    def pids(self) -> Mapping[str, int]:
        """instance -> pid of every process running now."""
        ...

    def close(self) -> Sequence[Ended]:
        """Stop every process this runtime started and still runs; how they ended."""
        ...
