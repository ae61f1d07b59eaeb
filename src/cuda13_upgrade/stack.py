"""The running stack of a host: parse what the tools print, build the snapshot
manifest, and rewrite the service's command for the new stack.

Everything here is pure: the steps collect the tools' output on the host and
these functions turn it into data (:mod:`cuda13_upgrade.steps`). Errors are
``ValueError`` with the offending text quoted.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

# Read on the host too (the snapshot and the toolkit step), standard library only.
from .hostscripts.alternatives import cuda_alternatives_groups, parse_alternatives_selections

__all__ = [
    "build_manifest",
    "cuda_alternatives_groups",
    "forward_compat_gpu",
    "forward_compat_problems",
    "freeze_difference",
    "overlap_problems",
    "parse_alternatives_query",
    "parse_alternatives_selections",
    "parse_dpkg_query",
    "parse_pip_freeze_lines",
    "rewrite_exec_start",
    "service_exec_start",
    "stack_verdict",
]

SNAPSHOT_SCHEMA = 1


def parse_alternatives_query(text: str) -> dict[str, Any]:
    """Parse ``update-alternatives --query NAME`` (Debian's alternatives system).

    Returns ``{"name", "link", "status": "auto"|"manual", "value", "best",
    "alternatives": {path: priority}}``; ``value`` is None when the link group
    has no selection. Raises ``ValueError`` when ``text`` is not a query answer
    (e.g. ``update-alternatives: error: no alternatives for cuda``).
    """
    header: dict[str, str] = {}
    alternatives: dict[str, int] = {}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Alternative":
            current = value
            alternatives[current] = 0
        elif key == "Priority" and current is not None:
            try:
                alternatives[current] = int(value)
            except ValueError as exc:
                raise ValueError(f"alternative {current!r} has priority {value!r}") from exc
        elif current is None:
            header[key] = value
    if "Name" not in header or "Link" not in header or "Status" not in header:
        raise ValueError(f"not an update-alternatives --query answer: {text.strip()[:200]!r}")
    if header["Status"] not in ("auto", "manual"):
        raise ValueError(f"unknown alternatives status {header['Status']!r}")
    value = header.get("Value")
    return {
        "name": header["Name"],
        "link": header["Link"],
        "status": header["Status"],
        "value": None if value in (None, "", "none") else value,
        "best": header.get("Best"),
        "alternatives": alternatives,
    }


def service_exec_start(systemctl_cat: str) -> str:
    """The effective ``ExecStart=`` command line from ``systemctl cat UNIT``.

    ``systemctl cat`` prints the unit file and then each drop-in, each after a
    ``# /path`` comment; a drop-in's empty ``ExecStart=`` resets the list
    (systemd.service(5)). Continuation lines ending in ``\\`` are joined.
    Returns the last command (a simple service has exactly one). Raises
    ``ValueError`` when no ExecStart remains.
    """
    commands: list[str] = []
    section = None
    pending = ""
    for raw in systemctl_cat.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        if section != "Service":
            continue
        key, sep, value = line.partition("=")
        if sep and key.strip() == "ExecStart":
            value = value.strip()
            if value:
                commands.append(value)
            else:
                commands.clear()
    if not commands:
        raise ValueError("the unit has no ExecStart= in its [Service] section")
    return commands[-1]


def rewrite_exec_start(exec_start: str, old_venv: str, new_venv: str) -> str:
    """Point a service command that runs from ``old_venv`` at ``new_venv``.

    ``exec_start`` is a systemd command line (``/opt/ml-env/bin/python -m
    sglang.launch_server --tp 8``); its executable must live under
    ``old_venv`` (a systemd prefix such as ``-`` or ``@`` is kept). Every
    argument that is a path under ``old_venv`` moves too. Returns the new
    command line, shell-quoted. Raises ``ValueError`` naming the command and
    ``cuda13_old_venv`` when the executable is not in ``old_venv``.
    """
    old = old_venv.rstrip("/")
    new = new_venv.rstrip("/")
    if not old or not new:
        raise ValueError("cuda13_old_venv and cuda13_new_venv must be absolute paths")
    prefix_match = re.match(r"^([-@:+!]*)(.*)$", exec_start.strip())
    prefixes, command = prefix_match.group(1), prefix_match.group(2)
    argv = shlex.split(command)
    if not argv or not (argv[0] == old or argv[0].startswith(old + "/")):
        raise ValueError(
            f"the service runs {argv[0] if argv else '(nothing)'!r}, not a program of "
            f"cuda13_old_venv={old!r}: set cuda13_old_venv to the serving venv "
            f"(ExecStart={exec_start!r})"
        )
    moved = [new + arg[len(old) :] if arg == old or arg.startswith(old + "/") else arg for arg in argv]
    return prefixes + shlex.join(moved)


def parse_pip_freeze_lines(text: str) -> list[str]:
    """``pip freeze`` output as a sorted list of requirement lines, comments dropped."""
    return sorted(
        line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def freeze_difference(before: list[str], after: list[str]) -> dict[str, list[str]]:
    """Lines only in ``before`` (``removed``) and only in ``after`` (``added``)."""
    b, a = set(before), set(after)
    return {"removed": sorted(b - a), "added": sorted(a - b)}


def build_manifest(raw: dict[str, Any]) -> dict[str, Any]:
    """Assemble the snapshot manifest from the raw tool outputs a role collected.

    ``raw`` keys: ``host``, ``taken_at`` (ISO 8601), ``run_id``, ``venv``,
    ``pip_freeze`` (text), ``alternatives`` ({name: query text or ""}),
    ``cuda_resolved`` (``readlink -f /usr/local/cuda``), ``nvcc`` (parsed
    ``{"release", "version"}`` or None), ``packages`` ({package: version}),
    ``sglang`` ({"src", "commit", "dirty", "describe"}), ``service``
    ({"name", "unit_text", "fragment_path", "dropins": {path: text},
    "active_state"}), ``cache_dirs`` (list of existing paths).
    Returns the manifest (schema ``SNAPSHOT_SCHEMA``); raises ``ValueError``
    when a required key is missing.
    """
    missing = [k for k in ("host", "venv", "pip_freeze", "service") if k not in raw]
    if missing:
        raise ValueError(f"snapshot is missing {', '.join(missing)}")
    alternatives = {}
    for name, text in (raw.get("alternatives") or {}).items():
        alternatives[name] = parse_alternatives_query(text) if text and text.strip() else None
    service = dict(raw["service"])
    unit_text = service.get("unit_text") or ""
    service["exec_start"] = service_exec_start(unit_text) if unit_text else None
    return {
        "schema": SNAPSHOT_SCHEMA,
        "host": raw["host"],
        "taken_at": raw.get("taken_at"),
        "run_id": raw.get("run_id"),
        "venv": {"path": raw["venv"], "pip_freeze": parse_pip_freeze_lines(raw["pip_freeze"])},
        "cuda": {
            "resolved": raw.get("cuda_resolved"),
            "alternatives": alternatives,
            "nvcc": raw.get("nvcc"),
            "packages": dict(sorted((raw.get("packages") or {}).items())),
        },
        "sglang": raw.get("sglang") or {},
        "service": service,
        "cache_dirs": sorted(raw.get("cache_dirs") or []),
    }


def parse_dpkg_query(text: str) -> dict[str, str]:
    """``dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'cuda-*'``
    as {package: version}, only packages in the installed state (``ii``)."""
    packages = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("ii"):
            packages[parts[0]] = parts[1]
    return packages


#: The import module of each kernel distribution (sgl-kernel up to 0.3.21,
#: sglang-kernel from 0.4.0 on; both install ``sgl_kernel``).
KERNEL_MODULE = "sgl_kernel"


def _kernel_torch_pin(probe: dict[str, Any]) -> list[str]:
    """Problems of the kernel wheel's own torch pin (its Requires-Dist) against the torch installed."""
    from packaging.markers import InvalidMarker
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    from cuda13_upgrade.wheels import KERNEL_DISTRIBUTIONS

    dists = probe.get("dists") or {}
    torch_version = dists.get("torch")
    environment = probe.get("marker_environment") or None
    problems = []
    for kernel in KERNEL_DISTRIBUTIONS:
        if kernel not in dists or not torch_version:
            continue
        for line in (probe.get("requires") or {}).get(kernel, []):
            try:
                req = Requirement(line)
                if req.name.lower() != "torch" or not req.specifier:
                    continue
                if req.marker is not None and not req.marker.evaluate(environment or {}):
                    continue
                ok = req.specifier.contains(Version(torch_version), prereleases=True)
            except (InvalidRequirement, InvalidMarker, InvalidVersion):
                problems.append(
                    f"{kernel} {dists[kernel]} declares a torch requirement that cannot be read: {line!r}"
                )
                continue
            if not ok:
                problems.append(
                    f"{kernel} {dists[kernel]} is built for torch{req.specifier} (its Requires-Dist) "
                    f"but torch {torch_version} is installed; install torch{req.specifier} or the "
                    f"{kernel} release built for torch {torch_version}"
                )
    return problems


#: Files that real distributions of the stack both install at the top of site-packages
#: and that nothing imports when the stack runs: ``build_backend.py``, the PEP 517 build
#: backend that flashinfer-python 0.7.2 and torch-c-dlpack-ext 0.1.5 each ship
#: (tests/fixtures/probes/real-stack-overlaps.json). Their overlap is a note, not a problem.
UNUSED_AT_RUN_TIME = ("build_backend.py",)

#: Distributions known to write the same paths, and what to do (the first match wins).
#: nvidia-cutlass-dsl-libs-base and -libs-cu13 before 4.6: ``nvidia-cutlass-dsl[cu13]``
#: installs both, "They write to the same `site-packages` paths with different content"
#: (sgl-project/sglang PR #25938; NVIDIA/cutlass#3170, where libs-base's copy emits
#: malformed SM120 PTX; #3259, "fixed in 4.6", 2026-07-02). The remedy is the fixed
#: release, or -libs-cu13's files forced on top (smg-project/smg PR #1717:
#: "Force-reinstall `nvidia-cutlass-dsl-libs-cu13==4.5.2` after installing SGLang. This is
#: the upstream workaround until the fix ships in CUTLASS 4.6"; sgl-project/sglang PR
#: #25938 keeps -libs-cu13 on Blackwell CUDA 13 runners).
KNOWN_OVERLAPS: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset({"nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13"}),
        "pin nvidia-cutlass-dsl and its libs wheels to 4.6 or later, whose wheels no longer share "
        "paths (NVIDIA/cutlass#3170, #3259: fixed in 4.6); on 4.5, make -libs-cu13's files the ones "
        "on disk with `pip install --force-reinstall --no-deps nvidia-cutlass-dsl-libs-cu13=={cu13}` "
        "after the install (smg-project/smg PR #1717; sgl-project/sglang PR #25938 keeps -libs-cu13 "
        "on Blackwell)",
    ),
)


