"""Helpers for the local-mode kernel tests (test_local_*.py): run the real
`collapsar` CLI as a subprocess, wait for its progress lines, and take
snapshots of the host's namespaces, links, hosts files and processes, so a
test can assert that a run leaves the host exactly as it found it."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

CLI = [sys.executable, "-m", "collapsar.cli"]


def host_snapshot() -> dict[str, set[str]]:
    """Names of everything a run could leave behind."""
    netns = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    links = set(os.listdir("/sys/class/net"))
    hosts = set(os.listdir("/etc/netns")) if os.path.isdir("/etc/netns") else set()
    iptables = shutil.which("iptables")
    rules = (
        set(
            subprocess.run(
                [iptables, "-w", "-S", "FORWARD"], capture_output=True, text=True, check=True
            ).stdout.splitlines()
        )
        if iptables
        else set()
    )
    return {"netns": netns, "links": links, "etc_netns": hosts, "forward_rules": rules}


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class Cli:
    """`collapsar ...` in the background, its stdout read line by line."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
        )
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, prefix: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"collapsar ended before {prefix!r}: {self.lines} {self.proc.stderr.read()}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no {prefix!r} within {timeout_s}s: {self.lines}")

    def finish(self, timeout_s: float = 60.0) -> tuple[int, list[str], str]:
        code = self.proc.wait(timeout_s)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return code, self.lines, self.proc.stderr.read()

    def kill(self) -> None:
        """For `finally:` after a failed assertion: SIGKILL the manager, then
        remove its leftovers through the journal, as a user would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # Also after a kill of the test's own: a run that ended well is no
        # longer in the state directory, and cleanup then changes nothing.
        if any(line.startswith("run ") for line in self.lines):
            subprocess.run([*CLI, "cleanup", run_id_of(self.lines)], capture_output=True)


def run_to_end(*args: str, timeout_s: float = 90.0) -> list[str]:
    """`collapsar ARGS` to its end, which must be a success; its stdout lines."""
    cli = Cli(*args)
    try:
        code, lines, stderr = cli.finish(timeout_s)
    finally:
        cli.kill()
    assert code == 0, (lines, stderr)
    return lines


def run_id_of(lines: list[str]) -> str:
    """From the first progress line: `run 3fa2c1: N instances, ...`."""
    return next(line.split()[1].rstrip(":") for line in lines if line.startswith("run "))


def read_json(path: Path):
    return json.loads(path.read_text())


def test_snapshot_sees_a_new_namespace():
    before = host_snapshot()
    name = f"cxsnap{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert host_snapshot()["netns"] - before["netns"] == {name}
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)
    assert host_snapshot()["netns"] == before["netns"]
