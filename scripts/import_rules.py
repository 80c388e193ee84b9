#!/usr/bin/env python3
"""Two import rules import-linter's contracts do not state, checked on the
installed layout (scripts/check.py runs this in build/lint-tree):

- no import cycles between modules of collapsar, TYPE_CHECKING imports
  included: a cycle means two modules that cannot be read apart;
- no module imports another module's private name (`from x import _y`): a
  name two modules need is public and lives where both can see it.  (Reading
  or setting another object's private attribute is ruff's SLF001.)

Exit 0, or 1 with one line per cycle and per private import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph.modules)))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def private_imports(root: Path) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                for alias in node.names:
                    name = alias.name
                    if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                        problems.append(f"{path}:{node.lineno}: imports the private name {name} of {node.module}")
    return problems


def main() -> int:
    graph = grimp.build_graph("collapsar")
    problems = [f"import cycle: {' <-> '.join(group)}" for group in cycles(graph)]
    problems += private_imports(Path("collapsar"))
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
