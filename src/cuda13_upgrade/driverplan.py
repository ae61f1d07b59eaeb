"""The driver window's plan for one host: what moving its driver needs, judged before any change.

A host whose NVIDIA driver is below the CUDA release's floor (CUDA 13.0: 580.65.06, CUDA Toolkit
Release Notes, Table 3) can be moved to the target driver (``cuda13_driver_target``) first. This
module judges, from what the preflight read on the host, whether that move can be made there and
how; it changes nothing. :func:`judge` returns the plan record::

    {
      "current": "570.86.15",            # the running driver (nvidia-smi)
      "floor": "580.65.06",              # the CUDA release's floor
      "needs_move": True,                # current below floor
      "target": "580.95.05",             # the version, or "R580" for a branch target
      "current_branch": 570, "target_branch": 580,
      "flavour": "open",                 # cuda13_driver_flavour
      "loaded_flavour": "open" | "proprietary" | None,   # /proc/driver/nvidia/version
      "activation": "reload" | "reboot" | None,          # None: refused
      "activation_why": "...",
      "requests": ["nvidia-open=580.95.05-1", ...],      # what apt is asked to install
      "changes": ["upgrade nvidia-driver 570.86.15-1 -> 580.95.05-1", ...],  # apt's transaction
      "held": ["nvidia-driver", ...],    # driver packages held now (released, then held again)
      "clients": [{"pid", "comm", "unit", "known": bool}],
      "blockers": [{"check", "value", "option", "problem", "remedy"}],
      "notes": ["..."],
      "ready": bool,                     # no blocker
    }

The checks (each a blocker naming the value, the option and the remedy):

- ``flavour``: Blackwell GPUs (compute capability 10.0 and later) run only the open kernel
  modules (:func:`cuda13_upgrade.driver.check_flavour`);
- ``packages``: apt resolves the target's packages from the host's repositories, without removing
  a package outside the driver or touching the kernel (:func:`judge_transaction`);
- ``headers``: a DKMS module package in the transaction builds against
  ``/lib/modules/<kernel release>/build``; without it DKMS fails ("Your kernel headers for kernel
  ... cannot be found");
- ``secure_boot``: with Secure Boot on, the module DKMS builds is signed with its key
  (``/var/lib/dkms/mok.pub``), which the firmware must trust; an untrusted key makes modprobe fail
  with "Key was rejected by service", and enrolling one (``mokutil --import``) needs the console at
  the next boot, which an unattended window does not have;
- ``activation``: with ``cuda13_driver_activation: reload``, a process holding ``/dev/nvidia*``
  outside the serving unit, ``nvidia-persistenced`` and ``cuda13_driver_gpu_clients`` (which the
  window stops) would keep the module loaded ("Module nvidia is in use"), so the host is refused;
  with ``reload_or_reboot`` it is planned as a reboot;
- ``fabric_manager``: on an NVSwitch system the fabric manager must be packaged at the target
  driver's exact version (NVIDIA Fabric Manager User Guide; NVIDIA/gpu-operator#2781: a mismatch
  leaves the fabric "In Progress" and CUDA fails with error 802).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cuda13_upgrade import aptplan, driver, nvidia_smi
from cuda13_upgrade.errors import Cuda13Error
from cuda13_upgrade.versions import parse_driver_version

__all__ = ["judge", "judge_transaction", "describe", "requests_for"]

TARGET_OPTION = "cuda13_driver_target"
FLAVOUR_OPTION = "cuda13_driver_flavour"
ACTIVATION_OPTION = "cuda13_driver_activation"
CLIENTS_OPTION = "cuda13_driver_gpu_clients"
PACKAGES_OPTION = "cuda13_driver_packages"

#: Ubuntu's prebuilt, signed kernel module packages (no DKMS build on the host).
_PREBUILT = ("linux-modules-nvidia-", "linux-objects-nvidia-", "linux-signatures-nvidia-")

#: Units the window stops itself besides the serving unit and cuda13_driver_gpu_clients.
ALWAYS_STOPPED = ("nvidia-persistenced.service",)


def _key(version: str) -> tuple[int, int, int]:
    return parse_driver_version(version, option=None)


def judge_transaction(text: str, requested: Sequence[str]) -> dict[str, Any]:
    """Judge ``apt-get -s install --no-install-recommends <requested>`` for a driver move.

    Unlike the toolkit's transaction (:func:`cuda13_upgrade.aptplan.check_transaction`), the
    driver's own packages (``nvidia-*``, ``libnvidia-*``, ``libcuda1``, ``*-dkms``, ...) may be
    installed, upgraded or removed: that is the move. Refused: any action on a kernel package
    (``linux-image-*``, ``linux-headers-*``, ...), and the removal or change of an installed
    package outside the driver. Returns ``{"ok", "actions", "changes": [text], "refused": [text],
    "reason"}``; a simulation that installs none of ``requested`` is ``ok`` False with apt's own
    errors as the reason (a request apt reports "is already the newest version" is satisfied).
    """
    text = text if isinstance(text, str) else ""
    actions = aptplan.parse_simulation(text)
    names = {a["package"].split(":", 1)[0] for a in actions}
    # "nvidia-driver-pinning-580 is already the newest version (580-1ubuntu1)." (apt-get)
    names |= set(re.findall(r"(?m)^(\S+?)(?::\S+)? is already the newest version", text))
    missing = [r for r in requested if r.split("=", 1)[0] not in names]
    changes = [aptplan.describe_action(a) for a in actions]
    if missing:
        return {
            "ok": False,
            "actions": actions,
            "changes": changes,
            "refused": [],
            "reason": f"apt cannot install {', '.join(missing)}: {aptplan.apt_errors(text)}",
        }
    refused = []
    for a in actions:
        kind = aptplan.package_kind(a["package"])
        if kind == "kernel" or (kind is None and a["action"] != "install"):
            refused.append(f"{aptplan.describe_action(a)} ({kind or 'installed package'})")
    reason = ""
    if refused:
        reason = (
            f"installing {', '.join(requested)} would also {'; '.join(refused)}: the driver window changes"
            " the driver's packages only. Fix: make the other change in a window of its own first, or pin"
            " the target to a version whose dependencies the host satisfies"
        )
    return {"ok": not refused, "actions": actions, "changes": changes, "refused": refused, "reason": reason}


def requests_for(
    target: Mapping[str, Any], *, flavour: str, distro: str, given: Sequence[str] = ()
) -> dict[str, Any]:
    """The apt requests of the move: ``given`` (``cuda13_driver_packages``) when there are any, else
    NVIDIA's repository's (:func:`cuda13_upgrade.driver.install_packages`). Returns ``{"packages",
    "pinning": the pinning package or None}``."""
    if given:
        return {"packages": list(given), "pinning": None, "source": PACKAGES_OPTION}
    return driver.install_packages(target, flavour=flavour, distro=distro)


def is_pin(request: str) -> bool:
    """Whether an apt request is one of NVIDIA's pinning packages (``nvidia-driver-pinning-*``)."""
    return str(request).startswith("nvidia-driver-pinning-")


