"""The run's report files on the control node: where they go and how each is written.

A run's directory is ``<cuda13_reports_dir>/<run id>/`` (``reports/`` beside the
playbooks, or ``$CUDA13_REPORTS_DIR``); each host's files are in
``<run dir>/<host>/``. :func:`write_text` writes a file atomically (a temporary
file in the same directory, then ``os.replace``), so that a reader never sees half
a result, creating the directories it needs.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_dir(options: Mapping[str, Any], run_id: str) -> Path:
    """The run's report directory, from the options' ``cuda13_reports_dir``."""
    return Path(str(options.get("cuda13_reports_dir") or "reports")) / str(run_id)


def write_text(path: str | Path, content: str, mode: int = 0o644, *, check_mode: bool = False) -> bool:
    """Write ``content`` to ``path`` atomically with ``mode``; returns whether it changed.

    Nothing is written in check mode. Raises OSError naming the path when it cannot be written.
    """
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    data = content.encode("utf-8")
    try:
        same = path.read_bytes() == data and (path.stat().st_mode & 0o7777) == mode
    except OSError:
        same = False
    if same or check_mode:
        return not same
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=".cuda13-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(scratch, mode)
        os.replace(scratch, path)
    except BaseException:
        os.unlink(scratch)
        raise
    return True


def write_json(path: str | Path, value: Any, mode: int = 0o644, *, check_mode: bool = False) -> bool:
    """:func:`write_text` of ``value`` as indented JSON with a final newline."""
    return write_text(path, json.dumps(value, indent=4, sort_keys=True) + "\n", mode, check_mode=check_mode)
