"""The run directory: a write-ahead journal of everything a run creates, and
the host-wide lock that lets only one local run be active at a time.

Before the manager creates a namespace, a veth, the bridge, a hosts file or a
pinned BPF object, it appends a line naming it to `journal.jsonl`
(write-ahead); right after starting a process it records the pid with the
process's start time (so a recycled pid is never mistaken for ours).  After a SIGKILL of the
manager, `collapsar cleanup` replays the journal and removes exactly those
objects (see cleanup_plan, which checks each record against the run's own
naming first), nothing found by name pattern.

Layout: STATE/journals/<run id>.jsonl is the journal of a run not yet ended,
STATE/index/<run id> a symlink to its run directory (by default STATE/<run
id>, or under --run-dir), STATE/active.lock the flock held by the active run.
STATE is /run/collapsar (or $COLLAPSAR_STATE_DIR).

Cleanup runs as root on what these files say, so it believes only files that
no one but root could have written (safefiles.py): the state directory and
every directory above it must be root's and writable by no one else, a
journal is opened without following symlinks and must be root's and not
group/other-writable, and a run is named by its id (looked up in STATE only,
never relative to the current directory) or by a run directory the index
names.  A run directory is made 0700 where only root can write (its parent
checked the same way, /tmp's sticky bit allowed), and everything the run
writes there is created anew (O_EXCL, O_NOFOLLOW, 0600) through a descriptor
of that directory, so nothing planted there, or in its place, is followed.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from collapsar.errors import CollapsarError, RunError
from collapsar.manager.addressing import check_run_id
from collapsar.manager.safefiles import check_private_dir, create_file_at, open_dir, read_private_file

STATE_DIR_ENV = "COLLAPSAR_STATE_DIR"
DEFAULT_STATE_DIR = "/run/collapsar"
JOURNAL = "journal.jsonl"
END_KINDS = ("finished", "cleaned")  # a journal ending in one of these has nothing left


def state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def checked_state_dir(state: Path | None = None, create: bool = False) -> Path:
    """The state directory (made if asked), refused unless only root can
    change it or anything above it.  One that does not exist holds no runs."""
    state = state or state_dir()
    if create:
        os.makedirs(state, mode=0o755, exist_ok=True)
    elif not os.path.lexists(state):
        return state
    return check_private_dir(state, "state directory")


def checked_run_base(base: Path | None, state: Path | None = None) -> Path:
    """Where run directories go: `base` (made if missing), or the state
    directory; refused unless only root can change it or anything above it."""
    if base is None:
        return checked_state_dir(state, create=True)
    os.makedirs(base, mode=0o755, exist_ok=True)
    return check_private_dir(base, "run directory base", sticky_leaf=True)


def _state_subdir(state: Path, name: str) -> Path:
    """STATE/journals or STATE/index, made if missing, checked as STATE is."""
    path = state / name
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    return check_private_dir(path, "state directory")


def is_run_id(text: str) -> bool:
    try:
        check_run_id(text)
    except CollapsarError:
        return False
    return True


def process_start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of `pid`, None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
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

    def __init__(self, path: Path, new: bool = False):
        self.path = path
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags | (os.O_CREAT | os.O_EXCL if new else 0), 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def record(self, kind: str, **fields: object) -> None:
        line = json.dumps({"kind": kind, "t": round(time.time(), 6), **fields}, sort_keys=True)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(path: Path) -> list[dict]:
    """Every record of a journal only root could have written (else one line
    saying why).  A torn last line (SIGKILL mid-write) is skipped, which is
    safe because a record is written before the object exists; any other
    line that is not a record means the file is not a journal we wrote."""
    try:
        text = read_private_file(path, "journal").decode("utf-8")
    except UnicodeDecodeError:
        raise CollapsarError(f"journal {path}: not UTF-8 text; expected a journal written by collapsar run") from None
    lines = text.split("\n")
    lines.pop()  # "" after a final newline, else a line cut short: skipped
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            raise CollapsarError(f"{path}:{number}: not a journal record; expected one JSON object per line")
        records.append(record)
    return records


class RunLock:
    """flock on STATE/active.lock; the kernel drops it when the holder dies,
    so a SIGKILLed run never blocks the next one (its leftovers are reported
    as stale instead)."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, state: Path, run_id: str, run_dir: Path) -> RunLock:
        path = checked_state_dir(state, create=True) / "active.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
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
        os.pwrite(fd, json.dumps({"run_id": run_id, "pid": os.getpid(), "run_dir": str(run_dir)}).encode(), 0)
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
    leaves the state directory.  The run's first record names the run
    directory's device and inode, so a cleanup can tell it from whatever
    later stands at its path."""

    run_id: str
    path: Path
    state: Path
    journal: Journal
    dir_fd: int  # the run directory itself, whatever becomes of its path

    @classmethod
    def create(cls, run_id: str, base: Path | None = None, state: Path | None = None) -> RunDir:
        check_run_id(run_id)
        state = checked_state_dir(state, create=True)
        path = checked_run_base(base, state) / run_id
        try:
            os.mkdir(path, 0o700)  # fails on anything already there, a symlink included
        except FileExistsError:
            what = "a symlink" if path.is_symlink() else "something"
            raise RunError(
                f"run directory {path}: {what} is already there; a new run never reuses (or follows) one"
            ) from None
        dir_fd = open_dir(path)
        os.mkdir("logs", 0o700, dir_fd=dir_fd)
        journal_path = _state_subdir(state, "journals") / f"{run_id}.jsonl"
        journal = Journal(journal_path, new=True)
        os.symlink(path, _state_subdir(state, "index") / run_id)
        os.symlink(journal_path, JOURNAL, dir_fd=dir_fd)
        itself = os.fstat(dir_fd)
        journal.record(
            "run",
            run_id=run_id,
            pid=os.getpid(),
            start_time=process_start_time(os.getpid()),
            run_dir=str(path),
            run_dir_dev=itself.st_dev,
            run_dir_ino=itself.st_ino,
        )
        return cls(run_id, path, state, journal, dir_fd)

    def log_paths(self, instance: str) -> tuple[Path, Path]:
        return self.path / "logs" / f"{instance}.out", self.path / "logs" / f"{instance}.err"

    def write_file(self, name: str, text: str) -> Path:
        """RUNDIR/NAME, new, mode 0600: never written over or through
        anything already there (which only root could have put there)."""
        try:
            create_file_at(self.dir_fd, name, text.encode())
        except FileExistsError:
            raise RunError(
                f"{self.path / name}: already exists; a run writes each of its files "
                f"once and never over (or through) another"
            ) from None
        return self.path / name

    def finish(self) -> None:
        """Mark the run as fully torn down and retire its journal."""
        self.journal.record("finished")
        self.journal.close()
        retire(self.state, self.run_id, self.dir_fd)
        os.close(self.dir_fd)


def state_journal(state: Path, run_id: str) -> Path:
    return state / "journals" / f"{check_run_id(run_id)}.jsonl"


def retire(state: Path, run_id: str, dir_fd: int | None = None) -> str | None:
    """Copy the journal into the run directory and drop the run from the
    state directory.  The copy goes into the directory the run created
    (`dir_fd`, or the one its first record names by device and inode),
    never through a symlink; returns why it could not, if it could not."""
    journal = state_journal(state, run_id)
    index = state / "index" / run_id
    problem = None
    if index.is_symlink():
        run_dir = Path(os.readlink(index))
        try:
            data = read_private_file(journal, "journal")
        except CollapsarError:
            data = None  # gone, or not ours to copy: dropped below all the same
        if data is not None:
            try:
                problem = _file_journal(run_dir, data, dir_fd)
            except OSError as error:
                problem = f"the journal could not be copied into {run_dir}: {error.strerror}"
        index.unlink()
    journal.unlink(missing_ok=True)
    return problem


def _created_dir(data: bytes) -> tuple[object, object] | None:
    """(device, inode) of the run directory, from a journal's first record."""
    try:
        head = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    return (head.get("run_dir_dev"), head.get("run_dir_ino")) if isinstance(head, dict) else None


