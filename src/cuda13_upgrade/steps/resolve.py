"""The preflight's resolution of a host's whole target: one pip resolution per distinct target of a run.

Read-only. The target is the cu130 wheels (``cu130_wheels_requirements``) together
with the SGLang release the run installs (``sglang_build_method``, ``_repo``,
``_version``: :func:`cuda13_upgrade.sglang_build.requirement`), resolved by pip's
resolver in report mode in a throwaway venv on the host (module ``cuda13_resolve``,
``hostscripts/pip_resolve.py``). The resolved set (exact versions, the hashes the
index gave: :func:`cuda13_upgrade.resolve.resolved_set`) is what the wheels step
installs (``cuda13_upgrade.steps.wheels.install``, ``resolved``).

One resolution per distinct target of the run: the target's key is what the
resolution reads (the pins, the SGLang requirement, the index URL, the extra index
URLs, the find-links directory, the extra pip arguments and the version of the
Python the new venv is made with, read on the host); the first host of a key to
take the key's lock on the control node resolves (:func:`cuda13_upgrade.steps.once.once`),
the others take what it resolved, so that the last batch installs what the canary
got. Called by the preflight's step; not a task of its own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from cuda13_upgrade import resolve as rules
from cuda13_upgrade import sglang_build
from cuda13_upgrade.steps.host import Host, StepFailed
from cuda13_upgrade.steps.once import once
from cuda13_upgrade.steps.wheels import requirements_of

UNCHANGED = "Nothing on the host was changed."


def sglang_requirement(options: Mapping[str, Any]) -> str:
    """The SGLang release to resolve with the wheels, as a PEP 508 requirement.

    ``cu130_wheels_resolve_sglang`` when set, else the one sglang_build installs
    (:func:`cuda13_upgrade.sglang_build.requirement` of ``sglang_build_method``,
    ``sglang_build_repo``, ``sglang_build_version``: the release the step
    :func:`cuda13_upgrade.steps.sglang.build` installs).

    Raises:
        StepFailed: the wheel method with a ref that names no release.
    """
    given = str(options.get("cu130_wheels_resolve_sglang") or "")
    if given:
        return given
    try:
        return sglang_build.requirement(
            str(options.get("sglang_build_method") or "source"),
            str(options.get("sglang_build_repo") or ""),
            str(options.get("sglang_build_version") or ""),
        )
    except ValueError as exc:
        raise StepFailed(str(exc)) from exc


def resolution_key(options: Mapping[str, Any], requirement: str, python_version: str) -> str:
    """The sha1 of what a resolution reads (the key the preflight's task file hashed): the pins,
    the SGLang requirement, the index URL, the extra index URLs, the find-links directory,
    the extra pip arguments and the host's Python version."""
    read = [
        list(options.get("cu130_wheels_requirements") or []),
        requirement,
        str(options.get("cu130_wheels_index_url") or ""),
        list(options.get("cu130_wheels_extra_index_urls") or []),
        str(options.get("cu130_wheels_find_links") or ""),
        list(options.get("cu130_wheels_pip_extra_args") or []),
        python_version,
    ]
    return hashlib.sha1(json.dumps(read).encode("utf-8"), usedforsecurity=False).hexdigest()


def resolve_on(host: Host, options: Mapping[str, Any], requirement: str) -> list[dict[str, Any]]:
    """Resolve the target on ``host`` (module ``cuda13_resolve``): the resolved set.

    Raises:
        StepFailed: ``"<host>: <the refusal> Nothing on the host was changed."`` when pip
        refuses the target (:func:`cuda13_upgrade.resolve.refusal_message`), or its report
        is not one.
    """
    environment = dict(options.get("cu130_wheels_pip_environment") or {})
    found = host.module(
        "cuda13_resolve",
        {
            "python": str(options["cu130_wheels_python"]),
            "pip_tmpdir": str(options["cu130_wheels_pip_tmpdir"]),
            "index_url": str(options.get("cu130_wheels_index_url") or ""),
            "extra_index_urls": list(options.get("cu130_wheels_extra_index_urls") or []),
            "find_links": str(options.get("cu130_wheels_find_links") or ""),
            "pip_extra_args": list(options.get("cu130_wheels_pip_extra_args") or []),
            "requirements": requirements_of(options),
            "sglang": requirement,
            "environment": environment,
        },
        check_mode=False,
    )
    if found.get("rc") != 0:
        refusal = rules.refusal_message(f"{found.get('stdout') or ''}\n{found.get('stderr') or ''}")
        raise StepFailed(f"{host.name}: {refusal} {UNCHANGED}", {"rc": found.get("rc")})
    try:
        return rules.resolved_set(found.get("report"))
    except ValueError as exc:
        raise StepFailed(f"{host.name}: {exc} {UNCHANGED}") from exc


def resolve(host: Host, options: Mapping[str, Any], *, run_dir: str) -> dict[str, Any]:
    """The host's resolved target, resolved once per distinct target of the run.

    Args:
        host: the host (its Python version is read there; the first host of a key resolves there).
        options: the options record (``cu130_wheels_*``, ``sglang_build_method``, ``_repo``,
            ``_version``).
        run_dir: a directory of this run on the control node, for the keys' locks and
            results (``resolve-<key>.lock``, ``resolve-<key>.json``).

    Returns:
        ``{"resolved": [{"name", "version", "url", "sha256"}] (resolved_set), "resolved_by":
        the host that resolved it, "requirement": the SGLang requirement, "key": str}``.

    Raises:
        StepFailed: the host that resolves a refused target says why (``"<host>: <refusal>
        Nothing on the host was changed."``); every other host of that target
        ``"<host>: its target is the one <leader> resolves, and that target was refused
        (the reason is above, under <leader>). Nothing on the host was changed."``
    """
    requirement = sglang_requirement(options)
    python = str(options["cu130_wheels_python"])
    version = host.module("cuda13_venv_read", {"python": python}, check_mode=False)["python_version"]
    key = resolution_key(options, requirement, str(version))

    def produce() -> dict[str, Any]:
        resolved = resolve_on(host, options, requirement)
        host.tell("resolved the target: " + ", ".join(f"{d['name']}=={d['version']}" for d in resolved))
        return {"resolved": resolved}

    try:
        record, by = once(run_dir, f"resolve-{key}", host.name, produce)
    except StepFailed as exc:
        if exc.msg:
            raise
        leader = exc.record["failed_by"]
        raise StepFailed(
            f"{host.name}: its target is the one {leader} resolves, and that target was refused "
            f"(the reason is above, under {leader}). {UNCHANGED}",
            {"resolved_by": leader, "requirement": requirement, "key": key},
        ) from None
    return {"resolved": record["resolved"], "resolved_by": by, "requirement": requirement, "key": key}
