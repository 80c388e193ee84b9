"""This experiment's containers, through the Docker API (docker SDK).

`DockerView.scan()` lists the experiment's instance containers on this node
with what the manager needs of each (topology instance, pid, address on the
experiment network, running or not); `watch()` follows the events stream on
a thread and only raises a flag: the manager rescans when it is set, so a
missed or reordered event can never leave it with a wrong picture.
Lifecycle calls (start / stop / kill) run on their own threads: a stop waits
up to its grace period, and the timeline must not wait with it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from collapsar.deploy.naming import LABEL_EXPERIMENT, LABEL_ROLE, LABEL_SERVICE, instance_of
from collapsar.errors import CollapsarError, EnvironmentProblem


@dataclass(frozen=True)
class Seen:
    """One instance container as the engine reports it."""

    instance: str
    container_id: str
    pid: int  # 0 when not running
    ip: str | None  # on the experiment network; None before it is attached
    running: bool
    exit_code: int
    oom_killed: bool = False  # the engine says the kernel's OOM killer ended it (its memory limit)


def connect():
    """A docker client, or one line that says how to get a daemon."""
    import docker

    try:
        client = docker.from_env(version="auto", timeout=30)
        client.ping()
    except Exception as error:  # the SDK raises several unrelated types here
        raise EnvironmentProblem(
            f"cannot reach the Docker daemon ({error})",
            "start dockerd, and give this process /var/run/docker.sock (in a container: mount it)",
        ) from None
    return client


def address_on(attrs: dict, network_ids: set[str]) -> str | None:
    """The container's address on one of the experiment's networks."""
    for network in (attrs.get("NetworkSettings") or {}).get("Networks", {}).values():
        if network.get("NetworkID") in network_ids and network.get("IPAddress"):
            return network["IPAddress"]
    return None


def seen_from(attrs: dict, experiment: str, network_ids: set[str]) -> Seen | None:
    instance = instance_of((attrs.get("Config") or {}).get("Labels") or {}, experiment)
    if instance is None:
        return None
    state = attrs.get("State") or {}
    running = bool(state.get("Running"))
    return Seen(
        instance=instance,
        container_id=attrs["Id"],
        pid=int(state.get("Pid") or 0) if running else 0,
        ip=address_on(attrs, network_ids),
        running=running,
        exit_code=int(state.get("ExitCode") or 0),
        oom_killed=bool(state.get("OOMKilled")) and not running,
    )


class DockerView:
    def __init__(self, client, experiment: str):
        self.client = client
        self.experiment = experiment
        self.changed = threading.Event()
        self.changed.set()  # the first scan is always due
        self._stop = threading.Event()
        self._stream: Any = None  # the SDK's events generator (untyped), once watching
        self._ids: dict[str, str] = {}  # instance -> container id, from the last scan
        self._network_ids: set[str] = set()
        self._control: bool | None = None  # this node is a swarm manager

    def _label_filter(self, role: str) -> dict:
        return {"label": [f"{LABEL_EXPERIMENT}={self.experiment}", f"{LABEL_ROLE}={role}"]}

    def network_ids(self) -> set[str]:
        if not self._network_ids:
            nets = self.client.api.networks(filters={"label": f"{LABEL_EXPERIMENT}={self.experiment}"})
            self._network_ids = {net["Id"] for net in nets}
        return self._network_ids

    def scan(self) -> dict[str, Seen]:
        """instance -> its container on this node.  Two containers claiming
        one instance (a Swarm task replaced while the old one lingers): the
        running one wins."""
        self.changed.clear()  # before listing: an event during the scan triggers another
        ids = self.network_ids()
        found: dict[str, Seen] = {}
        for summary in self.client.api.containers(all=True, filters=self._label_filter("instance")):
            try:
                attrs = self.client.api.inspect_container(summary["Id"])
            except Exception:  # removed between list and inspect: the next scan sees it gone
                self.changed.set()
                continue
            seen = seen_from(attrs, self.experiment, ids)
            if seen is None:
                continue
            other = found.get(seen.instance)
            if other is None or (seen.running and not other.running):
                found[seen.instance] = seen
        self._ids = {name: seen.container_id for name, seen in found.items()}
        return found

    def inspect(self, container_id: str) -> dict:
        return self.client.api.inspect_container(container_id)

    def is_running(self, container_id: str) -> bool:
        try:
            return bool(self.client.api.inspect_container(container_id)["State"]["Running"])
        except Exception:
            return False

    # ---- events ---------------------------------------------------------------

    def watch(self) -> None:
        """Follow container events of this experiment until close()."""
        self._stream = self.client.api.events(
            decode=True, filters={"type": "container", "label": f"{LABEL_EXPERIMENT}={self.experiment}"}
        )
        threading.Thread(target=self._follow, name="docker-events", daemon=True).start()

    def _follow(self) -> None:
        try:
            for _event in self._stream:
                self.changed.set()
                if self._stop.is_set():
                    return
        except Exception:  # the stream closed (close(), or the daemon went away)
            self.changed.set()

    def close(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()

    # ---- lifecycle ------------------------------------------------------------

    def _background(self, label: str, what: str, call) -> None:
        def body() -> None:
            try:
                call()
            except Exception as error:  # reported, never fatal: the next scan shows the truth
                print(f"warning: {what} {label}: {error}", flush=True)
            self.changed.set()

        threading.Thread(target=body, name=f"{what}-{label}", daemon=True).start()

    def _act(self, instance: str, what: str, call) -> None:
        container_id = self._ids.get(instance)
        if container_id is None:
            raise CollapsarError(
                f"instance {instance}: no container of experiment {self.experiment} on this node to {what}"
            )
        self._background(f"{instance} ({container_id[:12]})", what, lambda: call(container_id))

    def start(self, instance: str) -> None:
        self._act(instance, "start", self.client.api.start)

    def stop(self, instance: str, grace_s: float) -> None:
        self._act(instance, "stop", lambda cid: self.client.api.stop(cid, timeout=max(0, round(grace_s))))

    def kill(self, instance: str) -> None:
        self._act(instance, "kill", self.client.api.kill)

    def owns(self, instance: str) -> bool:
        return instance in self._ids

    def scale_up(self, service: str, replicas: int) -> None:
        """Swarm: run at least `replicas` tasks of the topology service.  A
        join on Swarm is a scale-up, not a container start: Swarm's DNS drops
        a stopped task for good, and its next slot is the joined instance's
        index (indices are never reused).  Every node's manager plays the same
        timeline, so the call is idempotent (scale to N, never +1), and only
        nodes that can reach the swarm's control plane make it."""
        if not self._controls_swarm():
            return

        def call() -> None:
            found = self.client.services.list(
                filters={"label": [f"{LABEL_EXPERIMENT}={self.experiment}", f"{LABEL_SERVICE}={service}"]}
            )
            if not found:
                raise CollapsarError(f"no Swarm service for {service} of experiment {self.experiment}")
            current = found[0].attrs["Spec"]["Mode"].get("Replicated", {}).get("Replicas", 0)
            if current < replicas:
                found[0].scale(replicas)

        self._background(f"{service} to {replicas}", "scale", call)

    def _controls_swarm(self) -> bool:
        if self._control is None:
            self._control = bool(self.client.info().get("Swarm", {}).get("ControlAvailable"))
        return self._control
