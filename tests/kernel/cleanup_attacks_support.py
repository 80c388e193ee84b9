"""What the cleanup attack tests share (test_cleanup_attacks_*.py): the
fixtures `state` (an empty state directory), `run_id` and `made` (what a
test made, removed afterwards by name and pid whatever the cleanup under
test did), imported by name; the real CLI's `collapsar cleanup`; and how to
plant a journal, a canary file, namespaces, links and processes, and check
that a cleanup was refused with one line."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest
from test_local_support import CLI


@pytest.fixture
def state(tmp_path) -> Path:
    path = tmp_path / "state"
    (path / "journals").mkdir(parents=True)
    return path


@pytest.fixture
def run_id() -> str:
    return secrets.token_hex(3)


@pytest.fixture
def made():
    """Namespaces, links, files and processes a test made: removed afterwards,
    by name and pid, whatever the cleanup under test did."""
    things: dict[str, list] = {"netns": [], "links": [], "paths": [], "procs": []}
    yield things
    for proc in things["procs"]:
        proc.kill()
        proc.wait()
    for name in things["links"]:
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    for name in things["netns"]:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for path in reversed(things["paths"]):
        if path.is_file() or path.is_symlink():
            path.unlink()
        elif path.is_dir():
            path.rmdir()


def cleanup(state: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "cleanup", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLLAPSAR_STATE_DIR": str(state)},
    )


def dead_manager(run_id: str, run_dir: Path) -> dict:
    """The head of a journal whose manager was killed: a pid that has ended."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return {"kind": "run", "run_id": run_id, "pid": gone.pid, "start_time": 0, "run_dir": str(run_dir)}


def write_journal(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    return path


def canary(tmp_path: Path, name: str = "canary") -> tuple[Path, bytes]:
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    text = f"not the run's: {secrets.token_hex(8)}\n".encode()
    path.write_bytes(text)
    return path, text


def add_netns(made: dict, name: str) -> int:
    subprocess.run(["ip", "netns", "add", name], check=True)
    made["netns"].append(name)
    return os.stat(f"/run/netns/{name}").st_ino


def add_link(made: dict, name: str) -> None:
    # A bridge: this kernel has no dummy links, and a bridge needs no peer.
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    made["links"].append(name)


def link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def start_sleep(made: dict, netns: str | None = None) -> subprocess.Popen:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    proc = subprocess.Popen([*prefix, "sleep", "120"], start_new_session=True)
    made["procs"].append(proc)
    return proc


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def assert_refused(result: subprocess.CompletedProcess, run_id: str, *why: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"collapsar: cleanup {run_id}: refused, nothing removed: "), lines[0]
    for part in why:
        assert part in lines[0], lines[0]
    assert "removed" not in result.stdout and "deleted" not in result.stdout, result.stdout
