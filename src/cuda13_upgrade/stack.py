"""The running stack of a host: parse what the tools print, build the snapshot
manifest, and rewrite the service's command for the new stack.

Everything here is pure: the roles collect the tools' output on the host and
these functions turn it into data (the ``cuda13_stack`` filter plugin wraps
them). Errors are ``ValueError`` with the offending text quoted.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

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


_CUDA_GROUP_RE = re.compile(r"^cuda(-[0-9][0-9.]*)?$")


def parse_alternatives_selections(text: str) -> dict[str, dict[str, str]]:
    """Parse ``update-alternatives --get-selections`` (Debian's alternatives system).

    Each line is ``<name> <auto|manual> <current value>`` (dpkg's
    ``utils/update-alternatives.c`` prints ``%-30s %-8s %s``). Returns
    ``{name: {"status": "auto"|"manual", "value": path}}``. Raises
    ``ValueError`` naming the line when one has another shape or status.
    """
    out: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        fields = raw.split()
        if len(fields) != 3 or fields[1] not in ("auto", "manual"):
            raise ValueError(f"not an update-alternatives --get-selections line: {raw!r}")
        out[fields[0]] = {"status": fields[1], "value": fields[2]}
    return out


def cuda_alternatives_groups(text: str, named: list[str] | None = None) -> list[str]:
    """The CUDA toolkit's link groups on a host: the names of
    ``update-alternatives --get-selections`` that are ``cuda`` or
    ``cuda-<release>`` (``cuda-12``, ``cuda-12.8``; NVIDIA's packages register
    ``/usr/local/cuda`` and ``/usr/local/cuda-<major>``), plus the ``named``
    groups that exist there, sorted. Raises ``ValueError`` as
    :func:`parse_alternatives_selections`.
    """
    selections = parse_alternatives_selections(text)
    wanted = {name for name in selections if _CUDA_GROUP_RE.match(name)}
    wanted |= {name for name in (named or []) if name in selections}
    return sorted(wanted)


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


def probe_problems(probe: dict[str, Any], expected_cuda_major: int) -> list[str]:
    """What is wrong with a venv, from ``hostscripts/stack_probe.py``'s JSON.

    ``probe`` is the probe's output (``dists``, ``torch``, ``imports``);
    ``expected_cuda_major`` the CUDA major ``torch.version.cuda`` must report
    (13 for the cu130 stack). Returns human-readable problems, empty when the
    stack is consistent: torch missing or on another CUDA major, local labels
    that disagree (``cuda13_upgrade.wheels.check_stack_consistency``), and any
    module that fails to import, with the exception's text.
    """
    from cuda13_upgrade.wheels import check_stack_consistency

    problems: list[str] = []
    torch = probe.get("torch") or {}
    cuda = str(torch.get("cuda") or "")
    if not torch:
        problems.append("torch is not importable")
    elif cuda.split(".")[0] != str(expected_cuda_major):
        problems.append(
            f"torch {torch.get('version')} reports torch.version.cuda={cuda or None}, "
            f"expected {expected_cuda_major}.x"
        )
    problems.extend(check_stack_consistency(probe.get("dists") or {}))
    for module, error in sorted((probe.get("imports") or {}).items()):
        if error:
            problems.append(f"import {module} fails: {error}")
    return problems
