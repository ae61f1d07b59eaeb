"""Putting the service into a profile: the one way every step starts the server (action ``cuda13_serve``).

:func:`serve` writes the profile drop-in, restarts the unit as planned and waits
until the server generates (module ``cuda13_service`` on the host,
``hostscripts/service_cycle.py``), then judges what that came to
(:func:`cuda13_upgrade.restarts.serve_outcome`): the server must run the
service's own command with the profile's arguments on the venv's Python, or
nothing may be measured on it. The baseline, the switch, the verify, its restore
and the rollback all go through here; so do the sandbox's readiness wait and an
operator's own play (``include_role: {name: cuda13, tasks_from: serve}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import restarts
from cuda13_upgrade.hostscripts.service_cycle import profile_dropin
from cuda13_upgrade.steps.host import Host, StepFailed

#: The first comment line of the drop-ins the package writes (Ansible's default ``ansible_managed``).
MANAGED = "Ansible managed"


def serve(
    host: Host,
    *,
    service: str,
    exec_start: str,
    venv: str = "",
    args: Sequence[Any] = (),
    restart: str = "always",
    changed: bool = False,
    check: bool = True,
    dropin: str = "60-cuda13-profile.conf",
    url: str = "http://127.0.0.1:30000",
    timeout: float = 900,
    leftover_timeout: float = 30,
    nvidia_smi: str = "nvidia-smi",
    what: str = "the service",
    about: str = "a profile",
    service_user: str = "",
    managed: str = MANAGED,
    stack: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Put ``service`` into the profile ``args`` and wait until it generates.

    ``restart``: ``always``, ``never`` (the drop-in is left as it is; the server is
    only waited for and read) or ``when-changed`` (restart when a drop-in changed,
    ``changed`` or this one, or the main process does not run ``venv``'s Python with
    ``args``). ``check``: the main process must run ``exec_start`` with ``args`` on
    ``venv``'s Python. ``timeout`` (s): the wait until it generates at ``url``. ``stack``: which
    stack serves (:func:`stack_context`), so that the cause and remedy of a failed start name
    that stack's CUDA build, venv and driver.

    Returns :func:`cuda13_upgrade.restarts.serve_outcome`'s record plus ``"cycle"``
    (what the host's side recorded, None in check mode), ``"dropin_changed"`` and, when the
    drop-in changed, ``"diff"`` (its text before and after, for ``--diff``).
    Raises StepFailed with the outcome's message (the cause, the remedy, the
    journal's last lines) and ``{"restarted", "leftovers", "running_command"}`` when
    the server did not start, did not generate in time, left processes on the
    GPUs, or runs something else.
    """
    args = [str(a) for a in args]
    content = profile_dropin(exec_start, args, unit=service, about=about, managed=managed) if args else None
    result = host.module(
        "cuda13_service",
        {
            "unit": service,
            "dropin_path": f"/etc/systemd/system/{service}.d/{dropin}",
            "dropin_content": content,
            "restart": restart,
            "changed": bool(changed),
            "exec_start": exec_start,
            "venv": venv,
            "args": args,
            "leftover_timeout": float(leftover_timeout),
            "nvidia_smi": nvidia_smi,
            "url": url,
            "ready_timeout": float(timeout),
        },
    )
    outcome = restarts.serve_outcome(
        result.get("cycle") or {},
        service=service,
        what=what,
        exec_start=exec_start,
        venv=venv,
        args=args,
        check=check,
        restart=restart,
        files_changed=bool(changed or result.get("dropin_changed")),
        url=url,
        timeout=int(timeout),
        leftover_timeout=float(leftover_timeout),
        service_user=service_user,
        stack=stack,
    )
    if outcome["failed"]:
        # The message holds the cause, the remedy and the journal's last lines; the record, what counts.
        raise StepFailed(
            outcome["msg"],
            {
                "restarted": outcome["restarted"],
                "leftovers": outcome["leftovers"],
                "running_command": outcome["running_command"],
            },
        )
    # The process command lines (base64) may hold the server's --api-key: they are read
    # here and kept out of the record.
    cycle = {key: value for key, value in (result.get("cycle") or {}).items() if not key.endswith("_b64")}
    served = {**outcome, "cycle": cycle or None, "dropin_changed": bool(result.get("dropin_changed"))}
    if result.get("diff"):
        served["diff"] = result["diff"]
    return served


