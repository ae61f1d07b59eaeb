"""Rules and parsers for moving an NVIDIA driver from R570/R575 to the R580 branch or later.

CUDA 13 needs an R580 driver or newer (the CUDA 13.0 floor of
:data:`cuda13_upgrade.versions.DRIVER_TABLE` is 580.65.06). Pure decisions of that
move: the target, NVIDIA's branch table, the Debian/Ubuntu packages of NVIDIA's
CUDA repository, the kernel module flavour, and readers of what a move prints when
it fails (rmmod/modprobe, DKMS, Secure Boot, NVML, the GPU Operator's driver
container), of ``mokutil`` and of ``nvidia-smi -q``'s Fabric section. Real samples
are in ``tests/fixtures/driver/``, each source named in its SOURCES.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from cuda13_upgrade.errors import Cuda13Error, ParseError
from cuda13_upgrade.nvidia_smi import classify_failure, kernel_module_flavour, parse_proc_driver_version
from cuda13_upgrade.preflight import OPEN_MODULE_ONLY_FROM
from cuda13_upgrade.versions import parse_compute_capability, parse_driver_version

__all__ = [
    "BRANCHES",
    "FLAVOURS",
    "branch_info",
    "check_flavour",
    "check_target",
    "classify_driver_text",
    "fabric_verdict",
    "flavour_required",
    "install_packages",
    "module_unload_order",
    "needs_move",
    "parse_fabric",
    "parse_mokutil_sb_state",
    "parse_mokutil_test_key",
    "parse_target",
]

TARGET_OPTION = "cuda13_driver_target"
FLAVOUR_OPTION = "cuda13_driver_flavour"
FLAVOURS = ("open", "proprietary")

_PAGE = "NVIDIA Data Center Drivers, 'Supported Drivers and CUDA Toolkit Versions', Table 'CUDA and Drivers'"
_OLD_ED = f"{_PAGE} (edition listing R535, R570 and R580)"
_NEW_ED = f"{_PAGE} (editions 615 and 620)"
_FORUM = (
    "NVIDIA developer forums, 'Current graphics driver releases': "
    "'Current new feature branch release: 590.48.01'"
)
_NFB = "'New Feature Branches are short-lived and do not have an end-of-life date' (edition 620)"
# (branch, type, end of life, newest CUDA major without the forward compatibility package, note, source)
_BRANCH_ROWS = (
    (570, "production branch", "February 2026", 12, None, _OLD_ED),
    (575, None, None, None, "listed among the previous branches that 'are end of life', no date", _OLD_ED),
    (580, "long-term support branch", "June 2028", 13, "an earlier edition printed August 2028", _NEW_ED),
    (590, "new feature branch", None, None, _NFB, _FORUM),
    (595, "production branch", "March 2027", 13, None, _NEW_ED),
)
#: NVIDIA's driver branches around the move, only what NVIDIA publishes (``None`` where it says nothing).
BRANCHES: dict[int, dict[str, Any]] = {
    row[0]: dict(zip(("branch", "type", "end_of_life", "max_cuda_major", "note", "source"), row, strict=True))
    for row in _BRANCH_ROWS
}


def branch_info(branch: int) -> dict[str, Any] | None:
    """The :data:`BRANCHES` row of a branch number (``580``), a copy; ``None`` for others."""
    if isinstance(branch, bool) or not isinstance(branch, int):
        return None
    row = BRANCHES.get(branch)
    return dict(row) if row else None


_BRANCH_RE = re.compile(r"^[Rr]?(\d{3})$")
_TARGET_REMEDY = (
    "write a branch such as 'R580' or a driver version such as '580.95.05'; leave it empty to keep the "
    "installed driver"
)


def parse_target(value: object, *, option: str = TARGET_OPTION) -> dict[str, Any] | None:
    """Read the driver a host should move to.

    Args:
        value: a branch (``"R580"``, ``"r580"``, ``"580"``, the int ``580``) or a
            driver version as nvidia-smi prints it: three parts (``"580.95.05"``) or
            two (``"580.142"``, ``"595.79"``: NVIDIA ships both shapes); ``None`` or
            ``""`` turn the move off.
        option: the variable quoted in errors.

    Returns:
        ``{"kind": "branch", "version": None, "branch": 580}`` or ``{"kind":
        "version", "version": "580.95.05", "branch": 580}``; ``None`` when empty.

    Raises:
        Cuda13Error: bools, floats (YAML reads an unquoted ``580.10`` as ``580.1``),
            ``"R"``, ``"latest"``, ``"58O.95"`` and other shapes; the message names
            the value and the option.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool | float):
        remedy = "quote it (YAML reads 580.10 as 580.1); " + _TARGET_REMEDY
        raise Cuda13Error("driver target is a YAML boolean or number", value, option=option, remedy=remedy)
    text = str(value).strip() if isinstance(value, int | str) else ""
    match = _BRANCH_RE.match(text)
    if match:
        return {"kind": "branch", "version": None, "branch": int(match.group(1))}
    try:
        branch = parse_driver_version(text, option=option)[0] if re.match(r"^\d{3}\.", text) else None
    except Cuda13Error:
        branch = None
    if branch is not None:
        return {"kind": "version", "version": text, "branch": branch}
    problem = "driver target is neither a branch (R580) nor a driver version (580.95.05)"
    raise Cuda13Error(problem, value, option=option, remedy=_TARGET_REMEDY)


