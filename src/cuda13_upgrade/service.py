"""The serving unit's user, group, environment and the cache locations they imply.

A server run as a service user writes its JIT products where that user's
environment points, and fails when those directories belong to root
("[Errno 13] Permission denied": vllm-project/vllm#28440, ai-dynamo/dynamo PR
#11154). :func:`service_identity` reads what the unit really runs with:

* ``systemctl show -p User -p Group -p Environment -p MainPID <unit>``
  (:func:`parse_show`). systemd prints the ``Environment`` list space-separated
  and an entry holding a space or a newline as ``[unprintable]``
  (src/shared/bus-print-properties.c, ``bus_print_property``: "This property
  has multiple space-separated values, so neither spaces nor newlines can be
  allowed in a value").
* the main process's environment, ``/proc/<MainPID>/environ`` (NUL-separated),
  when the unit runs: it holds what ``Environment=`` and ``EnvironmentFile=``
  set and the ``HOME`` systemd sets from the user database for ``User=``
  (systemd.exec(5), "Environment variables in spawned processes");
* the user's ``getent passwd`` entry, for ``HOME`` and the primary group when
  the unit does not run.

:func:`cache_dirs` then gives each cache's directory by the rule of the
library that writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuda13_upgrade.errors import ParseError

__all__ = ["CACHE_VARIABLES", "cache_dirs", "parse_environ", "parse_passwd", "parse_show", "service_identity"]

#: The cache environment variables of the stack, and the directory each
#: library uses without it (``~`` is the service user's HOME):
#: Triton (triton/runtime/cache.py: ``$TRITON_HOME`` or HOME, then
#: ``.triton/cache``), FlashInfer (flashinfer/jit/env.py:
#: ``$FLASHINFER_WORKSPACE_BASE`` or HOME, then ``.cache/flashinfer``), torch
#: extensions (torch/utils/cpp_extension.py: ``$XDG_CACHE_HOME`` or
#: ``~/.cache``, then ``torch_extensions``), TorchInductor
#: (torch/_inductor/runtime/cache_dir_utils.py: the temporary directory, then
#: ``torchinductor_<user>``).
CACHE_VARIABLES = (
    "TRITON_CACHE_DIR",
    "FLASHINFER_WORKSPACE_BASE",
    "TORCH_EXTENSIONS_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
)


def parse_show(text: str) -> dict[str, Any]:
    """Parse ``systemctl show -p User -p Group -p Environment -p MainPID`` output.

    Returns ``{"user": str, "group": str, "environment": {name: value},
    "unprintable": int, "main_pid": int}``; empty strings where the unit sets
    no ``User=``/``Group=`` (systemd then runs it as root). ``unprintable``
    counts the ``Environment`` entries systemd could not print (a value with a
    space). Raises :class:`ParseError` when a line is not ``Key=value``.
    """
    if not isinstance(text, str):
        raise ParseError("systemctl show output must be text", text, option="systemctl show")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ParseError("systemctl show line is not Key=value", line, option="systemctl show")
        fields[key] = value
    environment: dict[str, str] = {}
    unprintable = 0
    for entry in fields.get("Environment", "").split(" "):
        if not entry:
            continue
        if entry == "[unprintable]" or "=" not in entry:
            unprintable += 1
            continue
        name, _, value = entry.partition("=")
        environment[name] = value
    pid = fields.get("MainPID", "0").strip() or "0"
    return {
        "user": fields.get("User", "").strip(),
        "group": fields.get("Group", "").strip(),
        "environment": environment,
        "unprintable": unprintable,
        "main_pid": int(pid) if pid.isdigit() else 0,
    }


def parse_environ(data: str) -> dict[str, str]:
    """``/proc/<pid>/environ`` (``NAME=value`` entries separated by NUL) as a dict."""
    out: dict[str, str] = {}
    for entry in data.split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name:
            out[name] = value
    return out


def parse_passwd(line: str) -> dict[str, Any] | None:
    """One ``getent passwd`` line (``name:x:uid:gid:gecos:home:shell``); None when empty."""
    line = (line or "").strip().splitlines()[0] if (line or "").strip() else ""
    if not line:
        return None
    parts = line.split(":")
    if len(parts) != 7 or not parts[2].isdigit() or not parts[3].isdigit():
        raise ParseError(
            "getent passwd line is not name:x:uid:gid:gecos:home:shell", line, option="getent passwd"
        )
    return {"name": parts[0], "uid": int(parts[2]), "gid": int(parts[3]), "home": parts[5]}


def service_identity(show: str, passwd: str = "", environ: str = "") -> dict[str, Any]:
    """Who the unit runs as and with what environment.

    Args:
        show: :func:`parse_show`'s input.
        passwd: ``getent passwd <user>`` output ("" when not read).
        environ: ``/proc/<MainPID>/environ`` ("" when the unit does not run).

    Returns:
        ``{"user", "group", "uid", "gid", "home", "environment", "source",
        "unprintable", "cache_dirs"}``; ``user`` ``root`` when the unit sets
        none, ``group`` the user's primary group id (as text) when the unit
        sets none, ``source`` ``"process"`` when the environment was read
        from the running main process, else ``"unit"``.

    Raises:
        ParseError: ``User=`` names a user the host does not know (no passwd
            entry) or the outputs are malformed.
    """
    unit = parse_show(show)
    user = unit["user"] or "root"
    entry = parse_passwd(passwd)
    if entry is None and user != "root":
        raise ParseError(
            "the service's User= is not a user of this host (getent passwd found none)",
            user,
            option="cuda13_service_name",
            remedy="create the user, or fix the unit's User=",
        )
    if entry is None:
        entry = {"name": "root", "uid": 0, "gid": 0, "home": "/root"}
    env = parse_environ(environ) if environ else {}
    source = "process" if env else "unit"
    if not env:
        env = {"HOME": entry["home"], "USER": user, **unit["environment"]}
    env.setdefault("HOME", entry["home"])
    identity = {
        "user": user,
        "group": unit["group"] or str(entry["gid"]),
        "uid": entry["uid"],
        "gid": entry["gid"],
        "home": env["HOME"],
        "environment": {
            k: v
            for k, v in env.items()
            if k in ("HOME", "XDG_CACHE_HOME", "TRITON_HOME", "TMPDIR", *CACHE_VARIABLES)
        },
        "source": source,
        "unprintable": unit["unprintable"],
    }
    identity["cache_dirs"] = cache_dirs(identity)
    return identity


def cache_dirs(identity: Mapping[str, Any]) -> dict[str, str]:
    """``{"triton", "flashinfer", "torch_extensions", "torchinductor"}`` directories.

    Each from its variable in ``identity["environment"]`` when set, else the
    library's default under the user's HOME (see :data:`CACHE_VARIABLES`).
    """
    env = identity.get("environment") or {}
    home = env.get("HOME") or identity.get("home") or "/root"
    xdg = env.get("XDG_CACHE_HOME") or f"{home}/.cache"
    flashinfer_base = env.get("FLASHINFER_WORKSPACE_BASE") or home
    return {
        "triton": env.get("TRITON_CACHE_DIR") or f"{env.get('TRITON_HOME') or home}/.triton/cache",
        "flashinfer": f"{flashinfer_base}/.cache/flashinfer",
        "torch_extensions": env.get("TORCH_EXTENSIONS_DIR") or f"{xdg}/torch_extensions",
        "torchinductor": env.get("TORCHINDUCTOR_CACHE_DIR")
        or f"{env.get('TMPDIR') or '/tmp'}/torchinductor_{identity.get('user') or 'root'}",
    }
