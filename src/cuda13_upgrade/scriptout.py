"""Read what a host script (``hostscripts/*.py``, run as a script) printed.

Over SSH, Ansible runs a script with ``ssh -tt`` (the ssh connection's ``use_tty``
option, on by default, for any command that may use become): both of the script's
streams go to one pseudo-terminal, so the task's ``stdout`` holds the script's stderr
too, with ``\\r\\n`` line ends, and its ``stderr`` is empty. Whatever the imported
libraries print lands there, before the result: flashinfer 0.7.2 warns "Ignoring
incompatible flashinfer-cubin package ..." on stderr when the cubin wheel's version
differs. A local or ``podman`` connection keeps the streams apart. Either way the
scripts print their result as one JSON object on the last line of stdout.

``result_document`` finds that line (the last line that is a JSON object) whichever way
the streams came back; ``script_said`` gives the other lines, what the script and its
libraries said, for messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class NoResultError(ValueError):
    """The script's output holds no JSON object line."""


def _lines(text: str) -> list[str]:
    return [line.rstrip("\r") for line in (text or "").replace("\r\n", "\n").split("\n")]


def _document(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def result_document(stdout: str) -> dict[str, Any]:
    """The JSON object a host script printed last.

    ``stdout``: the task's stdout (str), possibly holding the script's stderr lines too
    (SSH with a pseudo-terminal). Returns the object on the last line that parses as a
    JSON object. Raises ``NoResultError`` naming the output's last lines when there is
    none (the script failed before its result, or printed something else).
    """
    for line in reversed(_lines(stdout)):
        document = _document(line)
        if document is not None:
            return document
    tail = [line for line in _lines(stdout) if line.strip()][-5:]
    shown = " | ".join(tail) if tail else "nothing"
    raise NoResultError(f"the script printed no JSON result; its last output: {shown[:1000]}")


def script_said(result: Mapping[str, Any]) -> str:
    """What a host script said besides its result: its stderr and its stdout's other lines.

    ``result``: the result of a script run (``stdout``,
    ``stderr``, optionally ``msg``). Returns the lines joined by newlines (str, empty when it
    said nothing): stderr first, then stdout's non-result lines (where a pseudo-terminal put
    stderr), then ``msg`` when there is nothing else (a script that did not start).
    """
    said = [line for line in _lines(str(result.get("stderr") or "")) if line.strip()]
    said += [
        line for line in _lines(str(result.get("stdout") or "")) if line.strip() and _document(line) is None
    ]
    if not said and result.get("msg"):
        said = [str(result["msg"])]
    return "\n".join(said)