def _blocker(check: str, value: Any, option: str | None, problem: str, remedy: str) -> dict[str, Any]:
    return {"check": check, "value": value, "option": option, "problem": problem, "remedy": remedy}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list | tuple) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _run_text(run: Any) -> str:
    run = _mapping(run)
    return "\n".join(str(run.get(k) or "") for k in ("stdout", "stderr"))


def _secure_boot(facts: Mapping[str, Any]) -> bool | None:
    """On, off, or None (unknown). mokutil's "enabled"/"disabled" decide; else the firmware's
    SecureBoot variable; else a host that did not boot through UEFI (no /sys/firmware/efi) has no
    Secure Boot. mokutil's "EFI variables are not supported" alone decides nothing: a UEFI kernel
    without EFI runtime access still enforces module signatures."""
    state = driver.parse_mokutil_sb_state(_run_text(facts.get("secure_boot")))
    if state in ("enabled", "disabled"):
        return state == "enabled"
    efi = facts.get("efi_secure_boot")
    if isinstance(efi, bool):
        return efi
    if facts.get("efi") is False:
        return False
    return None


def _key_enrolled(facts: Mapping[str, Any]) -> bool | None:
    test = facts.get("mok_test_key")
    if not isinstance(test, Mapping):
        return None
    return driver.parse_mokutil_test_key(_run_text(test))


def _clients(facts: Mapping[str, Any], *, service: str, known_units: Iterable[str]) -> list[dict[str, Any]]:
    known = {service, *ALWAYS_STOPPED, *known_units}
    out = []
    for holder in _mappings(facts.get("device_holders")):
        unit = holder.get("unit") if isinstance(holder.get("unit"), str) else None
        out.append(
            {
                "pid": holder.get("pid"),
                "comm": holder.get("comm"),
                "unit": unit,
                "known": bool(unit) and unit in known,
            }
        )
    return out


