"""The step ``options``: every option the steps read, checked once per host and run (``cuda13_options``).

The options are the roles' public variables (each role's ``defaults/main.yml``
and ``meta/argument_specs.yml``) and the playbooks' own (:data:`cuda13_upgrade.options.PLAY_OPTIONS`).
The action plugin gives this step what the inventory or ``-e`` set for the host
(``given``) and every other option's default as Ansible templates it
(``defaults``: ``cuda13_pip_tmpdir`` is ``<cuda13_new_venv>/.pip-tmp`` for this
host's ``cuda13_new_venv``); :func:`cuda13_upgrade.options.validate` checks
and converts them. The result is one record, the fact ``cuda13_options``, that
every later step reads; nothing templates an option again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from cuda13_upgrade import options as rules
from cuda13_upgrade.steps.host import StepFailed

#: The roles whose variables are options, in the order their defaults are read.
ROLES = (
    "cuda13",
    "stack_snapshot",
    "cuda_toolkit",
    "cu130_wheels",
    "sglang_build",
    "stack_switch",
    "verify_throughput",
    "rollback",
    "artifact_cache",
    "nvidia_driver_check",
)

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader
    except (OSError, yaml.YAMLError) as exc:
        raise StepFailed(f"cannot read {path}: {exc}") from exc


def read_specs(roles_dir: Path, roles: Iterable[str] = ROLES) -> dict[str, dict[str, Any]]:
    """``{option: argument spec entry}`` of the roles' ``meta/argument_specs.yml`` (entry point main)."""
    merged: dict[str, dict[str, Any]] = {}
    for role in roles:
        path = Path(roles_dir) / role / "meta" / "argument_specs.yml"
        document = _load(path)
        try:
            merged.update(document["argument_specs"]["main"]["options"])
        except (KeyError, TypeError) as exc:
            raise StepFailed(f"{path} is not an argument spec with an entry point main") from exc
    return merged


def read_defaults(roles_dir: Path, roles: Iterable[str] = ROLES) -> dict[str, Any]:
    """``{option: default as written}`` of the roles' ``defaults/main.yml`` (templates untemplated)."""
    defaults: dict[str, Any] = {}
    for role in roles:
        document = _load(Path(roles_dir) / role / "defaults" / "main.yml") or {}
        if isinstance(document, Mapping):
            defaults.update(document)
    return defaults


def option_names(specs: Mapping[str, Any]) -> list[str]:
    """Every option's name: the specs' and the playbooks' own."""
    return sorted({*specs, *rules.PLAY_OPTIONS})


def check(host: str, given: Mapping[str, Any], specs: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict:
    """Check and convert the options of ``host``.

    ``given``: ``{option: value}`` the inventory or ``-e`` set; ``specs``: :func:`read_specs`;
    ``defaults``: every other option's templated default. Returns ``{"values": {option: value},
    "given": [option names]}``. Raises StepFailed listing every bad value, each with the option
    and the remedy, when one does not hold.
    """
    verdict = rules.validate(dict(given), specs, defaults)
    if not verdict["ok"]:
        lines = "\n".join(f"- {failure['message']}" for failure in verdict["failures"])
        raise StepFailed(
            f"{host}: invalid option values; nothing on the host was changed.\n{lines}",
            {"failures": verdict["failures"]},
        )
    return {"values": verdict["values"], "given": sorted(given)}
