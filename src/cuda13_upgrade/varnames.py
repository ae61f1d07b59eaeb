"""Variable names with the project's prefixes that nothing reads: refused before any host is touched.

A variable of the inventory or ``-e`` whose name starts with one of the roles'
prefixes (:data:`PREFIXES`) but that no role or playbook reads is a typo
(``verify_throughput_tolerence_pct: 5.0`` leaves the gate at its default 3 %,
``cuda13_drain_task:`` leaves the rollout without a drain hook). The options
step (action ``cuda13_options``) refuses such a name, naming it, where it was
set (:func:`origins`) and the closest known name (:func:`closest`, difflib).

The known names (:func:`known_names`) are read from the files at run time:
every option of every entry point of every role's ``meta/argument_specs.yml``,
every role's ``defaults/main.yml``, the playbooks' own options
(:data:`cuda13_upgrade.options.PLAY_OPTIONS`), the names the playbooks and roles
set themselves (``register:``, ``set_fact:``, ``vars:`` of plays, blocks and
tasks: :func:`names_set_in`), and the facts the action plugins return and the
command line passes (:data:`INTERNAL_NAMES`). An operator's own variables with
one of the prefixes are listed in ``cuda13_extra_vars_allowed`` (names or
shell-style patterns, ``fnmatch``).
"""

from __future__ import annotations

import difflib
import fnmatch
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

#: The prefixes of the roles' variables (one per role, and the package's ``cuda13_``).
PREFIXES = (
    "cuda13_",
    "cuda_toolkit_",
    "cu130_wheels_",
    "sglang_build_",
    "verify_throughput_",
    "nvidia_driver_check_",
    "stack_snapshot_",
    "stack_switch_",
    "rollback_",
    "artifact_cache_",
)

#: Names the Python side sets or passes that no YAML file names as set: the facts the
#: action plugins return (``ansible_facts``), the run record, the values the command line
#: passes with ``-e`` (cli/commands.py, cli/runner.py) and the hooks' own switches
#: (playbooks/hooks/). A test (tests/test_varnames.py) checks that every such name found in
#: action_plugins/ and the command line is listed.
INTERNAL_NAMES = frozenset(
    {
        # action_plugins/*.py: ansible_facts
        "cuda13_options",
        "cuda13_host_run",
        "cuda13_result",
        "cuda13_fleet",
        "cuda13_breaker",
        "cuda13_run_hosts",
        "cuda13_upgrade_hosts",
        "cuda13_not_started",
        "cuda13_notice",
        "artifact_cache_find_links",
        "artifact_cache_files",
        "artifact_cache_fetched_files",
        "artifact_cache_fetched_bytes",
        "cu130_wheels_stack",
        "cu130_wheels_verdict",
        "cuda13_must_set_sources",
        # read with a default by the roles (a caller's resolved set)
        "cu130_wheels_resolved_target",
        # passed by the command line
        "cuda13_run_id",
        "cuda13_interrupted_steps",
        "cuda13_interrupted_by",
        # playbooks/hooks/sglang-router-*.yml
        "cuda13_router_delegate_to",
        # the escape hatch itself
        "cuda13_extra_vars_allowed",
    }
)

#: Where a name was set when no file of the inventory names it.
UNKNOWN_ORIGIN = "set in the inventory or -e"

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_SUFFIXES = (".yml", ".yaml", ".json")


def has_prefix(name: str) -> bool:
    """Whether ``name`` starts with one of :data:`PREFIXES` (``__cuda13_x``, a file's own, does not)."""
    return name.startswith(PREFIXES)