def check_target(target: Mapping[str, Any] | None, *, floor: str, option: str = TARGET_OPTION) -> None:
    """Refuse a target below the driver floor of the CUDA release.

    A branch target is refused when its number is below the floor's branch
    (``R575`` against ``580.65.06``): any R580 release passes once the branch's
    newest is installed. A version target is refused when it is older than the
    floor (``575.64.05``, also ``580.65.05``). ``None`` (move off) passes. The floor
    comes from the CUDA Toolkit Release Notes, Table 3 (see
    :func:`cuda13_upgrade.versions.driver_supports`).

    Raises:
        Cuda13Error: the target is below the floor; the remedy names the floor's branch.
        Cuda13Error: a malformed floor.
    """
    if target is None:
        return
    floor_key = parse_driver_version(floor, option=None)
    if target["kind"] == "branch":
        too_old = target["branch"] < floor_key[0]
        shown: object = f"R{target['branch']}"
    else:
        too_old = parse_driver_version(target["version"], option=option) < floor_key
        shown = target["version"]
    if too_old:
        problem = f"driver target is older than {floor}, the driver this CUDA release needs"
        remedy = (
            f"target the R{floor_key[0]} branch ('R{floor_key[0]}': its newest release) or a version of"
            f" {floor} or newer"
        )
        raise Cuda13Error(problem, shown, option=option, remedy=remedy)


def needs_move(current_driver: str, floor: str) -> bool:
    """Whether the installed driver is below the floor and must move.

    Args:
        current_driver: ``"570.124.06"`` as nvidia-smi prints it, or the text of
            ``/proc/driver/nvidia/version`` (the loaded module, read with
            :func:`cuda13_upgrade.nvidia_smi.kernel_module_flavour`).
        floor: the release's minimum driver, e.g. ``"580.65.06"``.

    Raises:
        Cuda13Error: a malformed version; ParseError: a /proc text without an
            ``NVRM version`` line.
    """
    if isinstance(current_driver, str) and current_driver.lstrip().startswith("NVRM"):
        current_driver = kernel_module_flavour(current_driver)["driver_version"]
    return parse_driver_version(current_driver) < parse_driver_version(floor, option=None)


_GUIDE = "NVIDIA Driver Installation Guide"
_PACKAGES_SOURCE = (
    f"{_GUIDE}: 'Recent Updates' > 'Version locking packages for Ubuntu / Debian' (install the pinning "
    "package prior to installing the driver); Ubuntu and Debian 'Driver Installation' (open kernel "
    "modules: nvidia-open; proprietary: cuda-drivers); 'Advanced Options' > 'Switching between Driver "
    "Module Flavors'"
)


