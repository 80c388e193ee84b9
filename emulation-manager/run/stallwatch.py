"""A manager loop that stops turning is reported, with where it stopped.

The loop calls `beat()` once per period.  Each beat re-arms faulthandler's
watchdog: if the next beat does not come within `after_s`, the watchdog (a C
thread, which needs no GIL, so a thread hogging the GIL cannot silence it)
writes every thread's Python stack to `path` (None: standard error, where a
manager container's log is).  When the loop turns again the
run says how long it stood still and where the stacks are.  A stalled loop
means stale shares, a late status and unmeasured periods: the user must know.
"""

from __future__ import annotations

import faulthandler
import sys
import time
from collections.abc import Callable
from pathlib import Path


class StallWatch:
    def __init__(self, path: Path | None, say: Callable[[str], None], after_s: float = 2.0):
        self.path, self._say, self.after_s = path, say, after_s
        self._file = sys.stderr if path is None else open(path, "a")  # noqa: SIM115 - closed in close()
        self._last = time.monotonic()

    def beat(self) -> None:
        now = time.monotonic()
        gap = now - self._last
        self._last = now
        if gap > self.after_s:
            where = "on standard error" if self.path is None else f"in {self.path}"
            self._say(f"warning: the manager loop stood still for {gap:.1f} s; every thread's stack is {where}")
        faulthandler.dump_traceback_later(self.after_s, repeat=False, file=self._file)

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self.path is None:
            return
        self._file.close()
        if self.path.exists() and self.path.stat().st_size == 0:
            self.path.unlink()