def stack_context(
    options: Mapping[str, Any], which: str, manifest: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Which stack serves, for the diagnosis of a failed start or use (:func:`serve`'s ``stack``).

    ``which``: ``"old"`` (the baseline, the rollback and its re-check) or ``"new"`` (the switch,
    the verify, the soak). ``manifest``: the pre-upgrade snapshot, whose ``nvcc --version`` of
    ``/usr/local/cuda`` is the old stack's CUDA release and whose ``venv`` its venv.

    Returns ``{"stack", "stack_cuda", "target_cuda", "venv"}``: the new stack's release is
    ``cuda13_toolkit_release``, its venv ``cuda13_new_venv``; the old stack's venv is the
    snapshot's, else ``cuda13_old_venv``. A fact that is not known is ``""`` (the diagnosis then
    falls back to the target for it). Raises ValueError for another ``which``.
    """
    if which not in ("old", "new"):
        raise ValueError(f"which must be 'old' or 'new', got {which!r}")
    target = str(options.get("cuda13_toolkit_release") or "")
    if which == "new":
        return {
            "stack": "new",
            "stack_cuda": target,
            "target_cuda": target,
            "venv": str(options.get("cuda13_new_venv") or ""),
        }
    manifest = manifest or {}
    nvcc = (manifest.get("cuda") or {}).get("nvcc") or {}
    return {
        "stack": "old",
        "stack_cuda": str(nvcc.get("release") or ""),
        "target_cuda": target,
        "venv": str((manifest.get("venv") or {}).get("path") or options.get("cuda13_old_venv") or ""),
    }


def running(host: Host, *, service: str, exec_start: str) -> dict[str, Any]:
    """What the service runs now, read only (no restart, no wait): ``{"running_args": list or
    None, "running_venv": str or None, "running_command": str}`` (see
    :func:`cuda13_upgrade.restarts.running_args`)."""
    result = host.module("cuda13_service", {"unit": service, "restart": "never", "url": ""}, check_mode=False)
    outcome = restarts.serve_outcome(
        result.get("cycle") or {"cmdline_b64": ""},
        service=service,
        what="what it runs now",
        exec_start=exec_start,
        venv="",
        args=[],
        check=False,
        restart="never",
        url="",
        timeout=0,
        leftover_timeout=0,
    )
    return {key: outcome[key] for key in ("running_args", "running_venv", "running_command")}


def serve_options(options: Mapping[str, Any], prefix: str = "verify_throughput") -> dict[str, Any]:
    """The keyword arguments of :func:`serve` that the options give, for a role's own
    variables (``verify_throughput_server_url``, ``stack_switch_health_timeout``, ...)."""
    names = {
        "verify_throughput": (
            "verify_throughput_service_name",
            "verify_throughput_profile_dropin",
            "verify_throughput_server_url",
            "verify_throughput_health_timeout",
        ),
        "stack_switch": (
            "stack_switch_service_name",
            "stack_switch_profile_dropin",
            "stack_switch_server_url",
            "stack_switch_health_timeout",
        ),
        "rollback": (
            "rollback_service_name",
            "rollback_profile_dropin",
            "rollback_server_url",
            "rollback_health_timeout",
        ),
        "cuda13": (
            "cuda13_service_name",
            "cuda13_profile_dropin",
            "cuda13_server_url",
            "cuda13_health_timeout",
        ),
    }[prefix]
    service, dropin, url, timeout = (options.get(n) for n in names)
    return {
        "service": service or options.get("cuda13_service_name"),
        "dropin": dropin or options.get("cuda13_profile_dropin"),
        "url": url or options.get("cuda13_server_url"),
        "timeout": float(timeout or options.get("cuda13_health_timeout") or 900),
        "leftover_timeout": float(options.get("cuda13_leftover_timeout") or 30),
        "nvidia_smi": options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi",
    }
