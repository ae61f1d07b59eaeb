"""The step ``artifact_cache``: wheels fetched once, copied to each host (action ``cuda13_artifacts``).

Fleet: the real CUDA 13 SGLang Python stack is about 4.3 GB of wheels per host,
so a fleet fetches each artifact once and serves it to its hosts
(roles/artifact_cache).

On the control node, once per run and target (:func:`cuda13_upgrade.steps.once.once`:
the first host's worker takes the lock in the cache directory and fetches, the
others wait and take its record): ``pip download`` of the requirements with their
whole dependency closure (the hosts install with ``--no-index``), resolved for the
hosts' platform (``--platform`` each tag, ``--python-version``, ``--implementation``,
``--abi``, ``--only-binary=:all:``: pip evaluates environment markers other than
the Python release on the control node) into ``artifact_cache_dir``, which keeps
the wheels across runs; pip skips a file already there, ``--no-cache-dir`` keeps
its HTTP cache from holding a second copy of every wheel, and the control node's
pip configuration files are not read (``PIP_CONFIG_FILE=/dev/null``). A later run
finds the wheels there and fetches nothing.

Then, on the host: only the wheels it lacks, or holds with another checksum, are
sent (Ansible's own ``copy``, through the action plugin: :class:`Controller`), to
``artifact_cache_host_dir``, the directory the wheels step reads with
``--no-index --find-links``. A host that has them all gets nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuda13_upgrade.steps.host import Host, StepFailed
from cuda13_upgrade.steps.once import once


def _run(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, check=False)


@dataclass
class Controller:
    """What the step does on the control node, given by the action plugin.

    ``copy(src, dest, mode)``: Ansible's ``copy`` of the control node's file ``src`` to the
    host's ``dest`` with ``mode``, returning its result (``changed``, ``failed``, ``msg``).
    ``run_id``: this run (the ansible-playbook process): a fetch recorded by another run is
    not taken. ``run(argv, env)``: runs ``pip download`` (``subprocess.run`` by default).
    """

    copy: Callable[[str, str, str], Mapping[str, Any]]
    run_id: str
    run: Callable[[Sequence[str], Mapping[str, str]], subprocess.CompletedProcess] = field(default=_run)


def check_lists(options: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``artifact_cache_requirements`` and ``artifact_cache_platforms``.

    Raises:
        StepFailed: either is not a non-empty list (the role's check, its message).
    """
    requirements = options.get("artifact_cache_requirements")
    platforms = options.get("artifact_cache_platforms")
    if (
        not isinstance(requirements, list | tuple)
        or not requirements
        or not isinstance(platforms, list | tuple)
        or not platforms
    ):
        raise StepFailed(
            "artifact_cache_requirements must be a non-empty list of requirements (got "
            f"{json.dumps(requirements)}) and artifact_cache_platforms a non-empty list of platform "
            f"tags (got {json.dumps(platforms)})."
        )
    return [str(r) for r in requirements], [str(p) for p in platforms]


def download_argv(options: Mapping[str, Any]) -> list[str]:
    """``pip download`` of the requirements' closure for the hosts' platform (the role's command)."""
    requirements, platforms = check_lists(options)
    return [
        str(options["artifact_cache_python"]),
        *("-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir", "--progress-bar=off"),
        *("--dest", str(options["artifact_cache_dir"])),
        *("--index-url", str(options["artifact_cache_index_url"])),
        *[f"--extra-index-url={url}" for url in options.get("artifact_cache_extra_index_urls") or []],
        *[f"--platform={tag}" for tag in platforms],
        f"--python-version={options['artifact_cache_python_version']}",
        f"--implementation={options['artifact_cache_implementation']}",
        f"--abi={options['artifact_cache_abi']}",
        "--only-binary=:all:",
        *[str(a) for a in options.get("artifact_cache_pip_extra_args") or []],
        *requirements,
    ]


def fetch_key(options: Mapping[str, Any]) -> str:
    """The sha1 of what a fetch reads: its command line (requirements, indexes, the hosts' platform,
    pip arguments, the interpreter, the cache directory)."""
    return hashlib.sha1(json.dumps(download_argv(options)).encode("utf-8"), usedforsecurity=False).hexdigest()


def _sha1(path: str) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_wheels(directory: str, *, checksums: bool = False) -> dict[str, dict[str, Any]]:
    """The wheels in ``directory``: ``{file name: {"size": bytes, "sha1": hex or None}}``."""
    found: dict[str, dict[str, Any]] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".whl") and os.path.isfile(path):
            found[name] = {"size": os.path.getsize(path), "sha1": _sha1(path) if checksums else None}
    return found