def _drm_in_use(facts: Mapping[str, Any]) -> bool:
    """``nvidia_drm`` loaded and used (a console or display server on the GPU): unloading it
    fails ("Module nvidia_drm is in use"), whatever process list the host shows."""
    return any(
        m.get("name") == "nvidia_drm" and (m.get("refcount") is None or _count(m.get("refcount")) > 0)
        for m in _mappings(facts.get("modules"))
    )


def judge(
    *,
    current: str,
    floor: str,
    target: Mapping[str, Any] | None,
    settings: Mapping[str, Any],
    compute_capabilities: Sequence[str],
    proc_version: str | None,
    facts: Mapping[str, Any],
    transaction: Mapping[str, Any] | None,
    requests: Sequence[str],
    service: str,
) -> dict[str, Any]:
    """The plan record of the module docstring for one host.

    ``settings``: ``{"flavour", "activation", "gpu_clients"}`` (the options ``cuda13_driver_*``);
    ``facts``: ``cuda13_upgrade.hostscripts.driver_facts.facts``; ``transaction``:
    :func:`judge_transaction` of the simulated install of ``requests`` (None when it was not
    simulated); ``service``: the serving unit. Raises nothing for odd facts: what cannot be read is
    a blocker or a note.
    """
    record: dict[str, Any] = {
        "current": current,
        "floor": floor,
        "needs_move": False,
        "target": None,
        "current_branch": None,
        "target_branch": None,
        "flavour": settings.get("flavour") or "open",
        "loaded_flavour": None,
        "activation": None,
        "activation_why": "",
        "requests": list(requests),
        "changes": [],
        "held": [],
        "clients": [],
        "blockers": [],
        "notes": [],
        "ready": False,
    }
    try:
        record["needs_move"] = _key(current) < _key(floor)
    except Cuda13Error:
        record["blockers"].append(
            _blocker(
                "driver", current, None, "the running driver's version cannot be read", "check nvidia-smi"
            )
        )
        return record
    if target:
        record["target"] = target.get("version") or f"R{target['branch']}"
        record["target_branch"] = target.get("branch")
    record["current_branch"] = _key(current)[0]
    if not record["needs_move"]:
        record["ready"] = True
        return record
    blockers: list[dict[str, Any]] = record["blockers"]
    if proc_version and "NVRM version" in proc_version:
        try:
            record["loaded_flavour"] = nvidia_smi.kernel_module_flavour(proc_version).get("flavour")
        except Cuda13Error:
            record["notes"].append(
                "the loaded kernel module's flavour cannot be read (/proc/driver/nvidia/version)"
            )
    try:
        driver.check_flavour(record["flavour"], list(compute_capabilities), option=FLAVOUR_OPTION)
    except Cuda13Error as exc:
        blockers.append(_blocker("flavour", record["flavour"], FLAVOUR_OPTION, exc.problem, exc.remedy or ""))
    record["held"] = [str(p.get("name")) for p in _mappings(facts.get("packages")) if p.get("held")]
    transaction = transaction if isinstance(transaction, Mapping) else None
    if transaction is None:
        blockers.append(
            _blocker(
                "packages",
                list(requests),
                TARGET_OPTION,
                "apt's transaction of the move was not simulated",
                "check that the host's apt works (apt-get -s install), then run again",
            )
        )
    else:
        record["changes"] = list(transaction.get("changes") or [])
        if len(requests) > 1 and is_pin(requests[0]):
            record["notes"].append(
                "apt simulated the pinning package and the metapackages in one transaction, resolved before"
                " the pin file exists: a version shown may be the repository's newest; the move installs the"
                " pin in an apt run of its own first"
            )
        if not transaction.get("ok"):
            reason = str(transaction.get("reason") or "apt cannot install the target's packages")
            if "held broken packages" in reason or "held packages were changed" in reason.lower():
                remedy = (
                    "release the holds of the driver's packages first"
                    f" (apt-mark unhold {' '.join(record['held']) or '<held packages>'}), then run again"
                )
            else:
                remedy = (
                    "add NVIDIA's CUDA repository for this distribution (it carries the driver), or choose"
                    " a target it offers: a branch ('R580', its pinning package nvidia-driver-pinning-580),"
                    " or a version whose own pinning package it has (apt-cache search nvidia-driver-pinning);"
                    f" a host that takes its driver elsewhere names its packages in {PACKAGES_OPTION}"
                )
            blockers.append(_blocker("packages", list(requests), TARGET_OPTION, reason, remedy))
    # DKMS builds the module unless the transaction brings a prebuilt one (Ubuntu's
    # linux-modules-nvidia-*) and no *-dkms package; a failed simulation shows neither.
    actions = _mappings((transaction or {}).get("actions"))
    names = [str(a.get("package") or "").split(":", 1)[0] for a in actions]
    prebuilt = any(n.startswith(_PREBUILT) for n in names)
    dkms = any(n.endswith("-dkms") for n in names) or not prebuilt
    kernel = str(facts.get("kernel_release") or "") or "<the running kernel>"
    headers = _mapping(facts.get("headers"))
    if dkms and not headers.get("exists"):
        blockers.append(
            _blocker(
                "headers",
                kernel,
                None,
                f"DKMS builds the new kernel module against /lib/modules/{kernel}/build, which is missing"
                " (the kernel headers of the running kernel are not installed): the build would fail",
                f"install linux-headers-{kernel} (or the prebuilt module package for this kernel),"
                " then run again",
            )
        )
    secure = _secure_boot(facts)
    if secure is None:
        blockers.append(
            _blocker(
                "secure_boot",
                None,
                None,
                "Secure Boot's state cannot be read (mokutil answered "
                + repr(" ".join(_run_text(facts.get("secure_boot")).split())[:120] or "nothing")
                + ", no SecureBoot EFI variable): with Secure Boot on, an unsigned or untrusted module"
                " is refused at load",
                "install mokutil (mokutil --sb-state), or make the firmware's state readable, then run again",
            )
        )
    elif secure and dkms:
        enrolled = _key_enrolled(facts)
        key = str(facts.get("mok_key") or "/var/lib/dkms/mok.pub")
        if not enrolled:
            if facts.get("mok_key_exists") is False or enrolled is None:
                problem = (
                    f"Secure Boot is on and DKMS has no signing key yet ({key} is missing): DKMS makes one at"
                    " its first signed build, which the firmware does not trust, so the new module would be"
                    ' refused ("Key was rejected by service")'
                )
                remedy = (
                    f"create DKMS's key ({key}, the mok_certificate of /etc/dkms/framework.conf), enrol it"
                    " with mokutil --import and confirm it at the console on the next boot (MOK manager),"
                    " before the window"
                )
            else:
                problem = (
                    f"Secure Boot is on and DKMS's signing key ({key}) is not enrolled: the new module would"
                    ' be refused ("Key was rejected by service")'
                )
                remedy = (
                    f"enrol it with mokutil --import {key} and confirm it at the console on the next boot"
                    " (MOK manager), before the window"
                )
            blockers.append(_blocker("secure_boot", "enabled", None, problem, remedy))
    clients = _clients(facts, service=service, known_units=settings.get("gpu_clients") or [])
    record["clients"] = clients
    unknown = [c for c in clients if not c["known"]]
    activation = settings.get("activation") or "reload_or_reboot"
    holders = ", ".join(f"{c['comm']} (pid {c['pid']}, {c['unit'] or 'no unit'})" for c in unknown)
    if _drm_in_use(facts):
        holders = ", ".join(h for h in (holders, "nvidia_drm (a console or display server)") if h)
    if activation == "reboot":
        record["activation"] = "reboot"
        record["activation_why"] = f"{ACTIVATION_OPTION} is reboot"
    elif not holders:
        record["activation"] = "reload"
        record["activation_why"] = "nothing outside the units to stop holds the GPUs"
    else:
        if activation == "reload":
            blockers.append(
                _blocker(
                    "activation",
                    activation,
                    ACTIVATION_OPTION,
                    f"{holders} hold(s) the GPUs outside the units to stop: the module could not be"
                    ' unloaded ("Module nvidia is in use")',
                    f"add their units to {CLIENTS_OPTION}, stop them, or allow a reboot"
                    f" ({ACTIVATION_OPTION}: reload_or_reboot)",
                )
            )
        else:
            record["activation"] = "reboot"
            record["activation_why"] = f"{holders} hold(s) the GPUs outside the units to stop"
    if _count(facts.get("nvswitch")):
        _fabric_manager(record, facts, transaction)
    record["ready"] = not blockers
    return record