def _file_journal(run_dir: Path, data: bytes, dir_fd: int | None) -> str | None:
    refused = (
        f"{run_dir} is not the run directory the run created (replaced or a symlink); its journal was not copied there"
    )
    own = dir_fd is None
    if dir_fd is None:
        try:
            fd = open_dir(run_dir)
        except FileNotFoundError:
            return None  # deleted with its logs (e.g. under /tmp): nothing to file it in
        except OSError:
            return refused
    else:
        fd = dir_fd
    try:
        itself = os.fstat(fd)
        if own and _created_dir(data) != (itself.st_dev, itself.st_ino):
            return refused
        tmp = JOURNAL + ".tmp"
        try:  # a copy a killed cleanup left half-written
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        create_file_at(fd, tmp, data)
        os.replace(tmp, JOURNAL, src_dir_fd=fd, dst_dir_fd=fd)  # replaces our symlink itself
    finally:
        if own:
            os.close(fd)
    return None


def list_runs(state: Path | None = None) -> dict[str, Path]:
    """run id -> its journal, for every run not yet finished or cleaned."""
    journals = (state or state_dir()) / "journals"
    if not journals.is_dir():
        return {}
    return {
        entry.name[: -len(".jsonl")]: entry
        for entry in sorted(journals.iterdir())
        if entry.name.endswith(".jsonl") and is_run_id(entry.name[: -len(".jsonl")])
    }


def manager_alive(records: list[dict]) -> bool:
    head = records[0] if records and records[0].get("kind") == "run" else {}
    pid = head.get("pid")
    return isinstance(pid, int) and pid > 0 and same_process(pid, head.get("start_time"))


def is_stale(records: list[dict]) -> bool:
    """Left behind: not ended, and its manager is gone."""
    if records and records[-1].get("kind") in END_KINDS:
        return False
    return not manager_alive(records)
