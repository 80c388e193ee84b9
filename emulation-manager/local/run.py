"""Local mode: one experiment on this host, from nothing back to nothing.

`LocalRun` ties the pieces together: addressing (names, addresses), netns
(bridge, namespaces), core (shaping per instance), supervisor (commands),
player (timeline), status (API), rundir (journal, lock) and teardown.  The
order matters and is the whole point of this module:

  check the kernel -> take the lock -> journal -> network -> shaping at t=0
  -> meter (with sharing: counters attached) -> sharing -> status API
  -> commands of the instances present at t=0 -> "all up" -> t=0: timeline
  -> loop (reap, counters, sharing, status) until duration / all exited / signal
  -> stop commands -> detach counters -> undo the journal -> the workload's
  summary (measure/workload) -> release the lock -> instances that failed on
  their own make the run fail (outputs)
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from collapsar.errors import RunError
from collapsar.manager.addressing import NetworkPlan, new_run_id, plan_network
from collapsar.manager.core import EmulationCore, needs_netem, real_tcal
from collapsar.manager.experiment import all_instances, launches, paths_from, timeline_paths
from collapsar.manager.local import outputs, teardown
from collapsar.manager.local.cleanup import plan_cleanup
from collapsar.manager.local.netns import HostNetwork
from collapsar.manager.local.rundir import RunDir, RunLock, is_stale, list_runs, read_journal, state_dir
from collapsar.manager.local.supervisor import Launch, Supervisor
from collapsar.manager.measure import workload
from collapsar.manager.measure.throughput import Meter
from collapsar.manager.play.live import LivePlayer
from collapsar.manager.run.awake import KeepAwake
from collapsar.manager.run.stallwatch import StallWatch
from collapsar.manager.status.api import StatusBoard, StatusServer, paths_rows
from collapsar.manager.status.control import AdHocLinks, local_control
from collapsar.manager.status.topoview import topology_json
from collapsar.model import Experiment
from collapsar.tcal.prepared import PreparedStep


@dataclass
class RunOptions:
    duration_us: int | None = None
    subnet: str = "10.77.0.0/16"
    run_base: Path | None = None
    status_port: int | None = 0  # None: no status API
    grace_s: float = 5.0
    wait_start: bool = False  # set up, then wait for POST /control/start
    dashboard: Path | None = None  # built web page to serve at /dashboard/
    source_text: str | None = None  # the topology as parsed (ad-hoc changes re-parse it)
    probe_count: int = 0  # pings per pair before t=0 (0: no probe)
    sharing: bool = True  # False: per-pair shaping only (sharing/local.py)
    keep_awake: str = "auto"  # busy idle-priority process per CPU: on, off, auto (on a VM; run/awake.py)


PREPARE_AHEAD_NS = 20_000_000  # a step's preparation takes ~1-2 ms, under load up to several


def _once_in_force(note: Callable[[], object]) -> None:
    """Bookkeeping of a new state: after the step being prepared fires (see
    PreparedStep.record), or now outside a step."""
    step = PreparedStep.current()
    if step is None:
        note()
    else:
        step.record(note)


class LocalRun:
    def __init__(self, experiment: Experiment, timeline, options: RunOptions, out: TextIO = sys.stdout, tcal=None):
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
        self.status: dict[str, str] = dict.fromkeys(self.instances, "absent")
        self.network: dict[str, str] = dict.fromkeys(self.instances, "up")
        self.exit_codes: dict[str, int] = {}
        self._stop_reason: str | None = None
        # Held by the timeline thread from a step's preparation until it has
        # fired, by the sharing loop for its changes, and by readers of the
        # cores' paths (re-entrant: set_paths takes it inside a step).
        self.paths_lock = threading.RLock()
        self.step_lock = self.paths_lock
        self.paths_version = 0  # one more per set_paths: /paths is built again only then
        # Everything below only queues on a step being prepared (see
        # player.Actuator), so the player prepares each step this long before
        # its time: its Python work is done before the deadline, and the step
        # is put in force at the deadline in one call (collapsar.tcal.prepared).
        self.prepare_ahead_ns = PREPARE_AHEAD_NS
        self.t0_ns: int | None = None
        self.sharing = None  # share_local.LocalSharing once up, unless --no-sharing

    # ---- the Actuator the player drives --------------------------------------

    def set_paths(self, src, paths) -> None:
        with self.paths_lock:  # the status API reads the cores' paths meanwhile
            self.cores[src].apply(paths)
            self.paths_version += 1
            marks = [(dst, *self._configured_rate(src, dst)) for dst in paths if dst != src]

        def mark_all() -> None:
            for dst, rate_bps, cut in marks:
                self.meter.mark(src, dst, rate_bps, cut)

        _once_in_force(mark_all)

    def _configured_rate(self, src: str, dst: str) -> tuple[int | None, bool]:
        """(rate_bps, cut) of the path in force from src to dst."""
        core = self.cores[src]
        path = core.shaped.get(dst)
        return (None if path is None else path.rate_bps), (path is None or dst in core.cut)

    def start_instance(self, instance: str) -> None:
        # Joins start in the step's follow-up (player.apply_plan), after it fired.
        self.status[instance] = "up"
        if instance in self.launches:
            self.supervisor.finish_now(instance)  # a rejoin within a leave's grace period
            self.supervisor.start(self.launches[instance])

    def stop_instance(self, instance: str) -> None:
        self.supervisor.stop(instance)
        _once_in_force(lambda: self.status.update({instance: "stopped"}))

    def mark_instance(self, instance: str, status: str) -> None:
        # disconnect/reconnect: the process keeps running
        _once_in_force(lambda: self.network.update({instance: status}))

    def kill_instance(self, instance: str) -> None:
        self.supervisor.kill(instance)
        _once_in_force(lambda: self.status.update({instance: "crashed"}))

    # ---- the run --------------------------------------------------------------

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _on_signal(self, signum, frame) -> None:
        self._stop_reason = signal.Signals(signum).name

    def run(self) -> int:
        tcal = self._tcal or real_tcal()
        tcal.check_kernel(need_netem=self.netem)  # before anything is created
        state = state_dir()
        run_path = (self.options.run_base or state) / self.run_id
        lock = RunLock.acquire(state, self.run_id, run_path)
        for run_id, journal in list_runs(state).items():
            if is_stale(read_journal(journal)):
                self.say(f"warning: run {run_id} was not torn down; `collapsar cleanup {run_id}` removes its leftovers")
        self.rundir = RunDir.create(self.run_id, self.options.run_base, state)
        # SIGHUP too: a closed terminal ends the run as Ctrl-C does, with its teardown.
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        # The timeline thread must get the GIL soon after its deadline: with the
        # default 5 ms switch interval a busy main loop alone could break the
        # 5 ms lateness budget.
        old_interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        server = None
        awake = KeepAwake.for_mode(self.options.keep_awake)
        try:
            self.say(f"run {self.run_id}: {len(self.instances)} instances, run directory {self.rundir.path}")
            if awake.procs:
                self.say(
                    f"keeping {len(awake.procs)} CPUs awake at idle priority (a virtual machine's halted "
                    f"CPU wakes late; --keep-awake off stops this)"
                )
            outputs.write_plan(self)
            self.rundir.write_file(
                "experiment.yaml",  # the topology as run, for `collapsar trace`
                self.options.source_text or Path(self.experiment.source).read_text(),
            )
            workload.trace_into(self)
            server = self._bring_up(tcal)
            self._loop()
        finally:
            self._tear_down(server)
            awake.stop()
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            sys.setswitchinterval(old_interval)
            lock.release()
        failed = [fired for fired in self.player.log if fired.error]
        if failed:
            first = failed[0]
            raise RunError(
                f"{len(failed)} timeline step(s) failed to apply; the first, at "
                f"{first.scheduled_us / 1e6:g}s ({first.label}): {first.error}"
            )
        outputs.raise_on_failed_instances(self)
        return 0

    def _bring_up(self, tcal) -> StatusServer | None:
        started = time.monotonic()
        journal = self.rundir.journal
        self.host_net = HostNetwork(self.plan, journal)
        self.host_net.build()
        ip_of = self.plan.ip_of()
        first = self.timeline.steps[0].state
        for net in self.plan.instances:
            journal.record("qdisc", netns=net.netns, ifname=net.ifname, handle="1:")
            core = EmulationCore(
                net.instance,
                net.ifname,
                net.netns,
                ip_of,
                tcal.TcTree,
                tcal.Shaping,
                netem=self.netem,
                wire_overhead=self.experiment.settings.wire_overhead,
            )
            core.install(paths_from(first, net.instance, self.instances))
            self.cores[net.instance] = core
        if self.options.probe_count:
            probe_started = time.monotonic()
            outputs.probe_pairs(self)
            started += time.monotonic() - probe_started  # "all up" leaves the probe out
        nets = self.plan.by_instance()
        self.supervisor = Supervisor(
            self.rundir.log_paths,
            # setpriv first: SIGKILL when the manager dies (see local/supervisor.py),
            # armed before ip's setup work, which the signal then survives (exec).
            prefix=lambda inst: ["setpriv", "--pdeathsig", "KILL", "--", "ip", "netns", "exec", nets[inst].netns],
            on_start=lambda inst, pid, st: journal.record("process", instance=inst, pid=pid, start_time=st),
            grace_s=self.options.grace_s,
        )
        for instance in first.instances:
            self.network[instance] = first.status(instance)
        # Everything that acts while the commands run is up before the first
        # of them starts: t=0 is when they start.  With sharing, that includes
        # the counters: flows are shared from their first byte, not once the
        # counters catch up (seconds per instance on a VM's emulated CPUs).
        self.meter = Meter(self.plan, tcal.counters_factory, self.say)
        self.meter.start()
        if self.options.sharing:
            from collapsar.manager.sharing.local import LocalSharing

            self.sharing = LocalSharing(self, self.say)
            self.meter.wait_attached()
        self.board = StatusBoard(self._paths_json, lambda: self.paths_version)
        self.player = LivePlayer(self.timeline, self)
        self._start_requested = threading.Event()
        text = self.options.source_text
        adhoc = AdHocLinks(
            Path(self.experiment.source).read_text() if text is None else text,
            self.experiment.source,
            self.player,
            self.netem,
            on_change=lambda timeline: setattr(self, "timeline", timeline),
        )
        server = None
        if self.options.status_port is not None:
            control = local_control(
                self.rundir.path,
                self.say,
                self.player,
                adhoc,
                self.options.wait_start,
                self._start_requested,
                self._stop,
            )
            server = StatusServer(
                self.board,
                self.options.status_port,
                control=control,
                topology=lambda: topology_json(first),
                assets=self.options.dashboard,
                error_log=self.rundir.path / "status-errors.txt",
            ).start()
            self.say(f"status: http://127.0.0.1:{server.port}/status (also /paths /events /stream /metrics)")
            if self.options.dashboard is not None:
                self.say(f"dashboard: http://127.0.0.1:{server.port}/dashboard/")
            self.rundir.write_file("status-port", f"{server.port}\n")
        if not self.options.wait_start:
            self._start_commands()
        up_ms = (time.monotonic() - started) * 1000
        self.say(
            f"{'network of' if self.options.wait_start else 'all'} {len(first.instances)} "
            f"instances up in {up_ms:.0f} ms"
            f" ({'netem' if self.netem else 'htb only, no delay/jitter/loss in this experiment'})"
        )
        self.up_ms = up_ms
        if self.options.wait_start:
            # The status API says so before the line does: a client that
            # reads the line and asks at once must not see "starting".
            self.board.publish(self._snapshot(0))
            self.say("waiting for start: POST /control/start with the control token")
        else:
            self._begin()
        return server

    def _start_commands(self) -> None:
        for instance in self.timeline.steps[0].state.instances:
            self.start_instance(instance)

    def _begin(self) -> None:
        """t=0: the timeline starts (and the meter's segments with it)."""
        self.t0_ns = self.player.start()
        self.meter.follow(self._configured_rate, self.t0_ns)
        # Wall-clock t=0, for lining up the instances' own timestamped logs
        # with the event log (whose times are relative to t=0).
        t0_unix = time.time() - (time.monotonic_ns() - self.t0_ns) / 1e9
        self.rundir.write_file("t0", f"{t0_unix:.6f}\n")

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason

    def _loop(self) -> None:
        period_s = self.experiment.settings.period_us / 1e6
        had_commands = bool(self.launches)
        last_start_us = self.player.last_start_us
        next_tick = time.monotonic()
        watch = StallWatch(self.rundir.path / "stalls.txt", self.say)
        try:
            while self._stop_reason is None:
                watch.beat()
                if self._start_requested.is_set() and not self.player.started:
                    self._start_commands()
                    self._begin()
                    last_start_us = self.player.last_start_us
                now_us = self.player.now_us()
                for exit_ in self.supervisor.poll():
                    self.exit_codes[exit_.instance] = exit_.returncode
                    if self.status.get(exit_.instance) == "up":
                        self.status[exit_.instance] = f"exited({exit_.returncode})"
                self.meter.sample()
                if self.sharing is not None:
                    self.sharing.tick(now_us)
                self.board.publish(self._snapshot(now_us))
                if self.options.duration_us is not None and now_us >= self.options.duration_us:
                    self._stop_reason = "duration reached"
                elif had_commands and self.player.started and now_us >= last_start_us and not self.supervisor.running():
                    self._stop_reason = "every command has exited"
                next_tick += period_s
                now = time.monotonic()
                if next_tick < now - period_s:
                    next_tick = now  # fell behind (a slow tick): skip, do not burst to catch up
                time.sleep(max(0.0, next_tick - now))
        finally:
            watch.close()
        self.say(f"stopping: {self._stop_reason}")

    def _snapshot(self, now_us: int) -> dict:
        return outputs.status_snapshot(self, now_us, stopping=self._stop_reason is not None)

    def _paths_json(self) -> list[dict]:
        with self.paths_lock:  # copies made in C only: step preparation waits on this lock
            configured = [(src, core.shaped.copy(), core.cut.copy()) for src, core in self.cores.items()]
        return paths_rows(configured)

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
            stage(
                "stop the commands",
                lambda: [self.exit_codes.setdefault(e.instance, e.returncode) for e in supervisor.stop_all()],
            )
            stage("close the supervisor", supervisor.close)
        stage("report the flows", lambda: outputs.report_flows(self))
        for name in ("sharing", "meter", "board", "host_net"):
            obj = getattr(self, name, None)
            if obj is not None:
                stage(f"close {name}", obj.close)
        if server is not None:
            stage("stop the status API", server.stop)
        # Namespaces go, and their qdiscs and the counters' filters with them:
        # no per-tree teardown is needed on this path.
        stage(
            "remove what the journal lists",
            lambda: teardown.execute(plan_cleanup(read_journal(self.rundir.journal.path))),
        )
        stage("write the event log", lambda: outputs.write_event_log(self))
        stage("write instances.json", lambda: outputs.write_instances(self))
        stage("report the workload", lambda: workload.report(self))
        if failures:
            for line in failures:
                self.say(f"warning: teardown: {line}")
            self.say(f"run {self.run_id} may have leftovers: `collapsar cleanup {self.run_id}`")
            return
        self.rundir.finish()
        self.say(
            f"torn down: {len(self.instances)} namespaces, bridge {self.plan.bridge}; "
            f"logs in {self.rundir.path / 'logs'}"
        )
