"""Disk space where the upgrade writes: each filesystem, what it must hold.

The upgrade writes to several places that are often on different
filesystems: pip's temporary directory (pip unpacks and downloads multi-GB
wheels under ``TMPDIR``, pypa/pip#12868, often a small tmpfs at ``/tmp``),
pip's cache, apt's archive cache, the toolkit's prefix, the new venv, the new
SGLang tree, the per-stack cache root and the fleet cache's copy on the host.
:func:`plan` groups those places by filesystem (``st_dev``, as
``hostscripts/space_probe.py`` measures them) and adds what each place must
hold, from the figures measured for the target stack
(``roles/nvidia_driver_check/files/stack-space.yml``: its source and how it
was measured), so that two places on one filesystem need the sum of both.

Figures, a dict as that file's ``stacks.<name>``::

    {"margin": 1.25,
     "bytes": {"wheels": 4340000000, "venv": 10995116278, "toolkit": 6442450944,
               "apt_archives": 6442450944, "sglang_tree": 1073741824,
               "caches": 1073741824}}

Places, a dict ``{place: path}``: the keys of :data:`PLACES`; a place whose
path is empty is not written in this run (e.g. the fleet cache's copy without
``cuda13_artifact_cache``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda13_upgrade.errors import Cuda13Error

__all__ = ["PLACES", "COMPONENTS", "plan", "stack_figures"]

#: What each place holds (components of the figures), what it is called in
#: messages, and the option that moves it (None: only freeing space helps).
PLACES: dict[str, dict[str, Any]] = {
    "pip_tmpdir": {
        "holds": ("wheels",),
        "what": "pip's temporary directory",
        "option": "cuda13_pip_tmpdir",
    },
    "pip_cache": {"holds": ("wheels",), "what": "pip's cache", "option": None},
    "apt_archives": {"holds": ("apt_archives",), "what": "apt's archive cache", "option": None},
    "toolkit_prefix": {"holds": ("toolkit",), "what": "the CUDA toolkit's prefix", "option": None},
    "new_venv": {"holds": ("venv",), "what": "the new venv", "option": "cuda13_new_venv"},
    "sglang_src": {
        "holds": ("sglang_tree",),
        "what": "the new SGLang tree",
        "option": "cuda13_new_sglang_src",
    },
    "cache_root": {"holds": ("caches",), "what": "the per-stack cache root", "option": "cuda13_cache_root"},
    "artifact_copy": {
        "holds": ("wheels",),
        "what": "the fleet cache's copy",
        "option": "cuda13_state_dir",
    },
}

#: The components every stack's figures give, in bytes.
COMPONENTS = ("wheels", "venv", "toolkit", "apt_archives", "sglang_tree", "caches")

_STACK_OPTION = "nvidia_driver_check_space_stack"


def human_bytes(count: float) -> str:
    """``count`` bytes in binary units: ``"1.5 GiB"``, ``"105.0 KiB"``, ``"512 B"``."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(count) >= size:
            return f"{count / size:.1f} {unit}"
    return f"{int(count)} B"