def _owners_text(owners: list[dict[str, Any]]) -> str:
    names = [f"{o['name']} {o['version']}" for o in owners]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def overlap_problems(overlaps: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Problems and notes of the files that two distributions write with different contents.

    Args:
        overlaps: the probe's ``overlaps`` (``hostscripts/stack_probe.py``, ``scan_records``):
            ``[{"path", "owners": [{"name", "version", "hash"}], "on_disk": name or None}]``.

    pip does not detect such a file: the distribution installed last wrote it, so the
    stack runs whichever copy the install order left (sgl-project/sglang PR #25938,
    NVIDIA/cutlass#3170). One problem per set of owners, naming its first path (shared
    objects first), how many more and the remedy (:data:`KNOWN_OVERLAPS`, else: keep one
    of them). Paths of :data:`UNUSED_AT_RUN_TIME` give notes instead.

    Returns:
        ``(problems, notes)``, lists of str.
    """
    from cuda13_upgrade.hostscripts.stack_probe import SHARED_OBJECT

    groups: dict[tuple[tuple[str, str], ...], list[dict[str, Any]]] = {}
    for overlap in overlaps or []:
        key = tuple(sorted({(o["name"], o["version"]) for o in overlap.get("owners") or []}))
        if len(key) > 1:
            groups.setdefault(key, []).append(overlap)
    problems, notes = [], []
    for key, found in sorted(groups.items()):
        owners = [{"name": n, "version": v} for n, v in key]
        unused = [o["path"] for o in found if o["path"] in UNUSED_AT_RUN_TIME]
        if unused:
            notes.append(
                f"{', '.join(unused)} is written by {_owners_text(owners)} with different contents; "
                "nothing imports it when the stack runs (a build backend), so it is not refused"
            )
        found = [o for o in found if o["path"] not in UNUSED_AT_RUN_TIME]
        if not found:
            continue
        found.sort(key=lambda o: (not SHARED_OBJECT.search(o["path"]), o["path"]))
        first = found[0]
        more = (
            f" (and {len(found) - 1} more file{'s' if len(found) > 2 else ''}, among them "
            f"{', '.join(o['path'] for o in found[1:4])})"
            if len(found) > 1
            else ""
        )
        on_disk = next((o for o in owners if o["name"] == first.get("on_disk")), None)
        won = f" (on disk now: {on_disk['name']} {on_disk['version']}'s)" if on_disk else ""
        names = {n for n, _ in key}
        versions = dict(key)
        remedy = next(
            (
                text.format(cu13=versions.get("nvidia-cutlass-dsl-libs-cu13", ""))
                for pair, text in KNOWN_OVERLAPS
                if pair <= names
            ),
            "install only one of them; where both are needed, force-reinstall the one whose files "
            "must win (`pip install --force-reinstall --no-deps <name>==<version>`) after the install "
            "and check again",
        )
        problems.append(
            f"{first['path']} is written by {_owners_text(owners)} with different contents{more}: "
            f"the one installed last won{won}, so another install order gives another stack "
            f"(pip does not detect it). Remedy: {remedy}"
        )
    return problems, notes


#: GPUs that NVIDIA forward compatibility serves, by the name nvidia-smi gives them
#: without its ``NVIDIA `` prefix; a name matches an entry it equals or begins with
#: followed by a space or ``-`` (``H100 80GB HBM3``, ``A100-SXM4-40GB``). NVIDIA's
#: CUDA Compatibility guide, "Forward Compatibility": "Forward Compatibility is
#: applicable only for systems with: NVIDIA Data Center GPUs. Select NGC Server Ready
#: SKUs of RTX cards. Jetson boards." The data-center GPUs are those of the "Data
#: Center" column of NVIDIA's CUDA GPU Compute Capability page
#: (developer.nvidia.com/cuda-gpus: GB10, RTX PRO 6000 and RTX PRO 4500 Blackwell Server
#: Edition, GB300, B300, GB200, B200, GH200, H200, H100, L4, L40, L40S, A40, A10, A16,
#: A2) and the data-center products of NVIDIA's GPU Operator platform support page
#: (docs.nvidia.com/datacenter/cloud-native/gpu-operator/1.8/platform-support.html: A100,
#: A30, T4, V100, and the ``Tesla`` line: see :func:`forward_compat_gpu`). Workstation and
#: consumer boards (RTX PRO 6000 Blackwell Workstation and Max-Q Workstation Edition,
#: GeForce) are not in the table, nor are the NGC Server Ready RTX SKUs, which NVIDIA
#: does not list by name: a GPU not in the table is taken as unsupported.
FORWARD_COMPAT_GPUS: tuple[str, ...] = (
    "GB10",
    "RTX PRO 6000 Blackwell Server Edition",
    "RTX PRO 4500 Blackwell Server Edition",
    "GB300",
    "B300",
    "GB200",
    "B200",
    "GH200",
    "H200",
    "H100",
    "L4",
    "L40",
    "L40S",
    "A100",
    "A40",
    "A30",
    "A10",
    "A16",
    "A2",
    "T4",
    "V100",
)


def forward_compat_gpu(name: str) -> bool:
    """Whether NVIDIA forward compatibility serves the GPU nvidia-smi calls ``name``
    (``"NVIDIA H100 80GB HBM3"``, ``"Tesla T4"``): a ``Tesla`` board (NVIDIA's data-center
    line) or an entry of :data:`FORWARD_COMPAT_GPUS`."""
    model = str(name).strip()
    if model.startswith("Tesla "):
        return True
    model = model.removeprefix("NVIDIA ").strip()
    return any(
        model == entry or model.startswith((entry + " ", entry + "-")) for entry in FORWARD_COMPAT_GPUS
    )


def _where_text(entry: dict[str, Any]) -> str:
    where = str(entry.get("where") or "")
    if where == "venv":
        return "in the new venv"
    if where == "sys.path":
        return f"installed by {entry.get('owner') or 'a distribution'}"
    if where.startswith("LD_LIBRARY_PATH") or where == "library_path":
        of = where.removeprefix("LD_LIBRARY_PATH").strip() or "of the new stack"
        return f"in a directory of the LD_LIBRARY_PATH {of}"
    return f"in a directory {where} gives the loader"


def _compat_remedy(entry: dict[str, Any]) -> str:
    where = str(entry.get("where") or "")
    directory = str(entry.get("path") or "").rsplit("/", 1)[0]
    if where in ("venv", "sys.path"):
        owner = entry.get("owner")
        return (
            f"uninstall {owner} from the new venv (it installed this file)"
            if owner
            else "remove the file from the new venv"
        )
    if where.startswith("LD_LIBRARY_PATH of "):
        return f"remove {directory} from the LD_LIBRARY_PATH of {where.removeprefix('LD_LIBRARY_PATH of ')}"
    if where.startswith("LD_LIBRARY_PATH") or where == "library_path":
        return f"remove {directory} from the new stack's LD_LIBRARY_PATH"
    return f"remove the line {directory} from {where} (or the file) and run ldconfig"


def forward_compat_problems(
    libcuda: list[dict[str, Any]],
    gpu_names: list[str] | None,
    driver_version: str | None,
) -> tuple[list[str], list[str]]:
    """Problems and notes of CUDA driver libraries the new stack would load instead of the driver's.

    Args:
        libcuda: the probe's ``libcuda`` (``hostscripts/stack_probe.py``, ``libcuda_files``):
            ``[{"path", "target", "version", "where", "owner"}]``.
        gpu_names: the host's GPUs as nvidia-smi names them (``"NVIDIA RTX PRO 6000 Blackwell
            Server Edition"``); None or empty when unknown.
        driver_version: the driver nvidia-smi reports (``"590.48.01"``), None when unknown.

    Which files count: each one the loader resolves ``libcuda.so.1`` to (that soname is what
    the CUDA runtime and torch load), and any ``libcuda.so.*`` inside the venv, once per
    file they resolve to; not a ``libcuda.so`` nor anything under ``stubs/`` (the toolkit's
    link-time stub). The driver's own is left out: a version equal to ``driver_version``,
    or, the driver unknown, a file of a loader-configuration directory other than a
    ``compat`` one. Copies of one version in one directory count once.

    The rule is NVIDIA's CUDA Compatibility guide, "Forward Compatibility" (a
    ``cuda-compat-<major>-<minor>`` package's libcuda, for a driver older than the CUDA
    release): "Forward Compatibility is applicable only for systems with: NVIDIA Data
    Center GPUs. Select NGC Server Ready SKUs of RTX cards. Jetson boards." Elsewhere CUDA
    fails with cudaErrorCompatNotSupportedOnDevice, 804 (its text, "forward compatibility
    was attempted on non supported HW", as QuipNetwork/quip-miner#24 printed it on an RTX
    3060 and huggingface/candle#3358 on an RTX 5090 under a CUDA 13.1 image; the error's
    description: "the system was upgraded to run with forward compatibility but the
    visible hardware detected by CUDA does not support this configuration", CUDA Runtime
    API). A compat libcuda older than the driver fails with
    cudaErrorSystemDriverMismatch, 803 (NVIDIA-NeMo/labs-molt PR #44: "forcing it on a
    595 host gives CUDA error 803"; its text, "system has unsupported display driver /
    cuda driver combination", as NVIDIA/nvidia-docker#1256 printed it;
    NVIDIA/nvidia-container-toolkit#1426: its compat check "relies on a strictly greater
    driver version"). So a file is refused when a GPU is not one :func:`forward_compat_gpu`
    accepts (804), or when ``driver_version`` is newer than its version (803); a newer
    compat library on data-center GPUs is forward compatibility as NVIDIA describes it,
    a note.

    Returns:
        ``(problems, notes)``, lists of str.
    """
    from cuda13_upgrade.versions import parse_driver_version

    def version_key(value: str | None) -> tuple[int, ...] | None:
        try:
            return parse_driver_version(str(value)) if value else None
        except Exception:  # noqa: BLE001 - an unreadable version is compared with nothing
            return None

    driver = version_key(driver_version)
    names = [str(n) for n in gpu_names or []]
    unsupported = sorted({n for n in names if not forward_compat_gpu(n)})
    problems: list[str] = []
    notes: list[str] = []
    seen: set[str] = set()
    for entry in libcuda or []:
        path = str(entry.get("path") or "")
        base = path.rsplit("/", 1)[-1]
        where = str(entry.get("where") or "")
        in_venv = where in ("venv", "sys.path")
        if base == "libcuda.so" or "/stubs/" in path or not (base == "libcuda.so.1" or in_venv):
            continue
        target = str(entry.get("target") or path)
        version = entry.get("version")
        # One file, however many names lead to it; and copies of one version side by side
        # (a wheel holds no symlinks: libcuda.so.1 beside libcuda.so.580.65.06) once.
        keys = {target, f"{path.rsplit('/', 1)[0]}@{version}"} if version else {target}
        if keys & seen:
            continue
        seen.update(keys)
        own = version_key(version)
        compat_dir = "/compat/" in f"{path}/" or "/compat/" in target
        if driver is not None and own is not None and own == driver:
            continue
        if driver is None and not (in_venv or where.startswith("LD_LIBRARY_PATH") or compat_dir):
            continue
        what = f"{path} (libcuda {version or 'of unknown version'}, {_where_text(entry)})"
        reasons = []
        if unsupported:
            reasons.append(
                "NVIDIA forward compatibility serves only NVIDIA Data Center GPUs and select NGC "
                'Server Ready RTX SKUs (CUDA Compatibility, "Forward Compatibility"), not '
                f"{', '.join(unsupported)}: CUDA fails with cudaErrorCompatNotSupportedOnDevice "
                '(804, "forward compatibility was attempted on non supported HW")'
            )
        if driver is not None and own is not None and driver > own:
            reasons.append(
                f"the driver {driver_version} is newer than this compat library ({version}): CUDA "
                'fails with cudaErrorSystemDriverMismatch (803, "system has unsupported display '
                'driver / cuda driver combination")'
            )
        if reasons:
            problems.append(
                f"{what} would be loaded instead of the NVIDIA driver's libcuda"
                f"{f' ({driver_version})' if driver_version else ''}: {'; '.join(reasons)}. "
                f"Remedy: {_compat_remedy(entry)}; the driver's own libcuda is the one this host needs"
            )
            continue
        if not names:
            notes.append(
                f"{what} is not the driver's libcuda; the GPUs are unknown, so forward "
                "compatibility was not checked"
            )
        elif own is None or driver is None:
            notes.append(
                f"{what} is not the driver's libcuda; its version or the driver's is unknown, so "
                "it was not compared with the driver"
            )
        else:
            notes.append(
                f"{what} is CUDA forward compatibility over the driver {driver_version}, on GPUs "
                "NVIDIA lists for it"
            )
    return problems, notes


def stack_verdict(
    probe: dict[str, Any],
    expected_cuda_major: int,
    *,
    driver_library_optional: bool = False,
    compute_capabilities: list[str] | None = None,
    driver_version: str | None = None,
    gpu_names: list[str] | None = None,
) -> dict[str, Any]:
    """What is true of a venv's stack, from ``hostscripts/stack_probe.py``'s JSON.

    Args:
        probe: the probe's output (``dists``, ``requires``, ``needed``,
            ``objects``, ``torch``, ``imports``, ``driver_library``, ``pip_check``).
        expected_cuda_major: the CUDA major ``torch.version.cuda`` must report
            (13 for the cu130 stack).
        driver_library_optional: a host without the NVIDIA driver's
            ``libcuda.so.1`` (a sandbox or build host) may pass: an import that
            fails only for want of it is a remaining *condition*, not a problem.
            On a serving host it is a problem (the default).
        compute_capabilities: the GPUs' compute capabilities (``["12.0"]``)
            that torch's arch list must cover; non-empty means the host has GPUs.
        driver_version: the NVIDIA driver nvidia-smi reports (``"570.133.20"``),
            named when torch cannot reach the GPUs, and compared with a forward-compatibility
            libcuda's version.
        gpu_names: the GPUs' names as nvidia-smi gives them (``"NVIDIA RTX PRO 6000
            Blackwell Server Edition"``), checked against the GPUs forward compatibility
            serves when the new stack would load a libcuda other than the driver's.

    A host that has GPUs (``compute_capabilities``) and the driver's library
    (the probe's ``driver_library`` is null) where the new torch reports
    ``cuda_available`` false is refused: torch cannot reach the GPUs, most often
    because the driver is older than torch's CUDA (its ``cuda_warning``, "The
    NVIDIA driver on your system is too old (found version 12080)"). The
    problem names the driver and the floor of the new stack
    (:func:`cuda13_upgrade.versions.stack_driver_floor`).

    Facts read (PyPI wheels have no local labels: ``pip freeze`` says
    ``torch==2.14.1`` while ``torch.__version__`` says ``2.14.1+cu130``;
    PyTorch's own index puts ``+cu130`` in the distribution version; both are
    accepted): ``torch.version.cuda`` against ``expected_cuda_major``; the
    labels, or else the CUDA major of the libraries each wheel's shared objects
    load (ELF NEEDED), of torch, the kernel and flashinfer-jit-cache
    (:func:`cuda13_upgrade.wheels.check_stack_consistency`); each shared object
    of every distribution, label-blind, by the CUDA major of the libraries it
    needs, per-major variants that the imports did not map let pass
    (:func:`cuda13_upgrade.wheels.check_shared_objects`; a probe without
    ``objects`` skips this), and each CUDA library they need found in the venv
    or outside another major's toolkit (the probe's ``libraries``); the kernel wheel's
    torch pin (sglang-kernel 0.4.10 declares ``torch==2.14.1``); ``pip check``;
    each import, classified (:func:`cuda13_upgrade.wheels.classify_import_failure`);
    torch's arch list against ``compute_capabilities`` whenever torch reports
    one (torch 2.14.1 does without a GPU); CUDA component wheels on another
    release than each other or torch's CUDA
    (:func:`cuda13_upgrade.components.cuda_component_skew`); files that two
    distributions write with different contents (the probe's ``overlaps``,
    :func:`overlap_problems`); a libcuda the new stack would load instead of the
    driver's, on GPUs forward compatibility does not serve or under a newer driver (the
    probe's ``libcuda``, :func:`forward_compat_problems`). A probe without ``overlaps`` or
    ``libcuda`` skips that check.

    Returns:
        ``{"summary": str, "consistent": bool, "problems": [str], "conditions": [str],
        "notes": [str], "torch": str|None, "cuda": str|None, "kernel": str|None,
        "arch_list_covers": [str], "imports": {module: {"cause", "detail",
        "remedy", "text"}}}``. ``consistent`` is true when ``problems`` is
        empty; ``conditions`` are what the host still lacks (the driver library).
    """
    from cuda13_upgrade.components import cuda_component_skew
    from cuda13_upgrade.versions import arch_list_covers
    from cuda13_upgrade.wheels import (
        KERNEL_DISTRIBUTIONS,
        check_shared_objects,
        check_stack_consistency,
        classify_import_failure,
        cuda_majors_of_needed,
        local_label,
    )

    problems: list[str] = []
    conditions: list[str] = []
    notes: list[str] = []
    dists = probe.get("dists") or {}
    needed = probe.get("needed") or {}
    torch = probe.get("torch") or {}
    runtime_version = str(torch.get("version") or "")
    cuda = str(torch.get("cuda") or "")

    if torch:
        if cuda.split(".")[0] != str(expected_cuda_major):
            problems.append(
                f"torch {runtime_version} reports torch.version.cuda={cuda or None}, "
                f"expected {expected_cuda_major}.x"
            )
    elif "torch" in dists:
        majors = cuda_majors_of_needed(needed.get("torch", []))
        built = f", and its libraries are a CUDA {'/'.join(map(str, sorted(majors)))} build" if majors else ""
        problems.append(f"torch {dists['torch']} is installed but does not import{built}")
    else:
        problems.append("torch is not installed")

    default_labels = {}
    if "torch" in dists and not local_label(dists["torch"] or "0"):
        runtime_label = local_label(runtime_version) if runtime_version else None
        if runtime_label:
            default_labels["torch"] = runtime_label
    problems.extend(
        check_stack_consistency(
            dists,
            default_labels=default_labels,
            needed_libraries=needed,
            target_cuda_major=expected_cuda_major,
        )
    )
    if probe.get("objects"):
        found = check_shared_objects(
            probe["objects"],
            expected_cuda_major,
            dists=dists,
            imported=[module for module, text in (probe.get("imports") or {}).items() if not text],
            libraries=probe.get("libraries"),
        )
        problems.extend(found["problems"])
        notes.extend(found["notes"])
    problems.extend(_kernel_torch_pin(probe))
    problems.extend(cuda_component_skew(dists, torch_cuda=cuda or None))
    for found_problems, found_notes in (
        overlap_problems(probe.get("overlaps") or []),
        forward_compat_problems(probe.get("libcuda") or [], gpu_names, driver_version),
    ):
        problems.extend(found_problems)
        notes.extend(found_notes)

    pip_check = probe.get("pip_check") or {}
    if pip_check.get("rc") not in (0, None):
        problems.append(f"pip check: {'; '.join(pip_check.get('output', '').splitlines())}")
    elif pip_check and pip_check.get("rc") is None:
        notes.append(f"pip check could not run: {pip_check.get('output')}")

    imports = {}
    driver_missing = probe.get("driver_library")
    for module, text in sorted((probe.get("imports") or {}).items()):
        if not text:
            continue
        found = classify_import_failure(text, expected_cuda_major)
        imports[module] = {**found, "text": text}
        if found["cause"] == "driver_library_missing" and driver_missing and driver_library_optional:
            conditions.append(
                f"import {module} needs the NVIDIA driver library {found['detail']}, which this "
                f"host does not have ({driver_missing})"
            )
        else:
            problems.append(
                f"import {module} fails ({found['cause']}: {found['detail']}): {found['remedy']}. "
                f"Its text: {text}"
            )

    capabilities = [str(c) for c in (compute_capabilities or [])]
    if (
        torch
        and capabilities
        and torch.get("cuda_available") is False
        and "driver_library" in probe
        and probe.get("driver_library") is None
    ):
        problems.append(_unreachable_gpus(torch, dists, capabilities, driver_version))

    covers: list[str] = []
    arch_list = torch.get("arch_list") if torch else None
    if not torch:
        notes.append("the arch-list check cannot run: torch does not import")
    elif not arch_list:
        why = torch.get("arch_list_error") or "torch.cuda.get_arch_list() is empty"
        notes.append(f"the arch-list check cannot run: torch {runtime_version} reports no arch list ({why})")
    elif not capabilities:
        notes.append(f"the arch-list check has no compute capabilities to check ({' '.join(arch_list)})")
    else:
        missing = arch_list_covers(arch_list, capabilities)
        if missing:
            problems.append(
                f"torch {runtime_version} has no kernels for compute capability {', '.join(missing)} "
                f"(arch list {' '.join(arch_list)}): pick a torch build that lists them "
                "(cu130_wheels_requirements / cu130_wheels_index_url)"
            )
        covers = sorted(set(capabilities) - set(missing))

    kernel = next((f"{k} {dists[k]}" for k in KERNEL_DISTRIBUTIONS if k in dists), None)
    summary = "; ".join(
        [
            "consistent" if not problems else "INCONSISTENT",
            f"torch {runtime_version or dists.get('torch')}, CUDA {cuda or None}, {kernel or 'no kernel'}",
            f"arch list covers {', '.join(covers) or 'nothing checked'}",
            *notes,
            *(f"remaining condition: {line}" for line in conditions),
        ]
    )
    return {
        "summary": summary,
        "consistent": not problems,
        "problems": problems,
        "conditions": conditions,
        "notes": notes,
        "torch": runtime_version or dists.get("torch"),
        "cuda": cuda or None,
        "kernel": kernel,
        "kernel_module": KERNEL_MODULE,
        "arch_list_covers": covers,
        "imports": imports,
    }


def _unreachable_gpus(
    torch: dict[str, Any], dists: dict[str, Any], capabilities: list[str], driver_version: str | None
) -> str:
    """The problem of a torch that cannot reach a host's GPUs: why (its warning,
    diagnosed), the driver, and the driver the new stack needs (NVIDIA's tables)."""
    from cuda13_upgrade.diagnosis import diagnose
    from cuda13_upgrade.versions import stack_driver_floor

    version, cuda = torch.get("version"), torch.get("cuda")
    warning = str(torch.get("cuda_warning") or "")
    found = diagnose(warning, context={"target_cuda": cuda or ""}) if warning else None
    why = found.cause if found is not None and found.known else (warning or "torch gives no reason")
    driver = f"driver {driver_version}" if driver_version else "the installed driver"
    try:
        floor = stack_driver_floor(dists, torch_cuda=cuda) if cuda else None
    except ValueError:
        floor = None
    needs = (
        f"; the new stack needs driver >= {floor['floor']} (set by {floor['set_by']}; CUDA Toolkit "
        f"Release Notes, Table {3 if floor['rule'] == 'toolkit-driver' else 2}): upgrade the driver "
        "before the switch"
        if floor and floor.get("floor")
        else "; upgrade the driver to one that supports torch's CUDA before the switch"
    )
    return (
        f"torch {version} (CUDA {cuda}) cannot reach this host's GPUs (compute capability "
        f"{', '.join(sorted(set(capabilities)))}): torch.cuda.is_available() is False, "
        f"{torch.get('device_count', 0)} devices, under {driver}: {why}{needs}"
    )
