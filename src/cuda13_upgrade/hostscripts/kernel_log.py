#!/usr/bin/env python3
"""Read the kernel log around the switch: a marker before it, the new lines after.

Runs on the managed host with any Python 3 (standard library only)::

    kernel_log.py mark --command CMD
    kernel_log.py read --command CMD --marker JSON

``CMD`` (cuda13_kernel_log_command) prints the kernel log, oldest line first:
``journalctl -k -o short-iso --no-pager`` on a real host, ``dmesg``, or the
sandbox's double. ``mark`` prints the marker as one JSON object::

    {"cursor": "<journal cursor>" | null, "last_line": "<line>" | null, "error": null | "<why>"}

``read`` takes that object back and prints the lines logged after it that
carry the driver's ``NVRM:`` prefix (the Xid lines among them), and the
marker line the decision counts from (cuda13_upgrade.xid.kernel_log_verdict)::

    {"lines": ["..."], "since": "<line>" | null, "marker_found": bool | null, "error": null | "<why>"}

When ``CMD`` is journalctl, the marker is the journal's cursor: ``-n 1
--show-cursor`` prints the last entry and then its cursor ("-- cursor: ..."),
and ``--after-cursor=CURSOR`` starts after it (journalctl(1), OPTIONS:
``--show-cursor``: "The cursor is shown after the last entry after two
dashes"; ``--after-cursor=``: "Start showing entries from the location in the
journal after the location specified by the passed cursor"). A cursor names
one entry of one boot, so a line logged twice, or a clock stepped back, cannot
confuse it. Where journalctl cannot seek to the cursor (the journal was
vacuumed; sd_journal_seek_cursor(3) seeks to the closest entry when it can)
it fails; then the whole log is read and ``marker_found`` is false. The cursor
is a kernel entry itself, so ``--after-cursor`` with ``-k``'s filter skips
exactly it (systemd/systemd#30288 was a cursor outside the filter). With any
other command the marker is the last line printed, and the new lines are those
after its last occurrence (``since``).

A command that cannot be run, exits non-zero, runs past 60 s, or prints
nothing on stdout but something on stderr (journalctl without the
permission to read the kernel's entries) gives ``error``: the caller says
"kernel log not read" and gates nothing. Exit status 0 whenever the script ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess

#: Seconds one command may take.
COMMAND_TIMEOUT_S = 60

CURSOR_PREFIX = "-- cursor: "


def _run(argv: list[str]) -> tuple[list[str] | None, str | None]:
    """The command's stdout lines, or ``None`` and why it could not be read."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT_S)
    except OSError as exc:
        return None, f"{argv[0]}: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return None, f"{argv[0]} did not finish within {COMMAND_TIMEOUT_S} s"
    err = " ".join(proc.stderr.split())
    if proc.returncode != 0:
        return None, f"{' '.join(argv)} exited with status {proc.returncode}" + (f": {err}" if err else "")
    if not proc.stdout.strip() and err:
        return None, f"{' '.join(argv)} printed nothing: {err}"
    return proc.stdout.splitlines(), None


def _journal(argv: list[str]) -> bool:
    return os.path.basename(argv[0]) == "journalctl"


def _log_lines(lines: list[str]) -> list[str]:
    """The log's own lines: journalctl's "-- ... --" notes and cursor line left out."""
    return [line for line in lines if line.strip() and not line.startswith("-- ")]


def mark(argv: list[str]) -> dict[str, object]:
    if _journal(argv):
        lines, error = _run([*argv, "-n", "1", "--show-cursor"])
        if lines is None:
            return {"cursor": None, "last_line": None, "error": error}
        cursor = next((line[len(CURSOR_PREFIX) :] for line in lines if line.startswith(CURSOR_PREFIX)), None)
        rows = _log_lines(lines)
        return {"cursor": cursor, "last_line": rows[-1] if rows else None, "error": None}
    lines, error = _run(argv)
    if lines is None:
        return {"cursor": None, "last_line": None, "error": error}
    rows = _log_lines(lines)
    return {"cursor": None, "last_line": rows[-1] if rows else None, "error": None}


def read(argv: list[str], marker: dict[str, object]) -> dict[str, object]:
    cursor = marker.get("cursor")
    since = marker.get("last_line")
    found: bool | None = None
    if _journal(argv) and cursor:
        lines, error = _run([*argv, f"--after-cursor={cursor}"])
        if lines is not None:
            rows = _log_lines(lines)
            return {
                "lines": [r for r in rows if "NVRM:" in r],
                "since": None,
                "marker_found": True,
                "error": None,
            }
        # The journal no longer knows the cursor: read all of it.
        found = False
        since = None
    lines, error = _run(argv)
    if lines is None:
        return {"lines": [], "since": since, "marker_found": None, "error": error}
    rows = _log_lines(lines)
    keep = [r for r in rows if "NVRM:" in r or (since is not None and r == since)]
    return {"lines": keep, "since": since, "marker_found": found, "error": None}


#: The argument spec of the module cuda13_kernel_log.
KERNEL_LOG_SPEC = {
    "action": {"type": "str", "choices": ["mark", "read"], "required": True},
    "command": {"type": "str", "default": "journalctl -k -o short-iso --no-pager"},
    "marker": {"type": "dict", "default": {}},
}


def kernel_log_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_kernel_log: :func:`mark` or :func:`read` of the command's log."""
    argv = shlex.split(params["command"])
    if not argv:
        return {"changed": False, "log": {"error": "the kernel log command is empty"}}
    if params["action"] == "mark":
        return {"changed": False, "log": mark(argv)}
    return {"changed": False, "log": read(argv, params.get("marker") or {})}


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("mark", "read"))
    parser.add_argument("--command", required=True, help="the command that prints the kernel log")
    parser.add_argument("--marker", default="{}", help="mark's JSON output (read)")
    ns = parser.parse_args(args)
    argv = shlex.split(ns.command)
    if not argv:
        print(json.dumps({"error": "the kernel log command is empty"}))
        return 0
    if ns.action == "mark":
        out = mark(argv)
    else:
        try:
            marker = json.loads(ns.marker)
        except ValueError:
            marker = {}
        out = read(argv, marker if isinstance(marker, dict) else {})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
