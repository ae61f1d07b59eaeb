"""The step ``snapshot``: a manifest of the running stack, kept on the host and on the control node
(action ``cuda13_snapshot``).

The host's side (module ``cuda13_snapshot_read``, ``hostscripts/snapshot.py``)
reads the stack in one run; the manifest (:func:`cuda13_upgrade.stack.build_manifest`)
and who the unit runs as (:func:`cuda13_upgrade.service.service_identity`) are
built here. The manifest is written once on the host (``<stack_snapshot_dir>/pre-upgrade.json``):
a re-run after the switch keeps the record of the old stack. A copy goes to the
run's report on the control node (``<run dir>/<host>/snapshot.json``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from cuda13_upgrade import nvcc, service, stack
from cuda13_upgrade.steps.host import Host, StepFailed, now_iso


def take(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    write_report: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Take (or read back) the pre-upgrade snapshot of ``host``.

    ``options``: the validated record (``stack_snapshot_*``). ``write_report(manifest)``: keeps
    the copy on the control node (not called in check mode, nor with ``stack_snapshot_fetch``
    false). Returns ``{"manifest": dict, "taken": bool (this run took it), "changed": bool}``.
    Raises StepFailed when the running stack cannot be read.
    """
    path = f"{options['stack_snapshot_dir']}/pre-upgrade.json"
    collected = host.module(
        "cuda13_snapshot_read",
        {
            "action": "collect",
            "snapshot_file": path,
            "venv": options["stack_snapshot_venv"],
            "sglang_src": options["stack_snapshot_sglang_src"],
            "service": options["stack_snapshot_service_name"],
            "alternatives": list(options.get("stack_snapshot_alternatives") or []),
        },
        check_mode=False,
    )
    changed = False
    if collected.get("existing") is not None:
        manifest = dict(collected["existing"])
        taken = False
    else:
        manifest, candidates = build(host.name, run_id, options, collected["raw"])
        stored = host.module(
            "cuda13_snapshot_read",
            {"action": "store", "snapshot_file": path, "manifest": manifest, "cache_dirs": candidates},
        )
        manifest = dict(stored["manifest"] or manifest)
        changed = bool(stored.get("changed"))
        taken = True
    if write_report is not None and options.get("stack_snapshot_fetch", True) and not host.check_mode:
        write_report(manifest)
    return {"manifest": manifest, "taken": taken, "changed": changed}


def build(
    host: str, run_id: str, options: Mapping[str, Any], raw: Mapping[str, Any]
) -> tuple[dict, list[str]]:
    """The manifest from what the host read, and the cache directories to look for (the unit's
    identity's and ``stack_snapshot_cache_dirs``). Raises StepFailed when the unit's user is
    unknown to the host, or what it read has not the shape the manifest needs (a unit without
    ``ExecStart=``)."""
    environ = base64.b64decode(raw.get("environ_b64") or "").decode("utf-8", "replace")
    try:
        identity = service.service_identity(raw.get("identity_show") or "", raw.get("passwd") or "", environ)
    except ValueError as exc:
        raise StepFailed(f"{host}: {exc}") from exc
    shown = dict(line.split("=", 1) for line in str(raw.get("show") or "").splitlines() if "=" in line)
    try:
        manifest = _manifest(host, run_id, options, raw, identity, shown)
    except ValueError as exc:
        # A unit without a command (nothing for the switch to move), an nvcc that prints no release.
        raise StepFailed(
            f"{host}: cannot record the running stack: {exc}; nothing on the host was changed."
        ) from exc
    candidates = list(
        dict.fromkeys([*identity["cache_dirs"].values(), *(options.get("stack_snapshot_cache_dirs") or [])])
    )
    return manifest, candidates


def _manifest(
    host: str,
    run_id: str,
    options: Mapping[str, Any],
    raw: Mapping[str, Any],
    identity: Mapping[str, Any],
    shown: Mapping[str, str],
) -> dict:
    """:func:`cuda13_upgrade.stack.build_manifest` of what the host read; raises ValueError."""
    return stack.build_manifest(
        {
            "host": host,
            "taken_at": now_iso(),
            "run_id": run_id,
            "venv": options["stack_snapshot_venv"],
            "pip_freeze": raw.get("pip_freeze") or "",
            "alternatives": raw.get("alternatives") or {},
            "cuda_resolved": raw.get("cuda_resolved"),
            "nvcc": nvcc.parse_nvcc_version(raw["nvcc"]) if raw.get("nvcc") else None,
            "packages": stack.parse_dpkg_query(raw.get("packages") or ""),
            "sglang": raw.get("sglang") or {},
            "service": {
                "name": options["stack_snapshot_service_name"],
                "unit_text": raw.get("unit_text") or "",
                "fragment_path": shown.get("FragmentPath", ""),
                "dropin_paths": shown.get("DropInPaths", "").split(),
                "active_state": shown.get("ActiveState", ""),
                "user": identity["user"],
                "group": identity["group"],
                "home": identity["home"],
                "environment": identity["environment"],
                "cache_dirs": identity["cache_dirs"],
            },
            "cache_dirs": [],
        }
    )
