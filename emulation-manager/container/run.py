"""ContainerRun: the manager for one experiment's containers on this node.

It is the run skeleton (collapsar.manager.run.skeleton) with containers as
instances (container/runtime.py).  The order of things:

  check the kernel -> watch the events stream -> scan until every instance
  present at t=0 is shaped (or --wait-up passes) -> t=0: timeline
  -> loop (rescan on events, counters, status) until a signal, --duration,
     or the bootstrapper that started this manager is gone
  -> stop the timeline -> detach counters -> remove every tc tree still
     reachable -> release every namespace binding

A scan reconciles what the engine reports with what is shaped: a new
running container gets a binding (nsbind) and an EmulationCore installed
with the paths in force *now*; a container that stopped loses both (its
namespace, and the tree in it, go with it); a restarted one (new pid, so a
new namespace) is a stop and a start.  Destinations are shaped from the
moment their address is known.  The timeline's join / leave / crash start,
stop and kill containers through the Docker API; an instance the timeline
says is absent is stopped when found running.  A join starts the stopped
container Compose made for it, or on Swarm scales its service up (see
engine.DockerView.scale_up).

Addresses of instances on other Swarm nodes come from the overlay's DNS
(`remote_addresses`, dnsaddr.py); on one host the engine reports them all.

Bandwidth sharing (container/sharing.py) ticks once per period with the
cores this node has now; on Swarm its peers, the other nodes' managers, are
looked up again at every rescan.
"""

from __future__ import annotations

import bisect
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from collapsar.errors import CollapsarError
from collapsar.manager.container import hostsfile, nsbind
from collapsar.manager.container.dnsaddr import DnsAddresses, OutageReport
from collapsar.manager.container.engine import DockerView, Seen
from collapsar.manager.container.meter import ContainerMeter
from collapsar.manager.container.options import ContainerOptions
from collapsar.manager.container.runtime import DockerRuntime
from collapsar.manager.core import EmulationCore
from collapsar.manager.experiment import paths_from
from collapsar.manager.run.runtime import Place
from collapsar.manager.run.skeleton import ManagerRun
from collapsar.manager.status.api import StatusServer
from collapsar.manager.status.topoview import topology_json
from collapsar.model import Experiment, service_of
from collapsar.model import Path as NetPath

__all__ = ["ContainerOptions", "ContainerRun"]


@dataclass
class Shaped:
    seen: Seen
    netns: str
    ifname: str
    core: EmulationCore