def stack_figures(data: Any, stack: str) -> dict[str, Any]:
    """The figures of ``stack`` from the parsed ``stack-space.yml``.

    Returns ``{"margin": float, "bytes": {component: int}}``. Raises
    :class:`Cuda13Error` (option ``nvidia_driver_check_space_stack``) when the
    file lacks the stack, a component, or a figure is not a non-negative
    number.
    """
    stacks = data.get("stacks") if isinstance(data, Mapping) else None
    if not isinstance(stacks, Mapping) or stack not in stacks:
        raise Cuda13Error(
            "no measured space figures for this stack",
            stack,
            option=_STACK_OPTION,
            remedy=f"use one of {sorted(stacks or {})} (roles/nvidia_driver_check/files/stack-space.yml), "
            "or measure the stack and add it there",
        )
    entry = stacks[stack]
    sizes = entry.get("bytes") if isinstance(entry, Mapping) else None
    margin = entry.get("margin", 1.0) if isinstance(entry, Mapping) else None
    if not isinstance(sizes, Mapping):
        raise Cuda13Error("the stack's figures have no bytes mapping", stack, option=_STACK_OPTION)
    missing = [c for c in COMPONENTS if c not in sizes]
    if missing:
        raise Cuda13Error(f"the figures of stack {stack} lack", missing, option=_STACK_OPTION)
    for name in (*COMPONENTS, "margin"):
        value = margin if name == "margin" else sizes[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise Cuda13Error(
                f"the {name} figure of stack {stack} is not a non-negative number",
                value,
                option=_STACK_OPTION,
            )
    return {"margin": float(margin), "bytes": {c: int(sizes[c]) for c in COMPONENTS}}


def plan(
    probe: Mapping[str, Any], places: Mapping[str, str], figures: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Group the places by filesystem and compare need with free space.

    Args:
        probe: ``space_probe.py``'s output, ``{place: {"path", "measured",
            "dev", "mount", "fstype", "free_bytes"} | {"error"}}``.
        places: ``{place: path}``; places with an empty path are skipped.
        figures: :func:`stack_figures`'s result.

    Returns:
        One dict per filesystem, in the order the places first appear:
        ``{"dev", "mount", "fstype", "free_bytes", "need_bytes", "ok",
        "places": [{"place", "path", "what", "option", "need_bytes"}],
        "message"}``; ``need_bytes`` includes the margin. A place the probe
        could not measure is its own entry with ``ok`` false.

    Raises:
        Cuda13Error: a place name outside :data:`PLACES`.
    """
    unknown = sorted(set(places) - set(PLACES))
    if unknown:
        raise Cuda13Error("unknown places to measure", unknown, option=None, remedy=f"use {sorted(PLACES)}")
    margin = figures["margin"]
    groups: dict[Any, dict[str, Any]] = {}
    for place, path in places.items():
        if not path:
            continue
        info = PLACES[place]
        need = int(sum(figures["bytes"][c] for c in info["holds"]) * margin)
        entry = {
            "place": place,
            "path": path,
            "what": info["what"],
            "option": info["option"],
            "need_bytes": need,
        }
        found = probe.get(place) or {"error": "not measured"}
        if "error" in found or "dev" not in found:
            groups[("error", place)] = {
                "dev": None,
                "mount": None,
                "fstype": None,
                "free_bytes": None,
                "need_bytes": need,
                "places": [entry],
                "error": found.get("error", "not measured"),
            }
            continue
        group = groups.setdefault(
            found["dev"],
            {
                "dev": found["dev"],
                "mount": found.get("mount"),
                "fstype": found.get("fstype"),
                "free_bytes": int(found["free_bytes"]),
                "need_bytes": 0,
                "places": [],
            },
        )
        group["need_bytes"] += need
        group["places"].append(entry)
    result = []
    for group in groups.values():
        group["ok"] = "error" not in group and group["free_bytes"] >= group["need_bytes"]
        group["message"] = _message(group)
        result.append(group)
    return result


def _message(group: dict[str, Any]) -> str:
    """Set ``problem`` and ``remedy`` on a group; return the one-line message."""
    listed = ", ".join(
        f"{p['what']} {p['path']}"
        + (f" ({p['option']})" if p["option"] else "")
        + f" {human_bytes(p['need_bytes'])}"
        for p in group["places"]
    )
    if "error" in group:
        group["problem"] = f"could not measure the filesystem of {listed}: {group['error']}"
        group["remedy"] = "create the directory's parent, or point the option at a directory that exists"
        return f"{group['problem']}. Fix: {group['remedy']}"
    fs = f"the filesystem at {group['mount']}" + (f" ({group['fstype']})" if group.get("fstype") else "")
    need, free = human_bytes(group["need_bytes"]), human_bytes(group["free_bytes"])
    head = f"{fs} holds {listed}: needs {need}, {free} free"
    if group["ok"]:
        return head
    options = [p["option"] for p in group["places"] if p["option"]]
    moves = f"point {' or '.join(options)} at a filesystem with room, or " if options else ""
    group["problem"] = f"not enough space: {head}"
    short = human_bytes(group["need_bytes"] - group["free_bytes"])
    group["remedy"] = f"{moves}free {short} on {group['mount']}"
    return f"{group['problem']}. Fix: {group['remedy']}"