def install_packages(target: Mapping[str, Any], *, flavour: str, distro: str) -> dict[str, Any]:
    """The apt packages of NVIDIA's CUDA repository that install a target driver.

    The guide gives Debian and Ubuntu one recipe for every branch: first the
    pinning package, ``nvidia-driver-pinning-<branch>`` or ``-<version>`` (the
    repository describes them as "APT driver pinning file for driver branch 580" /
    "... for driver version 580.105.08"), then ``nvidia-open`` or ``cuda-drivers``.
    From 590 the Ubuntu packages lose the branch from their names
    (``cuda-drivers-580`` "will be removed") and an unpinned system follows the
    newest driver: the pin keeps a host on R580. A version is chosen through its
    pinning package, not with ``name=version``.

    Args:
        target: :func:`parse_target`'s result.
        flavour: ``"open"`` or ``"proprietary"`` (:data:`FLAVOURS`).
        distro: ``"debian"`` or ``"ubuntu"``.

    Returns:
        ``{"packages": ["nvidia-driver-pinning-580", "nvidia-open"], "pinning":
        "nvidia-driver-pinning-580", "source": "<guide sections>"}``, packages in
        install order.

    Raises:
        Cuda13Error: another distribution or flavour, or no target.
    """
    if str(distro).strip().lower() not in ("debian", "ubuntu"):
        problem = "NVIDIA's pinning packages are documented for Debian and Ubuntu only"
        remedy = f"on other distributions follow the {_GUIDE}, 'Version locking' (dnf, zypper)"
        raise Cuda13Error(problem, distro, option="distro", remedy=remedy)
    _check_flavour_name(flavour, FLAVOUR_OPTION)
    if not isinstance(target, Mapping) or target.get("kind") not in ("branch", "version"):
        raise Cuda13Error("no driver target to install", target, option=TARGET_OPTION)
    pin = target["version"] if target["kind"] == "version" else target["branch"]
    pinning = f"nvidia-driver-pinning-{pin}"
    main = "nvidia-open" if flavour == "open" else "cuda-drivers"
    return {"packages": [pinning, main], "pinning": pinning, "source": _PACKAGES_SOURCE}


_README_OPEN = (
    "NVIDIA driver README, chapter 'Open Linux Kernel Modules', 'Supported Features': the proprietary "
    "flavor supports GPUs 'until Blackwell. Blackwell and later are only supported by the open kernel "
    "modules'"
)


def _check_flavour_name(flavour: object, option: str) -> None:
    if flavour not in FLAVOURS:
        remedy = "use 'open' (NVIDIA's default since R560, required for Blackwell) or 'proprietary'"
        raise Cuda13Error("driver flavour is unknown", flavour, option=option, remedy=remedy)


def flavour_required(compute_capabilities: Iterable[str]) -> str | None:
    """``"open"`` when a GPU is Blackwell or newer (compute capability >= 10.0), else ``None``.

    Source: the NVIDIA driver README (560 and later), 'Open Linux Kernel
    Modules': "Blackwell and later are only supported by the open kernel modules".

    Raises:
        Cuda13Error: a malformed compute capability (``"sm_120"``).
    """
    return "open" if _needing_open(compute_capabilities) else None


def _needing_open(caps: Iterable[str]) -> list[str]:
    return sorted({cc for cc in caps if parse_compute_capability(cc, option=None) >= OPEN_MODULE_ONLY_FROM})


def check_flavour(flavour: str, compute_capabilities: Iterable[str], option: str = FLAVOUR_OPTION) -> None:
    """Refuse an unknown flavour, and the proprietary one on Blackwell or newer GPUs.

    Raises:
        Cuda13Error: the message names the value, the option and the GPUs' compute capabilities.
    """
    _check_flavour_name(flavour, option)
    needing = _needing_open(compute_capabilities)
    if flavour == "proprietary" and needing:
        problem = f"GPUs of compute capability {', '.join(needing)} need the open kernel modules"
        remedy = f"set it to 'open' ({_README_OPEN})"
        raise Cuda13Error(problem, flavour, option=option, remedy=remedy)


