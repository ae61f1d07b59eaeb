"""Once per key of a run, on the control node: the first host's worker does it, the others take its result.

Ansible runs each host's task in its own forked worker process, so what must
happen once for several hosts (the preflight's resolution of a target, the
artifact cache's download) is coordinated through files: a lock file per key
(``fcntl.flock``, released when its holder's file closes, a killed worker's too)
and the result written beside it. The first worker to take the lock does the
work while holding it and writes what came of it, a failure included; the
others wait on the lock and read that.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from cuda13_upgrade.redact import redact
from cuda13_upgrade.steps.host import StepFailed


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created 0600, with its directory 0700: it is in
    the run's private report directory) for the block."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: str) -> Any:
    """The JSON document in ``path``; None when there is none (or half of one)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_json(path: str, value: Any) -> None:
    """Write ``value``, redacted (:func:`cuda13_upgrade.redact.redact`), to ``path`` atomically
    (a temporary file, 0600, renamed over it)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=".cuda13-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(redact(value), handle, indent=1, sort_keys=True)
        os.replace(scratch, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        raise


def once(
    directory: str, stem: str, who: str, produce: Callable[[], dict[str, Any]], *, scope: str = ""
) -> tuple[dict[str, Any], str]:
    """``produce()``'s record, made once for every caller with the same ``directory``, ``stem`` and ``scope``.

    Args:
        directory: where the lock (``<stem>.lock``) and the result (``<stem>.json``) live,
            on the control node (created).
        stem: the key's file name (the key's hash).
        who: the caller (a host's name), recorded as the one that produced it.
        produce: the work, returning a JSON-serializable record; it may raise.
        scope: what the result is valid for (a run): a result written for another scope is
            not taken, but made again and written over it.

    Returns:
        ``(record, by)``: the record and the host that produced it (``who`` for the
        first caller).

    Raises:
        StepFailed: for the first caller, what ``produce`` raised (re-raised as it was);
        for the others, a StepFailed whose ``msg`` is the empty string and whose record
        is ``{"failed_by": host, "failure": its message}``, for the caller to word.
    """
    lock = os.path.join(directory, f"{stem}.lock")
    out = os.path.join(directory, f"{stem}.json")
    with locked(lock):
        found = read_json(out)
        if isinstance(found, dict) and found.get("by") and found.get("scope", "") == scope:
            if "failure" in found:
                raise StepFailed("", {"failed_by": found["by"], "failure": found["failure"]})
            return dict(found.get("record") or {}), str(found["by"])
        try:
            record = produce()
        except StepFailed as exc:
            write_json(out, {"by": who, "scope": scope, "failure": exc.msg})
            raise
        except BaseException as exc:
            write_json(out, {"by": who, "scope": scope, "failure": f"{type(exc).__name__}: {exc}"})
            raise
        write_json(out, {"by": who, "scope": scope, "record": record})
        return record, who
