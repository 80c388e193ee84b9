"""The native libraries tcal/Makefile builds (build/), loaded through ctypes."""

from __future__ import annotations

import ctypes
import pathlib

from collapsar.errors import EnvironmentProblem

TCAL_DIR = pathlib.Path(__file__).resolve().parent


def load_built(path: pathlib.Path, sources: tuple[str, ...], what: str) -> ctypes.CDLL:
    """Load `path`, refusing a missing build or one older than any of its
    `sources` (relative to tcal/): a stale library may disagree with its
    Python side on the layout of the structs they share."""
    if not path.exists():
        raise EnvironmentProblem(f"{what}: not built ({path} is missing)", "run `make -C tcal`")
    built = path.stat().st_mtime
    newer = [s for s in sources if (TCAL_DIR / s).stat().st_mtime > built]
    if newer:
        raise EnvironmentProblem(f"{what}: the build is older than tcal/{newer[0]}", "run `make -C tcal`")
    return ctypes.CDLL(str(path))  # CDLL, not PyDLL: calls release the interpreter lock
