"""Whether a re-run can stop at one comparison: a host already kept.

A host whose last measured upgrade kept the new stack records in its
``result.json`` the target it was verified for and a digest of the stack it
then served (``hostscripts/stack_digest.py``: the venv's ``pip freeze``, the
unit's drop-ins, the CUDA alternatives, the toolkit's packages, the driver
and GPUs nvidia-smi reports). A later run for the same target reads the
digest again, before its preflight (:func:`early_verdict`, one script on the
host); when nothing differs the host is "already kept" and neither the
preflight nor any role runs (kubernetes-sigs/kubespray#6948: an idempotent
re-run that re-walks every role of every host is what this avoids).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda13_upgrade.runlock import stopped_run

#: The parts of a stack digest, in the order a difference is named.
PARTS = ("freeze", "dropins", "alternatives", "toolkit", "driver")

#: Parts of a target that later versions added, with what a target recorded without them
#: meant: before ``sglang_build_method`` every run built SGLang from source.
TARGET_DEFAULTS: dict[str, Any] = {"sglang_method": "source"}

#: A profile's keys that may be absent, with what their absence means (the argument
#: spec's defaults of ``cuda13_profiles``: roles/cuda13/meta/argument_specs.yml).
PROFILE_DEFAULTS: dict[str, Any] = {"new_stack_args": [], "soak_concurrency": None}

#: The validated option each part of a target comes from.
TARGET_OPTIONS: dict[str, str] = {
    "toolkit_release": "cuda13_toolkit_release",
    "toolkit_package_version": "cuda13_toolkit_package_version",
    "requirements": "cu130_wheels_requirements",
    "sglang_version": "sglang_build_version",
    "sglang_method": "sglang_build_method",
    "profiles": "cuda13_profiles",
}


def target(options: Mapping[str, Any]) -> dict[str, Any]:
    """The run's target from the validated options (``cuda13_options``).

    ``options``: ``{option: value}`` as :func:`cuda13_upgrade.options.validate`
    returns them (given values converted to their types, literal defaults for
    the others). Returns ``{"toolkit_release", "toolkit_package_version",
    "requirements", "sglang_version", "sglang_method", "profiles"}``: what a
    run installs and measures, recorded in ``step.json``, ``staged.json`` and
    ``result.json`` and compared by :func:`same_target`.

    Raises ``KeyError`` naming the option when one is missing (the options were
    not validated).
    """
    missing = [option for option in TARGET_OPTIONS.values() if option not in options]
    if missing:
        raise KeyError(f"the validated options lack {', '.join(missing)}")
    return {part: options[option] for part, option in TARGET_OPTIONS.items()}


def _normalised(target: Mapping[str, Any]) -> dict[str, Any]:
    whole = {**TARGET_DEFAULTS, **target}
    profiles = whole.get("profiles")
    if isinstance(profiles, list):
        whole["profiles"] = [
            {**PROFILE_DEFAULTS, **profile} if isinstance(profile, Mapping) else profile
            for profile in profiles
        ]
    return whole


def same_target(recorded: Mapping[str, Any] | None, target: Mapping[str, Any]) -> bool:
    """Whether a target a run recorded (result.json, staged.json) is this run's ``target``.

    Every part counts, the SGLang install method too (a host kept with SGLang built from
    source is not kept for its release wheel); a part the record lacks because it was written
    before that part existed counts as its :data:`TARGET_DEFAULTS` value, and a profile's
    key it lacks as its :data:`PROFILE_DEFAULTS` value.
    """
    if not isinstance(recorded, Mapping) or not recorded:
        return False
    return _normalised(recorded) == _normalised(target)


def kept_rerun(
    previous: Mapping[str, Any] | None,
    target: Mapping[str, Any],
    digest: Mapping[str, Any] | None,
    *,
    reverify: bool = False,
) -> dict[str, Any]:
    """Decide whether a host is already kept for ``target``.

    ``previous``: the host's ``result.json`` (``status``, ``target``,
    ``stack_digest``: ``{"digest", "parts": {part: sha256}}``), ``{}`` or
    None when there is none. ``target``: this run's target (toolkit release,
    package version, requirements, SGLang version and install method, profiles;
    compared by :func:`same_target`). ``digest``:
    the stack digest read now (same shape as ``stack_digest``), None when it
    was not read. ``reverify``: ``cuda13_reverify``, measure again anyway.

    Returns ``{"already_kept": bool, "differs": [part, ...], "reason": str,
    "measure": bool}``: ``differs`` names the digest's parts that changed since
    the record, in :data:`PARTS` order; ``reason`` says in words why the full
    run follows (empty when the host is already kept); ``measure`` whether the
    full run measures the host again. It does, except where only the record
    falls short while the stack is the one verified: a result with no stack
    digest, or one without a part that a later version added (every part it
    has unchanged). Such a host goes through the roles unmeasured and its
    result then records the whole digest; taking every kept host of a fleet
    out of service to re-measure an unchanged stack, because the tool was
    updated, is what this avoids.
    """
    previous = previous or {}

    def full(reason: str, differs: list[str] | None = None, *, measure: bool = True) -> dict[str, Any]:
        return {"already_kept": False, "differs": differs or [], "reason": reason, "measure": measure}

    if reverify:
        return full("cuda13_reverify=true measures the host again")
    if previous.get("status") != "kept":
        return full(f"its last result is {previous.get('status') or 'none'}, not kept")
    if not same_target(previous.get("target"), target):
        return full(f"it was kept for another target (run {previous.get('run_id') or '?'})")
    recorded = previous.get("stack_digest") or {}
    if not recorded.get("parts"):
        return full("its result records no stack digest", measure=False)
    if not digest or not digest.get("parts"):
        return full("the stack digest could not be read")
    unrecorded = [part for part in PARTS if part not in recorded["parts"]]
    differs = [
        part
        for part in (*PARTS, *sorted(set(recorded["parts"]) - set(PARTS)))
        if part not in unrecorded and recorded["parts"].get(part) != digest["parts"].get(part)
    ]
    if differs:
        return full(
            f"its stack differs from the one run {previous.get('run_id') or '?'} kept: {', '.join(differs)}",
            differs,
        )
    if unrecorded:
        return full(
            f"the stack digest run {previous.get('run_id') or '?'} recorded has no "
            f"{', '.join(unrecorded)} part (an earlier version of cuda13-upgrade wrote it); "
            "the parts it has are unchanged",
            unrecorded,
            measure=False,
        )
    return {"already_kept": True, "differs": [], "reason": "", "measure": False}


def early_verdict(
    state: Mapping[str, Any] | None,
    target: Mapping[str, Any],
    run_id: str,
    *,
    reverify: bool = False,
) -> dict[str, Any]:
    """Decide, before the preflight, whether a host is already kept for ``target``.

    ``state``: what ``stack_digest.py --state DIR`` read on the host, one
    script run: ``{"result": result.json or None, "step": step.json or None,
    "lock": run.lock's owner.json ({} when the lock has no owner yet) or None
    when no lock is held, "digest": {"digest", "parts", "errors"} or None}``;
    None when the script did not run. ``target``, ``reverify``: as for
    :func:`kept_rerun`. ``run_id``: this run's identifier.

    Nothing is written on the host on the way to this verdict, so a host goes
    the short way only when no other run can be changing it: no lock is held
    and no earlier run stopped part way (:func:`cuda13_upgrade.runlock.stopped_run`);
    either sends the host through the preflight and the full run, which takes
    the lock (or refuses it) and resolves the stopped run.

    A result.json or step.json that cannot be read also sends the host the full
    way. Returns :func:`kept_rerun`'s ``{"already_kept", "differs", "reason",
    "measure"}`` and ``"previous"``, the host's result.json (``{}`` when there
    is none).
    """
    if not isinstance(state, Mapping):
        return {
            "already_kept": False,
            "differs": [],
            "reason": "its state could not be read",
            "measure": True,
            "previous": {},
        }
    previous = state.get("result") if isinstance(state.get("result"), Mapping) else {}
    step = state.get("step") if isinstance(state.get("step"), Mapping) else {}

    def full(reason: str) -> dict[str, Any]:
        return {
            "already_kept": False,
            "differs": [],
            "reason": reason,
            "measure": True,
            "previous": dict(previous),
        }

    unreadable = (state.get("errors") or {}) if isinstance(state.get("errors"), Mapping) else {}
    for name in ("result", "step"):
        if unreadable.get(name):
            return full(f"its {name}.json cannot be read ({unreadable[name]})")
    lock = state.get("lock")
    if lock is not None:
        holder = lock.get("run_id") if isinstance(lock, Mapping) else None
        return full(f"the lock of run {holder or '?'} is on the host")
    stopped = stopped_run(step, previous, run_id)
    if stopped:
        return full(f"run {stopped['run_id']} stopped at step {stopped['step']}")
    verdict = kept_rerun(previous, target, state.get("digest"), reverify=reverify)
    return {**verdict, "previous": dict(previous)}


def host_verdict(
    state: Mapping[str, Any] | None,
    target: Mapping[str, Any],
    run_id: str,
    *,
    reverify: bool = False,
    locked: bool = False,
    host: str = "",
) -> dict[str, Any]:
    """What a run does with a host, from the one read of its state.

    ``state``: what ``stack_digest.py --state DIR`` read on the host, as for
    :func:`early_verdict`; None when the script did not run. ``target``,
    ``run_id``, ``reverify``: as for :func:`early_verdict`. ``locked``: whether
    this run holds the host's lock (the pass after the preflight); before it
    (``False``) the verdict is :func:`early_verdict`'s.

    Under the lock, the lock on the host is this run's own; an earlier run
    that stopped part way (:func:`cuda13_upgrade.runlock.stopped_run`) is
    resolved by this one, which runs in full without comparing digests;
    otherwise :func:`kept_rerun` decides.

    Returns :func:`kept_rerun`'s ``{"already_kept", "differs", "reason",
    "measure"}`` with ``"previous"`` (the host's result.json, ``{}`` when there
    is none), ``"stopped"`` (the stopped run, or None) and ``"notice"``: what
    the operator reads about it under the lock, each line starting with
    ``host`` (the stopped run this run resolves; why a kept host runs in full),
    ``""`` when nothing is to be said. Raises
    ``ValueError`` under the lock when the state could not be read, or its
    result.json or step.json could not (the host then fails: nothing of the
    upgrade has run yet).
    """
    if not locked:
        verdict = early_verdict(state, target, run_id, reverify=reverify)
        step = state.get("step") if isinstance(state, Mapping) else None
        stopped = stopped_run(step if isinstance(step, Mapping) else {}, verdict["previous"], run_id)
        return {**verdict, "stopped": stopped, "notice": ""}
    if not isinstance(state, Mapping):
        raise ValueError("the host's state directory could not be read (stack_digest.py --state did not run)")
    unreadable = state.get("errors") if isinstance(state.get("errors"), Mapping) else {}
    for name in ("result", "step"):
        if unreadable.get(name):
            raise ValueError(f"its {name}.json cannot be read ({unreadable[name]})")
    previous = dict(state.get("result") or {})
    stopped = stopped_run(state.get("step") or {}, previous, run_id)
    verdict = kept_rerun(previous, target, None if stopped else state.get("digest"), reverify=reverify)
    notice = []
    if stopped:
        recorded = f", recorded {stopped['recorded']}" if stopped.get("recorded") else ""
        notice.append(
            f"{host}: run {stopped.get('run_id')} stopped at step {stopped.get('step')} (begun"
            f" {stopped.get('started_at')}, the service then on {stopped.get('serving')}{recorded}); this run"
            " verifies the stack the service points at or rolls the host back."
        )
    if previous.get("status") == "kept" and not verdict["already_kept"]:
        notice.append(f"{host}: not already kept: {verdict['reason']}; the full run follows.")
    return {**verdict, "previous": previous, "stopped": stopped, "notice": "\n".join(notice)}
