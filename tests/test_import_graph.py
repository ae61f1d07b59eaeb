"""The package's modules import each other without a cycle.

A cycle (``cli`` importing ``progress`` importing ``cli``) works only while
one side defers its import into a function, and breaks on the first
top-level use. Every ``cuda13_upgrade`` import, at any depth of a module, is
an edge here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "cuda13_upgrade"


def imports_of(path: Path) -> set[str]:
    """The package modules a module imports (``cuda13_upgrade.X`` -> ``X``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "cuda13_upgrade":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("cuda13_upgrade."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cuda13_upgrade."):
                    found.add(alias.name.split(".")[1])
    return found


def graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for nxt in sorted(edges.get(name, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(edges):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle_deferred_into_a_function():
    assert cycle({"cli": {"progress"}, "progress": {"cli"}}) == ["cli", "progress", "cli"]
    assert cycle({"cli": {"progress", "report"}, "progress": {"report"}, "report": set()}) is None


def test_the_package_has_no_import_cycle():
    edges = graph()
    assert "progress" in edges["cli"]
    assert cycle(edges) is None, " -> ".join(cycle(edges))
