"""What moving the NVIDIA driver needs to know about a host, read in one run (module ``cuda13_driver_facts``).

Runs on the managed host, standard library only, and changes nothing: it reads files and runs
query commands. What it returns is judged on the control node (``cuda13_upgrade.driverplan``).

Read:

* the NVIDIA driver's packages as dpkg has them: ``dpkg-query -W -f=FORMAT PATTERN...`` with
  :data:`DPKG_FORMAT` (fields of dpkg-query(1) ``--showformat``: ``binary:Package`` is the name
  with its architecture qualifier where Multi-Arch needs one, ``libcuda1:amd64``;
  ``db:Status-Abbrev`` the three letters of ``dpkg -l``, whose first is the selection state,
  ``h`` for hold, dpkg(1) "Package selection states"; ``Status`` the same in words, ``hold ok
  installed``) and the name patterns of :data:`DRIVER_PATTERNS`. dpkg-query exits 1 and names
  each pattern that matched nothing on stderr ("dpkg-query: no packages found matching
  libcuda1"), so rc 1 is the usual answer;
* the running kernel's release and its build directory ``/lib/modules/RELEASE/build``, which
  DKMS builds the module against (a link into the kernel headers' package);
* Secure Boot: ``mokutil --sb-state`` as it ran, and the firmware's ``SecureBoot`` variable
  (efivarfs.rst of the kernel: four bytes of attributes, then the value, 1 when Secure Boot is on; UEFI
  specification, "Globally Defined Variables", under EFI_GLOBAL_VARIABLE's GUID
  ``8be4df61-93ca-11d2-aa0d-00e098032b8c``); and ``mokutil --test-key KEY`` for DKMS's signing
  certificate (DKMS's README, "Secure Boot": ``/var/lib/dkms/mok.pub``) when that file exists;
* every process with an open file descriptor on ``/dev/nvidia*`` (the links of
  ``/proc/PID/fd``), its name (``/proc/PID/comm``) and its systemd unit (``/proc/PID/cgroup``,
  cgroups(7)); processes that end or may not be read meanwhile are left out, so the module
  runs as root to see them all;
* the loaded NVIDIA kernel modules of :data:`NVIDIA_MODULES` (``/proc/modules``: name, size,
  reference count, the modules that use it, state; a kernel built without module unloading
  prints ``-`` for the count and users);
* ``/proc/driver/nvidia/version``, the NVSwitch devices (``/dev/nvidia-nvswitchN``; the control
  node ``nvidia-nvswitchctl`` is no switch and is not counted), and
  ``systemctl is-active`` of the fabric manager, nvidia-persistenced and the units named in
  ``units`` (the GPU clients the operator knows: DCGM, exporters).

Every command goes through :func:`_run`, which never raises: a missing tool is rc 127 with the
OS error, a run past ``timeout`` seconds is ``{"rc": None, "timedout": True}``.
"""

from __future__ import annotations

import os
import subprocess

from .preflight_facts import _read

#: dpkg-query's --showformat (dpkg-query itself reads the ``\t`` and ``\n`` escapes); the first three
#: fields are in the order ``cuda13_upgrade.aptplan.driver_packages`` reads.
DPKG_FORMAT = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n"
#: The NVIDIA driver's package families (nvidia-* holds nvidia-open*, nvidia-kernel-*,
#: nvidia-driver-pinning-*, nvidia-fabricmanager*, nvidia-persistenced; libnvidia-* holds
#: libnvidia-nscq*). A pattern without an architecture matches every architecture (libcuda1:i386).
DRIVER_PATTERNS = (
    "nvidia-*",
    "libnvidia-*",
    "libcuda1",
    "cuda-drivers*",
    "xserver-xorg-video-nvidia*",
    "firmware-nvidia-gsp*",
    # Ubuntu's prebuilt, signed kernel modules (cuda13_upgrade.aptplan.package_kind's "driver").
    "linux-modules-nvidia-*",
    "linux-objects-nvidia-*",
    "linux-signatures-nvidia-*",
)
#: The kernel modules of the driver, GPUDirect Storage (nvidia_fs) and GDRCopy (gdrdrv).
NVIDIA_MODULES = (
    "nvidia",
    "nvidia_uvm",
    "nvidia_modeset",
    "nvidia_drm",
    "nvidia_peermem",
    "nvidia_fs",
    "gdrdrv",
)
#: The firmware's Secure Boot variable: its name and EFI_GLOBAL_VARIABLE's GUID.
SECURE_BOOT_VARIABLE = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
PERSISTENCED_UNIT = "nvidia-persistenced"

DEFAULTS = {
    "proc": "/proc",
    "dev": "/dev",
    "lib_modules": "/lib/modules",
    "efivars": "/sys/firmware/efi/efivars",
    "mok_key": "",
    "dkms_framework": "/etc/dkms/framework.conf",
    "units": [],
    "timeout": 30,
}