# --- failure texts ----------------------------------------------------------------------------

_IN_USE_FIX = (
    "stop what uses the GPUs (nvidia-persistenced, nvidia-fabricmanager, DCGM, the display manager, GPU "
    "processes: 'lsof /dev/nvidia*'), unload nvidia_drm if loaded, then {order} in this order, or reboot"
)
# (kind, pattern, cause, fix): the templates take the pattern's groups ({0}, {1}) and {order}.
_DRIVER_TEXTS: tuple[tuple[str, re.Pattern[str], str, str], ...] = (
    (
        "dkms_headers_missing",
        re.compile(r"Your kernel headers for kernel (\S+) cannot be found"),
        "DKMS cannot build the NVIDIA module: the headers of kernel {0} are not installed",
        "install them (Debian/Ubuntu: linux-headers-{0}) and install the driver again, or boot a kernel "
        "whose headers are installed",
    ),
    (
        "secure_boot_key_rejected",
        re.compile(r"could not insert '(nvidia[\w-]*)': Key was rejected by service"),
        "Secure Boot refused the signature of the {0} module: its signing key is not enrolled",
        "enroll the key DKMS signs with (Ubuntu: mokutil --import /var/lib/shim-signed/mok/MOK.der) and "
        "confirm it in the MOK manager at the next boot, on the console; check with 'mokutil --sb-state' "
        "and 'mokutil --test-key'",
    ),
    (
        "driver_container_in_use",
        re.compile(r"Could not unload NVIDIA driver kernel modules, driver is in use"),
        "the driver container could not unload the loaded NVIDIA modules: GPU clients still hold them",
        "drain GPU workloads from the node (k8s-driver-manager evicts GPU pods with ENABLE_GPU_POD_EVICTION "
        "and drains with ENABLE_AUTO_DRAIN) or reboot the node",
    ),
    (
        "module_in_use",
        re.compile(r"(?:rmmod: ERROR|modprobe: FATAL): Module (nvidia[\w-]*) is in use(?: by: (.+))?"),
        "the {0} kernel module cannot be unloaded: {1}",
        _IN_USE_FIX,
    ),
)
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\S+)")


def _hit(pattern: re.Pattern[str], lines: list[str]) -> tuple[re.Match[str], str] | None:
    for line in lines:
        match = pattern.search(line)
        if match:
            return match, line.strip()
    return None


