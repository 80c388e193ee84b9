#!/usr/bin/env python3
"""The static checks CI runs before the tests: ruff (lint and format), mypy on
the core, the import-linter contracts of the layers (pyproject.toml holds
the configuration of all three), and two import rules of our own: no
cycles, no private names imported (scripts/import_rules.py).

    python scripts/check.py            every check; exit 1 at the first failing one
    python scripts/check.py mypy       one of: ruff, format, mypy, imports, cycles

mypy and import-linter find modules by folder, and Collapsar's components are
installed under other names (tcal/ is collapsar.tcal, emulation-manager/ is
collapsar.manager: [tool.setuptools.package-dir]).  So both read a tree of
hard links laid out as the installed package, build/lint-tree/collapsar/..., and
what they report is mapped back to the files of the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
TREE = TOP / "build" / "lint-tree"


def package_dirs() -> dict[str, Path]:
    """`collapsar.tcal` -> TOP/tcal, from pyproject's package-dir."""
    with open(TOP / "pyproject.toml", "rb") as handle:
        mapping = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
    return {package: TOP / folder for package, folder in mapping.items()}


def build_tree() -> dict[str, str]:
    """Every .py file linked under TREE as the installed package lays them
    out; returns tree prefix -> checkout prefix, to map reports back."""
    shutil.rmtree(TREE, ignore_errors=True)
    back = {}
    for package, folder in package_dirs().items():
        target = TREE.joinpath(*package.split("."))
        back[f"{target.relative_to(TREE)}/"] = f"{folder.relative_to(TOP)}/"
        for source in folder.rglob("*.py"):
            relative = source.relative_to(folder)
            if "node_modules" in relative.parts:
                continue
            link = target / relative
            link.parent.mkdir(parents=True, exist_ok=True)
            # A hard link (a copy across file systems), not a symlink: grimp
            # names a module by its real path.
            try:
                os.link(source, link)
            except OSError:
                shutil.copy2(source, link)
    # Longest prefix first: collapsar/tcal/ before collapsar/.
    return dict(sorted(back.items(), key=lambda item: -len(item[0])))


def run(name: str, command: list[str], back: dict[str, str] | None = None) -> bool:
    """Run one check; with `back`, in TREE (where `collapsar` is the tree's, not
    the checkout's folder of that name) and its report mapped back."""
    started = time.monotonic()
    cwd, env = (TREE, dict(os.environ, PYTHONPATH=str(TREE))) if back is not None else (TOP, None)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    for tree_prefix, checkout_prefix in (back or {}).items():
        output = re.sub(rf"(^|\s){re.escape(tree_prefix)}", rf"\g<1>{checkout_prefix}", output, flags=re.M)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.stdout.write(output)
        print(f"check: {name} failed ({took:.1f} s): {' '.join(command)}", file=sys.stderr)
        return False
    print(f"check: {name} passed ({took:.1f} s)")
    return True


def main(argv: list[str]) -> int:
    python = sys.executable
    lint_imports = str(Path(python).parent / "lint-imports")  # the venv's; no `python -m` form
    config, cache = TOP / "pyproject.toml", TOP / "build" / "mypy-cache"
    back: dict[str, str] = {}

    def tree() -> dict[str, str]:
        if not back:
            back.update(build_tree())
        return back

    checks = {
        "ruff": lambda: run("ruff check", [python, "-m", "ruff", "check", "--no-cache", "."]),
        "format": lambda: run("ruff format --check", [python, "-m", "ruff", "format", "--check", "--no-cache", "."]),
        "mypy": lambda: run(
            "mypy", [python, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache)], tree()
        ),
        "imports": lambda: run("import-linter", [lint_imports, str(config), "--no-cache"], tree()),
        "cycles": lambda: run(
            "no import cycles, no private imports", [python, str(TOP / "scripts" / "import_rules.py")], tree()
        ),
    }
    names = argv or list(checks)
    unknown = [name for name in names if name not in checks]
    if unknown:
        print(f"check: unknown check {', '.join(unknown)}; expected one of {', '.join(checks)}", file=sys.stderr)
        return 2
    for name in names:
        if not checks[name]():
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
