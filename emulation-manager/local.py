"""Local mode: one experiment on this host, from nothing back to nothing.

`LocalRun` ties the pieces together: addressing (names, addresses), netns
(bridge, namespaces), core (shaping per instance), supervisor (commands),
player (timeline), status (API), rundir (journal, lock) and teardown.  The
order matters and is the whole point of this module:

  check the kernel -> take the lock -> journal -> network -> shaping at t=0
  -> commands of the instances present at t=0 -> "all up" -> t=0: timeline
  -> loop (reap, counters, status) until duration / all exited / signal
  -> stop commands -> detach counters -> undo the journal -> release the lock
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from ..errors import RunError
from ..model import Experiment
from .addressing import NetworkPlan, new_run_id, plan_network
from .core import EmulationCore, needs_netem
from .experiment import all_instances, launches, paths_from, timeline_paths
from .netns import HostNetwork
from .player import Player
from .report import flow_table
from .rundir import RunDir, RunLock, is_stale, list_runs, plan_cleanup, read_journal, state_dir
from .scheduler import percentile
from .status import StatusBoard, StatusServer
from .supervisor import Launch, Supervisor
from . import teardown
from .throughput import Meter


@dataclass
class RunOptions:
    duration_us: int | None = None
    subnet: str = "10.77.0.0/16"
    run_base: Path | None = None
    status_port: int | None = 0  # None: no status API
    grace_s: float = 5.0


class LocalRun:
    def __init__(self, experiment: Experiment, timeline, options: RunOptions,
                 out: TextIO = sys.stdout, tcal=None):
        self.experiment = experiment
        self.timeline = timeline
        self.options = options
        self.out = out
        self.run_id = new_run_id()
        self.instances = all_instances(timeline)
        self.plan: NetworkPlan = plan_network(self.run_id, self.instances, options.subnet)
        self.launches: dict[str, Launch] = launches(experiment, self.instances, self.plan)
        self.netem = needs_netem(timeline_paths(timeline))
        self._tcal = tcal
        self.cores: dict[str, EmulationCore] = {}
        # Two sides of an instance: its process (absent, up, stopped, crashed,
        # exited(N)) and its network (up, disconnected).
        self.status: dict[str, str] = {name: "absent" for name in self.instances}
        self.network: dict[str, str] = {name: "up" for name in self.instances}
        self.exit_codes: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._paths_lock = threading.Lock()
        self.t0_ns: int | None = None

    # ---- the Actuator the player drives --------------------------------------

    def set_paths(self, src, paths) -> None:
        with self._paths_lock:  # the status API reads the cores' paths meanwhile
            self.cores[src].apply(paths)

    def start_instance(self, instance: str) -> None:
        self.status[instance] = "up"
        if instance in self.launches:
            self.supervisor.finish_now(instance)  # a rejoin within a leave's grace period
            self.supervisor.start(self.launches[instance])

    def stop_instance(self, instance: str) -> None:
        self.status[instance] = "stopped"
        self.supervisor.stop(instance)

    def mark_instance(self, instance: str, status: str) -> None:
        self.network[instance] = status  # disconnect/reconnect: the process keeps running

    def kill_instance(self, instance: str) -> None:
        self.status[instance] = "crashed"
        self.supervisor.kill(instance)

    # ---- the run --------------------------------------------------------------

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _on_signal(self, signum, frame) -> None:
        self._stop_reason = signal.Signals(signum).name

    def run(self) -> int:
        tcal = self._tcal or _real_tcal()
        tcal.check_kernel(need_netem=self.netem)  # before anything is created
        state = state_dir()
        run_path = (self.options.run_base or state) / self.run_id
        lock = RunLock.acquire(state, self.run_id, run_path)
        for run_id, journal in list_runs(state).items():
            if is_stale(read_journal(journal)):
                self._say(f"warning: run {run_id} was not torn down; "
                          f"`collapsar cleanup {run_id}` removes its leftovers")
        self.rundir = RunDir.create(self.run_id, self.options.run_base, state)
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        # The timeline thread must get the GIL soon after its deadline: with the
        # default 5 ms switch interval a busy main loop alone could break the
        # 5 ms lateness budget.
        old_interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        server = None
        try:
            self._say(f"run {self.run_id}: {len(self.instances)} instances, run directory {self.rundir.path}")
            self._write_plan()
            server = self._bring_up(tcal)
            self._loop()
        finally:
            self._tear_down(server)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            sys.setswitchinterval(old_interval)
            lock.release()
        failed = [fired for fired in self.player.log if fired.error]
        if failed:
            first = failed[0]
            raise RunError(f"{len(failed)} timeline step(s) failed to apply; the first, at "
                           f"{first.scheduled_us / 1e6:g}s ({first.label}): {first.error}")
        return 0

    def _write_plan(self) -> None:
        (self.rundir.path / "plan.json").write_text(json.dumps({
            "run_id": self.run_id, "source": self.experiment.source, "subnet": self.plan.subnet,
            "bridge": self.plan.bridge, "netem": self.netem,
            "instances": [{"name": n.instance, "ip": n.ip, "netns": n.netns, "veth": n.host_veth}
                          for n in self.plan.instances]}, indent=1))

    def _bring_up(self, tcal) -> StatusServer | None:
        started = time.monotonic()
        journal = self.rundir.journal
        self.host_net = HostNetwork(self.plan, journal)
        self.host_net.build()
        ip_of = self.plan.ip_of()
        first = self.timeline.steps[0].state
        for net in self.plan.instances:
            journal.record("qdisc", netns=net.netns, ifname=net.ifname, handle="1:")
            core = EmulationCore(net.instance, net.ifname, net.netns, ip_of, tcal.TcTree, tcal.Shaping,
                                 netem=self.netem, wire_overhead=self.experiment.settings.wire_overhead)
            core.install(paths_from(first, net.instance, self.instances))
            self.cores[net.instance] = core
        nets = self.plan.by_instance()
        self.supervisor = Supervisor(
            self.rundir.log_paths,
            prefix=lambda inst: ["ip", "netns", "exec", nets[inst].netns],
            on_start=lambda inst, pid, st: journal.record("process", instance=inst, pid=pid, start_time=st),
            grace_s=self.options.grace_s)
        for instance in first.instances:
            self.start_instance(instance)
            self.network[instance] = first.status(instance)
        up_ms = (time.monotonic() - started) * 1000
        self._say(f"all {len(first.instances)} instances up in {up_ms:.0f} ms"
                  f" ({'netem' if self.netem else 'htb only, no delay/jitter/loss in this experiment'})")
        self.up_ms = up_ms
        self.meter = Meter(self.plan, tcal.counters_factory, self._say)
        self.meter.start()
        self.board = StatusBoard(self._paths_json)
        server = None
        if self.options.status_port is not None:
            server = StatusServer(self.board, self.options.status_port).start()
            self._say(f"status: http://127.0.0.1:{server.port}/status (also /paths /events /stream /metrics)")
            (self.rundir.path / "status-port").write_text(f"{server.port}\n")
        self.player = Player(self.timeline, self)
        self.t0_ns = self.player.start()
        return server

    def _loop(self) -> None:
        period_s = self.experiment.settings.period_us / 1e6
        had_commands = bool(self.launches)
        last_start_us = self.player.last_start_us
        next_tick = time.monotonic()
        while self._stop_reason is None:
            now_us = (time.monotonic_ns() - self.t0_ns) // 1000
            for exit_ in self.supervisor.poll():
                self.exit_codes[exit_.instance] = exit_.returncode
                if self.status.get(exit_.instance) == "up":
                    self.status[exit_.instance] = f"exited({exit_.returncode})"
            self.meter.sample()
            self.board.publish(self._snapshot(now_us))
            if self.options.duration_us is not None and now_us >= self.options.duration_us:
                self._stop_reason = "duration reached"
            elif had_commands and now_us >= last_start_us and not self.supervisor.running():
                self._stop_reason = "every command has exited"
            next_tick += period_s
            now = time.monotonic()
            if next_tick < now - period_s:
                next_tick = now  # fell behind (a slow tick): skip, do not burst to catch up
            time.sleep(max(0.0, next_tick - now))
        self._say(f"stopping: {self._stop_reason}")

    def _snapshot(self, now_us: int) -> dict:
        log = [dict(f.as_dict()) for f in self.player.log]
        return {
            "run_id": self.run_id, "source": self.experiment.source, "t_us": now_us,
            "state": "running" if self._stop_reason is None else "stopping",
            "instances": [{"name": n.instance, "ip": n.ip, "netns": n.netns,
                           "status": self.status[n.instance], "network": self.network[n.instance],
                           "pid": self.supervisor.pid_of(n.instance),
                           "exit_code": self.exit_codes.get(n.instance)} for n in self.plan.instances],
            "throughput": self.meter.flows(),
            "events": {"applied": log, "pending": self.player.pending},
        }

    def _paths_json(self) -> list[dict]:
        rows = []
        with self._paths_lock:
            configured = {src: core.configured() for src, core in self.cores.items()}
        for src, paths in configured.items():
            for dst, path in sorted(paths.items()):
                rows.append({"src": src, "dst": dst, "cut": path is None,
                             **({} if path is None else {
                                 "delay_us": path.delay_us, "jitter_us": path.jitter_us,
                                 "loss_ratio": path.loss_ratio, "rate_bps": path.rate_bps})})
        return rows

    def _tear_down(self, server: StatusServer | None) -> None:
        """Every stage runs even if an earlier one failed: a half-torn-down
        run is the one thing worse than a failed run.  Failures are reported,
        and the journal stays unfinished so `collapsar cleanup` can retry."""
        failures: list[str] = []

        def stage(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as error:  # reported below; teardown goes on
                failures.append(f"{what}: {type(error).__name__}: {error}")

        player, supervisor = getattr(self, "player", None), getattr(self, "supervisor", None)
        if player is not None:
            stage("stop the timeline", player.stop)
        if supervisor is not None:
            stage("stop the commands", lambda: [self.exit_codes.setdefault(e.instance, e.returncode)
                                                for e in supervisor.stop_all()])
        stage("report the flows", self._report_flows)
        for name in ("meter", "board", "host_net"):
            obj = getattr(self, name, None)
            if obj is not None:
                stage(f"close {name}", obj.close)
        if server is not None:
            stage("stop the status API", server.stop)
        # Namespaces go, and their qdiscs and the counters' filters with them:
        # no per-tree teardown is needed on this path.
        stage("remove what the journal lists",
              lambda: teardown.execute(plan_cleanup(read_journal(self.rundir.journal.path))))
        stage("write the event log", self._write_event_log)
        stage("write instances.json", self._write_instances)
        if failures:
            for line in failures:
                self._say(f"warning: teardown: {line}")
            self._say(f"run {self.run_id} may have leftovers: `collapsar cleanup {self.run_id}`")
            return
        self.rundir.finish()
        self._say(f"torn down: {len(self.instances)} namespaces, bridge {self.plan.bridge}; "
                  f"logs in {self.rundir.path / 'logs'}")

    def _report_flows(self) -> None:
        if getattr(self, "meter", None) is None:
            return
        flows = self.meter.flows()
        (self.rundir.path / "flows.json").write_text(json.dumps(flows, indent=1))
        with self._paths_lock:
            configured = {(src, dst): path for src, core in self.cores.items()
                          for dst, path in core.configured().items()}
        for line in flow_table(flows, configured):
            self._say(line)

    def _write_instances(self) -> None:
        final = [{"name": n.instance, "ip": n.ip, "status": self.status[n.instance],
                  "network": self.network[n.instance],
                  "exit_code": self.exit_codes.get(n.instance)} for n in self.plan.instances]
        (self.rundir.path / "instances.json").write_text(json.dumps(final, indent=1))
        counts: dict[str, int] = {}
        for inst in final:
            counts[inst["status"]] = counts.get(inst["status"], 0) + 1
        self._say("instances: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))

    def _write_event_log(self) -> None:
        if getattr(self, "player", None) is None:
            return
        log = [f.as_dict() for f in self.player.log]
        (self.rundir.path / "events.json").write_text(json.dumps(log, indent=1))
        if log:
            late = [f["lateness_us"] for f in log]
            p50, p99 = percentile(late, 0.5) / 1000, percentile(late, 0.99) / 1000
            self._say(f"events: {len(log)} applied, {self.player.pending} not reached; "
                      f"lateness p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        for fired in self.player.log:
            if fired.error:
                self._say(f"warning: event at {fired.scheduled_us / 1e6:g}s ({fired.label}) "
                          f"failed: {fired.error}")


class _RealTcal:
    """The TCAL entry points local mode uses, imported only when a run starts."""

    def __init__(self):
        from ..tcal import Shaping, TcTree, check_kernel
        self.Shaping, self.TcTree, self.check_kernel = Shaping, TcTree, check_kernel

    @staticmethod
    def counters_factory(ifname: str, netns: str):
        from ..tcal.counters import Counters
        return Counters(ifname, netns=netns)


def _real_tcal() -> _RealTcal:
    return _RealTcal()
