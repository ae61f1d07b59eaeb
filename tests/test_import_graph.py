"""The package's modules import each other without a cycle.

A cycle (``cli.commands`` importing ``progress`` importing ``cli.commands``) works
only while one side defers its import into a function, and breaks on the first
top-level use. Every ``cuda13_upgrade`` import, at any depth of a module,
absolute or relative, is an edge here; the modules of the subpackages (``cli``,
``steps``) are nodes of their own (``cli.parser``), a package's ``__init__`` is the
package (``cli``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "cuda13_upgrade"


def module_name(path: Path) -> str:
    """``cli/parser.py`` -> ``cli.parser``; ``cli/__init__.py`` -> ``cli``; ``summary.py`` -> ``summary``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """The package's modules by name (the host scripts, which run on the hosts alone, left out)."""
    found = {module_name(p): p for p in PACKAGE.rglob("*.py") if "hostscripts" not in p.parts}
    found.pop("", None)  # the package's own __init__
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package modules a module imports: ``from cuda13_upgrade.cli import parser`` ->
    ``cli.parser``, ``from cuda13_upgrade.cli.runner import X`` -> ``cli.runner``,
    ``from . import diagnosis`` (in the package) -> ``diagnosis``."""
    here = module_name(path).split(".") if path.name != "__init__.py" else [*module_name(path).split("."), ""]
    found: set[str] = set()

    def add(base: str, names: list[str]) -> None:
        for name in names:
            dotted = f"{base}.{name}" if base else name
            if dotted in known:
                found.add(dotted)
            elif base in known:
                found.add(base)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                package = here[: len(here) - node.level]
                base = ".".join([*package, *([node.module] if node.module else [])]).strip(".")
            elif node.module == "cuda13_upgrade":
                base = ""
            elif node.module and node.module.startswith("cuda13_upgrade."):
                base = node.module.removeprefix("cuda13_upgrade.")
            else:
                continue
            add(base, [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("cuda13_upgrade."):
                    name = alias.name.removeprefix("cuda13_upgrade.")
                    if name in known:
                        found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, set(known)) - {name} for name, path in known.items()}


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
    assert cycle({"cli": {"progress", "summary"}, "progress": {"summary"}, "summary": set()}) is None


def test_the_graph_sees_subpackages_and_relative_imports():
    edges = graph()
    # The command's modules: the parser, the runner adapter, the subcommands, main.
    assert {"cli.parser", "cli.runner", "progress"} <= edges["cli.commands"]
    assert {"cli.commands", "cli.parser"} <= edges["cli"]
    assert "cli.parser" in edges["cli.runner"]
    # The fleet summary reads the hosts' records and draws the chart; the chart reads neither.
    assert {"hostresult", "chart"} <= edges["summary"]
    assert not edges["chart"] & {"summary", "hostresult"}
    # restarts.py: "from . import diagnosis, effective".
    assert {"diagnosis", "effective"} <= edges["restarts"]
    assert "hostresult" in edges["steps.result"]


def test_the_package_has_no_import_cycle():
    edges = graph()
    assert cycle(edges) is None, " -> ".join(cycle(edges))
