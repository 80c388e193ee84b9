"""What every manager run takes, whatever makes its instances.

Each mode extends it: local mode with its subnet, run directory, probe and
start gate (collapsar.manager.local.run.LocalOptions), container mode with
its experiment id, the wait for containers and the bootstrapper
(collapsar.manager.container.run.ContainerOptions).  The command line
declares these once for both commands (collapsar.commands.runopts).
"""

from __future__ import annotations

from dataclasses import dataclass

# From this many instances on, `tree="auto"` picks the active tree
# (collapsar.tcal.active): below, a class per destination at t=0 costs under
# ~4 s of bring-up; above, the kernel's cost per class (it grows with every
# class on the host) makes N^2 classes take minutes (docs/scale.md).
ACTIVE_TREE_FROM = 100
TREES = ("auto", "full", "active")


@dataclass(kw_only=True)
class RunOptions:
    duration_us: int | None = None  # None: until stopped (or, in local mode, every command exited)
    status_port: int | None = 0  # None: no status API; 0: any free port
    grace_s: float = 5.0  # between SIGTERM and SIGKILL when an instance leaves or the run ends
    sharing: bool = True  # False: each pair shaped to its collapsed path only
