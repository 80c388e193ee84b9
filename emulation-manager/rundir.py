"""The run directory: a write-ahead journal of everything a run creates, and
the host-wide lock that lets only one local run be active at a time.

Before the manager creates a namespace, a veth, the bridge, a hosts file or a
pinned BPF object, it appends a line naming it to `journal.jsonl`
(write-ahead); right after starting a process it records the pid with the
process's start time (so a recycled pid is never mistaken for ours).  After a SIGKILL of the
manager, `collapsar cleanup` replays the journal and removes exactly those
objects (see `plan_cleanup`), nothing found by name pattern.

Layout: STATE/journals/<run id>.jsonl is the journal of a run not yet ended,
STATE/index/<run id> a symlink to its run directory (by default STATE/<run
id>, or under --run-dir), STATE/active.lock the flock held by the active run.
STATE is /run/collapsar (or $COLLAPSAR_STATE_DIR).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CollapsarError, RunError

STATE_DIR_ENV = "COLLAPSAR_STATE_DIR"
DEFAULT_STATE_DIR = "/run/collapsar"
JOURNAL = "journal.jsonl"
END_KINDS = ("finished", "cleaned")  # a journal ending in one of these has nothing left


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def process_start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of `pid`, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 overall


def same_process(pid: int, start_time: int | None) -> bool:
    return start_time is not None and process_start_time(pid) == start_time


class Journal:
    """Append-only JSON lines, each written to the kernel before the caller acts.

    No fsync: what must survive is a SIGKILL of the manager, and a write()
    is in the page cache, visible to `collapsar cleanup`, the moment it
    returns.  A host crash takes the namespaces with it, so there is nothing
    a synced journal could help remove (fsync cost ~6 ms per record here,
    a third of a 50-instance start)."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def record(self, kind: str, **fields: object) -> None:
        line = json.dumps({"kind": kind, "t": round(time.time(), 6), **fields}, sort_keys=True)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(path: Path) -> list[dict]:
    """Every complete record; a torn last line (SIGKILL mid-write) is skipped,
    which is safe because a record is written before the object exists."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class RunLock:
    """flock on STATE/active.lock; the kernel drops it when the holder dies,
    so a SIGKILLed run never blocks the next one (its leftovers are reported
    as stale instead)."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, state: Path, run_id: str, run_dir: Path) -> "RunLock":
        state.mkdir(parents=True, exist_ok=True)
        path = state / "active.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunError(
                f"another collapsar run is active: run {holder.get('run_id', '?')} "
                f"(manager pid {holder.get('pid', '?')}, {holder.get('run_dir', '?')}); "
                f"stop it (Ctrl-C or kill -TERM {holder.get('pid', '?')}) or wait for it to end"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"run_id": run_id, "pid": os.getpid(),
                                  "run_dir": str(run_dir)}).encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


@dataclass
class RunDir:
    """A run's directory (logs, plan, event log) and its journal.

    The journal itself lives in STATE/journals/<run id>.jsonl (tmpfs under
    /run, like the namespaces it describes), with a symlink to it in the run
    directory: a run directory under /tmp may be deleted while its run's
    leftovers still exist, and cleanup must not depend on it.  When the run
    ends (or is cleaned up) the journal is copied into the run directory and
    leaves the state directory."""

    run_id: str
    path: Path
    state: Path
    journal: Journal

    @classmethod
    def create(cls, run_id: str, base: Path | None = None, state: Path | None = None) -> "RunDir":
        state = state or state_dir()
        path = ((base or state) / run_id).resolve()
        path.mkdir(parents=True, exist_ok=False)
        (path / "logs").mkdir()
        journal_path = state_journal(state, run_id)
        journal_path.parent.mkdir(parents=True, exist_ok=True)
        (state / "index").mkdir(parents=True, exist_ok=True)
        os.symlink(path, state / "index" / run_id)
        os.symlink(journal_path, path / JOURNAL)
        run = cls(run_id, path, state, Journal(journal_path))
        run.journal.record("run", run_id=run_id, pid=os.getpid(),
                           start_time=process_start_time(os.getpid()), run_dir=str(path))
        return run

    def log_paths(self, instance: str) -> tuple[Path, Path]:
        return self.path / "logs" / f"{instance}.out", self.path / "logs" / f"{instance}.err"

    def finish(self) -> None:
        """Mark the run as fully torn down and retire its journal."""
        self.journal.record("finished")
        self.journal.close()
        retire(self.state, self.run_id)


