"""What produced a run: the kernel, the tools and their versions, taken
when the run starts and written to RUNDIR/provenance.json, so a report made
later, on another machine, still says what it shows the results of.

Every probe is bounded (a version command gets PROBE_TIMEOUT_S) and a tool
that is missing or says nothing reads as null; nothing here fails a run.
The source commit is read only from Collapsar's own checkout (the folder
this package was installed from), never from a path a topology names.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

from collapsar.model import host_congestion_control

PROBE_TIMEOUT_S = 2.0
_VERSION_CHARS = 120  # of a tool's first line: enough for any version banner
PROVENANCE = "provenance.json"


def _first_line(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0][:_VERSION_CHARS] if text else None


def _source_commit() -> str | None:
    """Collapsar's commit when it runs from a git checkout, `+dirty` when
    the tree has changes; None for an installed copy."""
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / ".git").exists():
        return None
    commit = _first_line(["git", "-C", str(checkout), "rev-parse", "HEAD"])
    if commit is None or len(commit) != 40:
        return None
    try:  # slow on a checkout the VM shares over 9p with a cold cache: the run goes on without it
        status = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return commit
    return commit + ("+dirty" if status.returncode == 0 and status.stdout.strip() else "")


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    """The host and tool versions of the run starting now."""
    uname = os.uname()
    return {
        "host": {
            "kernel": uname.release,
            "kernel_build": uname.version,
            "machine": uname.machine,
            # What TCP uses where the experiment names no `congestion-control`.
            "tcp_congestion_control": host_congestion_control(),
        },
        "versions": {
            "collapsar": _package_version("collapsar"),
            "collapsar_commit": _source_commit(),
            "python": platform.python_version(),
            "pyroute2": _package_version("pyroute2"),
            "iproute2": _first_line(["tc", "-V"]),
        },
    }
