"""What container mode takes beyond what every run takes (run/options.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from collapsar.manager.run.options import RunOptions


@dataclass
class ContainerOptions(RunOptions):
    experiment_id: str  # the label on the experiment's containers
    status_port: int | None = field(default=7077, kw_only=True)  # None: no status API
    wait_up_s: float = 120.0
    rescan_s: float = 2.0  # rescan even without events: a lost event costs at most this
    bootstrapper: str | None = None  # container id (Swarm); the manager stops when it is gone