def classify_driver_text(text: str, *, module_version_text: str | None = None) -> dict[str, str] | None:
    """Say what a failed driver step printed means and what to do.

    Recognised, in this order (the first that matches decides):

    * ``"dkms_headers_missing"``: DKMS's "Your kernel headers for kernel K cannot be found";
    * ``"secure_boot_key_rejected"``: "could not insert 'nvidia': Key was rejected by
      service" (the kernel refused the module's signature under Secure Boot);
    * ``"driver_container_in_use"``: "Could not unload NVIDIA driver kernel modules,
      driver is in use", printed by the GPU Operator's driver container
      (gpu-driver-container ``nvidia-driver``) and by k8s-driver-manager;
    * ``"module_in_use"``: ``rmmod: ERROR: Module nvidia is in use by: ...`` or
      ``modprobe: FATAL: Module nvidia is in use.``;
    * ``"driver_library_mismatch"``: "Failed to initialize NVML: Driver/library version
      mismatch", recognised by :func:`cuda13_upgrade.nvidia_smi.classify_failure`;
      the ``NVML library version`` line and, given ``module_version_text`` (the text
      of /proc/driver/nvidia/version), the loaded module's version are quoted.

    Returns:
        ``{"kind", "cause", "fix", "line"}`` (``line``: the deciding line), or ``None``.
    """
    lines = text.splitlines() if isinstance(text, str) else []
    order = ", ".join(module_unload_order())
    for kind, pattern, cause, fix in _DRIVER_TEXTS:
        hit = _hit(pattern, lines)
        if hit:
            groups = hit[0].groups(default="")
            if kind == "module_in_use":  # rmmod names the modules that depend on it; none: a process
                groups = (
                    groups[0],
                    f"{groups[1].strip()} use it"
                    if groups[1]
                    else "it is in use, not by a module (a process, the console)",
                )
            return {
                "kind": kind,
                "cause": cause.format(*groups, order=order),
                "fix": fix.format(*groups, order=order),
                "line": hit[1],
            }
    failure = classify_failure(None, "\n".join(lines))
    if failure.code != "driver_library_mismatch":
        return None
    cause = "the loaded kernel module and the user-space NVML library are different driver versions"
    library = _hit(_NVML_LIB_RE, lines)
    if library:
        module = parse_proc_driver_version(module_version_text) if module_version_text else None
        cause += f" (NVML library {library[0].group(1)}"
        cause += f", kernel module {module['module_version']})" if module else ")"
    return {"kind": "driver_library_mismatch", "cause": cause, "fix": failure.remedy, "line": failure.detail}


_UNLOAD_ORDER = "nvidia_modeset nvidia_uvm nvidia_peermem nvidia_fs nvidia_vgpu_vfio gdrdrv nvidia".split()


def module_unload_order() -> list[str]:
    """The modules k8s-driver-manager unloads, in its order (a new list).

    Source: NVIDIA/k8s-driver-manager, ``cmd/driver-manager/main.go``,
    ``unloadDriver`` (commit bd62ca7d); gpu-driver-container's ``nvidia-driver``
    script removes nvidia-modeset, nvidia-uvm and nvidia-peermem before nvidia too.
    """
    return list(_UNLOAD_ORDER)


# --- mokutil -------------------------------------------------------------------------------

_SB_STATES = (
    ("SecureBoot enabled", "enabled"),
    ("SecureBoot disabled", "disabled"),
    ("This system doesn't support Secure Boot", "unsupported"),
    ("EFI variables are not supported on this system", "unsupported"),
)


def parse_mokutil_sb_state(text: str) -> str | None:
    """Read ``mokutil --sb-state``: ``"enabled"``, ``"disabled"``, ``"unsupported"`` or ``None``.

    The texts are mokutil's (lcp/mokutil ``src/mokutil.c``): "SecureBoot enabled"
    (possibly followed by "SecureBoot validation is disabled in shim"),
    "SecureBoot disabled" (possibly "Platform is in Setup Mode"), "This system
    doesn't support Secure Boot" (no SecureBoot variable) and "EFI variables are
    not supported on this system" (booted without UEFI, e.g. legacy BIOS): both
    last ones mean Secure Boot cannot be on. Anything else (an error) is ``None``.
    """
    for line in text.splitlines() if isinstance(text, str) else []:
        for prefix, state in _SB_STATES:
            if line.strip() == prefix:
                return state
    return None


_TEST_KEY_RE = re.compile(
    r"^(\S.*) is (already enrolled|already in db|not enrolled|already in the enrollment request)$"
)


def parse_mokutil_test_key(text: str) -> bool | None:
    """Read ``mokutil --test-key <cert>``: ``True`` when the key is enrolled, ``False`` when not.

    mokutil prints "<cert> is already enrolled" (or "... is already in db"),
    "<cert> is not enrolled", or "<cert> is already in the enrollment request" (a
    request that the MOK manager confirms at the next boot: not enrolled yet, so
    ``False``). Source: lcp/mokutil ``src/mokutil.c`` (``test_key``,
    ``print_skip_message``). Other texts (errors) give ``None``.
    """
    for line in text.splitlines() if isinstance(text, str) else []:
        match = _TEST_KEY_RE.match(line.strip())
        if match:
            return match.group(2) in ("already enrolled", "already in db")
    return None


