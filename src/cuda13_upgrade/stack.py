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
    "freeze_difference",
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


def stack_verdict(
    probe: dict[str, Any],
    expected_cuda_major: int,
    *,
    driver_library_optional: bool = False,
    compute_capabilities: list[str] | None = None,
    driver_version: str | None = None,
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
            named when torch cannot reach the GPUs.

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
    (:func:`cuda13_upgrade.components.cuda_component_skew`).

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
