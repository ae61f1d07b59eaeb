#!/usr/bin/env python3
"""Digest the stack a host serves: one comparison tells a kept host unchanged.

Runs on the managed host with any Python 3 (standard library only)::

    stack_digest.py VENV UNIT

Prints one JSON object::

    {"digest": "<sha256 of the parts>",
     "parts": {"freeze": "<sha256>", "dropins": "<sha256>",
               "alternatives": "<sha256>", "toolkit": "<sha256>"},
     "errors": {"toolkit": "dpkg-query: no packages found matching cuda-*"}}

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

A command that fails contributes its exit status and error text to its part
(so a part that cannot be read differs from one that can) and the text to
``errors``. Exit status 0 whenever the script ran.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
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


def digest(venv: str, unit: str) -> dict:
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
    }
    parts = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in texts.items()}
    whole = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"digest": whole, "parts": parts, "errors": errors}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: stack_digest.py VENV UNIT")
    print(json.dumps(digest(sys.argv[1], sys.argv[2]), sort_keys=True))
