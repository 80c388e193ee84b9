"""How long each stage of a run's bring-up took, and what each instance cost
in it: wall time and the thread's user and kernel CPU.  Written to the run
directory as bringup.json and summed up in one line, so a cost that grows
with the instance count shows in every run (bench/local_bench.py reads it;
docs/scale.md says what it found).

`growth` compares the mean cost of the last quarter of a stage's instances
with the first quarter's: 1.0 is a flat per-instance cost; a cost that rises
with what the host already holds (as an htb class's did, docs/scale.md)
shows as a growth well above 1.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Stage:
    name: str
    wall_s: float = 0.0
    user_s: float = 0.0
    sys_s: float = 0.0
    items_s: list[float] = field(default_factory=list)  # wall time of each instance, in order

    def row(self) -> dict:
        items = self.items_s
        quarter = len(items) // 4
        growth = None
        if quarter >= 2 and statistics.fmean(items[:quarter]) > 0:
            growth = round(statistics.fmean(items[-quarter:]) / statistics.fmean(items[:quarter]), 3)
        return {
            "stage": self.name,
            "wall_s": round(self.wall_s, 4),
            "user_s": round(self.user_s, 4),
            "sys_s": round(self.sys_s, 4),
            "instances": len(items),
            "per_instance_ms": round(statistics.fmean(items) * 1000, 3) if items else None,
            "growth": growth,
        }


class StageClock:
    """Stages timed on whichever thread runs them (CPU is that thread's)."""

    def __init__(self) -> None:
        self._stages: dict[str, Stage] = {}
        self._timed: set[str] = set()  # stages timed whole (the rest: parts of one, per instance only)
        self._lock = threading.Lock()

    def _get(self, name: str) -> Stage:
        with self._lock:
            return self._stages.setdefault(name, Stage(name))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """The whole stage: wall and CPU added to `name`."""
        stage = self._get(name)
        self._timed.add(name)
        wall, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
        try:
            yield
        finally:
            after = resource.getrusage(resource.RUSAGE_THREAD)
            stage.wall_s += time.perf_counter() - wall
            stage.user_s += after.ru_utime - cpu.ru_utime
            stage.sys_s += after.ru_stime - cpu.ru_stime

    @contextmanager
    def item(self, name: str) -> Iterator[None]:
        """One instance's part of stage `name` (inside or outside `stage`);
        a name never timed whole ("network: veth") is a part of a stage,
        listed in bringup.json and left out of the summary line."""
        stage = self._get(name)
        began = time.perf_counter()
        try:
            yield
        finally:
            stage.items_s.append(time.perf_counter() - began)

    def rows(self) -> list[dict]:
        with self._lock:
            return [stage.row() for stage in self._stages.values()]

    def summary(self) -> str:
        """One line: each stage's wall time, per instance where it has them."""
        parts = []
        for row in self.rows():
            if row["stage"] not in self._timed:
                continue
            per = f" ({row['per_instance_ms']:.1f} ms/instance, growth {row['growth']})" if row["instances"] else ""
            parts.append(f"{row['stage']} {row['wall_s']:.2f} s{per}")
        return "bring-up: " + ", ".join(parts)