class ContainerRun(ManagerRun):
    options: ContainerOptions
    runtime: DockerRuntime
    meter: ContainerMeter | None

    def __init__(
        self,
        experiment: Experiment,
        timeline,
        options: ContainerOptions,
        view: DockerView,
        tcal,
        out: TextIO = sys.stdout,
    ):
        super().__init__(experiment, timeline, options, DockerRuntime(view, experiment, options), tcal, out)
        self.run_id = options.experiment_id
        self.view = view
        self.wake = view.changed  # an engine event runs the next tick (a rescan) at once
        self._step_times = [step.at_us for step in timeline.steps]
        first = timeline.steps[0].state
        self.status = {name: ("up" if name in first.instances else "absent") for name in self.instances}
        self.ip_of: dict[str, str] = {}  # shared with every core: new addresses reach them all
        self.shaped: dict[str, Shaped] = {}
        self.lock = self.paths_lock  # the player thread and the scans both touch cores
        self.find_peers: Callable[[], list[str]] | None = None  # Swarm: the other nodes' managers
        # Addresses of instances on other nodes (Swarm: dnsaddr.DnsAddresses);
        # None on one host, where the engine reports every container.
        self.remote_addresses: Callable[[], dict[str, str]] | None = None
        self.remote: dict[str, str] = {}
        self._dns_outage = OutageReport("overlay DNS", self.say)
        self._peers_outage = OutageReport("finding the other managers", self.say)
        self.names_writer: Callable[[int, dict[str, str]], object] = hostsfile.update
        self.shaped_marker: Callable[[int], object] = hostsfile.mark_shaped
        # (instance, pid, file) already warned about: a container that keeps
        # a file the manager refuses is said once, not at every rewrite.
        self._file_warned: set[tuple[str, int, str]] = set()
        self._last_scan = 0.0
        self._rescanned = False

    @property
    def seen(self) -> dict[str, Seen]:
        return self.runtime.seen

    def known(self, paths: dict[str, NetPath | None]) -> dict[str, NetPath | None]:
        return {dst: path for dst, path in paths.items() if dst in self.ip_of}

    def places(self) -> dict[str, Place]:
        return {
            name: Place(name, self.shaped[name].netns if name in self.shaped else None, self.ip_of.get(name))
            for name in self.instances
        }

    def instance_extras(self) -> dict[str, dict]:
        seen = self.seen
        return {
            name: {"container": seen[name].container_id[:12] if name in seen else None, "shaped": name in self.shaped}
            for name in self.instances
        }

    # ---- reconciling with the engine ------------------------------------------

    def _state_now(self):
        index = bisect.bisect_right(self._step_times, self.now_us()) - 1
        return self.timeline.steps[max(index, 0)].state

    def _paths_for(self, src: str) -> dict:
        return {
            dst: path for dst, path in paths_from(self._state_now(), src, self.instances).items() if dst in self.ip_of
        }

    def scan(self) -> None:
        seen = self.runtime.discover()
        # While the overlay's DNS fails, the addresses it gave last still hold.
        remote = self._dns_outage.attempt(self.remote_addresses, self.remote) if self.remote_addresses else {}
        with self.lock:
            self._reconcile(seen, remote)

    def _reconcile(self, seen: dict[str, Seen], remote: dict[str, str] | None = None) -> None:
        self.runtime.seen = seen
        # Instances on other nodes: only their addresses matter here.
        self.remote = {name: ip for name, ip in (remote or {}).items() if name not in seen and name in self.status}
        new_ips = {**self.remote, **{name: s.ip for name, s in seen.items() if s.ip}}
        moved = [name for name, ip in new_ips.items() if name in self.ip_of and self.ip_of[name] != ip]
        if moved:  # filters match addresses: a moved instance means rebuilding every tree
            self.say(f"address changed for {', '.join(sorted(moved))}: reinstalling every core")
            for name in list(self.shaped):
                self._unshape(name, teardown=True)
        added = [name for name in new_ips if name not in self.ip_of or name in moved]
        self.ip_of.update(new_ips)
        if self.meter is not None:
            self.meter.address(self.ip_of)
        for name in list(self.shaped):
            now = seen.get(name)
            if now is None or not now.running or now.pid != self.shaped[name].seen.pid:
                self._unshape(name, teardown=False)  # the namespace went, and its tree with it
        for name in added:  # destinations first seen now, in the trees already there
            for src, shaped in self.shaped.items():
                if src != name:
                    shaped.core.apply({name: paths_from(self._state_now(), src, [name]).get(name)})
        before = set(self.shaped)
        for name, now in seen.items():
            if not now.running:
                if self.status.get(name) == "up" and self.t0_ns is not None:
                    self.status[name] = "oom-killed" if now.oom_killed else f"exited({now.exit_code})"
                continue
            if self.status.get(name) in ("absent", "stopped", "crashed"):
                self.view.stop(name, 0)  # the timeline says it is not there (yet)
                continue
            if self.status.get(name, "").startswith("exited") or self.status.get(name) == "oom-killed":
                self.status[name] = "up"  # restarted by hand or by the engine
            if name not in self.shaped and now.ip:
                try:
                    self._shape(now, now.ip)
                except (CollapsarError, OSError) as error:  # e.g. it stopped meanwhile: rescan
                    self.say(f"warning: {name}: not shaped yet: {error}")
                    self.view.changed.set()
        fresh = [name for name in self.shaped if name not in before]
        self._write_names(self.shaped if added else fresh)
        if self.t0_ns is not None:  # before t=0, every container is marked at t=0
            self._mark_shaped(fresh)

    def _mark_shaped(self, instances) -> None:
        """Named, shaped and (from t=0) shared: a waiting command may start (hostsfile.py)."""
        for name in instances:
            try:
                self.shaped_marker(self.shaped[name].seen.pid)
            except OSError as error:  # stopped meanwhile, a read-only root, or refused (hostsfile.py)
                self._file_warning(name, "mark", f"cannot mark it shaped: {error}")

    def _write_names(self, instances) -> None:
        """Every instance's name in these containers' /etc/hosts (hostsfile.py)."""
        for name in instances:
            try:
                self.names_writer(self.shaped[name].seen.pid, self.ip_of)
            except OSError as error:  # stopped meanwhile (the next scan sees that), or refused
                self._file_warning(name, "hosts", f"instance names not written to /etc/hosts: {error}")

    def _file_warning(self, name: str, file: str, line: str) -> None:
        key = (name, self.shaped[name].seen.pid, file)
        if key not in self._file_warned:
            self._file_warned.add(key)
            self.say(f"warning: {name}: {line}")

    def _shape(self, seen: Seen, ip: str) -> None:
        netns = nsbind.bind(seen.container_id, seen.pid)
        try:
            ifname = nsbind.ifname_with(netns, ip)
            core = EmulationCore(
                seen.instance,
                ifname,
                netns,
                self.ip_of,
                self.tcal.TcTree,
                self.tcal.Shaping,
                netem=self.netem,
                wire_overhead=self.experiment.settings.wire_overhead,
                egress=self.experiment.service(service_of(self.experiment, seen.instance)).egress,
                classes=self.experiment.service(service_of(self.experiment, seen.instance)).traffic_classes,
            )
            core.install(self._paths_for(seen.instance))
        except Exception:
            nsbind.release(netns)
            raise
        self.shaped[seen.instance] = Shaped(seen, netns, ifname, core)
        self.cores[seen.instance] = core
        if self.meter is not None:
            self.meter.watch(seen.instance, ifname, netns)

    def _unshape(self, name: str, teardown: bool) -> None:
        shaped = self.shaped.pop(name)
        self.cores.pop(name, None)
        if self.meter is not None:
            self.meter.forget(name)
        if teardown:
            try:
                shaped.core.teardown()
            except CollapsarError as error:
                self.say(f"warning: {name}: tc teardown: {error}")
        nsbind.release(shaped.netns)

    # ---- the run --------------------------------------------------------------

    def bring_up(self) -> None:
        self.say(
            f"experiment {self.options.experiment_id}: {len(self.instances)} instances; "
            f"{'netem' if self.netem else 'htb only (no delay, jitter or loss in this experiment)'}"
        )
        self.view.watch()
        self.meter = ContainerMeter(self.tcal.counters_factory, self.say)
        if self.options.sharing:
            self._start_sharing()
        self._wait_up()
        if self.options.status_port is not None:
            first = self.timeline.steps[0].state
            self.server = StatusServer(
                self.board, self.options.status_port, topology=lambda: topology_json(first)
            ).start()
            self.say(f"status: http://127.0.0.1:{self.server.port}/status")
        self.begin()
        with self.lock:  # as in local mode, the commands start at t=0
            self._mark_shaped(list(self.shaped))
        self._last_scan = time.monotonic()

    def _wait_up(self) -> None:
        started = time.monotonic()
        wanted = {name for name, status in self.status.items() if status == "up"}
        while self.stop_reason is None:
            if self.view.changed.wait(0.2):
                self.scan()
            missing = wanted - set(self.shaped) - set(self.remote)
            if not missing:
                self.say(
                    f"all {len(wanted)} instances up in {(time.monotonic() - started) * 1000:.0f} ms: "
                    f"{len(self.shaped)} shaped on this node, {len(self.remote)} on others"
                )
                return
            if time.monotonic() - started > self.options.wait_up_s:
                # Multi-node: the others are on other nodes.  Go on with what is here.
                self.say(
                    f"after {self.options.wait_up_s:g}s, {len(self.shaped)} instances shaped on "
                    f"this node; not here: {', '.join(sorted(missing)[:10])}"
                )
                return

    def tick(self) -> None:
        now = time.monotonic()
        self._rescanned = self.view.changed.is_set() or now - self._last_scan >= self.options.rescan_s
        if self._rescanned:
            self.scan()  # clears view.changed before it lists
            self._last_scan = now

    def done(self, now_us: int) -> str | None:
        if self._rescanned and self.options.bootstrapper and not self.view.is_running(self.options.bootstrapper):
            return "the bootstrapper is gone"
        return None

    def _start_sharing(self) -> None:
        from collapsar.manager.container.sharing import container_sharing

        bootstrapper = dns = None
        if self.options.bootstrapper and isinstance(self.remote_addresses, DnsAddresses):
            dns = self.remote_addresses
            bootstrapper = self.view.inspect(self.options.bootstrapper)
        self.sharing, self.find_peers = container_sharing(self, self.say, bootstrapper=bootstrapper, dns=dns)
        self._share_peers()

    def _share_peers(self) -> None:
        if self.find_peers is None:
            return
        no_peers: list[str] = []  # while they cannot be found, the ones known stay
        self.sharing.add_peers(self._peers_outage.attempt(self.find_peers, no_peers))

    def share(self, now_us: int) -> None:
        if self._rescanned:
            self._share_peers()
        with self.lock:
            self.sharing.own(dict(self.cores))
        self.sharing.tick(now_us, self.meter.flows() if self.meter else [], self._state_now())

    # ---- teardown --------------------------------------------------------------

    def teardown_stages(self) -> list[tuple[str, Callable[[], object]]]:
        return [
            self.timeline_stage(),
            *self.closing_stages(),
            ("stop watching events", self.runtime.close),
            ("remove the tc trees", self._unshape_all),
        ]

    def _unshape_all(self) -> None:
        with self.lock:
            count = len(self.shaped)
            for name in list(self.shaped):
                # A stopped container's tree went with its interface: only
                # running ones have a tree to remove.
                alive = self.view.is_running(self.shaped[name].seen.container_id)
                try:
                    self._unshape(name, teardown=alive)
                except Exception as error:  # reported; the others still go
                    self.say(f"warning: teardown: {name}: {type(error).__name__}: {error}")
        self.say(f"torn down: tc trees and namespace bindings of {count} containers")