def fetch(options: Mapping[str, Any], controller: Controller, *, check_mode: bool) -> dict[str, Any]:
    """Fetch what the cache lacks (``pip download``; nothing in check mode) and list it.

    Returns ``{"files": [every wheel the cache holds], "fetched_files": [those that came from
    upstream now], "fetched_bytes": int, "checksums": {file: sha1}, "cache_bytes": int}``.

    Raises:
        StepFailed: pip download failed (its output, hidden when ``artifact_cache_pip_environment``
        is set).
    """
    directory = str(options["artifact_cache_dir"])
    argv = download_argv(options)
    before = set(cache_wheels(directory))
    if not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        operator = {str(k): str(v) for k, v in (options.get("artifact_cache_pip_environment") or {}).items()}
        env = {**os.environ, "PIP_CONFIG_FILE": "/dev/null", **operator}
        proc = controller.run(argv, env)
        if proc.returncode != 0:
            if operator:
                why = "its output is hidden: artifact_cache_pip_environment is set"
            else:
                lines = [line for line in f"{proc.stdout}\n{proc.stderr}".splitlines() if line.strip()]
                why = " ".join(line.strip() for line in lines[-3:])
            raise StepFailed(
                f"pip download of the new stack's wheels into {directory} failed "
                f"(rc {proc.returncode}): {why}"
            )
    after = cache_wheels(directory, checksums=True)
    fetched = sorted(set(after) - before)
    return {
        "files": sorted(after),
        "fetched_files": fetched,
        "fetched_bytes": sum(after[name]["size"] for name in fetched),
        "checksums": {name: item["sha1"] for name, item in sorted(after.items())},
        "cache_bytes": sum(item["size"] for item in after.values()),
    }


def _host_checksums(host: Host, directory: str) -> dict[str, str]:
    """``{file name: sha1}`` of the wheels the host holds in ``directory`` (Ansible's ``find``)."""
    found = host.module(
        "ansible.builtin.find",
        {"paths": [directory], "patterns": ["*.whl"], "get_checksum": True},
        check_mode=False,
    )
    return {os.path.basename(f["path"]): f.get("checksum") for f in found.get("files") or []}


def fetch_and_copy(host: Host, options: Mapping[str, Any], *, controller: Controller) -> dict[str, Any]:
    """The cache fetched once per run and target on the control node, and copied to the host.

    Args:
        host: the host.
        options: the options record (``artifact_cache_*``).
        controller: the control node's side (:class:`Controller`).

    Returns:
        ``{"find_links": artifact_cache_host_dir, "files": [every wheel the cache holds],
        "fetched_files": [those the run's fetch brought from upstream], "fetched_bytes": int,
        "fetched_by": the host whose worker fetched, "copied": [the wheels sent to this host],
        "changed": bool}``.

    In check mode nothing is fetched or written on the control node (each host lists the cache
    as it is), and the copy reports what it would send.

    Raises:
        StepFailed: the lists are not lists (the role's message), pip download failed (on the
        host whose worker fetched; the others say where the reason is), or a copy failed.
    """
    check_lists(options)
    directory = str(options["artifact_cache_dir"])
    host_dir = str(options["artifact_cache_host_dir"])
    key = fetch_key(options)

    def produce() -> dict[str, Any]:
        record = fetch(options, controller, check_mode=host.check_mode)
        host.tell(
            f"Fetched {len(record['fetched_files'])} wheels, {record['fetched_bytes']} bytes, from upstream; "
            f"{directory} holds {len(record['files'])} wheels, {record['cache_bytes']} bytes."
        )
        return record

    try:
        if host.check_mode:
            # Nothing is fetched, so there is nothing to do once: each host lists the cache as it
            # is, and nothing (not even the lock) is written on the control node.
            record, by = produce(), host.name
        else:
            record, by = once(directory, f".cuda13-fetch-{key}", host.name, produce, scope=controller.run_id)
    except StepFailed as exc:
        if exc.msg:
            raise
        leader = exc.record["failed_by"]
        raise StepFailed(
            f"{host.name}: the wheels of its target were fetched on the control node for {leader}, and that "
            f"fetch failed (the reason is above, under {leader}). Nothing on the host was changed."
        ) from None
    changed = by == host.name and bool(record["fetched_files"])
    changed = (
        bool(
            host.module("ansible.builtin.file", {"path": host_dir, "state": "directory", "mode": "0755"}).get(
                "changed"
            )
        )
        or changed
    )
    held = _host_checksums(host, host_dir)
    copied = []
    # Only the wheels the host lacks, or holds with another checksum, are sent.
    for name in record["files"]:
        if held.get(name) == record["checksums"].get(name):
            continue
        result = controller.copy(os.path.join(directory, name), os.path.join(host_dir, name), "0644")
        if result.get("failed"):
            raise StepFailed(
                f"copying {name} to {host.name}:{host_dir} failed: {result.get('msg')}",
                {"copied": copied, "changed": changed},
            )
        changed = bool(result.get("changed")) or changed
        copied.append(name)
    return {
        "find_links": host_dir,
        "files": list(record["files"]),
        "fetched_files": list(record["fetched_files"]),
        "fetched_bytes": int(record["fetched_bytes"]),
        "fetched_by": by,
        "copied": copied,
        "changed": changed,
    }