def _run(argv: list, timeout: float) -> dict:
    """``{"rc", "stdout", "stderr"}`` of a command (undecodable bytes replaced); rc 127 and the OS
    error when it cannot be found, 126 when it cannot be run, ``{"rc": None, "timedout": True}``
    past ``timeout`` seconds. Never raises."""
    try:
        done = subprocess.run(
            argv, capture_output=True, check=False, timeout=timeout, text=True, errors="replace"
        )
    except FileNotFoundError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": None, "stdout": "", "stderr": "", "timedout": True}
    except (OSError, ValueError) as exc:
        return {"rc": 126, "stdout": "", "stderr": str(exc)}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def parse_packages(text: str) -> list:
    """``[{"name", "version", "status", "held"}]`` of dpkg-query's lines in :data:`DPKG_FORMAT`, in
    its order. ``status`` is dpkg's Status in words (``deinstall ok config-files``); ``held`` is
    True when the selection state is hold. Names dpkg knows but has never installed (second
    letter ``n``, printed when a pattern names them) are left out."""
    found = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 4 or parts[2][1:2] in ("", "n"):
            continue
        found.append({"name": parts[0], "version": parts[1], "status": parts[3], "held": parts[2][:1] == "h"})
    return found


#: Where DKMS's signing certificate is when framework.conf names none: Ubuntu's DKMS signs with the
#: shim-signed MOK (update-secureboot-policy), upstream DKMS 3 makes /var/lib/dkms/mok.pub.
MOK_CANDIDATES = ("/var/lib/shim-signed/mok/MOK.der", "/var/lib/dkms/mok.pub")


def mok_certificate(framework: str, candidates=MOK_CANDIDATES) -> str:
    """DKMS's module signing certificate: ``mok_certificate=`` of ``framework`` (DKMS's
    framework.conf) when set, else the first of ``candidates`` that exists, else the last."""
    text = _read(framework) or ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("mok_certificate="):
            value = line.split("=", 1)[1].strip().strip('"').strip("'")
            if value:
                return value
    return next((path for path in candidates if os.path.isfile(path)), candidates[-1])


def headers(lib_modules: str, release: str) -> dict:
    """``{"path", "exists", "link", "target"}`` of ``LIB_MODULES/RELEASE/build``: ``exists`` when it
    is (or leads to) a directory, ``link`` the symlink's text (None when not a link), ``target``
    the resolved directory (None when missing: a link left by a removed headers package)."""
    path = os.path.join(lib_modules, release, "build")
    exists = os.path.isdir(path)
    return {
        "path": path,
        "exists": exists,
        "link": os.readlink(path) if os.path.islink(path) else None,
        "target": os.path.realpath(path) if exists else None,
    }


def efi_secure_boot(efivars: str) -> bool | None:
    """True or False from the firmware's SecureBoot variable; None without EFI variables (BIOS
    boot), without the variable (no Secure Boot support) or for any other value."""
    try:
        with open(os.path.join(efivars, SECURE_BOOT_VARIABLE), "rb") as handle:  # efivarfs: readable by all
            data = handle.read()
    except OSError:
        return None
    if len(data) < 5 or data[4] not in (0, 1):
        return None
    return data[4] == 1


def unit_of(cgroup: str | None) -> str | None:
    """The systemd unit of a ``/proc/PID/cgroup`` text: the last path element ending in
    ``.service`` or ``.scope``, read from the unified line (``0::PATH``) first, then systemd's own
    v1 hierarchy (``N:name=systemd:PATH``), then the others; None when none names a unit."""
    ranked = []
    for line in (cgroup or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            rank = 0 if parts[:2] == ["0", ""] else 1 if parts[1] == "name=systemd" else 2
            ranked.append((rank, parts[2]))
    for _rank, path in sorted(ranked, key=lambda item: item[0]):
        for element in reversed(path.split("/")):
            if element.endswith((".service", ".scope")):
                return element
    return None


def device_holders(proc: str, dev: str) -> list:
    """``[{"pid", "comm", "device", "unit"}]``, by pid, of every process with a descriptor open on
    ``DEV/nvidia*`` (``device``: the distinct paths, sorted)."""
    prefix = dev.rstrip("/") + "/nvidia"
    try:
        pids = sorted((name for name in os.listdir(proc) if name.isdigit()), key=int)
    except OSError:
        return []
    holders = []
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            names = os.listdir(fd_dir)
        except OSError:  # ended, or not ours to read
            continue
        devices = set()
        for name in names:
            try:
                target = os.readlink(os.path.join(fd_dir, name))
            except OSError:
                continue
            if target.startswith(prefix):
                devices.add(target)
        if devices:
            comm = _read(os.path.join(proc, pid, "comm"))
            holders.append(
                {
                    "pid": int(pid),
                    "comm": comm.rstrip("\n") if comm is not None else None,
                    "device": sorted(devices),
                    "unit": unit_of(_read(os.path.join(proc, pid, "cgroup"))),
                }
            )
    return holders


def modules(proc: str) -> list:
    """``[{"name", "size", "refcount", "users", "state"}]`` of the NVIDIA modules in
    ``PROC/modules``, in its order (``refcount`` None where the kernel prints ``-``)."""
    found = []
    for line in (_read(os.path.join(proc, "modules")) or "").splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] not in NVIDIA_MODULES:
            continue
        found.append(
            {
                "name": fields[0],
                "size": int(fields[1]) if fields[1].isdigit() else None,
                "refcount": int(fields[2]) if fields[2].isdigit() else None,
                "users": [user for user in fields[3].split(",") if user and user != "-"],
                "state": fields[4],
            }
        )
    return found


