"""What the limits tests of the kernel tier (tests/kernel/test_local_limits.py,
this host's cgroup v1) and the VM tier (tests/vm/test_limits_vm.py, a stock
kernel's cgroup v2) share: one real `collapsar run` of three limited
instances, measured from outside Collapsar.

- `busy` spins under `cpus: 0.5`: its share of a CPU is its run time
  (/proc/PID/schedstat) over a few seconds of wall time;
- `pinned` runs `sleep` as a child under `cpuset: "1"`: both may run on
  CPU 1 only (Cpus_allowed_list), the child born in its parent's groups;
- `hog` fills 200 MB under `memory: 64m`: the OOM killer ends it, and the
  run reports it `oom-killed`.

Groups are found through /proc/PID/cgroup and the mounts in /proc/self/mounts,
not through Collapsar's own detection; leftovers are any `collapsar-RUNID`
at the top of any cgroup mount."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CLI = [sys.executable, "-m", "collapsar.cli"]
SPIN = "while :; do :; done"
FILL = "x = b'x' * (200 << 20); print('survived', len(x))"

TOPOLOGY = f"""\
experiment: {{name: limits}}
services:
  busy: {{command: [sh, -c, "{SPIN}"], cpus: 0.5}}
  pinned: {{command: [sh, -c, "sleep 60 & wait"], cpuset: "1"}}
  hog: {{command: ["{sys.executable}", -c, "{FILL}"], memory: 64m}}
bridges: [s]
links:
  - {{from: busy, to: s, bandwidth: 10Mbps}}
  - {{from: pinned, to: s, bandwidth: 10Mbps}}
  - {{from: hog, to: s, bandwidth: 10Mbps}}
"""


def cgroup_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, fstype, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            mounts.append(Path(where.replace("\\040", " ")))
    return mounts


def leftover_groups(run_id: str) -> list[Path]:
    return [mount / f"collapsar-{run_id}" for mount in cgroup_mounts() if (mount / f"collapsar-{run_id}").exists()]


def run_seconds(pid: int) -> float:
    """CPU time the task has run, from the scheduler's own account."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def cpu_share(pid: int, seconds: float) -> float:
    ran, began = run_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (run_seconds(pid) - ran) / (time.monotonic() - began)


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"pid {pid}: no Cpus_allowed_list")


def groups_of(pid: int) -> list[str]:
    """Each line of /proc/PID/cgroup that names a group of a run."""
    return [line for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if "/collapsar-" in line]


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0").split("\0")
    except OSError:
        return []


def wait_for(what: str, test, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = test()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout_s:g} s")


@dataclass
class Launched:
    """A `collapsar run` in the background, its output in files."""

    proc: subprocess.Popen
    runs: Path
    out: Path
    err: Path
    run_dir: Path = Path()
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def journal(self) -> list[dict]:
        return [json.loads(line) for line in (self.run_dir / "journal.jsonl").read_text().splitlines() if line]

    def output(self) -> str:
        return f"stdout:\n{self.out.read_text()}\nstderr:\n{self.err.read_text()}"

    def wait_started(self, count: int, timeout_s: float = 60.0) -> None:
        def started():
            if self.proc.poll() is not None:
                raise AssertionError(f"collapsar ended early (exit {self.proc.returncode})")
            dirs = list(self.runs.iterdir()) if self.runs.is_dir() else []
            if len(dirs) != 1 or not (dirs[0] / "journal.jsonl").exists():
                return None
            self.run_dir = dirs[0]
            found = {r["instance"]: r["pid"] for r in self.journal() if r["kind"] == "process"}
            return found if len(found) >= count else None

        try:
            self.pids = wait_for("command of every instance", started, timeout_s)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.output()}") from None

    def finish(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout_s)

    def abandon(self) -> None:
        """For `finally:`: kill the manager and clean up after it, as a user would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.run_dir != Path():
            subprocess.run([*CLI, "cleanup", self.run_id], capture_output=True, timeout=60)


def launch(tmp_path: Path, topology: str = TOPOLOGY, *extra: str) -> Launched:
    path = tmp_path / "limits.yaml"
    path.write_text(topology)
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    proc = subprocess.Popen(
        [*CLI, "run", str(path), "--run-dir", str(tmp_path / "runs"), "--grace", "1s", *extra],
        stdout=out.open("w"),
        stderr=err.open("w"),
    )
    return Launched(proc, tmp_path / "runs", out, err)


@dataclass
class Measured:
    share: float  # of one CPU, by `busy` under cpus: 0.5
    busy_groups: list[str]
    pinned_allowed: list[str]  # Cpus_allowed_list of `pinned` and its child
    groups_during: list[Path]
    code: int
    stderr: str
    stdout: str
    instances: dict[str, dict]
    groups_after: list[Path]


def measure(run: Launched, seconds: float = 4.0) -> Measured:
    """The run's figures, from its start to after its teardown (SIGTERM)."""
    run.wait_started(3)
    busy, pinned = run.pids["busy"], run.pids["pinned"]
    wait_for("busy spinning", lambda: cmdline(busy) == ["sh", "-c", SPIN])
    time.sleep(1.0)  # past the start, in the quota's steady state
    share = cpu_share(busy, seconds)
    child = wait_for("pinned's child", lambda: children(pinned))[0]
    allowed = [cpus_allowed(pinned), cpus_allowed(child)]
    during = leftover_groups(run.run_id)
    busy_groups = groups_of(busy)
    hog = run.pids["hog"]
    wait_for("hog's end", lambda: not Path(f"/proc/{hog}").exists() or cmdline(hog) == [])
    code = run.finish()
    instances = {i["name"]: i for i in json.loads((run.run_dir / "instances.json").read_text())}
    return Measured(
        share,
        busy_groups,
        allowed,
        during,
        code,
        run.err.read_text(),
        run.out.read_text(),
        instances,
        leftover_groups(run.run_id),
    )


def spin_share(tmp_path: Path, seconds: float = 4.0) -> tuple[float, list[str]]:
    """`busy` alone (its own run, so that a timing rerun measures afresh):
    its share of a CPU under cpus 0.5, and its groups."""
    run = launch(tmp_path, TOPOLOGY.split("  pinned:")[0] + "links: []\n")
    try:
        run.wait_started(1)
        busy = run.pids["busy"]
        wait_for("busy spinning", lambda: cmdline(busy) == ["sh", "-c", SPIN])
        time.sleep(1.0)  # past the start, in the quota's steady state
        share, groups = cpu_share(busy, seconds), groups_of(busy)
        assert run.finish() == 0, run.err.read_text()
        return share, groups
    finally:
        run.abandon()


def killed_and_cleaned(tmp_path: Path) -> tuple[list[Path], list[Path], list[Path], str]:
    """Groups of a run (during, after its manager's SIGKILL, after
    `collapsar cleanup`), and what cleanup printed."""
    run = launch(tmp_path, TOPOLOGY.replace(f'"{SPIN}"', '"sleep 60"'))
    try:
        run.wait_started(3)
        during = leftover_groups(run.run_id)
        run.finish(signal.SIGKILL)
        pids = list(run.pids.values())
        # Dead soon, not at once: the VM tier's emulated guest once took more than 5 s.
        wait_for("the commands' parent-death", lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 30)
        after_kill = leftover_groups(run.run_id)
        done = subprocess.run([*CLI, "cleanup", run.run_id], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return during, after_kill, leftover_groups(run.run_id), done.stdout
    finally:
        run.abandon()