def state_journal(state: Path, run_id: str) -> Path:
    return state / "journals" / f"{run_id}.jsonl"


def retire(state: Path, run_id: str) -> None:
    """Copy the journal into the run directory (if it still exists) and drop
    the run from the state directory."""
    journal = state_journal(state, run_id)
    index = state / "index" / run_id
    if index.is_symlink():
        run_dir = Path(os.readlink(index))
        if run_dir.is_dir() and journal.is_file():
            copy = run_dir / (JOURNAL + ".tmp")
            copy.write_bytes(journal.read_bytes())
            os.replace(copy, run_dir / JOURNAL)
        index.unlink()
    try:
        journal.unlink()
    except FileNotFoundError:
        pass


def list_runs(state: Path | None = None) -> dict[str, Path]:
    """run id -> its journal, for every run not yet finished or cleaned."""
    journals = (state or state_dir()) / "journals"
    if not journals.is_dir():
        return {}
    return {entry.name[:-len(".jsonl")]: entry for entry in sorted(journals.iterdir())
            if entry.name.endswith(".jsonl")}


def run_dir_of(state: Path, run_id: str) -> Path | None:
    index = state / "index" / run_id
    return Path(os.readlink(index)) if index.is_symlink() else None


def find_run(target: str, state: Path | None = None) -> Path:
    """A journal from a run id, or from a run directory."""
    state = state or state_dir()
    runs = list_runs(state)
    if target in runs:
        return runs[target]
    path = Path(target) / JOURNAL
    if path.is_file():
        return path
    known = ", ".join(runs) or "none"
    raise CollapsarError(f"cleanup {target}: no such run; expected a run id from "
                         f"{state / 'journals'} (active or stale: {known}) or a run directory")


def manager_alive(records: list[dict]) -> bool:
    head = next((r for r in records if r.get("kind") == "run"), None)
    return bool(head) and same_process(int(head["pid"]), head.get("start_time"))


def is_stale(records: list[dict]) -> bool:
    """Left behind: not ended, and its manager is gone."""
    if records and records[-1].get("kind") in END_KINDS:
        return False
    return not manager_alive(records)


@dataclass(frozen=True)
class Step:
    """One cleanup action, in the order it must run."""

    action: str  # kill | kill_netns | unpin | del_link | del_netns | rm_hosts
    target: dict


def plan_cleanup(records: list[dict]) -> list[Step]:
    """What to undo, from a journal: processes first (a namespace with a live
    process in it would outlive its deletion), then BPF pins, links, the
    bridge, the namespaces and their hosts files.  Each step is idempotent:
    a thing already gone is skipped, so a cleanup can be repeated."""
    if records and records[-1].get("kind") in END_KINDS:
        return []
    by_kind: dict[str, list[dict]] = {}
    for record in records:
        by_kind.setdefault(record.get("kind", ""), []).append(record)
    steps = [Step("kill", {"pid": r["pid"], "start_time": r.get("start_time"),
                           "instance": r.get("instance")}) for r in by_kind.get("process", [])]
    steps += [Step("kill_netns", {"netns": r["name"], "inode": r["inode"]})
              for r in by_kind.get("netns_inode", [])]
    steps += [Step("unpin", {"path": r["path"]}) for r in by_kind.get("bpf_pin", [])]
    steps += [Step("del_link", {"name": r["name"]}) for r in reversed(by_kind.get("veth", []))]
    steps += [Step("del_link", {"name": r["name"]}) for r in by_kind.get("bridge", [])]
    steps += [Step("del_fw", {"bridge": r["bridge"], "tag": r["tag"]}) for r in by_kind.get("fw_accept", [])]
    steps += [Step("del_netns", {"netns": r["name"]}) for r in reversed(by_kind.get("netns", []))]
    steps += [Step("rm_hosts", {"path": r["path"]}) for r in reversed(by_kind.get("hosts", []))]
    return steps
