"""ContainerRun: the manager for one experiment's containers on this node.

The order of things:

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
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from collapsar.errors import CollapsarError
from collapsar.manager.container import hostsfile, nsbind
from collapsar.manager.container.dnsaddr import DnsAddresses, OutageReport
from collapsar.manager.container.engine import DockerView, Seen
from collapsar.manager.container.meter import ContainerMeter
from collapsar.manager.core import EmulationCore, needs_netem
from collapsar.manager.experiment import all_instances, paths_from, timeline_paths
from collapsar.manager.play.player import Player
from collapsar.manager.status.api import StatusBoard, StatusServer, paths_rows
from collapsar.manager.status.topoview import topology_json
from collapsar.model import Experiment, service_of


@dataclass
class ContainerOptions:
    experiment_id: str
    duration_us: int | None = None
    status_port: int | None = 7077  # None: no status API
    grace_s: float = 5.0
    wait_up_s: float = 120.0
    rescan_s: float = 2.0  # rescan even without events: a lost event costs at most this
    bootstrapper: str | None = None  # container id; the manager stops when it is gone
    sharing: bool = True  # False: per-pair shaping only


@dataclass
class Shaped:
    seen: Seen
    netns: str
    ifname: str
    core: EmulationCore


class ContainerRun:
    def __init__(
        self,
        experiment: Experiment,
        timeline,
        options: ContainerOptions,
        view: DockerView,
        tcal,
        out: TextIO = sys.stdout,
    ):
        self.experiment, self.timeline, self.options = experiment, timeline, options
        self.view, self.tcal, self.out = view, tcal, out
        self.instances = all_instances(timeline)
        self.netem = needs_netem(timeline_paths(timeline))
        self._step_times = [step.at_us for step in timeline.steps]
        first = timeline.steps[0].state
        self.status = {name: ("up" if name in first.instances else "absent") for name in self.instances}
        self.network = dict.fromkeys(self.instances, "up")
        self.ip_of: dict[str, str] = {}  # shared with every core: new addresses reach them all
        self.shaped: dict[str, Shaped] = {}
        self.seen: dict[str, Seen] = {}
        self.lock = threading.RLock()  # the player thread and the scans both touch cores
        self.step_lock = self.lock  # held until a step's queued changes have fired (see Scheduler)
        self._stop_reason: str | None = None
        self.t0_ns: int | None = None
        self.player: Player | None = None
        self.meter: ContainerMeter | None = None
        self.sharing = None  # container/sharing.py, unless options.sharing is off
        self.find_peers: Callable[[], list[str]] | None = None  # Swarm: the other nodes' managers
        # Addresses of instances on other nodes (Swarm: dnsaddr.DnsAddresses);
        # None on one host, where the engine reports every container.
        self.remote_addresses: Callable[[], dict[str, str]] | None = None
        self.remote: dict[str, str] = {}
        self._dns_outage = OutageReport("overlay DNS", self._say)
        self._peers_outage = OutageReport("finding the other managers", self._say)
        self.names_writer: Callable[[int, dict[str, str]], object] = hostsfile.update
        self.shaped_marker: Callable[[int], object] = hostsfile.mark_shaped
        # (instance, pid, file) already warned about: a container that keeps
        # a file the manager refuses is said once, not at every rewrite.
        self._file_warned: set[tuple[str, int, str]] = set()

    # ---- the Actuator the player drives --------------------------------------

    def set_paths(self, src, paths) -> None:
        with self.lock:
            shaped = self.shaped.get(src)
            if shaped is not None:  # not on this node, or not up yet: shaped when found
                shaped.core.apply({dst: p for dst, p in paths.items() if dst in self.ip_of})

    def start_instance(self, instance: str) -> None:
        self.status[instance] = "up"
        if self.view.owns(instance):
            self.view.start(instance)  # Compose: deployed stopped, started now
        elif self.options.bootstrapper:  # Swarm: a new task, wherever Swarm puts it
            service = service_of(self.experiment, instance)
            suffix = instance[len(service) + 1 :]
            self.view.scale_up(service, int(suffix) if suffix else 1)

    def stop_instance(self, instance: str) -> None:
        self.status[instance] = "stopped"
        if self.view.owns(instance):
            self.view.stop(instance, self.options.grace_s)

    def kill_instance(self, instance: str) -> None:
        self.status[instance] = "crashed"
        if self.view.owns(instance):
            self.view.kill(instance)

    def mark_instance(self, instance: str, status: str) -> None:
        self.network[instance] = status

    # ---- reconciling with the engine ------------------------------------------

    def _now_us(self) -> int:
        return 0 if self.t0_ns is None else (time.monotonic_ns() - self.t0_ns) // 1000

    def _state_now(self):
        index = bisect.bisect_right(self._step_times, self._now_us()) - 1
        return self.timeline.steps[max(index, 0)].state

    def _paths_for(self, src: str) -> dict:
        return {
            dst: path for dst, path in paths_from(self._state_now(), src, self.instances).items() if dst in self.ip_of
        }

    def scan(self) -> None:
        seen = self.view.scan()
        # While the overlay's DNS fails, the addresses it gave last still hold.
        remote = self._dns_outage.attempt(self.remote_addresses, self.remote) if self.remote_addresses else {}
        with self.lock:
            self._reconcile(seen, remote)

    def _reconcile(self, seen: dict[str, Seen], remote: dict[str, str] | None = None) -> None:
        self.seen = seen
        # Instances on other nodes: only their addresses matter here.
        self.remote = {name: ip for name, ip in (remote or {}).items() if name not in seen and name in self.status}
        new_ips = {**self.remote, **{name: s.ip for name, s in seen.items() if s.ip}}
        moved = [name for name, ip in new_ips.items() if name in self.ip_of and self.ip_of[name] != ip]
        if moved:  # filters match addresses: a moved instance means rebuilding every tree
            self._say(f"address changed for {', '.join(sorted(moved))}: reinstalling every core")
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
                    self.status[name] = f"exited({now.exit_code})"
                continue
            if self.status.get(name) in ("absent", "stopped", "crashed"):
                self.view.stop(name, 0)  # the timeline says it is not there (yet)
                continue
            if self.status.get(name, "").startswith("exited"):
                self.status[name] = "up"  # restarted by hand or by the engine
            if name not in self.shaped and now.ip:
                try:
                    self._shape(now)
                except (CollapsarError, OSError) as error:  # e.g. it stopped meanwhile: rescan
                    self._say(f"warning: {name}: not shaped yet: {error}")
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
            self._say(f"warning: {name}: {line}")

    def _shape(self, seen: Seen) -> None:
        netns = nsbind.bind(seen.container_id, seen.pid)
        try:
            ifname = nsbind.ifname_with(netns, seen.ip)
            core = EmulationCore(
                seen.instance,
                ifname,
                netns,
                self.ip_of,
                self.tcal.TcTree,
                self.tcal.Shaping,
                netem=self.netem,
                wire_overhead=self.experiment.settings.wire_overhead,
            )
            core.install(self._paths_for(seen.instance))
        except Exception:
            nsbind.release(netns)
            raise
        self.shaped[seen.instance] = Shaped(seen, netns, ifname, core)
        if self.meter is not None:
            self.meter.watch(seen.instance, ifname, netns)

    def _unshape(self, name: str, teardown: bool) -> None:
        shaped = self.shaped.pop(name)
        if self.meter is not None:
            self.meter.forget(name)
        if teardown:
            try:
                shaped.core.teardown()
            except CollapsarError as error:
                self._say(f"warning: {name}: tc teardown: {error}")
        nsbind.release(shaped.netns)

    # ---- the run --------------------------------------------------------------

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _on_signal(self, signum, frame) -> None:
        self._stop_reason = signal.Signals(signum).name

    def run(self) -> int:
        self.tcal.check_kernel(need_netem=self.netem)
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        # As in local mode: the timeline thread must get the GIL soon after
        # its deadline, whatever the scans and the events stream are doing.
        old_interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        server = None
        try:
            self._say(
                f"experiment {self.options.experiment_id}: {len(self.instances)} instances; "
                f"{'netem' if self.netem else 'htb only (no delay, jitter or loss in this experiment)'}"
            )
            self.view.watch()
            self.meter = ContainerMeter(self.tcal.counters_factory, self._say)
            if self.options.sharing:
                self._start_sharing()
            self._wait_up()
            self.board = StatusBoard(self._paths_json)
            if self.options.status_port is not None:
                first = self.timeline.steps[0].state
                server = StatusServer(
                    self.board, self.options.status_port, topology=lambda: topology_json(first)
                ).start()
                self._say(f"status: http://127.0.0.1:{server.port}/status")
            self.player = Player(self.timeline, self)
            self.t0_ns = self.player.start()
            with self.lock:  # as in local mode, the commands start at t=0
                self._mark_shaped(list(self.shaped))
            self._loop()
        finally:
            self._tear_down(server)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            sys.setswitchinterval(old_interval)
        return 0

    def _wait_up(self) -> None:
        started = time.monotonic()
        wanted = {name for name, status in self.status.items() if status == "up"}
        while self._stop_reason is None:
            if self.view.changed.wait(0.2):
                self.scan()
            missing = wanted - set(self.shaped) - set(self.remote)
            if not missing:
                self._say(
                    f"all {len(wanted)} instances up in {(time.monotonic() - started) * 1000:.0f} ms: "
                    f"{len(self.shaped)} shaped on this node, {len(self.remote)} on others"
                )
                return
            if time.monotonic() - started > self.options.wait_up_s:
                # Multi-node: the others are on other nodes.  Go on with what is here.
                self._say(
                    f"after {self.options.wait_up_s:g}s, {len(self.shaped)} instances shaped on "
                    f"this node; not here: {', '.join(sorted(missing)[:10])}"
                )
                return

    def _loop(self) -> None:
        period_s = self.experiment.settings.period_us / 1e6
        last_scan = time.monotonic()
        while self._stop_reason is None:
            now = time.monotonic()
            if self.view.changed.is_set() or now - last_scan >= self.options.rescan_s:
                self.scan()
                last_scan = now
                if self.options.bootstrapper and not self.view.is_running(self.options.bootstrapper):
                    self._stop_reason = "the bootstrapper is gone"
            self.meter.sample()
            if self.sharing is not None:
                self._share(last_scan == now)
            self.board.publish(self._snapshot())
            if self.options.duration_us is not None and self._now_us() >= self.options.duration_us:
                self._stop_reason = "duration reached"
            self.view.changed.wait(period_s)
        self._say(f"stopping: {self._stop_reason}")

    def _start_sharing(self) -> None:
        from collapsar.manager.container.sharing import container_sharing

        bootstrapper = dns = None
        if self.options.bootstrapper and isinstance(self.remote_addresses, DnsAddresses):
            dns = self.remote_addresses
            bootstrapper = self.view.inspect(self.options.bootstrapper)
        self.sharing, self.find_peers = container_sharing(self, self._say, bootstrapper=bootstrapper, dns=dns)
        self._share_peers()

    def _share_peers(self) -> None:
        if self.find_peers is None:
            return
        self.sharing.add_peers(self._peers_outage.attempt(self.find_peers, []))

    def _share(self, rescanned: bool) -> None:
        if rescanned:
            self._share_peers()
        with self.lock:
            self.sharing.own({name: s.core for name, s in self.shaped.items()})
        self.sharing.tick(self._now_us(), self.meter.flows(), self._state_now())

    def _snapshot(self) -> dict:
        log = [f.as_dict() for f in self.player.log]
        return {
            "run_id": self.options.experiment_id,
            "source": self.experiment.source,
            "t_us": self._now_us(),
            "mode": "container",
            "state": "running" if self._stop_reason is None else "stopping",
            "instances": [
                {
                    "name": name,
                    "ip": self.ip_of.get(name),
                    "netns": self.shaped[name].netns if name in self.shaped else None,
                    "status": self.status[name],
                    "network": self.network[name],
                    "pid": self.seen[name].pid if name in self.seen else None,
                    "container": self.seen[name].container_id[:12] if name in self.seen else None,
                    "shaped": name in self.shaped,
                }
                for name in self.instances
            ],
            "throughput": self.meter.flows(),
            "sharing": self.sharing.status() if self.sharing is not None else {"enabled": False},
            "events": {"applied": log, "pending": self.player.pending},
        }

    def _paths_json(self) -> list[dict]:
        with self.lock:  # copies made in C only: a step's preparation waits on this lock
            configured = [(src, s.core.shaped.copy(), s.core.cut.copy()) for src, s in self.shaped.items()]
        return paths_rows(configured)

    def _tear_down(self, server) -> None:
        """Every stage runs even when one fails; failures are reported."""
        for what, action in (
            ("stop the timeline", self.player and self.player.stop),
            ("stop sharing", self.sharing and self.sharing.close),
            ("detach the counters", self.meter and self.meter.close),
            ("stop watching events", self.view.close),
            ("stop the status API", server and server.stop),
        ):
            if action is None:
                continue
            try:
                action()
            except Exception as error:  # reported; teardown goes on
                self._say(f"warning: teardown: {what}: {type(error).__name__}: {error}")
        with self.lock:
            count = len(self.shaped)
            for name in list(self.shaped):
                # A stopped container's tree went with its interface: only
                # running ones have a tree to remove.
                alive = self.view.is_running(self.shaped[name].seen.container_id)
                try:
                    self._unshape(name, teardown=alive)
                except Exception as error:  # reported; the others still go
                    self._say(f"warning: teardown: {name}: {type(error).__name__}: {error}")
        self._say(f"torn down: tc trees and namespace bindings of {count} containers")