# --- nvidia-smi -q, Fabric ------------------------------------------------------------------

_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_FIELD_RE = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")


def parse_fabric(text: str) -> list[dict[str, str | None]]:
    """Read the ``Fabric`` section of each GPU in ``nvidia-smi -q``.

    Input: the whole output (each section follows its ``GPU 00000000:18:00.0``
    line) or a ``grep -A 2 Fabric`` excerpt of it (then ``bus_id`` is ``None``)::

            Fabric
                State                             : In Progress
                Status                            : N/A

    Returns:
        ``[{"bus_id": "00000000:18:00.0", "state": "Completed", "status":
        "Success"}, ...]`` in output order; ``[]`` without Fabric sections.

    Raises:
        ParseError: not a string, or a Fabric section without a State line.
    """
    if not isinstance(text, str):
        raise ParseError("nvidia-smi -q output is not text", text)
    gpus: list[dict[str, str | None]] = []
    bus_id: str | None = None
    section: dict[str, str | None] | None = None
    depth = 0
    for line in text.splitlines():
        header = _GPU_HEADER_RE.match(line)
        if header:
            bus_id = header.group(1)
        if section is not None:
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent <= depth:
                section = None
            else:
                field = _FIELD_RE.match(line)
                if field and len(field.group(1)) == depth + 4 and field.group(2) in ("State", "Status"):
                    section[field.group(2).lower()] = field.group(3)
        if section is None and line.strip() == "Fabric":
            depth = len(line) - len(line.lstrip())
            section = {"bus_id": bus_id, "state": None, "status": None}
            gpus.append(section)
    missing = [gpu["bus_id"] or "Fabric" for gpu in gpus if gpu["state"] is None]
    if missing:
        remedy = "pass the whole 'nvidia-smi -q' output, or 'grep -A 2 Fabric' of it"
        raise ParseError("a Fabric section of nvidia-smi -q has no 'State' line", missing[0], remedy=remedy)
    return gpus


_READY = ("Completed", "Success")
_NO_FABRIC = frozenset({"N/A", "Not Supported", "[Not Supported]", "[N/A]"})


def fabric_verdict(gpus: Iterable[Mapping[str, str | None]]) -> dict[str, Any]:
    """Whether every GPU is registered with the NVLink fabric.

    Rule (NVML API Reference, ``nvmlGpuFabricInfo_t``: ``state`` is the "state of
    GPU registration process"; ``status`` "must be checked only if state returns
    'complete'"): a GPU is ready when State is ``Completed`` and Status ``Success``.
    GPUs whose State is ``N/A``/``Not Supported`` have no fabric (PCIe cards, HGX
    A100 4-GPU boards): when all are so, the check does not apply.

    Returns:
        ``{"ok": bool, "applicable": bool, "not_ready": [gpu, ...], "summary": str}``;
        ``not_ready`` holds the GPUs (as given) that are not Completed/Success.
    """
    gpus = list(gpus)
    applicable = any(g.get("state") not in _NO_FABRIC for g in gpus)
    bad = [(i, dict(g)) for i, g in enumerate(gpus) if (g.get("state"), g.get("status")) != _READY]
    if not applicable:
        bad, summary = [], "no GPU reports an NVLink fabric"
    elif not bad:
        summary = f"all {len(gpus)} GPUs registered with the fabric (Completed/Success)"
    else:
        listing = "; ".join(
            f"{g.get('bus_id') or f'GPU #{i}'}: {g.get('state')}/{g.get('status')}" for i, g in bad
        )
        summary = (
            f"{len(bad)} of {len(gpus)} GPUs not registered with the fabric ({listing}); check that "
            "nvidia-fabricmanager runs and is of the driver's version"
        )
    return {"ok": not bad, "applicable": applicable, "not_ready": [g for _i, g in bad], "summary": summary}
