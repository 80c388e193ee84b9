"""Container mode's instances: containers, through the Docker API.

Namespaces are the containers' own; the run binds each by name when it
shapes it (nsbind.py).  Compose deploys an instance that joins later as a
stopped container, which a join starts; on Swarm a join scales the
instance's service up to its index, and Swarm places the task.  Containers
belong to Compose or Swarm: the manager never removes one, and at the end it
only stops watching.
"""

from __future__ import annotations

from collapsar.manager.container.engine import DockerView, Seen
from collapsar.manager.container.options import ContainerOptions
from collapsar.model import Experiment, instance_parts, service_of


class DockerRuntime:
    mode = "container"

    def __init__(self, view: DockerView, experiment: Experiment, options: ContainerOptions):
        self.view, self.experiment, self.options = view, experiment, options
        self.seen: dict[str, Seen] = {}  # as the last scan found them

    def discover(self) -> dict[str, Seen]:
        return self.view.scan()

    def start(self, instance: str) -> None:
        if self.view.owns(instance):
            self.view.start(instance)  # Compose: deployed stopped, started now
        elif self.options.bootstrapper:  # Swarm: a new task, wherever Swarm puts it
            service = service_of(self.experiment, instance)
            parts = instance_parts(instance)
            self.view.scale_up(service, 1 if parts is None else parts[1])

    def stop(self, instance: str, grace_s: float) -> None:
        if self.view.owns(instance):
            self.view.stop(instance, grace_s)

    def kill(self, instance: str) -> None:
        if self.view.owns(instance):
            self.view.kill(instance)

    def exits(self) -> list:
        return []  # a container that ended is found by the next scan (ContainerRun.reconcile)

    def pids(self) -> dict[str, int]:
        return {name: found.pid for name, found in self.seen.items()}  # 0: the container is not running

    def close(self) -> list:
        self.view.close()  # stop watching the engine's events
        return []
