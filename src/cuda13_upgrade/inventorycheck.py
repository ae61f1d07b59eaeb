"""The inventory's own consistency, checked on the control node before any host is touched
(action ``cuda13_inventory``, ``playbooks/start.yml``).

Two faults drop an inventory's values without a word from Ansible, and the run
would then check and use the roles' defaults (the plain profile only, ``/opt``
paths, any GPU count):

- a ``group_vars/<name>`` (a directory or a ``<name>.yml``/``.yaml``/``.json``
  file) beside the inventory that names no group of it, e.g. ``hosts.yml``'s
  group renamed and ``group_vars/blackwell/`` left (:func:`stray_group_vars`);
  Ansible loads group variables only for the groups the inventory has;
- target hosts that receive none of the values a fleet must set
  (:data:`MUST_SET`, the "must set for a fleet" tier of ``docs/options.md``,
  :data:`cuda13_upgrade.options_doc.MUST`) from the inventory or ``-e``
  (:func:`hosts_without_values`).

:func:`value_sources` says, per host, where each must-set value came from (the
file of the inventory, ``-e``, or the role default); ``cuda13-upgrade plan``
prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cuda13_upgrade.options_doc import MUST

#: The values a fleet must set, as the inventory gives them: the "must set for a fleet" tier
#: (options_doc.MUST) less ``cuda13_target_hosts``, which the plays read only from ``-e``.
MUST_SET: tuple[str, ...] = tuple(name for name in MUST if name != "cuda13_target_hosts")

#: The file suffixes Ansible's ``host_group_vars`` plugin reads (its default
#: ``yaml_valid_extensions``), and a file without one.
_SUFFIXES = (".yml", ".yaml", ".json")

ROLE_DEFAULT = "role default"


def _group_name(entry: Path) -> str | None:
    """The group a ``group_vars`` entry is for, or None for what Ansible does not read
    (hidden files, other suffixes)."""
    if entry.name.startswith("."):
        return None
    if entry.is_dir():
        return entry.name
    if entry.suffix in _SUFFIXES:
        return entry.stem
    if entry.suffix == "":
        return entry.name
    return None


def inventory_dirs(sources: Iterable[str]) -> list[Path]:
    """The directories whose ``group_vars`` Ansible reads for ``sources`` (the inventory
    sources, ``ansible_inventory_sources``): a directory source itself, a file source's
    directory; a host list (``a,b,``) has none."""
    dirs: list[Path] = []
    for source in sources:
        path = Path(str(source))
        if "," in str(source) and not path.exists():
            continue
        found = path if path.is_dir() else path.parent
        if found not in dirs:
            dirs.append(found)
    return dirs


def stray_group_vars(sources: Iterable[str], groups: Iterable[str]) -> list[str]:
    """One message per ``group_vars`` entry beside the inventory that names no group of it.

    ``sources``: the inventory sources; ``groups``: the inventory's group names (``groups``'
    keys, ``all`` and ``ungrouped`` included). Returns ``[message]`` (empty when all match)."""
    known = set(groups)
    messages = []
    for directory in inventory_dirs(sources):
        group_vars = directory / "group_vars"
        if not group_vars.is_dir():
            continue
        for entry in sorted(group_vars.iterdir()):
            name = _group_name(entry)
            if name is None or name in known:
                continue
            shown = f"{entry}/" if entry.is_dir() else str(entry)
            messages.append(
                f"{shown} is for the group '{name}', which the inventory {directory} does not have "
                f"(its groups: {', '.join(sorted(known - {'all', 'ungrouped'})) or 'none'}): Ansible loads "
                "none of its values, and every host would get the roles' defaults instead. Rename it "
                f"to the group's name, or name the group '{name}' in the inventory."
            )
    return messages


def value_sources(given: Mapping[str, Any], origins: Mapping[str, str]) -> dict[str, str]:
    """Where each of :data:`MUST_SET` came from for one host: ``origins[name]`` (the file
    and line of the inventory, or ``-e``) for a value in ``given`` (the host's variables
    from the inventory or ``-e``), else :data:`ROLE_DEFAULT`."""
    return {
        name: (origins.get(name) or "the inventory") if name in given else ROLE_DEFAULT for name in MUST_SET
    }


def hosts_without_values(
    sources: Mapping[str, Mapping[str, str]], groups_of: Mapping[str, Sequence[str]]
) -> list[str]:
    """One message for the hosts that receive none of :data:`MUST_SET` (every one a
    :data:`ROLE_DEFAULT` in ``sources``, per host :func:`value_sources`); ``groups_of``: each
    host's groups (``group_names``). Returns ``[]`` or ``[message]``."""
    bare = [host for host, where in sources.items() if all(v == ROLE_DEFAULT for v in where.values())]
    if not bare:
        return []
    groups = sorted({g for host in bare for g in groups_of.get(host, ())})
    return [
        f"{', '.join(bare)} receive{'s' if len(bare) == 1 else ''} none of the values a fleet must set "
        f"({', '.join(MUST_SET)}) from the inventory: each would be the roles' default. Set them in "
        f"group_vars/<group>/ of a group {'it is' if len(bare) == 1 else 'they are'} in "
        f"({', '.join(groups) or 'none'}), or in host_vars/<host>.yml "
        '(docs/options.md, "Must set for a fleet").'
    ]


def check(
    sources: Iterable[str],
    groups: Iterable[str],
    values: Mapping[str, Mapping[str, str]],
    groups_of: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    """Both checks: ``{"failures": [message], "sources": values}``; ``values``: per target
    host :func:`value_sources`."""
    failures = stray_group_vars(sources, groups) + hosts_without_values(values, groups_of)
    return {"failures": failures, "sources": {h: dict(v) for h, v in values.items()}}


def failure_message(failures: Sequence[str]) -> str:
    """The refusal the run stops with, listing ``failures``."""
    lines = "\n".join(f"- {failure}" for failure in failures)
    return f"The inventory's values do not reach its hosts; no host was changed.\n{lines}"
