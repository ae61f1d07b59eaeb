"""The run's report files on the control node: where they go and how each is written.

A run's directory is ``<cuda13_reports_dir>/<run id>/`` (``reports/`` beside the
playbooks, or ``$CUDA13_REPORTS_DIR``); each host's files are in
``<run dir>/<host>/``. :func:`write_text` writes a file atomically (a temporary
file in the same directory, then ``os.replace``), so that a reader never sees half
a result, creating the directories it needs.

Reports are private (they name hosts, paths and the services' command lines): every
directory this module creates is mode 0700 (:data:`DIR_MODE`, :func:`private_dir`) and
every file 0600 (:data:`FILE_MODE`); the one exception is the Prometheus textfile
``cuda13_upgrade.prom`` (:func:`cuda13_upgrade.metrics.write_textfile`), 0644 because
node_exporter's textfile collector, another user, reads it. Every text is written
through :func:`cuda13_upgrade.redact.redact` (tokens in ``Environment=``, URL userinfo,
``--api-key`` values masked).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cuda13_upgrade.redact import redact, redact_text

#: Mode of every directory of a run's report.
DIR_MODE = 0o700

#: Mode of every file of a run's report (the metrics textfile excepted).
FILE_MODE = 0o600


def run_dir(options: Mapping[str, Any], run_id: str) -> Path:
    """The run's report directory, from the options' ``cuda13_reports_dir``."""
    return Path(str(options.get("cuda13_reports_dir") or "reports")) / str(run_id)


def private_dir(path: str | Path) -> Path:
    """Create ``path`` and its missing parents with mode 0700 (:data:`DIR_MODE`, whatever the
    umask); ``path`` itself is set to 0700 also when it exists. Returns the absolute path.
    Raises OSError when it cannot be created."""
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    missing = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)
    if (path.stat().st_mode & 0o7777) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def write_text(path: str | Path, content: str, mode: int = FILE_MODE, *, check_mode: bool = False) -> bool:
    """Write ``content``, redacted (:func:`cuda13_upgrade.redact.redact_text`), to ``path``
    atomically with ``mode`` (0600 unless told); returns whether it changed. Missing
    directories are created 0700 (:func:`private_dir`).

    Nothing is written in check mode. Raises OSError naming the path when it cannot be written.
    """
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    data = redact_text(content).encode("utf-8")
    try:
        same = path.read_bytes() == data and (path.stat().st_mode & 0o7777) == mode
    except OSError:
        same = False
    if same or check_mode:
        return not same
    if not path.parent.is_dir():
        private_dir(path.parent)
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


def write_json(
    path: str | Path, value: Any, mode: int = FILE_MODE, *, check_mode: bool = False, indent: int = 4
) -> bool:
    """:func:`write_text` of ``value``, redacted (:func:`cuda13_upgrade.redact.redact`), as
    indented JSON (keys sorted) with a final newline."""
    text = json.dumps(redact(value), indent=indent, sort_keys=True) + "\n"
    return write_text(path, text, mode, check_mode=check_mode)
