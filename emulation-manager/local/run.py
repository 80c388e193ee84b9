"""Local mode: one experiment on this host, from nothing back to nothing.

`LocalRun` is the run skeleton (collapsar.manager.run.skeleton) with
namespaces it makes itself and commands it starts in them
(local/runtime.py).  What it adds, in order:

  take the lock -> journal -> network (netns.py) -> control groups of the
  instances with limits (limits.py) -> shaping at t=0
  -> probe (--probe) -> meter (with sharing: counters attached) -> sharing
  -> status API and control -> commands of the instances present at t=0
  -> "all up" -> t=0 (or wait for POST /control/start)
  -> loop: reap exits; stop when every command has exited
  -> teardown: stop commands -> report flows -> close -> undo the journal
     -> event log, instances.json, the workload's summary (measure/workload.py)
  -> release the lock -> instances that failed on their own fail the run
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from collapsar import provenance
from collapsar.errors import CollapsarError, EnvironmentProblem, RunError
from collapsar.manager.addressing import NetworkPlan, new_run_id, plan_network
from collapsar.manager.core import EmulationCore, real_tcal
from collapsar.manager.experiment import all_instances, launches, paths_from
from collapsar.manager.local import outputs, teardown
from collapsar.manager.local.cleanup import plan_cleanup
from collapsar.manager.local.limits import RunGroups
from collapsar.manager.local.netns import HostNetwork
from collapsar.manager.local.rundir import (
    RunDir,
    RunLock,
    is_stale,
    list_runs,
    process_start_time,
    read_journal,
    state_dir,
)
from collapsar.manager.local.runtime import NamespaceRuntime
from collapsar.manager.local.supervisor import Launch, Supervisor
from collapsar.manager.measure import workload
from collapsar.manager.measure.liveprobe import LiveProbe, capped
from collapsar.manager.measure.livework import WorkloadTail
from collapsar.manager.measure.series import SeriesWriter
from collapsar.manager.measure.throughput import Meter
from collapsar.manager.run.awake import KeepAwake
from collapsar.manager.run.options import ACTIVE_TREE_FROM, RunOptions
from collapsar.manager.run.runtime import Place
from collapsar.manager.run.skeleton import ManagerRun
from collapsar.manager.run.stages import StageClock
from collapsar.manager.status.api import StatusServer
from collapsar.manager.status.control import AdHocLinks, local_control
from collapsar.manager.status.topoview import topology_json
from collapsar.model import Experiment, service_of
from collapsar.model import Path as NetPath
from collapsar.resources import check_mode
from collapsar.tcal.contract import TreeFactory


@dataclass(kw_only=True)
class LocalOptions(RunOptions):
    subnet: str = "10.77.0.0/16"
    run_base: Path | None = None
    wait_start: bool = False  # set up, then wait for POST /control/start
    dashboard: Path | None = None  # built web page to serve at /dashboard/
    source_text: str | None = None  # the topology as parsed (ad-hoc changes re-parse it)
    probe_count: int = 0  # pings per pair before t=0 (0: no probe)
    probe_every_us: int = 0  # the live probe's interval from t=0 on (0: none; measure/liveprobe.py)
    keep_awake: str = "auto"  # busy idle-priority process per CPU: on, off, auto (on a VM; run/awake.py)
    tree: str = "auto"  # each instance's tc tree: full, active, auto (run/options.py ACTIVE_TREE_FROM)


class LocalRun(ManagerRun):
    options: LocalOptions
    runtime: NamespaceRuntime

    def __init__(self, experiment: Experiment, timeline, options: LocalOptions, out: TextIO = sys.stdout, tcal=None):
        run_id = new_run_id()
        instances = all_instances(timeline)
        plan = plan_network(run_id, instances, options.subnet)
        commands = launches(experiment, instances, plan)
        check_mode(experiment, "local")
        # Before anything exists: a limit this host cannot apply stops the run here.
        runtime = NamespaceRuntime(plan, commands, RunGroups.plan(experiment, instances, run_id))
        super().__init__(experiment, timeline, options, runtime, tcal or real_tcal(), out, instances)
        self.run_id = run_id
        self.plan: NetworkPlan = plan
        self.launches: dict[str, Launch] = commands
        self._places = {net.instance: Place(net.instance, net.netns, net.ip) for net in plan.instances}
        self.start_requested = threading.Event()
        self.rundir: RunDir
        self.host_net: HostNetwork | None = None
        self.live_probe: LiveProbe | None = None  # --probe-every, from t=0
        self.workload_tail: WorkloadTail | None = None  # the wl-clients' records as they come
        self.live: dict = {"probe": [], "workload": []}  # the snapshot's, once a second (outputs.live_figures)

    @property
    def supervisor(self) -> Supervisor | None:
        return self.runtime.supervisor

    def places(self) -> dict[str, Place]:
        return self._places

    # ---- before, around and after the skeleton's run ----------------------------

    @contextmanager
    def hold(self) -> Iterator[None]:
        state = state_dir()
        run_path = (self.options.run_base or state) / self.run_id
        lock = RunLock.acquire(state, self.run_id, run_path)
        awake = None
        try:
            for run_id, journal in list_runs(state).items():
                if is_stale(read_journal(journal)):
                    self.say(
                        f"warning: run {run_id} was not torn down; `collapsar cleanup {run_id}` removes its leftovers"
                    )
            self.rundir = RunDir.create(self.run_id, self.options.run_base, state)
            awake = KeepAwake.for_mode(self.options.keep_awake)
            self.say(f"run {self.run_id}: {len(self.instances)} instances, run directory {self.rundir.path}")
            if awake.procs:
                self.say(
                    f"keeping {len(awake.procs)} CPUs awake at idle priority (a virtual machine's halted "
                    f"CPU wakes late; --keep-awake off stops this)"
                )
            yield
        finally:
            if awake is not None:
                awake.stop()
            lock.release()

    def verdict(self) -> None:
        failed = [fired for fired in self.player.log if fired.error]
        if failed:
            first = failed[0]
            raise RunError(
                f"{len(failed)} timeline step(s) failed to apply; the first, at "
                f"{first.scheduled_us / 1e6:g}s ({first.label}): {first.error}"
            )
        outputs.raise_on_failed_instances(self)

    # ---- bring-up ---------------------------------------------------------------

    def bring_up(self) -> None:
        outputs.write_plan(self)
        self.rundir.write_file(
            "experiment.yaml",  # the topology as run, for `collapsar trace`
            self.options.source_text or Path(self.experiment.source).read_text(),
        )
        # What `collapsar report` shows the run with: its graph, and what produced it.
        self.rundir.write_file("topology.json", json.dumps(topology_json(self.timeline.steps[0].state)))
        self.rundir.write_file(provenance.PROVENANCE, json.dumps(provenance.describe(), indent=1))
        workload.trace_into(self)
        self.series = SeriesWriter(self.rundir.dir_fd)
        started = time.monotonic()
        journal = self.rundir.journal
        clock = StageClock()
        with clock.stage("network"):
            self.host_net = HostNetwork(self.plan, journal, self.experiment.settings.congestion_control)
            self.host_net.build(clock)
        if self.runtime.groups is not None:
            with clock.stage("limits"):
                self.runtime.groups.create(journal, self.say)
        # The counters need only the interfaces: they attach on their own
        # thread (mostly kernel time, BPF loads) while the trees go in.  Not
        # with a probe, which goes first: its pings are not the experiment's
        # traffic, and on a VM's emulated CPUs the BPF loads beside it delay
        # its echoes past their timeout.
        self.meter = Meter(self.plan, self.tcal.counters_factory, self.say, clock)
        if not self.options.probe_count:
            self.meter.start()
        ip_of = self.plan.ip_of()
        first = self.timeline.steps[0].state
        tree = self._tree_factory()
        # An active tree keeps destinations that the run's link changes move
        # alike in one class, changed in place (play.player.lineages).
        groups = self.player.lineages() if self.active_tree else {}
        future = self._guard_first(first)
        with clock.stage("shaping"):
            for net in self.plan.instances:
                journal.record("qdisc", netns=net.netns, ifname=net.ifname, handle="1:")
                core = EmulationCore(
                    net.instance,
                    net.ifname,
                    net.netns,
                    ip_of,
                    tree,
                    self.tcal.Shaping,
                    netem=self.netem,
                    wire_overhead=self.experiment.settings.wire_overhead,
                    egress=self.experiment.service(service_of(self.experiment, net.instance)).egress,
                    classes=self.experiment.service(service_of(self.experiment, net.instance)).traffic_classes,
                )
                with clock.item("shaping"):
                    core.install(
                        paths_from(first, net.instance, self.instances),
                        groups.get(net.instance),
                        self.guarded,
                        future.get(net.instance),
                    )
                self.cores[net.instance] = core
        if self.options.probe_count:
            probe_started = time.monotonic()
            outputs.probe_pairs(self)
            started += time.monotonic() - probe_started  # "all up" leaves the probe out
            self.meter.start()
        self.runtime.open(self.rundir.log_paths, journal, self.options.grace_s)
        for instance in first.instances:
            self.network[instance] = first.status(instance)
        # Everything that acts while the commands run is up before the first
        # of them starts: t=0 is when they start.  With sharing, that includes
        # the counters: flows are shared from their first byte, not once the
        # counters catch up (seconds per instance on a VM's emulated CPUs).
        if self.options.sharing:
            from collapsar.manager.sharing.local import LocalSharing

            self.sharing = LocalSharing(self, self.say)
            self.meter.wait_attached()
        if self.options.status_port is not None:
            self.server = self._serve_status(first, self.options.status_port)
        if not self.options.wait_start:
            with clock.stage("commands"):
                self._start_commands(clock)
        up_ms = (time.monotonic() - started) * 1000
        self.say(
            f"{'network of' if self.options.wait_start else 'all'} {len(first.instances)} "
            f"instances up in {up_ms:.0f} ms"
            f" ({'netem' if self.netem else 'htb only, no delay/jitter/loss in this experiment'})"
        )
        self.say(clock.summary() + " (bringup.json)")
        self.rundir.write_file("bringup.json", json.dumps(clock.rows(), indent=1) + "\n")
        if self.options.wait_start:
            # The status API says so before the line does: a client that
            # reads the line and asks at once must not see "starting".
            self.board.publish(self.snapshot(0))
            self.say("waiting for start: POST /control/start with the control token")
        else:
            self.begin()

    def _guard_first(self, first) -> dict[str, dict[str, NetPath]]:
        """Guard the instances no one reaches at t=0 (absent, disconnected):
        a step that cuts an instance off from all the others, or brings it
        back, is then one message at its bridge port instead of one in every
        other tree (collapsar.tcal.guard).  Returns, per source, the first
        path each guarded instance will have, to make its class with.
        Without eBPF the trees cut as before (one line says so)."""
        make = getattr(self.tcal, "guards", None)
        if make is None:
            return {}
        try:
            self.guards = make({net.instance: net.host_veth for net in self.plan.instances})
        except CollapsarError as error:
            self.say(f"no guards ({error}): an instance cut off is cut in every other tree")
            return {}
        self.guarded = first.cut_off(self.instances)
        self.guards.set(on=sorted(self.guarded))
        return self.player.first_paths(self.guarded)

    def _tree_factory(self) -> TreeFactory:
        """The trees' kind: a class per destination (full), or per distinct
        path until a destination carries traffic (active: the eBPF counters
        see it, so they are required)."""
        kind = self.options.tree
        problem = self.tcal.counters_problem() if kind != "full" else None
        if kind == "auto":
            kind = "active" if len(self.plan.instances) >= ACTIVE_TREE_FROM and problem is None else "full"
        if kind == "full":
            return self.tcal.TcTree
        if problem is not None:
            raise EnvironmentProblem(
                f"--tree active needs the eBPF counters, which cannot load: {problem}",
                "build them (`make -C tcal`) or run with --tree full",
            )
        self.active_tree = True
        self.say("tc trees: active (one class per distinct path; a destination gets its own once it carries traffic)")
        return self.tcal.ActiveTcTree

    def _serve_status(self, first, port: int) -> StatusServer:
        text = self.options.source_text
        adhoc = AdHocLinks(
            Path(self.experiment.source).read_text() if text is None else text,
            self.experiment.source,
            self.player,
            self.netem,
            on_change=lambda timeline: setattr(self, "timeline", timeline),
        )
        control = local_control(
            self.rundir.path,
            self.say,
            self.player,
            adhoc,
            self.options.wait_start,
            self.start_requested,
            self.stop,
        )
        server = StatusServer(
            self.board,
            port,
            control=control,
            topology=lambda: topology_json(first),
            assets=self.options.dashboard,
            error_log=self.rundir.path / "status-errors.txt",
        ).start()
        self.say(f"status: http://127.0.0.1:{server.port}/status (also /paths /events /stream /metrics)")
        if self.options.dashboard is not None:
            self.say(f"dashboard: http://127.0.0.1:{server.port}/dashboard/")
        self.rundir.write_file("status-port", f"{server.port}\n")
        return server

    def _start_commands(self, clock: StageClock | None = None) -> None:
        for instance in self.timeline.steps[0].state.instances:
            with clock.item("commands") if clock else nullcontext():
                self.start_instance(instance)

    def begin(self) -> int:
        t0_ns = super().begin()
        # Wall-clock t=0, for lining up the instances' own timestamped logs
        # with the event log (whose times are relative to t=0).
        t0_unix = time.time() - (time.monotonic_ns() - t0_ns) / 1e9
        self.rundir.write_file("t0", f"{t0_unix:.6f}\n")
        if self.options.probe_every_us:
            self._start_live_probe(t0_unix)
        return t0_ns

    def _start_live_probe(self, t0_unix: float) -> None:
        """One ping per probed pair from t=0 (measure/liveprobe.py), each
        journaled as a process of its source's namespace: cleanup kills it."""
        every = outputs.pairs_at(self, self.instances)  # those that join later too: cut until then
        pairs = capped(every)
        nets = self.plan.by_instance()
        journal = self.rundir.journal

        def started(src: str, pid: int) -> None:
            journal.record("process", instance=src, pid=pid, start_time=process_start_time(pid))

        self.live_probe = LiveProbe(
            pairs, {n: nets[n].netns for n in nets}, self.plan.ip_of(), self.options.probe_every_us / 1e6, started
        )
        self.live_probe.start(t0_unix)
        what = f"{len(pairs)} pairs"
        if len(pairs) < len(every):
            ends = len({src for src, _ in pairs})
            what += (
                f" of {len(every)} (those among the first {ends} instances; every pair, once, before t=0: --probe N)"
            )
        self.say(f"probing {what} every {self.options.probe_every_us / 1000:g} ms (series/rtt.csv)")

    def configured_rtt_ms(self, second: int, src: str, dst: str) -> float | None:
        """The RTT both paths of a pair configured in the middle of a second."""
        state = self.timeline.state_at(max(0, second * 1_000_000 - 500_000))
        rtt_us = workload.rtt_in(state, {name: name for name in self.instances})(src, dst)
        return None if rtt_us is None else rtt_us / 1000

    # ---- the loop ----------------------------------------------------------------

    def stall_file(self) -> Path | None:
        return self.rundir.path / "stalls.txt"

    def results_dir(self) -> Path | None:
        return self.rundir.path

    def tick(self) -> None:
        if self.start_requested.is_set() and not self.player.started:
            self._start_commands()
            self.begin()
        for exit_ in self.runtime.exits():
            self.exit_codes[exit_.instance] = exit_.returncode
            if self.status.get(exit_.instance) == "up":
                oom = exit_.how == "oom-killed"
                self.status[exit_.instance] = "oom-killed" if oom else f"exited({exit_.returncode})"

    def done(self, now_us: int) -> str | None:
        if self.launches and self.player.started and now_us >= self.player.last_start_us and not self.runtime.running():
            return "every command has exited"
        return None

    # ---- teardown ------------------------------------------------------------------

    def teardown_stages(self) -> list[tuple[str, Callable[[], object]]]:
        def stop_commands() -> None:
            for exit_ in self.runtime.close():
                self.exit_codes.setdefault(exit_.instance, exit_.returncode)

        stages: list[tuple[str, Callable[[], object]]] = [
            self.timeline_stage(),
            ("stop the commands", stop_commands),
            ("stop the live probe", self._stop_live_probe),
            ("report the flows", lambda: outputs.report_flows(self)),
            *self.closing_stages(),
        ]
        if self.host_net is not None:
            stages.append(("close host_net", self.host_net.close))
        if self.guards is not None:
            stages.append(("remove the guards", self.guards.close))
        # Namespaces go, and their qdiscs and the counters' filters with them:
        # no per-tree teardown is needed on this path.
        stages += [
            (
                "remove what the journal lists",
                lambda: teardown.execute(plan_cleanup(read_journal(self.rundir.journal.path))),
            ),
            ("write the event log", lambda: outputs.write_event_log(self)),
            ("close the series", self._close_series),
            ("write instances.json", lambda: outputs.write_instances(self)),
            ("report the workload", lambda: workload.report(self)),
        ]
        return stages

    def _stop_live_probe(self) -> None:
        if self.live_probe is not None:
            self.live_probe.stop()

    def _close_series(self) -> None:
        if self.workload_tail is not None:
            self.workload_tail.close()
        if self.series is not None:
            outputs.close_series(self)

    def write_series(self, now_us: int) -> None:
        super().write_series(now_us)
        self.live = outputs.live_figures(self, now_us)  # once a second, as the series

    def live_figures(self) -> dict:
        return self.live

    def torn_down(self, failures: list[str]) -> None:
        """Failures leave the journal unfinished, so `collapsar cleanup` can retry."""
        super().torn_down(failures)
        if failures:
            self.say(f"run {self.run_id} may have leftovers: `collapsar cleanup {self.run_id}`")
            return
        self.rundir.finish()
        if self.active_tree:
            self.say(f"tc trees: active; {self.activated} destinations got a class of their own")
        self.say(
            f"torn down: {len(self.instances)} namespaces, bridge {self.plan.bridge}; "
            f"logs in {self.rundir.path / 'logs'}"
        )
