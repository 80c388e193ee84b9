"""Start and stop each instance's command inside its namespace.

Each command runs in its own session (process group), so a leave or crash
reaches the whole tree the command started.  Leave is SIGTERM, then SIGKILL
after a grace period; crash is SIGKILL at once.  `poll()` reaps exited
children and escalates overdue leaves; it never blocks, so the manager's
loop and the event player stay on time.

A command must not outlive a manager that is killed (SIGKILL leaves no
teardown): the prefix the run gives (local/run.py) makes the kernel send it
SIGKILL when its parent dies (setpriv --pdeathsig).  "Parent" is the thread
that forked it, so every command is forked by one spawner thread that lives
until `close()`, after the commands are stopped: the timeline thread that
starts joins ends before that.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collapsar.errors import RunError
from collapsar.manager.local.rundir import process_start_time
from collapsar.tcal.prepared import PreparedStep

DEFAULT_GRACE_S = 5.0


@dataclass
class Launch:
    """What to run for one instance."""

    instance: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass
class Running:
    launch: Launch
    popen: subprocess.Popen
    started_mono: float
    kill_at_mono: float | None = None  # set by stop(): SIGKILL if still alive then


@dataclass(frozen=True)
class Exit:
    instance: str
    pid: int
    returncode: int  # negative: killed by that signal (subprocess convention)
    how: str  # exited | stopped | crashed | oom-killed (ENDED_ON_ITS_OWN: no one asked)


ENDED_ON_ITS_OWN = ("exited", "oom-killed")


class Supervisor:
    """`prefix(instance)` is the argv that runs a command inside the
    instance's namespace (`ip netns exec NAME`, see local/run.py);
    `on_start(instance, pid, start_time)` is called at once so the journal
    knows the pid before anything else happens; `ended_by(instance)` names
    what ended a command that failed on its own, when the runtime knows
    (`oom-killed`: limits.py), else None.

    No preexec_fn: with one, subprocess must fork() the whole manager (45 ms
    per start here); without, it uses vfork (3 ms)."""

    def __init__(
        self,
        log_paths: Callable[[str], tuple[Path, Path]],
        prefix: Callable[[str], list[str]],
        on_start: Callable[[str, int, int | None], None],
        grace_s: float = DEFAULT_GRACE_S,
        ended_by: Callable[[str], str | None] = lambda instance: None,
    ):
        self._log_paths = log_paths
        self._prefix = prefix
        self._on_start = on_start
        self._ended_by = ended_by
        self.grace_s = grace_s
        self._running: dict[str, Running] = {}
        self._stopping: dict[str, str] = {}  # instance -> how (stopped | crashed)
        self._lock = threading.Lock()
        self._spawner = _Spawner()
        self.exits: list[Exit] = []

    def start(self, launch: Launch) -> int:
        if not launch.argv:
            raise RunError(f"instance {launch.instance}: no command to start")
        out_path, err_path = self._log_paths(launch.instance)
        env = {**os.environ, **launch.env}
        with self._lock:
            if launch.instance in self._running:
                raise RunError(
                    f"instance {launch.instance}: already running (pid {self._running[launch.instance].popen.pid})"
                )
            with open(out_path, "ab") as out, open(err_path, "ab") as err:
                try:
                    popen = self._spawner.call(
                        lambda: subprocess.Popen(
                            [*self._prefix(launch.instance), *launch.argv],
                            env=env,
                            cwd=launch.cwd,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=err,
                            start_new_session=True,
                            close_fds=True,
                        )
                    )
                except (OSError, subprocess.SubprocessError) as error:
                    raise RunError(f"instance {launch.instance}: cannot start {launch.argv[0]!r}: {error}") from None
            self._on_start(launch.instance, popen.pid, process_start_time(popen.pid))
            self._running[launch.instance] = Running(launch, popen, time.monotonic())
            return popen.pid

    def _signal(self, run: Running, sig: int) -> None:
        try:
            os.killpg(run.popen.pid, sig)
        except ProcessLookupError:
            pass

    def _signal_in_step(self, run: Running, sig: int) -> float:
        """Signal now, or at the instant of the step being prepared on this
        thread (collapsar.tcal.prepared); returns that time (monotonic s)."""
        step = PreparedStep.current()
        if step is None:
            self._signal(run, sig)
            return time.monotonic()
        step.signal(run.popen.pid, sig)
        return step.deadline_ns / 1e9

    def stop(self, instance: str) -> None:
        """Leave: SIGTERM now, SIGKILL after the grace period (in poll)."""
        with self._lock:
            run = self._running.get(instance)
            if run is None:
                return
            self._stopping[instance] = "stopped"
            run.kill_at_mono = self._signal_in_step(run, signal.SIGTERM) + self.grace_s

    def kill(self, instance: str) -> None:
        """Crash: SIGKILL now."""
        with self._lock:
            run = self._running.get(instance)
            if run is None:
                return
            self._stopping[instance] = "crashed"
            self._signal_in_step(run, signal.SIGKILL)

    def finish_now(self, instance: str) -> None:
        """SIGKILL and reap at once: a rejoin during a leave's grace period
        must not find the old process still there."""
        with self._lock:
            run = self._running.pop(instance, None)
            if run is None:
                return
            how = self._stopping.pop(instance, "stopped")
            self._signal(run, signal.SIGKILL)
            code = run.popen.wait()
            self.exits.append(Exit(instance, run.popen.pid, code, how))

    def poll(self) -> list[Exit]:
        """Reap what exited, escalate overdue stops; never blocks."""
        now = time.monotonic()
        exits = []
        with self._lock:
            for instance, run in list(self._running.items()):
                code = run.popen.poll()
                if code is None:
                    if run.kill_at_mono is not None and now >= run.kill_at_mono:
                        self._signal(run, signal.SIGKILL)
                        run.kill_at_mono = None
                    continue
                # The leader is gone: take any stragglers of its group with it.
                self._signal(run, signal.SIGKILL)
                del self._running[instance]
                how = self._stopping.pop(instance, None) or self._own_end(instance, code)
                exits.append(Exit(instance, run.popen.pid, code, how))
            self.exits.extend(exits)
        return exits

    def _own_end(self, instance: str, code: int) -> str:
        cause = self._ended_by(instance) if code != 0 else None
        return cause or "exited"

    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def pids(self) -> dict[str, int]:
        """instance -> pid of every command running now (one lock for all)."""
        with self._lock:
            return {instance: run.popen.pid for instance, run in self._running.items()}

    def stop_all(self, grace_s: float | None = None) -> list[Exit]:
        """SIGTERM everything, wait up to the grace period, SIGKILL the rest, reap."""
        grace = self.grace_s if grace_s is None else grace_s
        for instance in self.running():
            self.stop(instance)
        deadline = time.monotonic() + grace
        while self.running() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.01)
        for instance in self.running():
            self.kill(instance)
        while self.running():
            self.poll()
            time.sleep(0.005)
        return self.exits

    def close(self) -> None:
        """End the spawner thread: whatever still runs then gets its parent-death
        signal, so call this after `stop_all`."""
        self._spawner.close()


class _Spawner:
    """One long-lived thread that forks every command (see the module doc)."""

    def __init__(self):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="collapsar-spawner", daemon=True)
        self._thread.start()

    def call(self, make: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        if not self._thread.is_alive():
            raise RunError("the supervisor is closed: no command can start")
        done = threading.Event()
        box: dict[str, Any] = {}  # "popen" or "error", filled by the spawner thread
        self._requests.put((make, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["popen"]

    def close(self) -> None:
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join()

    def _serve(self) -> None:
        while (request := self._requests.get()) is not None:
            make, box, done = request
            try:
                box["popen"] = make()
            except BaseException as error:  # handed to the caller, who raises it
                box["error"] = error
            done.set()
