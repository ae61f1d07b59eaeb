"""The host's state directory: records written atomically, and the upgrade lock.

Runs on the managed host, standard library only (the modules ``cuda13_record``
and ``cuda13_lock`` of ``library/``).

Records (:func:`write_files`): each file is written to a temporary file in
its own directory and renamed over the old one (``os.replace``), so that a
reader, or the next run after a power cut, never sees half a record. A file
whose content and mode are already what is asked is left alone (not changed).

The lock (:func:`lock`): ``mkdir <state_dir>/run.lock`` is atomic, so the
first run to create the directory holds it. A run that finds it there reads
who holds it (``owner.json``), the host's last result and the last step
boundary, for the control node to judge whether that run is dead
(cuda13_upgrade.runlock.lock_verdict); a run that takes it over, or holds it,
writes its ``owner.json``; the lock is released by removing the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile


def _mode(value) -> int:
    """A file mode from an octal string ("0600") or an int taken as the mode itself."""
    return value if isinstance(value, int) else int(str(value), 8)


def write_file(path: str, content: str, mode="0644", *, check_mode: bool = False, owner=None) -> bool:
    """Write ``content`` to ``path`` atomically with ``mode``; returns whether it changed.

    Parent directories are created (0755, or ``mode``'s directory equivalent for
    private files: 0700 when ``mode`` gives the group and others nothing).
    ``owner``: ``(uid, gid)`` to give the file, or None. Raises OSError.
    """
    wanted = _mode(mode)
    data = content.encode("utf-8")
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data
        stat = os.stat(path)
        same = same and (stat.st_mode & 0o7777) == wanted
        if owner is not None:
            same = same and (stat.st_uid, stat.st_gid) == tuple(owner)
    except OSError:
        same = False
    if same or check_mode:
        return not same
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700 if wanted & 0o077 == 0 else 0o755, exist_ok=True)
    fd, scratch = tempfile.mkstemp(prefix=".cuda13-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(scratch, wanted)
        if owner is not None:
            os.chown(scratch, owner[0], owner[1])
        os.replace(scratch, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        raise
    return True


def remove(path: str, *, check_mode: bool = False) -> bool:
    """Remove a file or a directory tree; returns whether there was one."""
    if not os.path.lexists(path):
        return False
    if not check_mode:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return True


def write_files(files: list, absent: list, *, check_mode: bool = False) -> dict:
    """Write each ``{"path", "content", "mode"}`` of ``files``, remove each path of ``absent``.

    Returns ``{"changed": bool, "written": [paths changed], "removed": [paths removed],
    "failed": bool, "msg": str}``; a file that cannot be written fails with the path and
    the OS error, after the others were tried.
    """
    written, removed, errors = [], [], []
    for item in files:
        try:
            if write_file(item["path"], item["content"], item.get("mode", "0644"), check_mode=check_mode):
                written.append(item["path"])
        except OSError as exc:
            errors.append(f"cannot write {item['path']}: {exc}")
    for path in absent:
        try:
            if remove(path, check_mode=check_mode):
                removed.append(path)
        except OSError as exc:
            errors.append(f"cannot remove {path}: {exc}")
    result = {"changed": bool(written or removed), "written": written, "removed": removed}
    if errors:
        result.update(failed=True, msg="; ".join(errors))
    return result


def _read_json(path: str):
    """The JSON object in ``path``; None when missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def lock(state_dir: str, action: str, owner=None, *, check_mode: bool = False) -> dict:
    """One operation on the host's upgrade lock, ``<state_dir>/run.lock``.

    ``action``:
      ``acquire``: create the state directory (0700) and the lock directory; when the
      lock exists, read its ``owner.json``, the host's ``result.json`` and ``step.json``.
      ``own``: write ``owner`` (a dict) as the lock's ``owner.json`` (0600): this run
      holds the lock (after acquiring it, or taking over a dead run's).
      ``release``: remove the lock directory.
    In check mode nothing is created, written or removed; ``acquire`` then reads only.

    Returns ``{"changed", "acquired" (acquire: the directory was created now),
    "held_by" (the owner found, or None), "result", "step"}``; an OS error fails
    with the path.
    """
    lock_dir = os.path.join(state_dir, "run.lock")
    result = {"changed": False, "acquired": False, "held_by": None, "result": None, "step": None}
    try:
        if action == "acquire":
            if check_mode:
                exists = os.path.isdir(lock_dir)
            else:
                os.makedirs(state_dir, mode=0o700, exist_ok=True)
                try:
                    os.mkdir(lock_dir, 0o700)
                    exists = False
                except FileExistsError:
                    exists = True
            result["acquired"] = not exists and not check_mode
            result["changed"] = result["acquired"]
            if exists:
                result["held_by"] = _read_json(os.path.join(lock_dir, "owner.json")) or {}
                result["result"] = _read_json(os.path.join(state_dir, "result.json"))
                result["step"] = _read_json(os.path.join(state_dir, "step.json"))
        elif action == "own":
            path = os.path.join(lock_dir, "owner.json")
            if not check_mode:
                os.makedirs(lock_dir, mode=0o700, exist_ok=True)
            result["changed"] = write_file(
                path, json.dumps(owner or {}, sort_keys=True) + "\n", "0600", check_mode=check_mode
            )
        elif action == "release":
            result["changed"] = remove(lock_dir, check_mode=check_mode)
        else:
            return {**result, "failed": True, "msg": f"unknown lock action {action!r}"}
    except OSError as exc:
        return {**result, "failed": True, "msg": f"{action} {lock_dir}: {exc}"}
    return result


def read_files(paths: list) -> dict:
    """``{path: {"exists": bool, "content": str or None}}`` of each path (a record's text, read as UTF-8)."""
    found = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                found[path] = {"exists": True, "content": handle.read()}
        except FileNotFoundError:
            found[path] = {"exists": os.path.lexists(path), "content": None}
        except (OSError, UnicodeDecodeError):
            found[path] = {"exists": True, "content": None}
    return found


#: The argument spec of the module cuda13_record.
RECORD_SPEC = {
    "files": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "path": {"type": "path", "required": True},
            "content": {"type": "str", "required": True, "no_log": False},
            "mode": {"type": "str", "default": "0644"},
        },
    },
    "absent": {"type": "list", "elements": "path", "default": []},
    "read": {"type": "list", "elements": "path", "default": []},
}


def record_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_record: ``read`` first, then ``files`` written and ``absent`` removed."""
    found = read_files(params.get("read") or [])
    result = write_files(params.get("files") or [], params.get("absent") or [], check_mode=check_mode)
    return {**result, "read": found}


#: The argument spec of the module cuda13_lock_dir.
LOCK_SPEC = {
    "action": {"type": "str", "choices": ["acquire", "own", "release"], "required": True},
    "state_dir": {"type": "path", "required": True},
    "owner": {"type": "dict"},
}


def lock_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_lock_dir: :func:`lock`."""
    return lock(params["state_dir"], params["action"], params.get("owner"), check_mode=check_mode)