def _load(path: Path) -> Any:
    """The YAML document of ``path``, or None where it cannot be read (a vaulted file, a template)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _set_in(node: Any, found: set[str]) -> None:
    """Collect, recursively, the names a task list or play sets: ``register``, ``set_fact``
    keys, ``vars`` keys (plays, blocks, tasks, includes)."""
    if isinstance(node, list):
        for item in node:
            _set_in(item, found)
        return
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        if key == "register" and isinstance(value, str):
            found.add(value.strip())
        elif key in ("vars", "ansible.builtin.set_fact", "set_fact") and isinstance(value, Mapping):
            found.update(str(k) for k in value)
        elif isinstance(value, list | Mapping):
            _set_in(value, found)


def names_set_in(roots: Iterable[Path]) -> set[str]:
    """Every variable name the YAML files under ``roots`` (playbooks/, roles/) define: options of
    every entry point of each ``meta/argument_specs.yml``, the keys of ``defaults/`` and
    ``vars/`` files, and what plays and task files set (``register``, ``set_fact``, ``vars``).
    Files that do not parse are skipped."""
    found: set[str] = set()
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if not path.is_file() or path.suffix not in (".yml", ".yaml"):
                continue
            document = _load(path)
            parent = path.parent.name
            if path.name == "argument_specs.yml" and isinstance(document, Mapping):
                for entry in (document.get("argument_specs") or {}).values():
                    if isinstance(entry, Mapping):
                        found.update((entry.get("options") or {}).keys())
            elif parent in ("defaults", "vars") and isinstance(document, Mapping):
                found.update(str(k) for k in document)
            else:
                _set_in(document, found)
    return {name for name in found if has_prefix(name)}


def known_names(repo: Path, play_options: Iterable[str] = ()) -> set[str]:
    """The names the project reads or sets: :func:`names_set_in` over ``repo``'s playbooks/ and
    roles/, ``play_options`` (:data:`cuda13_upgrade.options.PLAY_OPTIONS`) and
    :data:`INTERNAL_NAMES`."""
    repo = Path(repo)
    return names_set_in([repo / "playbooks", repo / "roles"]) | set(play_options) | set(INTERNAL_NAMES)


def allowed(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``cuda13_extra_vars_allowed`` (names or fnmatch patterns) lists ``name``."""
    return any(fnmatch.fnmatchcase(name, str(p)) for p in patterns)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (difflib's ratio, at least 0.8), or None."""
    same_prefix = [k for k in known if k.split("_", 1)[0] == name.split("_", 1)[0]] or list(known)
    matches = difflib.get_close_matches(name, same_prefix, n=1, cutoff=0.8)
    return matches[0] if matches else None


def unknown(names: Iterable[str], known: Iterable[str], allowed_patterns: Iterable[str] = ()) -> list[dict]:
    """The names of ``names`` with a project prefix that are neither known nor allowed.

    Returns ``[{"name", "suggestion": closest known name or None}]``, sorted by name."""
    known = set(known)
    patterns = list(allowed_patterns or [])
    out = []
    for name in sorted(set(names)):
        if not has_prefix(name) or name in known or allowed(name, patterns):
            continue
        out.append({"name": name, "suggestion": closest(name, known)})
    return out


def _inventory_names(node: Any, host: str, found: set[str], *, in_hosts: bool = False) -> None:
    """Names an inventory file (YAML format) sets for ``host``: every group's ``vars`` and the
    host's own entry under ``hosts`` (a group this host is not in is read too: a name set
    there for another host is still where an operator would look)."""
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        if in_hosts:
            if isinstance(value, Mapping):
                found.update(str(k) for k in value)
            continue
        if key == "vars" and isinstance(value, Mapping):
            found.update(str(k) for k in value)
        elif key == "hosts":
            _inventory_names(value, host, found, in_hosts=True)
        elif key == "children" or isinstance(value, Mapping):
            _inventory_names(value, host, found)


def _var_files(directory: Path, host: str, groups: Iterable[str]) -> list[Path]:
    """The group_vars/host_vars files under ``directory`` that Ansible reads for ``host``."""
    files: list[Path] = []
    for kind, names in (("group_vars", ["all", *groups]), ("host_vars", [host])):
        base = directory / kind
        for name in names:
            candidates = [base / name, *(base / f"{name}{s}" for s in _YAML_SUFFIXES)]
            for candidate in candidates:
                if candidate.is_dir():
                    files.extend(p for p in sorted(candidate.rglob("*")) if p.is_file())
                elif candidate.is_file():
                    files.append(candidate)
    return files


def origins(
    host: str,
    groups: Iterable[str],
    sources: Iterable[str],
    playbook_dir: str | None,
    extra_vars: Mapping[str, Any] | None,
) -> dict[str, list[str]]:
    """``{name: [where it was set]}`` as far as the files say: ``"-e"`` for the extra vars
    (``extra_vars``), else each group_vars/host_vars file of the inventory sources'
    directories and of ``playbook_dir`` that Ansible reads for ``host`` (in ``groups``), and the
    inventory files themselves. Ansible's variables carry no origin: a name found nowhere here
    (a dynamic inventory, a vaulted file) is :data:`UNKNOWN_ORIGIN` (:func:`origin_of`)."""
    found: dict[str, list[str]] = {}

    def note(names: Iterable[str], where: str) -> None:
        for name in names:
            if has_prefix(str(name)) and where not in found.setdefault(str(name), []):
                found[str(name)].append(where)

    groups = [g for g in groups if g not in ("all", "ungrouped")]
    directories: list[Path] = []
    for source in sources or []:
        path = Path(source)
        if path.is_dir():
            directories.append(path)
            for file in sorted(path.iterdir()):
                if file.is_file() and file.suffix in (".yml", ".yaml"):
                    names: set[str] = set()
                    _inventory_names(_load(file), host, names)
                    note(names, str(file))
        elif path.is_file():
            directories.append(path.parent)
            if path.suffix in (".yml", ".yaml"):
                names = set()
                _inventory_names(_load(path), host, names)
                note(names, str(path))
    if playbook_dir:
        directories.append(Path(playbook_dir))
    for directory in dict.fromkeys(d.resolve() for d in directories):
        for file in _var_files(directory, host, groups):
            document = _load(file)
            if isinstance(document, Mapping):
                note((str(k) for k in document), str(file))
    for name in extra_vars or {}:
        if has_prefix(str(name)):
            found[str(name)] = ["-e"]
    return found


def origin_of(name: str, found: Mapping[str, list[str]]) -> str:
    """``"set in <file>"`` / ``"set with -e"`` / :data:`UNKNOWN_ORIGIN` for ``name``."""
    where = found.get(name) or []
    if where == ["-e"]:
        return "set with -e"
    if where:
        return "set in " + ", ".join(os.path.relpath(w) if os.path.isabs(w) else w for w in where)
    return UNKNOWN_ORIGIN


def refusal(host: str, names: list[Mapping[str, Any]], found: Mapping[str, list[str]]) -> str:
    """The options step's message for unknown names (:func:`unknown`), one line per name, e.g.::

        h: unknown variable with a prefix of cuda13-upgrade's roles; no role or playbook reads it,
        so its value would be ignored. Nothing on the host was changed.
        - verify_throughput_tolerence_pct (set with -e): did you mean verify_throughput_tolerance_pct?
        Rename each to the option meant (docs/options.md), or list your own variables with these
        prefixes in cuda13_extra_vars_allowed.

    (the first and last sentences are each one line in the message).
    """
    lines = []
    for entry in names:
        hint = f"did you mean {entry['suggestion']}?" if entry.get("suggestion") else "no known name is close"
        lines.append(f"- {entry['name']} ({origin_of(entry['name'], found)}): {hint}")
    noun = "variable" if len(names) == 1 else "variables"
    it = "it" if len(names) == 1 else "them"
    return (
        f"{host}: unknown {noun} with a prefix of cuda13-upgrade's roles; no role or playbook reads "
        f"{it}, so {'its value' if len(names) == 1 else 'their values'} would be ignored. Nothing on the "
        "host was changed.\n" + "\n".join(lines) + "\nRename each to the option meant "
        "(docs/options.md), or list your own variables with these prefixes in cuda13_extra_vars_allowed."
    )
