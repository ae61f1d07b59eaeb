"""pip's resolver in report mode in a throwaway venv on the host (module ``cuda13_resolve``).

Runs on the managed host, standard library only. Read-only (the preflight): the
whole target - the cu130 wheels and the SGLang release's own requirements - is
resolved by ``pip install --dry-run --ignore-installed --report`` in a venv made
for the purpose and removed afterwards, whatever happened.

The venv (ensurepip) and pip's downloads go on the filesystem of pip's temporary
directory (``cu130_wheels_pip_tmpdir``), the one the preflight measures, never the
system's /tmp: that is often a small tmpfs (pypa/pip#12868). Before the upgrade
that directory does not exist yet: its nearest existing parent holds the
throwaway directory (``.cuda13-resolve-XXXXXXXX``, 0700).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile


def nearest_existing_parent(path: str) -> str:
    """``path`` itself when it is a directory, else its nearest ancestor that is."""
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        path = os.path.dirname(path)
    return path


def sources(index_url: str, extra_index_urls: list, find_links: str) -> list:
    """pip's source arguments: a find-links directory alone (``--no-index``), else the indexes."""
    if find_links:
        return ["--no-index", "--find-links", find_links]
    return ["--index-url", index_url, *[f"--extra-index-url={url}" for url in extra_index_urls]]


def resolve(params: dict) -> dict:
    """Resolve ``requirements`` (and ``sglang``) with the sources and pip arguments of ``params``.

    Returns ``{"changed": False, "rc", "stdout", "stderr", "report" (pip's installation
    report, a dict, or None when pip wrote none), "directory" (the throwaway directory,
    removed), "argv"}``; fails (``failed``, ``msg``) when the throwaway venv cannot be made.
    """
    parent = nearest_existing_parent(params["pip_tmpdir"])
    directory = tempfile.mkdtemp(prefix=".cuda13-resolve-", dir=parent)
    result = {
        "changed": False,
        "rc": None,
        "stdout": "",
        "stderr": "",
        "report": None,
        "directory": directory,
    }
    try:
        venv = os.path.join(directory, "venv")
        env = {**os.environ, "TMPDIR": directory}
        made = subprocess.run(
            [params["python"], "-m", "venv", venv], capture_output=True, text=True, env=env, check=False
        )
        if made.returncode != 0:
            return {
                **result,
                "failed": True,
                "rc": made.returncode,
                "stdout": made.stdout,
                "stderr": made.stderr,
                "msg": f"{params['python']} -m venv {venv} failed (rc {made.returncode}): "
                f"{made.stderr.strip() or made.stdout.strip()}",
            }
        report = os.path.join(directory, "report.json")
        argv = [
            os.path.join(venv, "bin", "python"),
            *("-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed"),
            *("--disable-pip-version-check", "--report", report),
            *sources(
                params.get("index_url") or "",
                params.get("extra_index_urls") or [],
                params.get("find_links") or "",
            ),
            *(params.get("pip_extra_args") or []),
            *params["requirements"],
            *([params["sglang"]] if params.get("sglang") else []),
        ]
        env = {
            **os.environ,
            **{k: str(v) for k, v in (params.get("environment") or {}).items()},
            "TMPDIR": directory,
        }
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        result.update(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, argv=argv)
        if proc.returncode == 0 and os.path.isfile(report):
            try:
                with open(report, encoding="utf-8") as handle:
                    result["report"] = json.load(handle)
            except ValueError:
                result["report"] = None
        return result
    except OSError as exc:
        return {**result, "failed": True, "msg": f"cannot run pip's resolver in {directory}: {exc}"}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


#: The argument spec of the module cuda13_resolve.
RESOLVE_SPEC = {
    "python": {"type": "str", "required": True},
    "pip_tmpdir": {"type": "path", "required": True},
    "index_url": {"type": "str", "default": ""},
    "extra_index_urls": {"type": "list", "elements": "str", "default": []},
    "find_links": {"type": "str", "default": ""},
    "pip_extra_args": {"type": "list", "elements": "str", "default": []},
    "requirements": {"type": "list", "elements": "str", "required": True},
    "sglang": {"type": "str", "default": ""},
    "environment": {"type": "dict", "default": {}, "no_log": True},
}


def resolve_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_resolve: :func:`resolve` (the same in check mode: nothing it makes is kept)."""
    del check_mode
    return resolve(params)