_FM = re.compile(r"^(?:nvidia-fabricmanager|cuda-drivers-fabricmanager)(?:-\d+)?$")


def _fabric_manager(
    record: dict[str, Any], facts: Mapping[str, Any], transaction: Mapping[str, Any] | None
) -> None:
    """On an NVSwitch system the transaction must bring the fabric manager at the driver's exact version
    ("the version of fabricmanager must match the NVIDIA driver installed", NVIDIA's
    apt-packaging-fabric-manager README); the driver window asks for it (:func:`fabric_manager_package`)."""
    actions = _mappings((transaction or {}).get("actions"))

    def upstream(action: Mapping[str, Any]) -> str:
        return str(action.get("version") or "").split("-", 1)[0]

    drivers = [
        a
        for a in actions
        if str(a.get("package") or "").startswith(
            ("nvidia-driver", "nvidia-open", "libcuda1", "libnvidia-ml")
        )
        and not str(a.get("package") or "").startswith("nvidia-driver-pinning")
    ]
    fms = [a for a in actions if _FM.match(str(a.get("package") or "").split(":", 1)[0])]
    versions = {upstream(a) for a in drivers if a.get("version")}
    if not fms or (versions and {upstream(a) for a in fms} != versions):
        record["blockers"].append(
            _blocker(
                "fabric_manager",
                [f"{a.get('package')} {a.get('version')}" for a in fms] or None,
                None,
                f"this host has {_count(facts.get('nvswitch'))} NVSwitch device(s); the move does not bring"
                " the fabric manager at the new driver's exact version"
                + (f" (driver {', '.join(sorted(versions))})" if versions else "")
                + ', so the fabric would stay "In Progress" and CUDA would fail with error 802'
                " (NVIDIA/gpu-operator#2781)",
                "make the host's repository offer the fabric manager of the target branch at the driver's"
                " version (cuda-drivers-fabricmanager-<branch>), then run again",
            )
        )


