"""Whether a re-run can stop at one comparison: a host already kept.

A host whose last measured upgrade kept the new stack records in its
``result.json`` the target it was verified for and a digest of the stack it
then served (``hostscripts/stack_digest.py``: the venv's ``pip freeze``, the
unit's drop-ins, the CUDA alternatives, the toolkit's packages). A later run
for the same target reads the digest again; when nothing differs the host is
"already kept" and no role runs (kubernetes-sigs/kubespray#6948: an
idempotent re-run that re-walks every role of every host is what this
avoids).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The parts of a stack digest, in the order a difference is named.
PARTS = ("freeze", "dropins", "alternatives", "toolkit")

#: Parts of a target that later versions added, with what a target recorded without them
#: meant: before ``sglang_build_method`` every run built SGLang from source.
TARGET_DEFAULTS: dict[str, Any] = {"sglang_method": "source"}


def same_target(recorded: Mapping[str, Any] | None, target: Mapping[str, Any]) -> bool:
    """Whether a target a run recorded (result.json, staged.json) is this run's ``target``.

    Every part counts, the SGLang install method too (a host kept with SGLang built from
    source is not kept for its release wheel); a part the record lacks because it was written
    before that part existed counts as its :data:`TARGET_DEFAULTS` value.
    """
    if not isinstance(recorded, Mapping) or not recorded:
        return False
    return {**TARGET_DEFAULTS, **recorded} == {**TARGET_DEFAULTS, **target}


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

    Returns ``{"already_kept": bool, "differs": [part, ...], "reason": str}``:
    ``differs`` names the digest's parts that changed since the record, in
    :data:`PARTS` order; ``reason`` says in words why the full run follows
    (empty when the host is already kept).
    """
    previous = previous or {}

    def full(reason: str, differs: list[str] | None = None) -> dict[str, Any]:
        return {"already_kept": False, "differs": differs or [], "reason": reason}

    if reverify:
        return full("cuda13_reverify=true measures the host again")
    if previous.get("status") != "kept":
        return full(f"its last result is {previous.get('status') or 'none'}, not kept")
    if not same_target(previous.get("target"), target):
        return full(f"it was kept for another target (run {previous.get('run_id') or '?'})")
    recorded = previous.get("stack_digest") or {}
    if not recorded.get("parts"):
        return full("its result records no stack digest")
    if not digest or not digest.get("parts"):
        return full("the stack digest could not be read")
    differs = [
        part
        for part in (*PARTS, *sorted(set(recorded["parts"]) - set(PARTS)))
        if recorded["parts"].get(part) != digest["parts"].get(part)
    ]
    if differs:
        return full(
            f"its stack differs from the one run {previous.get('run_id') or '?'} kept: {', '.join(differs)}",
            differs,
        )
    return {"already_kept": True, "differs": [], "reason": ""}
