"""The driver window's change: a host's NVIDIA driver moved to ``cuda13_driver_target``, checked,
measured against the serving stack's baseline, and put back from cached packages when it is not
kept (action ``cuda13_driver``).

The preflight planned the move read-only (:func:`cuda13_upgrade.steps.driver_window.readiness`,
the plan record of :func:`cuda13_upgrade.driverplan.judge`); these functions carry it out, one per
state of the action:

* :func:`cache` (``cached``): the installed driver packages, each at its installed version, as
  ``.deb`` files in ``<cuda13_state_dir>/driver-cache/<driver version>/`` - apt's own cache
  (``/var/cache/apt/archives``) first, else ``apt-get download name=version``; a package found in
  neither refuses the move, before any change, since the rollback could not put it back.
* :func:`move` (``moved``): read each GPU's persistence mode, stop the serving unit and every GPU
  client the plan found
  (``nvidia-persistenced``, ``cuda13_driver_gpu_clients``), release the driver's holds, install the
  pinning package in an apt run of its own when there is one (apt resolves a transaction before
  the pin file exists: dsx-ai-factory/infra-controller PR #6049), then the target's packages
  (``ansible.builtin.apt``), hold the driver's packages at their new versions, mark the kernel log,
  and activate: unload ``nvidia_drm``, ``nvidia_modeset``, ``nvidia_uvm``, ``nvidia_peermem``,
  ``nvidia_fs``, ``gdrdrv``, ``nvidia`` in this order (k8s-driver-manager's order) and load the
  modules that were loaded; a module still in use ("Module nvidia is in use") falls back to a
  reboot under ``reload_or_reboot`` (the record's ``reboot``: the play reboots the host with
  Ansible's ``reboot``) and fails the step under ``reload``.
* :func:`check` (``checked``): ``nvidia-smi`` answers with the target's version (a branch target:
  a version of that branch at or above the floor), without the library/module mismatch ("Failed to
  initialize NVML: Driver/library version mismatch"), with the same GPUs (bus ids) as before; on an
  NVSwitch host the fabric manager at the driver's version and running, and every GPU registered
  with the NVLink fabric (``nvidia-smi -q``'s Fabric section, waited for at most
  :data:`FABRIC_WAIT_S` seconds); the clients stopped are started again; the persistence mode the move read
  before it stopped anything (:func:`gpus_before`).
* :func:`measure_after` (``measured``): the serving stack, unchanged, measured on the new driver and
  judged by the stack's gate against the baseline taken on the old driver
  (:func:`cuda13_upgrade.steps.verify.gate`); the kernel log since the activation is read as the
  verify reads it.
* :func:`restore` (``restored``): the cached packages installed again in one apt transaction (they
  depend on each other at one exact version) with the packages the move added removed, held,
  activated and checked at the old version, and the service started on its stack.

Every change goes through Ansible's modules (``ansible.builtin.systemd_service``,
``.dpkg_selections``, ``.apt``, ``.command``, ``.file``), so that check mode changes nothing.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cuda13_upgrade import aptplan, driver, driverplan, nvidia_smi, xid
from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import Host, StepFailed, json_text, now_iso
from cuda13_upgrade.steps.serve import stack_context
from cuda13_upgrade.steps.verify import gate, read_kernel_log
from cuda13_upgrade.versions import parse_driver_version

#: apt's cache of downloaded packages (apt.conf's Dir::Cache::archives).
APT_ARCHIVES = "/var/cache/apt/archives"
#: The modules a reload unloads first (a display driver above nvidia_modeset).
DRM = "nvidia_drm"
#: The modules every NVIDIA driver package ships (NVIDIA's README, "Installed Components").
DRIVER_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")
#: The nvidia-smi query of the checks after an activation.
CHECK_FIELDS = ("driver_version", "pci.bus_id", "persistence_mode")
#: kmod's text for a module something still holds (tools/modprobe.c, tools/rmmod.c).
_IN_USE = re.compile(r"Module \S+ is in use")


def _versionless(name: str) -> str:
    return name.split("=", 1)[0].split(":", 1)[0]


def deb_file_name(name: str, version: str, arch: str) -> str:
    """The file name apt gives a downloaded package: ``<name>_<version>_<arch>.deb`` with the epoch's
    colon written ``%3a`` (apt-pkg's ``QuoteString`` of ``:``), e.g.
    ``libnvidia-compute-570_570.211.01-0ubuntu0.24.04.2_amd64.deb``."""
    return f"{name}_{version.replace(':', '%3a')}_{arch}.deb"


def cache_dir(options: Mapping[str, Any], version: str) -> str:
    """Where the old driver's packages are kept: ``<cuda13_state_dir>/driver-cache/<version>``."""
    return f"{str(options['cuda13_state_dir']).rstrip('/')}/driver-cache/{version}"


def _facts(host: Host, units: Sequence[str] = ()) -> dict[str, Any]:
    return host.module("cuda13_driver_facts", {"units": list(units)}, check_mode=False)["facts"]


#: Packages named like the driver's that are not the driver: NVIDIA's container toolkit.
_NOT_MOVED = re.compile(r"^(?:lib)?nvidia-container")


def _installed(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The driver's packages dpkg has installed (``install ok installed`` or held): the driver and
    its kernel module packages (:func:`cuda13_upgrade.aptplan.package_kind`), not the container
    toolkit. Names keep their ``:arch`` (``libcuda1:i386``): dpkg's selections are per
    architecture."""
    return [
        p
        for p in facts.get("packages") or []
        if isinstance(p, Mapping)
        and str(p.get("status") or "").endswith("ok installed")
        and aptplan.package_kind(str(p.get("name") or "")) in ("driver", "dkms")
        and not _NOT_MOVED.match(str(p.get("name") or ""))
    ]


def _present(facts: Mapping[str, Any]) -> list[str]:
    """Every driver package dpkg has in any state but "not-installed" and "config-files" (a package
    a failed run left half-configured included)."""
    return [
        str(p["name"])
        for p in facts.get("packages") or []
        if isinstance(p, Mapping)
        and not str(p.get("status") or "").endswith(("not-installed", "config-files"))
        and aptplan.package_kind(str(p.get("name") or "")) in ("driver", "dkms")
        and not _NOT_MOVED.match(str(p.get("name") or ""))
    ]


def _command(
    host: Host,
    argv: Sequence[str],
    *,
    check_mode: bool | None = None,
    environment: Mapping[str, str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """``ansible.builtin.command`` with ``argv`` and its arguments ``kw`` (``chdir``), never failing
    the step by itself; ``check_mode`` False runs a read in --check too."""
    return host.module(
        "ansible.builtin.command",
        {"argv": list(argv), **kw},
        check_mode=check_mode,
        environment=environment,
        allow_failure=True,
    )


def _text(result: Mapping[str, Any]) -> str:
    return "\n".join(str(result.get(k) or "") for k in ("stdout", "stderr", "msg")).strip()


#: The packages built at the driver's own version (the library, the kernel module and their
#: metapackages; not nvidia-settings or nvidia-modprobe, which Ubuntu versions on their own).
_VERSIONED_WITH_DRIVER = re.compile(
    r"^(?:libnvidia-compute-|libnvidia-ml1|libcuda1|nvidia-driver-\d|nvidia-driver$|nvidia-open|"
    r"nvidia-kernel-|nvidia-dkms-)"
)


def _other_branch(name: str, version: str, current: str) -> bool:
    """Whether the driver package ``name`` at ``version`` (Debian's, with an epoch and revision) is
    of another branch than the running driver ``current``; False when either cannot be read as a
    driver version (a pinning package's "580", a utility's own numbering)."""
    if not current or not _VERSIONED_WITH_DRIVER.match(name):
        return False
    upstream = version.split(":", 1)[-1].split("-", 1)[0]
    try:
        return parse_driver_version(upstream, option=None)[0] != parse_driver_version(current, option=None)[0]
    except (ParseError, ValueError):
        return False


def cache(host: Host, options: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the old driver's packages on the host (see the module docstring).

    Returns ``{"dir", "driver_version": the running driver, "packages": [{"name", "version",
    "arch", "file", "from": "apt-cache" | "download"}]}``. Raises StepFailed naming each package
    that could not be kept (nothing else on the host changed: the cache directory only).
    """
    current = str(plan.get("current") or "")
    facts = _facts(host)
    packages = _installed(facts)
    if not packages:
        raise StepFailed(
            f"{host.name}: dpkg lists no installed package of the NVIDIA driver ({current}), so a rollback"
            " could not put it back; the driver window moves only a driver installed from packages."
            " Nothing on the host was changed."
        )
    # The old driver's versions only: a host between two drivers (packages moved, module not yet
    # reloaded, or a run stopped part way) has no one driver to keep.
    for p in packages:
        name = str(p["name"]).split(":", 1)[0]
        if _other_branch(name, str(p["version"]), current):
            raise StepFailed(
                f"{host.name}: {name} {p['version']} is installed while the driver that runs is"
                f" {current}: the host is between two drivers, so there is no one driver to keep"
                " for a rollback. Fix: reboot the host (or finish or undo the package change) so"
                " that the packages and the loaded driver agree, then run again. Nothing on the"
                " host was changed."
            )
    arch_run = _command(host, ["dpkg", "--print-architecture"], check_mode=False)
    arch = str(arch_run.get("stdout") or "").strip() or "amd64"
    where = cache_dir(options, current)
    host.module("ansible.builtin.file", {"path": where, "state": "directory", "mode": "0755"})
    kept, missing = [], []
    for p in packages:
        name = str(p["name"]).split(":", 1)[0]
        pkg_arch = str(p["name"]).split(":", 1)[1] if ":" in str(p["name"]) else arch
        file_name = deb_file_name(name, str(p["version"]), pkg_arch)
        target = f"{where}/{file_name}"
        entry = {"name": name, "version": str(p["version"]), "arch": pkg_arch, "file": target}
        if host.check_mode:
            kept.append({**entry, "from": None})
            continue
        copied = host.module(
            "ansible.builtin.copy",
            {"src": f"{APT_ARCHIVES}/{file_name}", "dest": target, "remote_src": True, "mode": "0644"},
            allow_failure=True,
        )
        if not copied.get("failed"):
            kept.append({**entry, "from": "apt-cache"})
            continue
        got = _command(host, ["apt-get", "download", f"{name}:{pkg_arch}={p['version']}"], chdir=where)
        if got.get("rc") == 0:
            # An "Architecture: all" package is named <name>_<version>_all.deb.
            found = host.module("ansible.builtin.stat", {"path": target}, check_mode=False)
            if not (found.get("stat") or {}).get("exists"):
                entry["file"] = f"{where}/{deb_file_name(name, str(p['version']), 'all')}"
            kept.append({**entry, "from": "download"})
        else:
            missing.append(f"{name} {p['version']} ({(_text(got).splitlines() or ['no output'])[-1]})")
    if missing:
        raise StepFailed(
            f"{host.name}: the old driver's packages must be kept on the host before the move, so that a"
            f" rollback needs no repository; these are neither in {APT_ARCHIVES} nor downloadable:"
            f" {'; '.join(missing)}. Fix: make the installed versions available from a configured"
            " repository (or put their .deb files into apt's cache) and run again. Only the cache"
            f" directory {where} was created."
        )
    return {"dir": where, "driver_version": current, "packages": kept}


def _units_to_stop(
    options: Mapping[str, Any], plan: Mapping[str, Any], facts: Mapping[str, Any]
) -> list[str]:
    """The serving unit, then the clients the window stops that are active now."""
    units = [str(options["cuda13_service_name"])]
    wanted = [*driverplan.ALWAYS_STOPPED, *(options.get(driverplan.CLIENTS_OPTION) or [])]
    wanted += [str(c["unit"]) for c in plan.get("clients") or [] if c.get("known") and c.get("unit")]
    active = facts.get("units") or {}
    for unit in dict.fromkeys(wanted):
        if unit in units:
            continue
        state = active.get(unit) or {}
        if unit == "nvidia-persistenced.service":
            state = facts.get("persistenced") or state
        if str(state.get("stdout") or "").strip() == "active":
            units.append(unit)
    return units


def _hold(host: Host, names: Sequence[str], selection: str) -> None:
    for name in names:
        host.module("ansible.builtin.dpkg_selections", {"name": name, "selection": selection})


def _loaded_modules(facts: Mapping[str, Any]) -> list[str]:
    names = [str(m.get("name")) for m in facts.get("modules") or [] if isinstance(m, Mapping)]
    return [n for n in names if n.startswith("nvidia") or n == "gdrdrv"]


def activate(host: Host, options: Mapping[str, Any], *, loaded: Sequence[str]) -> dict[str, Any]:
    """Unload the driver's modules in order and load those that were ``loaded`` (``nvidia`` at least).

    Returns ``{"activation": "reload", "unloaded": [names], "loaded": [names]}``, or
    ``{"activation": "reboot", "reason"}`` when a module is in use and ``cuda13_driver_activation``
    allows a reboot. Raises StepFailed when a module is in use under ``reload``, or the load fails
    (the text of modprobe, e.g. "Key was rejected by service").
    """
    # The driver's own four modules are in modules.dep wherever it is installed (modprobe -r skips
    # one not loaded); the others (nvidia_peermem, nvidia_fs, gdrdrv...) only when loaded, since
    # modprobe fails on a module it cannot find.
    order = [m for m in [DRM, *driver.module_unload_order()] if m in DRIVER_MODULES or m in set(loaded)]
    if host.check_mode:
        return {"activation": "reload", "unloaded": order, "loaded": ["nvidia"]}
    unload = _command(host, ["modprobe", "-r", *order])
    if unload.get("rc") != 0:
        text = _text(unload)
        setting = str(options.get(driverplan.ACTIVATION_OPTION) or "reload_or_reboot")
        if _IN_USE.search(text) and setting == "reload_or_reboot":
            return {"activation": "reboot", "reason": text.splitlines()[-1]}
        raise StepFailed(
            f"{host.name}: the driver's modules could not be unloaded: {text}. The new packages are"
            " installed; the rollback puts the old ones back. Fix: stop what holds the GPU (lsof"
            f" /dev/nvidia*), name its unit in {driverplan.CLIENTS_OPTION}, or allow a reboot"
            f" ({driverplan.ACTIVATION_OPTION}: reload_or_reboot)."
        )
    wanted = [m for m in reversed(order) if m in set(loaded) and m != DRM] or ["nvidia"]
    if "nvidia" not in wanted:
        wanted.insert(0, "nvidia")
    load = _command(host, ["modprobe", "-a", *wanted])
    if load.get("rc") != 0:
        raise StepFailed(
            f"{host.name}: the new driver's modules did not load: {_text(load)}."
            " The rollback puts the old driver back. Fix: see docs/driver.md (Secure Boot, DKMS)."
        )
    return {"activation": "reload", "unloaded": order, "loaded": wanted}


#: What the move reads of each GPU before it stops anything: the checks after compare them.
BEFORE_FIELDS = ("pci.bus_id", "persistence_mode")


def _gpus_now(host: Host, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each GPU's bus id and persistence mode as nvidia-smi answers now (``[]`` when it fails):
    the persistence mode of before, which :func:`check` wants back after the activation."""
    smi = str(options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi")
    run = _command(
        host,
        [*shlex.split(smi), f"--query-gpu={','.join(BEFORE_FIELDS)}", "--format=csv,noheader"],
        check_mode=False,
    )
    try:
        return nvidia_smi.parse_query_gpu(
            str(run.get("stdout") or ""), BEFORE_FIELDS, "csv,noheader", rc=run.get("rc")
        )
    except ParseError:
        return []


def gpus_before(preflight_gpus: Sequence[Mapping[str, Any]], moved: Mapping[str, Any]) -> list[dict]:
    """The GPUs :func:`check` compares with: the preflight's (bus ids) with the persistence mode the
    move read before it stopped anything (``moved["gpus_before"]``), matched by bus id; the move's
    own rows when the preflight has none."""
    modes = {_bus_id(g): g.get("persistence_mode") for g in moved.get("gpus_before") or []}
    if not preflight_gpus:
        return [dict(g) for g in moved.get("gpus_before") or []]
    return [
        {**g, "persistence_mode": modes[_bus_id(g)]} if modes.get(_bus_id(g)) is not None else dict(g)
        for g in preflight_gpus
    ]


def move(host: Host, options: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, Any]:
    """Install the target driver and activate it (see the module docstring).

    ``plan``: the preflight's driver window plan (``ready``, ``requests``, ``held``, ``clients``,
    ``activation``). Returns ``{"gpus_before": [{"pci.bus_id", "persistence_mode"}] (read before
    anything stops), "stopped": [units], "unheld", "installed": [apt requests],
    "held": [names], "kernel_log_mark", "activation": "reload" | "reboot", "reboot": bool,
    "reason", "unloaded", "loaded", "changed": True}``. Raises StepFailed when the plan is not
    ready (nothing changed) or a change fails (the rescue restores the cached packages).
    """
    if not plan.get("ready") or not plan.get("needs_move"):
        raise StepFailed(
            f"{host.name}: the driver window's plan is not ready to move the driver"
            f" ({', '.join(b.get('check', '?') for b in plan.get('blockers') or []) or 'no move planned'});"
            " nothing on the host was changed. Fix: run the preflight and fix what it names."
        )
    facts = _facts(host, list(options.get(driverplan.CLIENTS_OPTION) or []))
    loaded = _loaded_modules(facts)
    record: dict[str, Any] = {
        "changed": True,
        "loaded_before": loaded,
        "gpus_before": _gpus_now(host, options),
    }
    stopped = _units_to_stop(options, plan, facts)
    for unit in stopped:
        host.module("ansible.builtin.systemd_service", {"name": unit, "state": "stopped"})
    record["stopped"] = stopped
    held = [str(p["name"]) for p in _installed(facts) if p.get("held")]
    _hold(host, held, "install")
    record["unheld"] = held
    requests = [str(r) for r in plan.get("requests") or []]
    runs = [[requests[0]], requests[1:]] if requests and driverplan.is_pin(requests[0]) else [requests]
    for number, names in enumerate(runs):
        if not names:
            continue
        if host.check_mode:
            # apt's own check mode resolves against the holds, which check mode did not release.
            host.tell(f"check mode: apt would install {' '.join(names)}")
            continue
        # Unversioned requests move an installed package too (present would leave nvidia-open at
        # its R570 version); the pinning package installed first limits what latest means. The
        # first run reads the repositories again, as the preflight's simulation did.
        state = "present" if any("=" in n for n in names) else "latest"
        result = host.module(
            "ansible.builtin.apt",
            {"name": names, "state": state, "install_recommends": False, "update_cache": number == 0},
            allow_failure=True,
        )
        if result.get("failed"):
            raise StepFailed(
                f"{host.name}: apt could not install {' '.join(names)}: {_text(result)}."
                " The rollback puts the old driver's packages back.",
                {**record, "installed": requests},
            )
    record["installed"] = requests
    after = _facts(host)
    new_held = [str(p["name"]) for p in _installed(after)]
    _hold(host, new_held, "hold")
    record["held"] = new_held
    record["packages_after"] = [{"name": p["name"], "version": p["version"]} for p in _installed(after)]
    record["kernel_log_mark"] = (
        None
        if host.check_mode
        else host.module(
            "cuda13_kernel_log",
            {"action": "mark", "command": options["cuda13_kernel_log_command"]},
            allow_failure=True,
        ).get("log")
    )
    planned = str(plan.get("activation") or "reboot")
    if planned == "reboot":
        record.update(activation="reboot", reboot=True, reason=str(plan.get("activation_why") or ""))
        return record
    started = time.monotonic()
    try:
        done = activate(host, options, loaded=loaded)
    except StepFailed as exc:
        raise StepFailed(exc.msg, {**record, **exc.record}) from exc
    record.update(done, reboot=done["activation"] == "reboot")
    record["activation_seconds"] = round(time.monotonic() - started, 1)
    record.setdefault("reason", "")
    return record


def _expected(plan: Mapping[str, Any]) -> tuple[str, int]:
    target = str(plan.get("target") or "")
    branch = plan.get("target_branch")
    return target, int(branch) if branch is not None else 0


def _version_ok(found: str, target: str, branch: int, floor: str) -> bool:
    if re.fullmatch(r"R?\d+", target, re.IGNORECASE):
        try:
            key = parse_driver_version(found, option=None)
            return key[0] == branch and (not floor or key >= parse_driver_version(floor, option=None))
        except ParseError:
            return False
    return found == target


#: The fabric manager's systemd unit on NVSwitch systems (NVIDIA Fabric Manager User Guide; the
#: driver facts read its ``systemctl is-active``).
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
#: The fabric manager's packages, each versioned with the driver it goes with: NVIDIA's
#: ``nvidia-fabricmanager`` from R580 on (apt: "nvidia-fabricmanager-580 is a virtual package provided
#: by: nvidia-fabricmanager 580.65.06-1", NVIDIA/gpu-driver-container PR #451),
#: ``nvidia-fabricmanager-<branch>`` before, and the ``cuda-drivers-fabricmanager[-<branch>]``
#: metapackages.
_FABRIC_MANAGER_PACKAGE = re.compile(r"^(?:nvidia-fabricmanager|cuda-drivers-fabricmanager)(?:-\d+)?$")
#: Seconds the checks wait, at most, for every GPU to register with the NVLink fabric once the fabric
#: manager runs (registration is not instant: a GPU shows State "In Progress" until it is done).
FABRIC_WAIT_S = 300
#: Seconds the checks wait, at most, for the persistence mode of before once the clients started again
#: (nvidia-persistenced sets it as it starts).
PERSISTENCE_WAIT_S = 30
#: Seconds between two reads while the checks wait.
POLL_S = 10

_PERSISTENCE_WORDS = {"enabled": "Enabled", "on": "Enabled", "disabled": "Disabled", "off": "Disabled"}


def _persistence(value: Any) -> str | None:
    """``"Enabled"``/``"Disabled"`` of a persistence mode as nvidia-smi prints it (``Enabled`` in a
    query, ``On`` in the table) or a bool; None when unknown (``[N/A]``, missing)."""
    if isinstance(value, bool):
        return "Enabled" if value else "Disabled"
    return _PERSISTENCE_WORDS.get(str(value).strip().lower()) if value is not None else None


def _bus_id(gpu: Mapping[str, Any]) -> str:
    return str(gpu.get("pci.bus_id") or gpu.get("pci_bus_id") or "")


def _persistence_before(gpus: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
    """``{bus id: "Enabled" | "Disabled"}`` of the GPUs before whose persistence mode is known
    (``persistence_mode``); None when no GPU's is."""
    known = {
        _bus_id(g): _persistence(g.get("persistence_mode"))
        for g in gpus
        if isinstance(g, Mapping) and _bus_id(g)
    }
    known = {bus: mode for bus, mode in known.items() if mode}
    return known or None


def _persistence_lost(before: Mapping[str, str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """``"<bus id>: Enabled before, Disabled after"`` for each GPU whose persistence mode was Enabled
    before and is not now."""
    after = {_bus_id(r): r.get("persistence_mode") for r in rows}
    return [
        f"{bus}: Enabled before, {after.get(bus) or 'unknown'} after"
        for bus, mode in sorted(before.items())
        if mode == "Enabled" and _persistence(after.get(bus)) != "Enabled"
    ]


def _query(host: Host, smi: str) -> tuple[dict[str, Any], nvidia_smi.NvidiaSmiFailure]:
    """The checks' nvidia-smi query (:data:`CHECK_FIELDS`) and what its failure means."""
    run = _command(
        host,
        [*shlex.split(smi), f"--query-gpu={','.join(CHECK_FIELDS)}", "--format=csv,noheader"],
        check_mode=False,
    )
    failure = nvidia_smi.classify_failure(
        run.get("rc"), str(run.get("stdout") or ""), str(run.get("stderr") or "")
    )
    return run, failure


def _rows(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    return nvidia_smi.parse_query_gpu(
        str(run.get("stdout") or ""), CHECK_FIELDS, "csv,noheader", rc=run.get("rc")
    )


def _upstream(version: str) -> str:
    """The upstream part of a Debian version: ``1:580.65.06-1`` -> ``580.65.06``."""
    return version.split(":", 1)[-1].split("-", 1)[0]


def _fabric_manager_after(
    host: Host, facts: Mapping[str, Any], driver_version: str, start: Sequence[str], record: dict[str, Any]
) -> dict[str, Any]:
    """On an NVSwitch host: the fabric manager's packages at the driver's version, and its unit
    running (started when the move stopped it, ``start``, or it is not active).

    Rule: "the version of fabricmanager must match the NVIDIA driver installed" (NVIDIA's
    apt-packaging-fabric-manager README); a fabric manager of another version does not start
    ("fabric manager NVIDIA GPU driver interface version ... don't match with driver version ...",
    NVIDIA/gpu-operator#544). Returns ``{"unit", "state": systemctl is-active before, "started":
    bool, "packages": [{"name", "version"}], "version_ok": bool}``; raises StepFailed (with
    ``record``) when no package is installed, one is of another version, or the unit does not start.
    """
    packages = [
        {"name": str(p.get("name")), "version": str(p.get("version") or "")}
        for p in facts.get("packages") or []
        if isinstance(p, Mapping)
        and str(p.get("status") or "").endswith("ok installed")
        and _FABRIC_MANAGER_PACKAGE.match(str(p.get("name") or "").split(":", 1)[0])
    ]
    state = str((facts.get("fabric_manager") or {}).get("stdout") or "").strip() or "unknown"
    found = {
        "unit": FABRIC_MANAGER_UNIT,
        "state": state,
        "started": False,
        "packages": packages,
        "version_ok": bool(packages) and all(_upstream(p["version"]) == driver_version for p in packages),
    }
    record["fabric_manager"] = found
    if not found["version_ok"]:
        listing = ", ".join(f"{p['name']} {p['version']}" for p in packages) or "no fabric manager package"
        raise StepFailed(
            f"{host.name}: this host has {record['nvswitch']} NVSwitch device(s) and the driver is"
            f" {driver_version}, but dpkg has {listing}: the fabric manager must be of the driver's"
            " exact version (NVIDIA's apt-packaging-fabric-manager), or it does not start and the GPUs"
            ' never register with the NVLink fabric (State "In Progress", CUDA error 802 "system not'
            " yet initialized\"). Fix: install the fabric manager at the driver's version"
            f" (nvidia-fabricmanager={driver_version}-*, or cuda-drivers-fabricmanager-<branch>), then"
            f" start {FABRIC_MANAGER_UNIT}. The rollback puts the old driver back.",
            record,
        )
    if state != "active" or FABRIC_MANAGER_UNIT in start:
        done = host.module(
            "ansible.builtin.systemd_service",
            {"name": FABRIC_MANAGER_UNIT, "state": "started"},
            allow_failure=True,
        )
        if done.get("failed"):
            raise StepFailed(
                f"{host.name}: {FABRIC_MANAGER_UNIT} does not start on the new driver ({state} before):"
                f" {_text(done)}. Without it the GPUs never register with the NVLink fabric. Fix: read"
                f" 'journalctl -u {FABRIC_MANAGER_UNIT}' (a driver interface version that does not match,"
                " missing NVSwitch or NVLSM devices). The rollback puts the old driver back.",
                record,
            )
        found["started"] = True
        record["started"].append(FABRIC_MANAGER_UNIT)
    return found


def _fabric_registered(
    host: Host, smi: str, record: dict[str, Any], sleep: Callable[[float], Any]
) -> dict[str, Any]:
    """Wait until every GPU is registered with the NVLink fabric (State "Completed", Status "Success"),
    reading the Fabric section of ``nvidia-smi -q`` (:func:`cuda13_upgrade.driver.parse_fabric`,
    :func:`cuda13_upgrade.driver.fabric_verdict`) every :data:`POLL_S` seconds, at most
    :data:`FABRIC_WAIT_S` seconds in all.

    The real nvidia-smi has both readings of NVML's ``nvmlGpuFabricInfo``: ``--help-query-gpu``
    lists ``fabric.state`` ("Current state of GPU fabric registration process") and
    ``fabric.status`` ("Error status, valid only if gpu fabric registration state is 'completed'"),
    and ``nvidia-smi -q`` prints them as the GPU's Fabric section. The Fabric section is read: it is
    what NVIDIA's Fabric Manager User Guide has an operator check ("A GPU fabric registration
    status can be verified with the command: nvidia-smi -q -i 0 | grep -i -A 2 Fabric", as quoted in
    siderolabs/extensions PR #717), and what the published outputs of R565, R570 and R580 hosts show
    (``tests/fixtures/driver/``, ``tests/fixtures/driver_check/``, their SOURCES.md).

    Returns fabric_verdict's ``{"ok", "applicable", "not_ready", "summary"}`` with ``"gpus"`` (the
    parsed sections), ``"reads"`` and ``"waited_s"``. Raises StepFailed (with ``record``) naming each
    GPU not registered, its State/Status, and what to do: a fabric left "In Progress" makes every
    CUDA initialisation fail with error 802, "system not yet initialized" (NVIDIA/gpu-operator#2781:
    a fabric manager that exits leaves all 8 GPUs "In Progress"). On HGX B200 and later the fabric
    manager also needs NVLSM ("the FabricManager package needs an additional NVLSM dependency", the
    Fabric Manager User Guide as quoted in siderolabs/extensions PR #717) and its InfiniBand modules
    (NVIDIA/gpu-operator#2781: mlx5_ib, ib_umad), which the message names.
    """
    argv = [*shlex.split(smi), "-q"]
    reads = 1 + -(-FABRIC_WAIT_S // POLL_S)
    waited = 0
    for number in range(reads):
        run = _command(host, argv, check_mode=False)
        if run.get("rc") != 0:
            raise StepFailed(
                f"{host.name}: '{shlex.join(argv)}' fails after the driver's activation: {_text(run)}."
                " The rollback puts the old driver back.",
                record,
            )
        gpus = driver.parse_fabric(str(run.get("stdout") or ""))
        verdict = {**driver.fabric_verdict(gpus), "gpus": gpus, "reads": number + 1, "waited_s": waited}
        record["fabric"] = verdict
        if verdict["ok"] or number == reads - 1:
            break
        sleep(POLL_S)
        waited += POLL_S
    if not verdict["ok"]:
        raise StepFailed(
            f"{host.name}: after {waited} s the GPUs are not registered with the NVLink fabric:"
            f' {verdict["summary"]}. A GPU left "In Progress" fails every CUDA initialisation with'
            f" error 802 (system not yet initialized). Fix: check that {FABRIC_MANAGER_UNIT} runs"
            f" ('systemctl status {FABRIC_MANAGER_UNIT}', 'journalctl -u {FABRIC_MANAGER_UNIT}'), that"
            " its version is the driver's, and on NVLink 5 systems (HGX B200 and later) that NVLSM and"
            " its InfiniBand modules are there; then read 'nvidia-smi -q' again. The rollback puts the"
            " old driver back.",
            record,
        )
    return verdict


def check(
    host: Host,
    options: Mapping[str, Any],
    *,
    expected: str,
    branch: int = 0,
    floor: str = "",
    gpus: Sequence[Mapping[str, Any]] = (),
    start: Sequence[str] = (),
    sleep: Callable[[float], Any] = time.sleep,
) -> dict[str, Any]:
    """The checks after an activation (see the module docstring).

    ``expected``: a version (``"580.142"``) or a branch (``"R580"`` with ``branch`` 580 and the
    ``floor``); ``gpus``: the GPUs before (each with ``pci.bus_id`` or ``pci_bus_id``, and
    ``persistence_mode`` when it was read); ``start``: units to start again afterwards; ``sleep``:
    what waits between two reads (seconds; tests pass their own).

    In order, each failure raising StepFailed naming what differs and what to do:

    * nvidia-smi answers, with the expected version and the GPUs (bus ids) of before;
    * on a host whose driver facts count NVSwitch devices (``nvswitch``, ``/dev/nvidia-nvswitchN``),
      the fabric manager: its packages at the driver's exact version, its unit started when the move
      stopped it or it is not active, then every GPU registered with the NVLink fabric within
      :data:`FABRIC_WAIT_S` seconds (:func:`_fabric_manager_after`, :func:`_fabric_registered`);
      a host without NVSwitch runs nothing more than the driver facts' read;
    * the units of ``start`` started again;
    * persistence mode as before: a GPU whose mode was Enabled before and is not, once the clients
      run again (nvidia-persistenced sets it; within :data:`PERSISTENCE_WAIT_S` seconds), fails. A
      module reload or a reboot resets it (NVML ``nvmlDeviceSetPersistenceMode``: "not persistent
      across reboots"); NVIDIA's Driver Persistence guide names the two ways to set it, the
      Persistence Daemon (nvidia-persistenced) and the legacy ``nvidia-smi -pm 1``. Without a
      known mode before, no verdict and no further read.

    Returns::

        {
          "driver_version": "580.65.06", "gpus": [bus ids],
          "persistence": [modes read at the first query],
          "started": [units, the fabric manager first when the checks started it],
          "nvswitch": 4,                                  # None in check mode
          "persistence_before": {bus id: "Enabled" | "Disabled"} | None,   # None: unknown
          "persistence_after": {bus id: mode} | None,    # None: no verdict
          "fabric_manager": None | {"unit", "state", "started", "packages": [{"name", "version"}],
                                    "version_ok"},       # None: no NVSwitch
          "fabric": None | {"ok", "applicable", "not_ready", "summary", "gpus", "reads", "waited_s"},
        }
    """
    record: dict[str, Any] = {
        "driver_version": None,
        "gpus": [],
        "persistence": [],
        "started": [],
        "nvswitch": None,
        "persistence_before": None,
        "persistence_after": None,
        "fabric_manager": None,
        "fabric": None,
    }
    if host.check_mode:
        return record
    smi = str(options.get("nvidia_driver_check_nvidia_smi") or "nvidia-smi")
    run, failure = _query(host, smi)
    if failure.code != "ok":
        raise StepFailed(
            f"{host.name}: after the driver's activation nvidia-smi fails: {failure.detail or _text(run)}"
            f" ({failure.code}). Fix: {failure.remedy}. The rollback puts the old driver back.",
            record,
        )
    rows = _rows(run)
    versions = sorted({str(r["driver_version"]) for r in rows})
    record.update(
        driver_version=versions[0] if len(versions) == 1 else ",".join(versions),
        gpus=[str(r["pci.bus_id"]) for r in rows],
        persistence=[r["persistence_mode"] for r in rows],
    )
    problems = []
    if len(versions) != 1 or not _version_ok(versions[0], expected, branch, floor):
        problems.append(f"the driver version is {record['driver_version']}, not {expected}")
    before = sorted(_bus_id(g) for g in gpus)
    if before and before != sorted(record["gpus"]):
        problems.append(f"the GPUs are {', '.join(sorted(record['gpus']))}, before {', '.join(before)}")
    if problems:
        raise StepFailed(
            f"{host.name}: the driver's checks after activation fail: {'; '.join(problems)}."
            " The rollback puts the old driver back.",
            record,
        )
    facts = _facts(host)
    nvswitch = facts.get("nvswitch")
    record["nvswitch"] = nvswitch if isinstance(nvswitch, int) and not isinstance(nvswitch, bool) else 0
    if record["nvswitch"] > 0:
        _fabric_manager_after(host, facts, str(record["driver_version"]), start, record)
        _fabric_registered(host, smi, record, sleep)
    for unit in start:
        if unit in record["started"]:
            continue
        host.module("ansible.builtin.systemd_service", {"name": unit, "state": "started"})
        record["started"].append(unit)
    known = _persistence_before(gpus)
    record["persistence_before"] = known
    if known is None:
        return record
    lost = _persistence_lost(known, rows)
    reads = -(-PERSISTENCE_WAIT_S // POLL_S)
    waited = 0
    for number in range(reads + 1 if lost else 0):
        if number:
            sleep(POLL_S)
            waited += POLL_S
        again, failure = _query(host, smi)
        if failure.code != "ok":
            raise StepFailed(
                f"{host.name}: nvidia-smi fails once the clients run again:"
                f" {failure.detail or _text(again)} ({failure.code}). Fix: {failure.remedy}."
                " The rollback puts the old driver back.",
                record,
            )
        rows = _rows(again)
        lost = _persistence_lost(known, rows)
        if not lost:
            break
    record["persistence_after"] = {_bus_id(r): r.get("persistence_mode") for r in rows}
    if lost:
        raise StepFailed(
            f"{host.name}: persistence mode is not as before the move ({'; '.join(lost)}; read again for"
            f" {waited} s after the clients started). A reload or a reboot resets it. Fix: run"
            " nvidia-persistenced (systemctl enable --now nvidia-persistenced; NVIDIA's Driver"
            " Persistence guide, 'Persistence Daemon'), or set it with 'nvidia-smi -pm 1' where the"
            " host used the legacy mode ('Persistence Mode (Legacy)'). The rollback puts the old"
            " driver back.",
            record,
        )
    return record


def measure_after(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_id: str,
    baseline: Mapping[str, Any],
    manifest: Mapping[str, Any],
    moved: Mapping[str, Any],
    prompts: Mapping[str, Any] | None = None,
    on_trial: Any = None,
) -> dict[str, Any]:
    """The serving stack measured on the new driver and judged against ``baseline`` (the baseline
    step's record, taken on the old driver). Returns ``{"measured", "verdict", "kernel_log_read",
    "kernel_log", "rollback": bool, "reason_to_roll_back"}``; nothing is measured in check mode."""
    record: dict[str, Any] = {
        "measured": None,
        "verdict": None,
        "rollback": False,
        "reason_to_roll_back": "",
        "baseline_recorded": False,
        # The new driver passed the gate: it stays, also when the stack upgrade after it rolls back.
        "kept": False,
    }
    if host.check_mode:
        return record
    profiles_before = dict((baseline.get("baseline") or {}).get("profiles") or {})
    exec_start = str((manifest.get("service") or {}).get("exec_start") or "")
    old = stack_context(options, "old", manifest)
    started = time.monotonic()
    # The old stack's own phase: its profiles without the new stack's arguments, so that the
    # record stands as the stack upgrade's baseline (restarts.recorded_baseline).
    measured = measure.phase(
        host,
        phase="baseline",
        options=options,
        profiles=list(options["cuda13_profiles"]),
        venv=old["venv"],
        exec_start=exec_start,
        # A series of its own in the phase's trial file: the baseline on the old driver is this
        # run's "baseline" series, and the bench returns a series' trials whole.
        run_id=f"{run_id}/driver-{(moved.get('check') or {}).get('driver_version') or 'new'}",
        plan=None,
        service_user=(manifest.get("service") or {}).get("user") or "",
        prompts=prompts,
        on_trial=on_trial,
        stack=old,
    )
    # No soak here: the old stack's phase serves no soak traffic, and its baseline has none.
    verdict = gate({**options, "verify_throughput_soak_requests": 0}, measured["results"], profiles_before)
    for decision in (verdict.get("decisions") or {}).values():
        host.tell(f"driver window gate: {decision.get('reason')}")
    log = read_kernel_log(host, options, moved)
    logged = xid.kernel_log_verdict(moved["kernel_log_mark"], log) if moved.get("kernel_log_mark") else None
    reasons = ([logged["reason"]] if logged and logged["gated"] else []) + (
        [verdict["reason"]] if verdict["regressed"] else []
    )
    record.update(
        measured=measured,
        verdict=verdict,
        kernel_log_read=log,
        kernel_log=logged,
        seconds=round(time.monotonic() - started, 1),
    )
    if reasons:
        record.update(
            rollback=True,
            reason_to_roll_back=f"The stack on the new driver fails the gate: {'; '.join(reasons)}",
        )
        return record
    # Kept: this measurement is the serving stack's baseline on the driver it now runs on, which
    # the stack upgrade's baseline step reuses instead of measuring again.
    written = {
        "run_id": run_id,
        "taken_at": now_iso(),
        "taken_at_epoch": time.time(),
        "driver_version": str((moved.get("check") or {}).get("driver_version") or ""),
        "profiles": measured["results"],
    }
    host.module(
        "cuda13_record",
        {
            "files": [
                {
                    "path": f"{options['cuda13_state_dir']}/baseline.json",
                    "content": json_text(written),
                    "mode": "0600",
                }
            ]
        },
    )
    record.update(baseline_recorded=True, kept=True)
    return record


def restore(
    host: Host,
    options: Mapping[str, Any],
    *,
    cached: Mapping[str, Any],
    moved: Mapping[str, Any],
    gpus: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Put the old driver back from ``cached`` (:func:`cache`'s record) after ``moved``
    (:func:`move`'s record, possibly partial); the stack's rollback that follows in the rescue
    starts the service on the old stack and measures it again. Returns ``{"restored": [files],
    "removed": [names], "clients": [units started again after the check], "activation", "reboot",
    "check"}``; a ``reboot`` True (the move rebooted, ``cuda13_driver_activation`` is ``reboot``,
    or a module is in use) means the play reboots and then checks the old driver (``checked``).
    Raises StepFailed when apt or the checks fail (the host needs the operator)."""
    record: dict[str, Any] = {"changed": True, "restored": [], "removed": [], "reboot": False}
    files = [str(p["file"]) for p in cached.get("packages") or []]
    if not files:
        raise StepFailed(
            f"{host.name}: no cached packages of the old driver to restore; see {cached.get('dir')}."
        )
    old_names = {str(p["name"]) for p in cached.get("packages") or []}
    facts = _facts(host)
    # What the move added: every driver package there now that the old driver did not have (from
    # dpkg itself, so that a move that failed part way is covered too).
    added = sorted(n for n in _present(facts) if n.split(":", 1)[0] not in old_names)
    _hold(host, [str(p["name"]) for p in _installed(facts) if p.get("held")], "install")
    service = str(options["cuda13_service_name"])
    stopped = list(dict.fromkeys([service, *(moved.get("stopped") or [])]))
    for unit in stopped:
        host.module("ansible.builtin.systemd_service", {"name": unit, "state": "stopped"})
    # One transaction: the old packages depend on each other at one exact version, and the
    # packages the move added go in the same run (Ansible's apt module takes one .deb per call).
    # No question at night: a changed configuration file keeps the host's version.
    argv = [
        "apt-get",
        "install",
        "-y",
        "--allow-downgrades",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        *files,
    ]
    argv += [f"{name}-" for name in added]
    if not host.check_mode:
        done = _command(host, argv, environment={"DEBIAN_FRONTEND": "noninteractive"})
        if done.get("rc") != 0:
            raise StepFailed(
                f"{host.name}: apt could not put the old driver's packages back: {_text(done)}."
                f" The packages are in {cached.get('dir')}; install them with: {shlex.join(argv)}",
                record,
            )
    record.update(restored=files, removed=added)
    # The holds the host had before the move.
    _hold(host, list(moved.get("unheld") or []), "hold")
    clients = [u for u in stopped if u != service]
    record["clients"] = clients
    if str(options.get(driverplan.ACTIVATION_OPTION) or "") == "reboot" or moved.get("reboot"):
        record.update(activation="reboot", reboot=True)
        return record
    done = activate(host, options, loaded=moved.get("loaded_before") or ["nvidia"])
    record.update(activation=done["activation"], reboot=done["activation"] == "reboot")
    if record["reboot"]:
        return record
    record["check"] = check(
        host, options, expected=str(cached.get("driver_version") or ""), gpus=gpus, start=clients
    )
    return record


def summary(records: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The driver window of a host's run in short, for its result: ``{"from", "to", "activation",
    "reboot", "kept": bool, "restored": bool, "reason", "baseline_recorded", "activation_seconds",
    "reboot_seconds", "measure_seconds"}``, or None when the run moved no driver (``records``:
    ``{"cache", "moved", "reboot", "checked", "measured", "restored"}``, each a step's record - the
    reboot's is Ansible's reboot module's result - ``{}`` or skipped when it did not run)."""

    def ran(name: str) -> dict[str, Any]:
        value = (records or {}).get(name)
        return dict(value) if isinstance(value, Mapping) and not value.get("skipped") else {}

    cached, moved, rebooted, checked, measured, restored = (
        ran(n) for n in ("cache", "moved", "reboot", "checked", "measured", "restored")
    )
    if not moved:
        return None
    return {
        "from": cached.get("driver_version"),
        "to": checked.get("driver_version"),
        "activation": moved.get("activation"),
        "reboot": bool(moved.get("reboot")),
        "kept": bool(measured.get("kept")) and not restored,
        "restored": bool(restored),
        "reason": measured.get("reason_to_roll_back") or moved.get("msg") or checked.get("msg") or "",
        "baseline_recorded": bool(measured.get("baseline_recorded")),
        # Seconds: the reload's unload and load (a reboot is the play's own task), and the stack's
        # measurement on the new driver (its restarts included).
        "activation_seconds": moved.get("activation_seconds"),
        # Ansible's reboot: its "elapsed", from the reboot command to the host answering again.
        "reboot_seconds": rebooted.get("elapsed"),
        "measure_seconds": measured.get("seconds"),
    }


__all__ = [
    "summary",
    "cache",
    "move",
    "activate",
    "check",
    "measure_after",
    "restore",
    "deb_file_name",
    "cache_dir",
]