def fabric_manager_package(target: Mapping[str, Any]) -> str:
    """The fabric manager's package for the target branch on Debian and Ubuntu,
    ``cuda-drivers-fabricmanager-<branch>`` (NVIDIA's apt-packaging-fabric-manager README: "apt-get
    install cuda-drivers-fabricmanager-XXX", XXX the driver's branch)."""
    return f"cuda-drivers-fabricmanager-{target['branch']}"


def describe(plan: Mapping[str, Any]) -> list[str]:
    """The plan's lines as ``plan`` and the refusal show them."""
    if not plan.get("needs_move"):
        return [f"driver {plan.get('current')} meets the floor {plan.get('floor')}: no driver change"]
    lines = [
        f"driver window: {plan.get('current')} -> {plan.get('target')} ({plan.get('flavour')} kernel modules;"
        f" below the floor {plan.get('floor')})",
    ]
    for branch, role in ((plan.get("current_branch"), "running"), (plan.get("target_branch"), "target")):
        info = driver.branch_info(branch) if isinstance(branch, int) else None
        if info:
            kind = info["type"] or "no type published"
            end = f", end of life {info['end_of_life']}" if info["end_of_life"] else ""
            lines.append(f"  {role} branch R{branch}: {kind}{end} ({info['source']})")
    if plan.get("requests"):
        lines.append(f"  apt installs: {' '.join(plan['requests'])}")
    for change in plan.get("changes") or []:
        lines.append(f"    {change}")
    if plan.get("held"):
        lines.append(f"  held now (to release, then hold at the new version): {', '.join(plan['held'])}")
    if plan.get("activation"):
        lines.append(f"  activation: {plan['activation']} ({plan.get('activation_why')})")
    for client in plan.get("clients") or []:
        state = "to stop" if client["known"] else "not among the units to stop"
        lines.append(
            f"  GPU client: {client['comm']} (pid {client['pid']}, {client['unit'] or 'no unit'}): {state}"
        )
    for note in plan.get("notes") or []:
        lines.append(f"  note: {note}")
    for b in plan.get("blockers") or []:
        option = f" Option: {b['option']}." if b.get("option") else ""
        lines.append(f"  blocker ({b['check']}): {b['problem']}.{option} Fix: {b['remedy']}.")
    if plan.get("ready"):
        lines.append("  every check of the move passes")
    return lines
