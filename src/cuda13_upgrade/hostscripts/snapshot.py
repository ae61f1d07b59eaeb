"""The running stack as the host shows it, for the pre-upgrade snapshot (module ``cuda13_snapshot_read``).

Runs on the managed host, standard library only. ``collect`` reads, in one run,
what the snapshot manifest records (cuda13_upgrade.stack.build_manifest): the
serving venv's ``pip freeze --all``, the CUDA alternatives groups (the configured
ones and every ``cuda``/``cuda-<release>`` group the host has) with their
``--query``, where ``/usr/local/cuda`` resolves, its ``nvcc --version``, the
installed ``cuda-*`` packages, the SGLang tree's commit, state and description,
the unit with its drop-ins (``systemctl cat``) and its state (``systemctl
show``), and who the unit runs as (``systemctl show -p User -p Group -p
Environment -p MainPID``, the user's ``getent passwd`` entry, the running
server's ``/proc/<pid>/environ``). An existing snapshot file is returned instead:
the pre-upgrade manifest is written once, so a re-run after the switch never
replaces the record of the old stack with the new one.

``store`` writes the manifest the control node built (0600, its directory
0700) unless the file exists, after recording which of the candidate cache
directories exist.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess

from .alternatives import cuda_alternatives_groups
from .statedir import write_file

COMMAND_TIMEOUT_S = 120


def _run(argv: list[str]) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT_S)
    except OSError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"{argv[0]} did not finish within {COMMAND_TIMEOUT_S} s"}
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _existing(path: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def collect(snapshot_file: str, venv: str, sglang_src: str, service: str, alternatives: list) -> dict:
    """See the module docstring. Returns ``{"existing": manifest or None, "raw": {...} or None}``;
    fails (``failed``, ``msg``) when the serving venv's pip, ``update-alternatives`` or ``systemctl``
    cannot be read."""
    try:
        existing = _existing(snapshot_file)
    except (OSError, ValueError) as exc:
        return {"failed": True, "msg": f"cannot read the snapshot {snapshot_file}: {exc}"}
    if existing is not None:
        return {"existing": existing, "raw": None}
    freeze = _run([f"{venv}/bin/python", "-m", "pip", "freeze", "--all", "--isolated"])
    selections = _run(["update-alternatives", "--get-selections"])
    unit = _run(["systemctl", "cat", service])
    for name, done in (
        ("the serving venv's pip freeze", freeze),
        ("update-alternatives", selections),
        ("systemctl cat " + service, unit),
    ):
        if done["rc"] != 0:
            return {
                "failed": True,
                "msg": f"cannot read {name}: {(done['stderr'] or done['stdout']).strip()}",
            }
    groups = list(dict.fromkeys([*alternatives, *cuda_alternatives_groups(selections["stdout"])]))
    queries = {}
    for group in groups:
        done = _run(["update-alternatives", "--query", group])
        queries[group] = done["stdout"] if done["rc"] == 0 else ""
    cuda = _run(["readlink", "-f", "/usr/local/cuda"])
    nvcc = _run(["/usr/local/cuda/bin/nvcc", "--version"])
    packages = _run(["dpkg-query", "-W", "-f=${Package} ${Version} ${db:Status-Abbrev}\n", "cuda-*"])
    commit = _run(["git", "-C", sglang_src, "rev-parse", "HEAD"])
    dirty = _run(["git", "-C", sglang_src, "status", "--porcelain", "--untracked-files=no"])
    describe = _run(["git", "-C", sglang_src, "describe", "--tags", "--always"])
    show = _run(["systemctl", "show", service, "--property=FragmentPath,DropInPaths,ActiveState"])
    identity = _run(
        ["systemctl", "show", "-p", "User", "-p", "Group", "-p", "Environment", "-p", "MainPID", service]
    )
    user = "root"
    pid = 0
    for line in identity["stdout"].splitlines():
        key, _, value = line.partition("=")
        if key == "User" and value:
            user = value
        elif key == "MainPID" and value.isdigit():
            pid = int(value)
    passwd = _run(["getent", "passwd", user])
    environ = b""
    if pid > 0:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            environ = b""
    return {
        "existing": None,
        "raw": {
            "pip_freeze": freeze["stdout"],
            "alternatives": queries,
            "cuda_resolved": cuda["stdout"].strip() if cuda["rc"] == 0 else None,
            "nvcc": nvcc["stdout"] if nvcc["rc"] == 0 else None,
            "packages": packages["stdout"],
            "sglang": {
                "src": sglang_src,
                "commit": commit["stdout"].strip() if commit["rc"] == 0 else None,
                "dirty": bool(dirty["stdout"].strip()),
                "describe": describe["stdout"].strip() if describe["rc"] == 0 else None,
            },
            "unit_text": unit["stdout"].rstrip("\n"),
            "show": show["stdout"],
            "identity_show": identity["stdout"],
            "passwd": passwd["stdout"] if passwd["rc"] == 0 else "",
            "environ_b64": base64.b64encode(environ).decode("ascii"),
        },
    }


def store(snapshot_file: str, manifest: dict, cache_dirs: list, *, check_mode: bool = False) -> dict:
    """Record which ``cache_dirs`` exist in ``manifest`` and write it to ``snapshot_file`` unless the
    file exists; returns ``{"changed", "manifest"}``."""
    manifest = {**manifest, "cache_dirs": sorted(d for d in dict.fromkeys(cache_dirs) if os.path.exists(d))}
    if os.path.exists(snapshot_file):
        return {"changed": False, "manifest": _existing(snapshot_file)}
    changed = write_file(
        snapshot_file, json.dumps(manifest, indent=4, sort_keys=True) + "\n", "0600", check_mode=check_mode
    )
    return {"changed": changed, "manifest": manifest}


#: The argument spec of the module cuda13_snapshot_read.
SNAPSHOT_SPEC = {
    "action": {"type": "str", "choices": ["collect", "store"], "required": True},
    "snapshot_file": {"type": "path", "required": True},
    "venv": {"type": "path"},
    "sglang_src": {"type": "path"},
    "service": {"type": "str"},
    "alternatives": {"type": "list", "elements": "str", "default": []},
    "manifest": {"type": "dict"},
    "cache_dirs": {"type": "list", "elements": "path", "default": []},
}


def snapshot_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_snapshot_read: :func:`collect` or :func:`store`."""
    if params["action"] == "collect":
        result = collect(
            params["snapshot_file"],
            params["venv"],
            params["sglang_src"],
            params["service"],
            params["alternatives"],
        )
        return {"changed": False, **result}
    try:
        return store(
            params["snapshot_file"], params["manifest"] or {}, params["cache_dirs"], check_mode=check_mode
        )
    except OSError as exc:
        return {"failed": True, "msg": f"cannot write the snapshot {params['snapshot_file']}: {exc}"}
