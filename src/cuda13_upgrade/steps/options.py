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

from cuda13_upgrade import ondemand, varnames
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


def check_names(
    host: str,
    names: Iterable[str],
    known: Iterable[str],
    allowed: Any,
    origins: Mapping[str, list[str]] | None = None,
) -> None:
    """Refuse the names of ``names`` (the host's variables from the inventory and ``-e``) that
    carry a project prefix but that nothing reads (:func:`cuda13_upgrade.varnames.unknown`).

    ``known``: :func:`cuda13_upgrade.varnames.known_names`; ``allowed``: the operator's
    ``cuda13_extra_vars_allowed`` (a list of names or patterns; anything else is taken as
    none); ``origins``: :func:`cuda13_upgrade.varnames.origins`. Raises StepFailed with
    :func:`cuda13_upgrade.varnames.refusal` and ``{"unknown": [{"name", "suggestion"}]}``.
    """
    patterns = [str(p) for p in allowed] if isinstance(allowed, list | tuple) else []
    found = varnames.unknown(names, known, patterns)
    if found:
        raise StepFailed(varnames.refusal(host, found, origins or {}), {"unknown": found})


def check(
    host: str,
    given: Mapping[str, Any],
    specs: Mapping[str, Any],
    defaults: Mapping[str, Any],
    hook_search: list[str | Path] | None = None,
) -> dict:
    """Check and convert the options of ``host``.

    ``given``: ``{option: value}`` the inventory or ``-e`` set; ``specs``: :func:`read_specs`;
    ``defaults``: every other option's templated default. ``hook_search``: the directories a
    relative drain hook is looked up in (:func:`cuda13_upgrade.ondemand.hook_failures`; None
    checks only that the hooks come as a pair). Returns ``{"values": {option: value},
    "given": [option names]}``. Raises StepFailed listing every bad value, each with the option
    and the remedy, when one does not hold.
    """
    verdict = rules.validate(dict(given), specs, defaults)
    failures = list(verdict["failures"])
    if verdict["ok"]:
        values = verdict["values"]
        failures += ondemand.hook_failures(
            values.get("cuda13_drain_tasks"), values.get("cuda13_undrain_tasks"), hook_search
        )
    if failures:
        lines = "\n".join(f"- {failure['message']}" for failure in failures)
        raise StepFailed(
            f"{host}: invalid option values; nothing on the host was changed.\n{lines}",
            {"failures": failures},
        )
    return {"values": verdict["values"], "given": sorted(given)}


#: Options no longer read, each with what replaced it: a value the inventory or ``-e`` still
#: sets is told to the operator (:func:`retired`), not refused.
RETIRED = {
    "nvidia_driver_check_validate_roles": (
        "the options of every role ({roles}) are checked at the start of the preflight, "
        "before any change, and every step reads them"
    ),
    "verify_throughput_baseline_load": (
        "the load metrics are compared only by the upgrade's gate (action cuda13_verify), which takes "
        "the old stack's from its own baseline step; roles/verify_throughput measures them and "
        "compares none"
    ),
}


def retired(names: Iterable[str]) -> list[str]:
    """The warning line for each name of ``names`` (the variables the host has) in :data:`RETIRED`.

    Returns ``["<name> is no longer read: <what replaced it>. Remove it from the inventory
    or -e."]`` in :data:`RETIRED`'s order; ``[]`` when none is set.
    """
    have = set(names)
    return [
        f"{name} is no longer read: {why.format(roles=', '.join(ROLES))}. Remove it from the inventory or -e."
        for name, why in RETIRED.items()
        if name in have
    ]
