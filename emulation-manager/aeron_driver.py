"""The Aeron media driver process: one `aeronmd` per host, started and stopped
by PID, registered so that process exit stops it after the clients closed
(see `aeron._close_at_exit`)."""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .aeron import TERM_LENGTH_BYTES, AeronError, _started_drivers, aeron_home

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


class MediaDriver:
    """One `aeronmd` process with its own aeron dir; started and stopped by PID.

    `prefix` runs it under another command, e.g. ("ip", "netns", "exec", ns)
    to bind UDP inside a namespace; `ip netns exec` execs, so the PID is aeronmd's.
    """

    def __init__(self, aeron_dir: str | os.PathLike, *, prefix: tuple[str, ...] = (),
                 term_length_bytes: int = TERM_LENGTH_BYTES, log_path: str | os.PathLike | None = None):
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

    def start(self, ready_timeout_s: float = 10.0) -> None:
        if self.alive():
            raise AeronError(f"media driver for {self.aeron_dir} already runs as pid {self.pid}")
        # A killed driver leaves its (our own, per-run) dir behind; its stale
        # cnc.dat would pass for the new driver's below.
        shutil.rmtree(self.aeron_dir, ignore_errors=True)
        with open(self.log_path, "ab") as out:
            self.process = subprocess.Popen(self.argv(), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        _started_drivers.add(self)
        cnc = self.aeron_dir / "cnc.dat"
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise AeronError(f"media driver exited with {self.process.returncode} at start; see {self.log_path}")
            if cnc.is_file() and cnc.stat().st_size > 0:
                return
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
        if self.process.returncode == -signal.SIGKILL:
            shutil.rmtree(self.aeron_dir, ignore_errors=True)  # nobody else will
        _started_drivers.discard(self)
        return self.process.returncode
