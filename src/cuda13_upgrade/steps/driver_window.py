"""The driver window's preflight (read-only): what moving a host's driver to ``cuda13_driver_target``
needs there, judged by :func:`cuda13_upgrade.driverplan.judge`.

Called by the preflight (:mod:`cuda13_upgrade.steps.preflight`) when ``cuda13_driver_target`` is
set. A host whose driver meets the CUDA release's floor skips the window (one line says so). For
one below it the host's side is read in one run (module ``cuda13_driver_facts``), the target's
packages are resolved by apt in a scratch state (module ``cuda13_apt_simulate`` with ``requests``,
the toolkit step's simulation), and the plan is shown line by line; its blockers join the
preflight's refusal. Nothing on the host changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import driver, driverplan
from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.steps.host import Host
from cuda13_upgrade.versions import driver_supports

_DISTROS = {"debian": "debian", "ubuntu": "ubuntu"}


def _distro(host: Host) -> str:
    """``debian`` or ``ubuntu`` from the host's ``/etc/os-release`` (``ID``, else ``ID_LIKE``)."""
    found = host.module("cuda13_record", {"read": ["/etc/os-release"]}, check_mode=False)["read"]
    text = str((found.get("/etc/os-release") or {}).get("content") or "")
    fields = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    ids = [fields.get("ID", "").strip().strip('"'), *fields.get("ID_LIKE", "").strip().strip('"').split()]
    return next((_DISTROS[i] for i in ids if i in _DISTROS), ids[0] if ids and ids[0] else "unknown")


def floor_for(options: Mapping[str, Any], current: str) -> str:
    """The driver floor of the run's CUDA release (:func:`cuda13_upgrade.versions.driver_supports`)."""
    return driver_supports(
        current,
        str(options["nvidia_driver_check_toolkit_release"]),
        jit=bool(options.get("nvidia_driver_check_require_jit", True)),
        min_driver_version=options.get("nvidia_driver_check_min_driver_version") or None,
    ).required


def readiness(
    host: Host,
    options: Mapping[str, Any],
    *,
    current: str,
    compute_capabilities: Sequence[str],
    proc_version: str | None,
) -> dict[str, Any] | None:
    """The driver window's plan of ``host`` (:func:`cuda13_upgrade.driverplan.judge`'s record, plus
    ``distro``), or None when ``cuda13_driver_target`` is empty. Shows its lines."""
    value = options.get(driverplan.TARGET_OPTION)
    target = driver.parse_target(value, option=driverplan.TARGET_OPTION)
    if target is None:
        return None
    try:
        floor = floor_for(options, current)
    except Cuda13Error:
        return None  # the preflight's own driver check names the unreadable version
    settings = {
        "flavour": options.get(driverplan.FLAVOUR_OPTION) or "open",
        "activation": options.get(driverplan.ACTIVATION_OPTION) or "reload_or_reboot",
        "gpu_clients": list(options.get(driverplan.CLIENTS_OPTION) or []),
    }
    base = dict(
        current=current,
        floor=floor,
        target=target,
        settings=settings,
        compute_capabilities=compute_capabilities,
        proc_version=proc_version,
        service=str(options["cuda13_service_name"]),
    )
    plan = driverplan.judge(facts={}, transaction=None, requests=[], **base)
    if not plan["needs_move"]:
        for line in driverplan.describe(plan):
            host.tell(line)
        return {**plan, "distro": None}
    distro = _distro(host)
    requests: list[str] = []
    transaction = None
    blocked = None
    try:
        given = list(options.get(driverplan.PACKAGES_OPTION) or [])
        requests = list(
            driverplan.requests_for(target, flavour=settings["flavour"], distro=distro, given=given)[
                "packages"
            ]
        )
    except Cuda13Error as exc:
        blocked = {
            "check": "packages",
            "value": exc.value,
            "option": exc.option if exc.option != "distro" else None,  # the host's, not an option
            "problem": exc.problem,
            "remedy": exc.remedy or "",
        }
    facts = host.module("cuda13_driver_facts", {"units": settings["gpu_clients"]}, check_mode=False)["facts"]
    if requests and isinstance(facts.get("nvswitch"), int) and facts["nvswitch"] > 0:
        requests.append(driverplan.fabric_manager_package(target))
    if requests:
        held = [str(p["name"]).split(":", 1)[0] for p in facts.get("packages") or [] if p.get("held")]
        simulated = host.module(
            "cuda13_apt_simulate",
            {"requests": requests, "apt_dir": "/etc/apt", "release_holds": held},
            check_mode=False,
        )
        text = "\n".join(str(simulated.get(key) or "") for key in ("update_stderr", "stdout", "stderr"))
        transaction = driverplan.judge_transaction(text, requests)
    plan = driverplan.judge(
        **{**base, "proc_version": facts.get("proc_version") or proc_version},
        facts=facts,
        transaction=transaction,
        requests=requests,
    )
    if blocked:
        plan["blockers"].insert(0, blocked)
        plan["ready"] = False
    plan["distro"] = distro
    for line in driverplan.describe(plan):
        host.tell(line)
    return plan


def planned_version(plan: Mapping[str, Any] | None) -> str | None:
    """The driver version a ready window installs, for the preflight's checks of the host after the
    move: the target's version, or for a branch target the floor (apt picks the branch's newest,
    at or above it; :func:`cuda13_upgrade.steps.driver_move.check` reads the real one). None when
    no move is planned or the plan is not ready."""
    if not plan or not plan.get("needs_move") or not plan.get("ready"):
        return None
    target = str(plan.get("target") or "")
    return str(plan.get("floor") or "") if target.upper().startswith("R") else target


def refusal_text(plan: Mapping[str, Any]) -> str:
    """What the preflight's refusal adds for a host below the floor with a driver window planned:
    the steps of the move for the operator's driver process when every check passes, else each
    blocker with its fix."""
    target = f"{driverplan.TARGET_OPTION}={plan.get('target')}"
    if plan.get("ready"):
        requests = list(plan.get("requests") or [])
        pin, rest = (
            (requests[0], requests[1:]) if requests and driverplan.is_pin(requests[0]) else ("", requests)
        )
        units = sorted(
            {str(c["unit"]) for c in plan.get("clients") or [] if c.get("known") and c.get("unit")}
        )
        steps = []
        if plan.get("held"):
            steps.append(f"apt-mark unhold {' '.join(plan['held'])}")
        if pin:
            steps.append(
                f"install {pin} in an apt run of its own"
                " (apt resolves a transaction before its pin file exists)"
            )
        if rest:
            steps.append(f"install {' '.join(rest)}")
        if plan.get("activation") == "reload":
            stop = f"stop {', '.join(units)}, " if units else ""
            order = ", ".join(["nvidia_drm", *driver.module_unload_order()])
            steps.append(f"{stop}unload the loaded ones of {order} in this order (modprobe -r), load nvidia")
        else:
            steps.append("reboot")
        steps.append("hold the driver's packages at the new version")
        numbered = "; ".join(f"({i}) {s}" for i, s in enumerate(steps, 1))
        return (
            f"- driver window ({target}): every check of the move to {plan.get('target')} passes; the run"
            f" makes it once the checks above pass: {numbered}"
        )
    reasons = []
    for b in plan.get("blockers") or []:
        option = f" (Option: {b['option']})" if b.get("option") else ""
        reasons.append(f"{b['problem']}{option}. Fix: {b['remedy']}")
    return (
        f"- driver window ({target}): the move to {plan.get('target')} cannot be made here:"
        f" {'; '.join(reasons)}"
    )
