"""Stage the manager image's build context (called by docker/Makefile).

  stage.py requirements PYPROJECT         print the pinned run-time requirements
  stage.py manager TOP CACHE OUT REQS     fill OUT with wheels/, src/, aeron/

Why a staged context instead of the repository: the repository holds a
virtualenv, Aeron's build tree and .git, which the legacy builder would send
to the daemon on every build.  Why wheels downloaded here: the image build
then needs no network at all, and the wheels are cached by the content of
the requirement list, so a second build downloads nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

# What the package needs at run time; tests, docs and native sources stay out.
SOURCE_DIRS = ("collapsar", "tcal", "emulation-manager", "deploy-generator", "dashboard", "topologies")
SOURCE_FILES = ("pyproject.toml", "README.md")
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc", "*.o", "*.d", "node_modules")


def requirements(pyproject: Path) -> str:
    data = tomllib.loads(pyproject.read_text())
    pins = list(data["project"]["dependencies"]) + list(data["build-system"]["requires"])
    return "\n".join(sorted(pins)) + "\n"


# What the pins pull in, pinned too (the same file scripts/setup.sh installs with).
CONSTRAINTS = Path(__file__).resolve().parent.parent / "deps" / "python-constraints.txt"


def _wheels(cache: Path, reqs: Path) -> Path:
    key = hashlib.sha256(reqs.read_bytes() + CONSTRAINTS.read_bytes()).hexdigest()[:16]
    target = cache / f"wheels-{key}"
    if (target / "requirements.txt").exists():
        return target
    partial = cache / f"wheels-{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # Wheels for the image's Python (Debian 12: CPython 3.11, glibc 2.36),
    # whatever Python runs this script.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux_2_17_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "any",
            "-r",
            str(reqs),
            "-c",
            str(CONSTRAINTS),
            "-d",
            str(partial),
        ],
        check=True,
    )
    shutil.copy2(reqs, partial / "requirements.txt")
    partial.rename(target)
    return target


def _sync(source: Path, target: Path) -> None:
    """Copy keeping metadata: unchanged files leave docker's layer cache valid."""
    if target.exists():
        shutil.rmtree(target)
    if source.is_dir():
        shutil.copytree(source, target, ignore=IGNORE, symlinks=True)
    else:
        target.mkdir(parents=True)


def manager(top: Path, cache: Path, out: Path, reqs: Path) -> None:
    built = top / "tcal" / "build"
    if not all((built / name).exists() for name in ("libcxcounters.so", "libcxfire.so")):
        subprocess.run(["make", "-s", "-C", str(top / "tcal")], check=True)
    out.mkdir(parents=True, exist_ok=True)
    _sync(_wheels(cache, reqs), out / "wheels")
    src = out / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir()
    for name in SOURCE_DIRS:
        if (top / name).exists():
            shutil.copytree(top / name, src / name, ignore=IGNORE, symlinks=True)
    for name in SOURCE_FILES:
        shutil.copy2(top / name, src / name)
    # Aeron only if it was built (scripts/build-aeron.sh): sharing needs it,
    # shaping does not.
    _sync(top / "third_party" / "aeron" / "install", out / "aeron")


def main(argv: list[str]) -> int:
    if argv[:1] == ["requirements"] and len(argv) == 2:
        sys.stdout.write(requirements(Path(argv[1])))
        return 0
    if argv[:1] == ["manager"] and len(argv) == 5:
        manager(Path(argv[1]), Path(argv[2]), Path(argv[3]), Path(argv[4]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
