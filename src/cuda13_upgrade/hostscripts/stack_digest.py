#!/usr/bin/env python3
"""Digest the stack a host serves: one comparison tells a kept host unchanged.

Runs on the managed host with any Python 3 (standard library only)::

    stack_digest.py [--nvidia-smi CMD] [--state DIR] VENV UNIT

Prints one JSON object::

    {"digest": "<sha256 of the parts>",
     "parts": {"freeze": "<sha256>", "dropins": "<sha256>",
               "alternatives": "<sha256>", "toolkit": "<sha256>",
               "driver": "<sha256>"},
     "errors": {"toolkit": "dpkg-query: no packages found matching cuda-*"}}

With ``--state DIR`` (the host's state directory, cuda13_state_dir) it also
reads what earlier runs left there, so that one script run tells whether the
host is already kept (cuda13_upgrade.rerun.host_verdict), and digests the
stack only where the last result is "kept" (``digest`` and ``parts`` are null
otherwise)::

    {"digest": ..., "parts": ..., "errors": ...,
     "state": {"result": <DIR/result.json> or null,
               "step": <DIR/step.json> or null,
               "lock": <DIR/run.lock/owner.json, {} without one> or null (no lock),
               "staged": <DIR/staged.json> or null,
               "errors": {"result": "<why it could not be read>"}}}

A file that is absent is null; one that cannot be read or parsed is null with
its error in ``state.errors``.

Each part is the SHA-256 of a text read on the host:

``freeze``
    ``VENV/bin/python -m pip freeze --all --isolated`` (what the snapshot
    records; an editable install appears with its commit).
``dropins``
    each path of ``systemctl show --property=DropInPaths UNIT`` with its
    contents (the switch's drop-in is the pointer to the new stack).
``alternatives``
    ``update-alternatives --query`` of each group whose name starts with
    ``cuda`` (``update-alternatives --get-selections``): mode and target.
``toolkit``
    ``dpkg-query -W -f='${Package}=${Version} ${db:Status-Abbrev}\\n' 'cuda-*'``
    (the toolkit's installed packages and their versions).
``driver``
    ``CMD --query-gpu=uuid,name,driver_version,compute_cap
    --format=csv,noheader`` (``CMD``: ``--nvidia-smi``, nvidia-smi by default):
    a new driver, or a GPU replaced, is another stack.

A command that fails, or runs past 60 s, contributes its exit status (124 for
the timeout) and error text to its part (so a part that cannot be read
differs from one that can) and the text to ``errors``. Exit status 0 whenever
the script ran.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess

#: Seconds one command may take (nvidia-smi can hang on a GPU in a bad state).
COMMAND_TIMEOUT_S = 60
#: The arguments of the ``driver`` part's nvidia-smi command.
DRIVER_QUERY = ("--query-gpu=uuid,name,driver_version,compute_cap", "--format=csv,noheader")


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT_S)
    except OSError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} did not finish within {COMMAND_TIMEOUT_S} s"
    return proc.returncode, proc.stdout, proc.stderr.strip()


def _part(argv: list[str], errors: dict[str, str], name: str) -> str:
    rc, out, err = _run(argv)
    if rc != 0:
        errors[name] = err or f"{argv[0]} exited {rc}"
        return f"rc={rc}\n{err}\n{out}"
    return out


def _dropins(unit: str, errors: dict[str, str]) -> str:
    text = _part(["systemctl", "show", "--property=DropInPaths", "--value", unit], errors, "dropins")
    if "dropins" in errors:
        return text
    parts = []
    for path in sorted(text.split()):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                parts.append(f"{path}\n{handle.read()}")
        except OSError as exc:
            parts.append(f"{path}\n{exc}")
    return "\n".join(parts)


def _alternatives(errors: dict[str, str]) -> str:
    text = _part(["update-alternatives", "--get-selections"], errors, "alternatives")
    if "alternatives" in errors:
        return text
    groups = sorted(line.split()[0] for line in text.splitlines() if line.split() and line.startswith("cuda"))
    return "\n".join(
        _part(["update-alternatives", "--query", group], errors, "alternatives") for group in groups
    )


def digest(venv: str, unit: str, nvidia_smi: str = "nvidia-smi") -> dict:
    """The parts' digests and the digest over them (see the module's docstring)."""
    errors: dict[str, str] = {}
    texts = {
        "freeze": _part(
            [f"{venv}/bin/python", "-m", "pip", "freeze", "--all", "--isolated"], errors, "freeze"
        ),
        "dropins": _dropins(unit, errors),
        "alternatives": _alternatives(errors),
        "toolkit": _part(
            ["dpkg-query", "-W", "-f=${Package}=${Version} ${db:Status-Abbrev}\\n", "cuda-*"],
            errors,
            "toolkit",
        ),
        "driver": _part([nvidia_smi, *DRIVER_QUERY], errors, "driver"),
    }
    parts = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()}
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"digest": whole, "parts": parts, "errors": errors}


def _read_json(path: str, name: str, errors: dict[str, str]) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        errors[name] = f"{path}: {exc}"
        return None
    if not isinstance(value, dict):
        errors[name] = f"{path}: not a JSON object"
        return None
    return value


def state(directory: str) -> dict:
    """What earlier runs left in ``directory`` (see the module's docstring)."""
    errors: dict[str, str] = {}
    lock_dir = os.path.join(directory, "run.lock")
    lock = None
    if os.path.isdir(lock_dir):
        lock = _read_json(os.path.join(lock_dir, "owner.json"), "lock", errors) or {}
    return {
        "result": _read_json(os.path.join(directory, "result.json"), "result", errors),
        "step": _read_json(os.path.join(directory, "step.json"), "step", errors),
        "lock": lock,
        "staged": _read_json(os.path.join(directory, "staged.json"), "staged", errors),
        "errors": errors,
    }


def read(directory: str, venv: str, unit: str, nvidia_smi: str = "nvidia-smi") -> dict:
    """What ``--state DIR`` prints: the state directory read and, where its last result is
    ``kept``, the digest of the stack the host serves (else ``digest`` and ``parts`` None)."""
    found = state(directory)
    if (found["result"] or {}).get("status") == "kept":
        out = digest(venv, unit, nvidia_smi)
    else:
        out = {"digest": None, "parts": None, "errors": {}}
    return {**out, "state": found}


def freeze_lines(venv: str) -> dict:
    """``<venv>/bin/python -m pip --isolated freeze --all``: ``{"rc": int, "lines": [str],
    "error": str}`` (rc 127 and the error when the venv's Python cannot run)."""
    rc, out, err = _run([os.path.join(venv, "bin", "python"), "-m", "pip", "--isolated", "freeze", "--all"])
    return {"rc": rc, "lines": [line for line in out.splitlines() if line.strip()], "error": err.strip()}


#: The argument spec of the module cuda13_state_read.
STATE_SPEC = {
    "state_dir": {"type": "path", "required": True},
    "venv": {"type": "path", "required": True},
    "unit": {"type": "str", "required": True},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "freeze": {"type": "bool", "default": False},
    "digest": {"type": "bool", "default": False},
}


def state_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_state_read: :func:`read`; with ``digest`` the digest whatever the last
    result; with ``freeze`` the new venv's :func:`freeze_lines` too."""
    if params.get("digest"):
        found = {
            **digest(params["venv"], params["unit"], params["nvidia_smi"]),
            "state": state(params["state_dir"]),
        }
    else:
        found = read(params["state_dir"], params["venv"], params["unit"], params["nvidia_smi"])
    if params.get("freeze"):
        found["freeze"] = freeze_lines(params["venv"])
    return {"changed": False, **found}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Digest the stack a host serves.")
    parser.add_argument(
        "--nvidia-smi", default="nvidia-smi", help="the nvidia-smi command (default: nvidia-smi)"
    )
    parser.add_argument("--state", metavar="DIR", help="also read the host's state directory")
    parser.add_argument("venv")
    parser.add_argument("unit")
    args = parser.parse_args(argv)
    if args.state is None:
        return digest(args.venv, args.unit, args.nvidia_smi)
    return read(args.state, args.venv, args.unit, args.nvidia_smi)


if __name__ == "__main__":
    print(json.dumps(main(), sort_keys=True))
