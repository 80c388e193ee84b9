"""The Aeron media driver process: one `aeronmd` per host, started and stopped
by PID, registered so that process exit stops it after the clients closed
(see `aeron._close_at_exit`).

The aeron dir sits in /dev/shm, which everyone may write, and its name is
predictable (a run id, an experiment id), while the driver and the manager
run as root.  So nobody else may own or reach into it: a path that exists
already must be a directory of ours (a killed driver's, removed then) and
never a symlink, anything else is refused; the driver runs with umask 077,
so it makes the dir 0700 and its files 0600 (no other user can connect to
it, read its logs or plant a symlink inside), and the dir is checked again
once the driver made it.  The driver's log is opened without following a
symlink and must be a regular file of ours.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from collapsar.manager.sharing.aeron import TERM_LENGTH_BYTES, AeronError, aeron_home, forget_at_exit, stop_at_exit

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started the
    driver dies, even by SIGKILL, so a driver never outlives its manager
    (it then shuts down cleanly and removes its dir).  The signal follows the
    starting *thread*: drivers are started and restarted from the manager's
    main loop."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    os.umask(0o077)  # the aeron dir 0700, its files 0600 (module doc)


def _unsafe(path: Path, st: os.stat_result) -> str | None:
    """Why a directory at `path` is not ours to use, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link (to {os.readlink(path)})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this manager (uid {os.geteuid()})"
    return None


def _open_log(path: Path) -> int:
    """The driver's log, appended to; never through a symlink, never another user's file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        # Refused by O_NOFOLLOW (ELOOP) or, in a sticky directory, by the kernel (EACCES).
        planted = os.path.islink(path)
        raise AeronError(
            f"media driver log {path}: {'a symbolic link, refused' if planted else error.strerror}"
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise AeronError(f"media driver log {path}: not a regular file of uid {os.geteuid()}; refusing it")
    return fd


class MediaDriver:
    """One `aeronmd` process with its own aeron dir; started and stopped by PID.

    `prefix` runs it under another command, e.g. ("ip", "netns", "exec", ns)
    to bind UDP inside a namespace; `ip netns exec` execs, so the PID is aeronmd's.
    """

    def __init__(
        self,
        aeron_dir: str | os.PathLike,
        *,
        prefix: tuple[str, ...] = (),
        term_length_bytes: int = TERM_LENGTH_BYTES,
        log_path: str | os.PathLike | None = None,
    ):
        self.aeron_dir = Path(aeron_dir)
        self.prefix = tuple(prefix)
        self.term_length_bytes = term_length_bytes
        self.log_path = Path(log_path) if log_path else self.aeron_dir.with_name(self.aeron_dir.name + ".log")
        self.process: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        props = {
            "aeron.dir": str(self.aeron_dir),
            "aeron.threading.mode": "SHARED",
            # A driver that died leaves its dir behind; the next one must not refuse it.
            "aeron.dir.delete.on.start": "true",
            "aeron.dir.delete.on.shutdown": "true",
            "aeron.term.buffer.length": str(self.term_length_bytes),
            "aeron.ipc.term.buffer.length": str(self.term_length_bytes),
            # The defaults (8 MiB counters x 5 with metadata, 4 MiB error log)
            # make a 48 MiB cnc.dat; a metadata bus needs a fraction of that.
            "aeron.counters.buffer.length": str(1024 * 1024),
            "aeron.error.buffer.length": str(1024 * 1024),
            "aeron.loss.report.buffer.length": str(64 * 1024),
        }
        return [*self.prefix, str(aeron_home() / "bin" / "aeronmd"), *(f"-D{k}={v}" for k, v in props.items())]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _clear_dir(self) -> None:
        """Refuse a path someone else prepared; remove a killed driver's dir
        of ours (its stale cnc.dat would pass for the new driver's)."""
        parent = self.aeron_dir.parent
        try:
            st = os.stat(parent)
        except FileNotFoundError:  # the driver makes it, 0700 like the dir
            return
        others_may_rename = st.st_uid not in (0, os.geteuid()) or (
            st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX
        )
        if others_may_rename:  # they could swap the dir for theirs after every check below
            raise AeronError(
                f"aeron dir {self.aeron_dir}: its parent {parent} lets other users rename "
                f"what is in it (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); "
                f"choose another place"
            )
        try:
            st = os.lstat(self.aeron_dir)
        except FileNotFoundError:
            return
        problem = _unsafe(self.aeron_dir, st)
        if problem:
            raise AeronError(f"aeron dir {problem}; refusing it (remove it if it is a leftover)")
        shutil.rmtree(self.aeron_dir)  # fd-based on Linux: never follows a symlink inside

    def _check_made(self) -> str | None:
        try:
            st = os.lstat(self.aeron_dir)
        except FileNotFoundError:
            return f"{self.aeron_dir} vanished"
        problem = _unsafe(self.aeron_dir, st)
        if problem is None and stat.S_IMODE(st.st_mode) & 0o077:
            problem = f"{self.aeron_dir} has mode {stat.S_IMODE(st.st_mode):04o}, open to others"
        return problem

    def start(self, ready_timeout_s: float = 10.0) -> None:
        if self.alive():
            raise AeronError(f"media driver for {self.aeron_dir} already runs as pid {self.pid}")
        self._clear_dir()
        log_fd = _open_log(self.log_path)
        try:
            self.process = subprocess.Popen(
                self.argv(),
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        finally:
            os.close(log_fd)
        stop_at_exit(self)
        cnc = self.aeron_dir / "cnc.dat"
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise AeronError(f"media driver exited with {self.process.returncode} at start; see {self.log_path}")
            if cnc.is_file() and cnc.stat().st_size > 0:
                problem = self._check_made()
                if problem is None:
                    return
                self.stop()
                raise AeronError(f"aeron dir {problem} after the media driver made it; refusing it")
            time.sleep(0.01)
        self.stop()
        raise AeronError(f"media driver made no {cnc} within {ready_timeout_s} s; see {self.log_path}")

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM (the driver shuts down cleanly and removes its dir), SIGKILL if it hangs."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.returncode == -signal.SIGKILL and self._check_made() is None:
            shutil.rmtree(self.aeron_dir, ignore_errors=True)  # ours, and nobody else will remove it
        forget_at_exit(self)
        return self.process.returncode
