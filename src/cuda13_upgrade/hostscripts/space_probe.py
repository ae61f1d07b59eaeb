#!/usr/bin/env python3
"""Measure the filesystem of each path the upgrade writes to.

Runs on the managed host (``python3 space_probe.py NAME=PATH ...``), standard
library only, reads only. A path that does not exist yet is measured at its
nearest existing ancestor (where it will be created); ``~`` is expanded for
the user that runs the script (pip's cache is ``~/.cache/pip``). Prints one
JSON object, one entry per NAME::

    {"pip_tmpdir": {"path": "/tmp", "measured": "/tmp", "dev": 45,
                    "mount": "/tmp", "fstype": "tmpfs",
                    "free_bytes": 67108864, "total_bytes": 67108864}, ...}

``dev`` is ``os.stat().st_dev``: entries with equal ``dev`` share one
filesystem. ``free_bytes`` is what an unprivileged writer may use
(``statvfs``: ``f_bavail * f_frsize``, as ``df``'s "Avail"); ``mount`` is the
topmost directory above ``measured`` on the same device; ``fstype`` comes
from ``/proc/self/mounts`` (``null`` when not found). An entry whose path has
no existing ancestor or cannot be read carries ``error`` instead.
"""

from __future__ import annotations

import json
import os
import sys


def _mount_types() -> dict[str, str]:
    types: dict[str, str] = {}
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 3:
                    # Octal escapes (\040 for a space) as the kernel writes them.
                    mount = fields[1].encode().decode("unicode_escape")
                    types[mount] = fields[2]  # the last mount on a point is the visible one
    except OSError:
        pass
    return types


def measure(path: str, types: dict[str, str]) -> dict:
    """One entry of the output for ``path`` (see the module docstring)."""
    expanded = os.path.abspath(os.path.expanduser(path))
    measured = expanded
    while not os.path.exists(measured):
        parent = os.path.dirname(measured)
        if parent == measured:
            return {"path": path, "error": "no existing ancestor"}
        measured = parent
    try:
        dev = os.stat(measured).st_dev
        vfs = os.statvfs(measured)
    except OSError as exc:
        return {"path": path, "measured": measured, "error": f"{type(exc).__name__}: {exc}"}
    mount = measured
    while mount != "/":
        parent = os.path.dirname(mount)
        try:
            if os.stat(parent).st_dev != dev:
                break
        except OSError:
            break
        mount = parent
    return {
        "path": expanded,
        "measured": measured,
        "dev": dev,
        "mount": mount,
        "fstype": types.get(mount),
        "free_bytes": vfs.f_bavail * vfs.f_frsize,
        "total_bytes": vfs.f_blocks * vfs.f_frsize,
    }


def main(argv: list[str]) -> int:
    types = _mount_types()
    out = {}
    for arg in argv:
        name, sep, path = arg.partition("=")
        if not sep or not name or not path:
            print(f"space_probe.py: expected NAME=PATH, got {arg!r}", file=sys.stderr)
            return 2
        out[name] = measure(path, types)
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