def nvswitch_count(dev: str) -> int:
    """How many ``DEV/nvidia-nvswitchN`` device nodes there are."""
    try:
        names = os.listdir(dev)
    except OSError:
        return 0
    return sum(1 for name in names if name.startswith("nvidia-nvswitch") and name[15:].isdigit())


def facts(params: dict) -> dict:
    """What a driver move needs to know about this host (see the module docstring).

    ``params`` as :data:`FACTS_SPEC`, each optional (:data:`DEFAULTS`). Returns ``{"packages":
    [{"name", "version", "status", "held"}], "dpkg_query": dpkg-query's stdout, "dpkg_query_exit":
    {"rc", "stderr"}, "kernel_release", "headers": {"path", "exists", "link", "target"},
    "secure_boot": RUN, "efi_secure_boot": bool or None, "efi": bool (booted through UEFI),
    "mok_key": the DKMS signing certificate's path, "mok_key_exists": bool, "mok_test_key": RUN or None,
    "device_holders": [{"pid", "comm", "device", "unit"}], "modules": [{"name", "size", "refcount",
    "users", "state"}], "proc_version": text or None, "fabric_manager": RUN, "nvswitch": int,
    "persistenced": RUN, "units": {unit: RUN}}`` where RUN is :func:`_run`'s record. Raises nothing.
    """
    p = dict(DEFAULTS)
    p.update({key: value for key, value in (params or {}).items() if value is not None})
    timeout = int(p["timeout"])
    out: dict = {}
    query = _run(["dpkg-query", "-W", "-f=" + DPKG_FORMAT, *DRIVER_PATTERNS], timeout)
    out["packages"] = parse_packages(query["stdout"])
    out["dpkg_query"] = query["stdout"]
    out["dpkg_query_exit"] = {key: value for key, value in query.items() if key != "stdout"}
    out["kernel_release"] = os.uname().release
    out["headers"] = headers(p["lib_modules"], out["kernel_release"])
    out["secure_boot"] = _run(["mokutil", "--sb-state"], timeout)
    out["efi_secure_boot"] = efi_secure_boot(p["efivars"])
    mok_key = p["mok_key"] or mok_certificate(p["dkms_framework"])
    out["mok_key"] = mok_key
    out["mok_key_exists"] = os.path.isfile(mok_key)
    # Booted through UEFI: the firmware's directory; without it there is no Secure Boot.
    out["efi"] = os.path.isdir(os.path.dirname(p["efivars"].rstrip("/")))
    out["mok_test_key"] = (
        _run(["mokutil", "--test-key", mok_key], timeout) if os.path.isfile(mok_key) else None
    )
    out["device_holders"] = device_holders(p["proc"], p["dev"])
    out["modules"] = modules(p["proc"])
    out["proc_version"] = _read(os.path.join(p["proc"], "driver", "nvidia", "version"))
    out["fabric_manager"] = _run(["systemctl", "is-active", FABRIC_MANAGER_UNIT], timeout)
    out["nvswitch"] = nvswitch_count(p["dev"])
    out["persistenced"] = _run(["systemctl", "is-active", PERSISTENCED_UNIT], timeout)
    out["units"] = {unit: _run(["systemctl", "is-active", unit], timeout) for unit in p["units"]}
    return out


#: The argument spec of the module cuda13_driver_facts.
FACTS_SPEC = {
    "proc": {"type": "path", "default": "/proc"},
    "dev": {"type": "path", "default": "/dev"},
    "lib_modules": {"type": "path", "default": "/lib/modules"},
    "efivars": {"type": "path", "default": "/sys/firmware/efi/efivars"},
    "mok_key": {"type": "str", "default": ""},
    "dkms_framework": {"type": "path", "default": "/etc/dkms/framework.conf"},
    "units": {"type": "list", "elements": "str", "default": []},
    "timeout": {"type": "int", "default": 30},
}


def facts_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_driver_facts: :func:`facts`; the same in check mode (it only reads)."""
    return {"changed": False, "facts": facts(params)}
