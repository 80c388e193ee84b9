"""One manager run, whatever makes its instances.

`ManagerRun` is what local mode (collapsar.manager.local.run.LocalRun) and
container mode (collapsar.manager.container.run.ContainerRun) have in common,
written once: the timeline's actuator, the signals, the loop, the status
snapshot (run/snapshot.py), the paths the status API shows and the staged
teardown.  A mode adds where its instances and namespaces come from (an
`InstanceRuntime`, run/runtime.py) and a few steps of its own:

  run():  check the kernel -> hold (mode: lock, journal, ...) -> signals
          -> bring_up (mode: network, cores, meter, sharing, status API)
          -> t=0 (begin) -> loop -> tear_down -> verdict (mode)
  loop:   tick (mode: reap or rescan) -> counters -> sharing -> status
          -> stop on a signal, --duration, or when the mode says so
  tear_down: the timeline, then the mode's stages, then what every run
          closes; every stage runs even when an earlier one failed.  The
          status API's last snapshot says the run ended, when and why
          (publish_end), and reaches every open stream before it stops

Everything the timeline changes (paths, an instance's status) is queued on
the step being prepared and put in force when the step fires
(collapsar.tcal.prepared), so a step's Python work is done before its
deadline in both modes.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from collapsar.errors import CollapsarError
from collapsar.manager.core import EmulationCore, guard_step, needs_netem
from collapsar.manager.experiment import all_instances, timeline_paths
from collapsar.manager.measure.series import SeriesWriter
from collapsar.manager.play.live import LivePlayer
from collapsar.manager.run.options import RunOptions
from collapsar.manager.run.runtime import InstanceRuntime, Place
from collapsar.manager.run.snapshot import end_of_run, status_snapshot
from collapsar.manager.run.stallwatch import StallWatch
from collapsar.manager.status.board import StatusBoard, paths_rows
from collapsar.manager.status.topoview import LiveView
from collapsar.model import Experiment
from collapsar.model import Path as NetPath
from collapsar.tcal.contract import InstanceGuards
from collapsar.tcal.prepared import PreparedStep

if TYPE_CHECKING:
    from collapsar.manager.measure.throughput import Meter
    from collapsar.manager.status.api import StatusServer

# A step's preparation takes ~1-2 ms, under load up to several: the player
# prepares each step this long before its time.
PREPARE_AHEAD_NS = 20_000_000
BUCKET_SAMPLE_S = 1.0  # how often the egress buckets' levels are read (sample_buckets)
# The timeline thread must get the GIL soon after its deadline: with the
# default 5 ms switch interval a busy main loop alone could break the 5 ms
# lateness budget.
SWITCH_INTERVAL_S = 0.0005
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: a closed terminal ends the run too


def once_in_force(note: Callable[[], None]) -> None:
    """Bookkeeping of a new state: after the step being prepared fires (see
    PreparedStep.record), or now outside a step."""
    step = PreparedStep.current()
    if step is None:
        note()
    else:
        step.record(note)


class ManagerRun:
    def __init__(
        self,
        experiment: Experiment,
        timeline,
        options: RunOptions,
        runtime: InstanceRuntime,
        tcal,
        out: TextIO = sys.stdout,
        instances: list[str] | None = None,
    ):
        """`instances`: all_instances(timeline), when the mode needed them first."""
        self.experiment, self.timeline, self.options = experiment, timeline, options
        self.runtime, self.tcal, self.out = runtime, tcal, out
        self.run_id = ""  # the mode names its run
        self.instances = all_instances(timeline) if instances is None else instances
        self.netem = needs_netem(timeline_paths(timeline))
        self.cores: dict[str, EmulationCore] = {}
        # Local mode: each instance's guard (collapsar.tcal.guard), and the
        # instances cut off by theirs as of the step being prepared.
        self.guards: InstanceGuards | None = None
        self.guarded: set[str] = set()
        # Two sides of an instance: its process (absent, up, stopped, crashed,
        # exited(N)) and its network (up, disconnected).
        self.status: dict[str, str] = dict.fromkeys(self.instances, "absent")
        self.network: dict[str, str] = dict.fromkeys(self.instances, "up")
        self.exit_codes: dict[str, int] = {}
        self.started_us: dict[str, int] = {}  # instance -> when its command last started (0: at t=0)
        self.stop_reason: str | None = None
        self.failure: BaseException | None = None  # what ended bring-up or the loop, if anything did
        self.stopped_at: tuple[int, float] | None = None  # (experiment us, unix s) when the loop stopped
        # Held by the timeline thread from a step's preparation until it has
        # fired, by the sharing loop for its changes, by scans and by readers
        # of the cores' paths (re-entrant: set_paths takes it inside a step).
        self.paths_lock = threading.RLock()
        self.step_lock = self.paths_lock
        self.paths_version = 0  # one more per set_paths: /paths is built again only then
        self.prepare_ahead_ns = PREPARE_AHEAD_NS
        self.t0_ns: int | None = None
        self.player = LivePlayer(timeline, self)
        self.meter: Meter | None = None
        self.active_tree = False  # True: idle destinations share classes until the meter sees them (tcal.active)
        self.activated = 0  # destinations given their own class so far (active trees)
        self.sharing: Any = None  # the mode's sharing loop once up, unless sharing is off
        self.series: SeriesWriter | None = None  # the mode's, where it has a run directory (measure/series.py)
        self.board = StatusBoard(self.paths_json, lambda: self.paths_version)
        self.server: StatusServer | None = None
        self.wake = threading.Event()  # set to run the loop's next tick now
        self.live_view = LiveView()  # the dashboard's links and flows, cached per state
        self.buckets_due = 0.0  # when the egress buckets are read next (monotonic s)

    @property
    def mode(self) -> str:
        return self.runtime.mode

    # ---- the Actuator the player drives --------------------------------------

    def set_paths(self, src: str, paths: dict[str, NetPath | None]) -> None:
        with self.paths_lock:  # the status API reads the cores' paths meanwhile
            core = self.cores.get(src)
            if core is None:
                return  # not on this host, or not shaped yet: shaped when found
            core.apply(self.known(paths), self.guarded)
            self.paths_version += 1

        def mark_all() -> None:
            if self.meter is not None:
                with self.paths_lock:
                    self.meter.mark_paths(src, paths, self.configured_rate)

        once_in_force(mark_all)

    def guard(self, cut_off: list[str], reached: list[str]) -> Callable[[], None] | None:
        """The player's word on who no one reaches (play.player.set_all_paths):
        with guards, every path to such an instance is cut by its guard, in
        one message, instead of in each of the other trees."""
        if self.guards is None:
            return None
        finish = guard_step(self.guards, self.guarded, self.cores.values(), cut_off, reached)

        def locked() -> None:
            with self.paths_lock:  # the cores' cuts: the status API reads them meanwhile
                finish()

        return locked

    def known(self, paths: dict[str, NetPath | None]) -> dict[str, NetPath | None]:
        """The destinations a core can be told about (container mode: those
        whose address is known)."""
        return paths

    def configured_rate(self, src: str, dst: str) -> tuple[int | None, bool]:
        """(rate_bps, cut) of the path in force from src to dst."""
        core = self.cores.get(src)
        if core is None:
            return None, True  # not shaped (container mode: stopped since): nothing is in force
        path = core.shaped.get(dst)
        return (None if path is None else path.rate_bps), (path is None or dst in core.cut)

    def allowed_rate(self, src: str, dst: str) -> int | None:
        """The rate src's class for dst holds now: its path's, or the share
        the sharing loop narrowed it to (None: unlimited, cut or not shaped)."""
        core = self.cores.get(src)
        return None if core is None else core.class_rate(dst)

    def start_instance(self, instance: str) -> None:
        # Joins start in the step's follow-up (player.apply_plan), after it fired.
        self.status[instance] = "up"
        self.started_us[instance] = self.now_us()
        self.runtime.start(instance)

    def stop_instance(self, instance: str) -> None:
        self.runtime.stop(instance, self.options.grace_s)
        once_in_force(lambda: self.status.update({instance: "stopped"}))

    def kill_instance(self, instance: str) -> None:
        self.runtime.kill(instance)
        once_in_force(lambda: self.status.update({instance: "crashed"}))

    def mark_instance(self, instance: str, status: str) -> None:
        # disconnect/reconnect: the process keeps running
        once_in_force(lambda: self.network.update({instance: status}))

    # ---- the run --------------------------------------------------------------

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def stop(self, reason: str) -> None:
        """End the run at the loop's next tick (from a signal handler, the
        control API's thread or the loop itself)."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def _on_signal(self, signum, frame) -> None:
        self.stop(signal.Signals(signum).name)

    def run(self) -> int:
        self.tcal.check_kernel(need_netem=self.netem)  # before anything is created
        with self.hold():
            handlers = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
            old_interval = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            try:
                self.bring_up()
                self.loop()
            except BaseException as error:  # for the status API's last word; raised on as it was
                self.failure = error
                raise
            finally:
                self.tear_down()
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
                sys.setswitchinterval(old_interval)
        self.verdict()
        return 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        """What the mode holds for the whole run (local mode: the lock and
        the run directory)."""
        yield

    def bring_up(self) -> None:
        raise NotImplementedError

    def begin(self) -> int:
        """t=0: the timeline starts, and the meter's segments with it.

        What bring-up made (trees, plans, paths: millions of objects at 400
        instances) lives to the end: it leaves the collector's generations,
        whose full scans otherwise took tens of ms in the middle of steps."""
        gc.freeze()  # O(1): no collection at t=0
        self.t0_ns = t0_ns = self.player.start()
        if self.meter is not None:
            self.meter.follow(self.configured_rate, t0_ns, self.allowed_rate)
        return t0_ns

    def now_us(self) -> int:
        """Experiment time; 0 before t=0."""
        return 0 if self.t0_ns is None else (time.monotonic_ns() - self.t0_ns) // 1000

    def loop(self) -> None:
        period_s = self.experiment.settings.period_us / 1e6
        next_tick = time.monotonic()
        watch = StallWatch(self.stall_file(), self.say)
        try:
            while self.stop_reason is None:
                watch.beat()
                self.tick()
                now_us = self.now_us()
                if self.meter is not None:
                    self.meter.sample()
                    self.activate_flows(self.meter.new_pairs())
                self.sample_buckets()
                if self.sharing is not None:
                    self.share(now_us)
                if self.series is not None and self.t0_ns is not None and self.series.due(now_us):
                    self.write_series(now_us)
                if self.server is not None:  # the snapshot's only reader (--status-port -1: none)
                    self.board.publish(self.snapshot(now_us))
                if self.options.duration_us is not None and now_us >= self.options.duration_us:
                    self.stop("duration reached")
                elif (reason := self.done(now_us)) is not None:
                    self.stop(reason)
                next_tick += period_s
                now = time.monotonic()
                if next_tick < now - period_s:
                    next_tick = now  # fell behind (a slow tick): skip, do not burst to catch up
                if self.wake.wait(max(0.0, next_tick - now)):
                    next_tick = time.monotonic()  # woken early: the schedule goes on from here
        finally:
            watch.close()
            self.stopped_at = (self.now_us(), time.time())
        self.say(f"stopping: {self.stop_reason}")

    def write_series(self, now_us: int) -> None:
        """One second's rows of the run's series (measure/series.py)."""
        assert self.series is not None
        rates = self.meter.rates_now() if self.meter is not None else {}
        flows = [{"src": src, "dst": dst, "rate_bps": rate} for (src, dst), rate in rates.items()]
        # The links as they stood in the middle of the second the rates were
        # measured over: a rate that changed at its start is not divided
        # into the load of the second before.
        view = self.live_view(self.timeline.state_at(max(0, now_us - 500_000)), flows)
        sharing = self.sharing.status() if self.sharing is not None else None
        self.series.second(now_us, rates, self.configured_rate, self.allowed_rate, sharing, view["links"])

    def activate_flows(self, pairs: list[tuple[str, str]]) -> None:
        """Flows the meter saw for the first time get classes of their own
        (collapsar.tcal.active), before the sharing loop sets their shares."""
        if not self.active_tree or not pairs:
            return
        by_src: dict[str, list[str]] = {}
        for src, dst in pairs:
            by_src.setdefault(src, []).append(dst)
        with self.paths_lock:
            for src, dsts in by_src.items():
                core = self.cores.get(src)
                if core is None:
                    continue
                try:
                    self.activated += core.activate(dsts)
                except CollapsarError as error:
                    self.say(f"warning: {src}: cannot give its new flows their own classes: {error}")

    def sample_buckets(self) -> None:
        """Each egress token bucket's level, for the status rows, once a
        second: the kernel answers a qdisc's counters only in a dump of the
        interface's every qdisc (a leaf per destination).  (A copy of the
        cores, made in C: container mode's scans add and drop them.)"""
        now = time.monotonic()
        if now < self.buckets_due:
            return
        self.buckets_due = now + BUCKET_SAMPLE_S
        for core in list(self.cores.values()):
            if core.bucket_gauge is None:
                continue
            try:
                core.sample_bucket()
            except CollapsarError as error:  # its namespace gone under it: shown as last read
                self.say(f"warning: {core.instance}: cannot read its egress bucket any more: {error}")
                core.bucket_gauge.stale = True

    def bucket_rows(self) -> dict[str, dict]:
        """instance -> its egress bucket's configuration and level (status rows' `egress`)."""
        return {c.instance: c.bucket_gauge.as_dict() for c in list(self.cores.values()) if c.bucket_gauge is not None}

    def stall_file(self) -> Path | None:
        """Where a stalled loop's stacks go (None: standard error)."""
        return None

    def results_dir(self) -> Path | None:
        """Where the run's results are, for `collapsar report` (None: this
        mode keeps none)."""
        return None

    def tick(self) -> None:
        """The mode's work each period (reap exits, rescan); clears `wake`
        once it has done what woke it."""

    def share(self, now_us: int) -> None:
        flows = self.meter.flows() if self.meter is not None else []
        self.sharing.tick(now_us, flows, self.timeline.state_at(max(0, now_us)))

    def done(self, now_us: int) -> str | None:
        """Why the run ends on its own now, if it does."""
        return None

    def snapshot(self, now_us: int) -> dict:
        return status_snapshot(self, now_us)

    def live_figures(self) -> dict:
        """The snapshot's `probe` and `workload` (the mode's, where it has
        them: local mode's in-run probe and wl-client records)."""
        return {"probe": [], "workload": []}

    def places(self) -> Mapping[str, Place]:
        """Where each instance's network is, as far as this host knows now."""
        raise NotImplementedError

    def instance_extras(self) -> Mapping[str, dict]:
        """Fields of the instances' status rows that only this mode has."""
        return {}

    def paths_json(self) -> list[dict]:
        with self.paths_lock:  # copies made in C only: step preparation waits on this lock
            configured = [(src, core.shaped.copy(), core.cut.copy()) for src, core in self.cores.items()]
        return paths_rows(configured)

    def tear_down(self) -> None:
        """Every stage runs even if an earlier one failed: a half-torn-down
        run is the one thing worse than a failed run."""
        failures: list[str] = []
        for what, action in self.teardown_stages():
            try:
                action()
            except Exception as error:  # reported below; teardown goes on
                failures.append(f"{what}: {type(error).__name__}: {error}")
        self.torn_down(failures)

    def teardown_stages(self) -> list[tuple[str, Callable[[], object]]]:
        """(what, action) in order.  A mode puts its own around these: its
        processes after the timeline, its namespaces after the rest."""
        return [self.timeline_stage(), *self.closing_stages()]

    def timeline_stage(self) -> tuple[str, Callable[[], object]]:
        return ("stop the timeline", self.player.stop)

    def closing_stages(self) -> list[tuple[str, Callable[[], object]]]:
        """What measured, shared and reported during the run."""
        stages: list[tuple[str, Callable[[], object]]] = [
            (f"close {name}", obj.close)
            for name, obj in (("sharing", self.sharing), ("meter", self.meter))
            if obj is not None
        ]
        if self.server is not None:
            stages.append(("publish the run's end", self.publish_end))
        stages.append(("close the status board", self.board.close))
        if self.server is not None:
            stages.append(("stop the status API", self.server.stop))
        return stages

    def publish_end(self) -> None:
        """The last snapshot: state "ended" and `end` (run/snapshot.py), from
        after the commands stopped, so exits and the verdict are final.
        Closing the board then sends it to every open stream (status/streams.py)."""
        t_us, at_unix = self.stopped_at or (self.now_us(), time.time())
        failure = self.failure
        if failure is None:
            try:
                self.verdict()  # as it stands now; given again after teardown
            except CollapsarError as error:
                failure = error
        end = end_of_run(self.stop_reason, failure, t_us, at_unix, self.results_dir())
        self.board.publish({**self.snapshot(t_us), "state": "ended", "end": end})

    def torn_down(self, failures: list[str]) -> None:
        for line in failures:
            self.say(f"warning: teardown: {line}")

    def verdict(self) -> None:
        """After teardown: raise if the run failed (local mode)."""
