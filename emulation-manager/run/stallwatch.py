"""A manager loop that stops turning is reported, with where it stopped.

The loop calls `beat()` once per period.  A watchdog thread checks the beats:
if none came for `after_s`, it writes every thread's Python stack to `path`
(None: standard error, where a manager container's log is), once per stall.
When the loop turns again the run says how long it stood still and where the
stacks are.  A stalled loop means stale shares, a late status and unmeasured
periods: the user must know.

The stacks are taken with the GIL held (`sys._current_frames`), from a
consistent view of the threads.  faulthandler's watchdog, used before, reads
the other threads' frames without the GIL while they run, and at 400
instances (a two-second stall while a step was prepared) that crashed the
manager with a general protection fault, leaving every namespace behind.
A thread that holds the GIL in one long C call delays the report until it
lets go; it can no longer take the manager down.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path


class StallWatch:
    def __init__(self, path: Path | None, say: Callable[[str], None], after_s: float = 2.0):
        self.path, self._say, self.after_s = path, say, after_s
        self._file = sys.stderr if path is None else open(path, "a")  # noqa: SIM115 - closed in close()
        self._last = time.monotonic()
        self._dumped_for: float | None = None  # the beat whose stall was written out
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        now = time.monotonic()
        with self._lock:
            gap = now - self._last
            self._last = now
        if gap > self.after_s:
            where = "on standard error" if self.path is None else f"in {self.path}"
            self._say(f"warning: the manager loop stood still for {gap:.1f} s; every thread's stack is {where}")

    def _watch(self) -> None:
        while not self._stop.wait(self.after_s / 4):
            with self._lock:
                last = self._last
                stalled = time.monotonic() - last > self.after_s and self._dumped_for != last
                if stalled:
                    self._dumped_for = last
            if stalled:
                self._dump(time.monotonic() - last)

    def _dump(self, gap_s: float) -> None:
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        lines = [f"Stalled for {gap_s:.1f} s: no loop period since then.\n"]
        # sys._current_frames is documented (for tools like this one) and has no public twin.
        for ident, frame in sys._current_frames().items():  # noqa: SLF001
            if ident == threading.get_ident():
                continue  # this watchdog
            lines.append(f"Thread {names.get(ident, '?')} ({ident:#x}), most recent call last:\n")
            lines += traceback.format_stack(frame)
        lines.append("\n")
        try:
            self._file.write("".join(lines))
            self._file.flush()
        except (OSError, ValueError):  # closed meanwhile, or the disk is full: the warning still comes
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.path is None:
            return
        self._file.close()
        if self.path.exists() and self.path.stat().st_size == 0:
            self.path.unlink()
