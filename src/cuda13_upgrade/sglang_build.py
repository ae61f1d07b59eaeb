"""How SGLang gets into the new venv: built from its git ref, or its release wheel.

``sglang_build_method`` (roles/sglang_build):

* ``source`` -- clone ``sglang_build_repo`` at ``sglang_build_version`` into
  ``sglang_build_src`` and install that tree editable, built against the new toolkit;
* ``wheel`` -- install the release's wheel, ``sglang==<sglang_build_version without the
  leading v>``, from the configured indexes (or the preflight's resolution of it) into the
  venv; nothing is cloned, nothing is compiled.

Both end in the same checks (:func:`import_problems`, and the role's check that no wheel of
the stack was replaced). Everything here is pure: the step reads ``pip show`` and an import
on the host, these functions decide (:mod:`cuda13_upgrade.steps.sglang`, action ``cuda13_sglang``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

__all__ = [
    "METHODS",
    "import_problems",
    "install_record",
    "parse_pip_show",
    "release_version",
    "requirement",
    "resolved_wheel",
    "wheel_plan",
]

#: The values of ``sglang_build_method``; the first is the default.
METHODS = ("source", "wheel")

# A release as SGLang tags it (v0.5.9) or as PyPI names it (0.5.9, 0.5.10rc1): digits with at
# least one dot, so that a commit id (hex, no dot) is never taken for one.
_RELEASE_RE = re.compile(r"^[vV]?(\d+(?:\.\d+)+(?:[._-]?(?:a|b|rc|post|dev)\.?\d*)*)$")


def release_version(ref: str) -> str | None:
    """The PEP 440 version a ref names: ``v0.5.9`` -> ``0.5.9``; None for a commit or branch.

    Args:
        ref: ``sglang_build_version``, a tag (``v0.5.9``), a version (``0.5.9``) or a commit.

    Returns:
        The normalized version (``packaging``), or None when ``ref`` is not a release version
        (no dot, a local label such as ``+cu130``, or not PEP 440).
    """
    match = _RELEASE_RE.match(str(ref).strip())
    if not match:
        return None
    try:
        return str(Version(match.group(1)))
    except InvalidVersion:
        return None


def _method(method: Any) -> str:
    if method not in METHODS:
        raise ValueError(f"sglang_build_method must be one of {list(METHODS)}, got {method!r}")
    return str(method)


def requirement(method: str, repo: str, ref: str) -> str:
    """The PEP 508 requirement that names the SGLang release the run installs.

    ``source``: ``sglang @ git+<repo>@<ref>#subdirectory=python``, from which pip's resolver
    reads the release's own ``python/pyproject.toml``; ``wheel``: ``sglang==<version>``, whose
    requirements pip reads from the wheel's metadata on the index.

    Raises:
        ValueError: an unknown method, or ``wheel`` with a ref that names no release.
    """
    if _method(method) == "source":
        return f"sglang @ git+{repo}@{ref}#subdirectory=python"
    version = release_version(ref)
    if version is None:
        raise ValueError(
            f"sglang_build_version {ref!r} names no release (vX.Y.Z), so there is no wheel to install "
            "for sglang_build_method=wheel; give a release tag or use sglang_build_method=source"
        )
    return f"sglang=={version}"


def parse_pip_show(text: str) -> dict[str, str | None]:
    """The fields of ``pip show [--files] sglang`` that say what is installed, and how.

    Returns:
        ``{"name", "version", "location", "editable"}`` (``editable``: pip's "Editable project
        location", None for a wheel install); ``{}`` when ``text`` shows no distribution.
    """
    fields: dict[str, str] = {}
    for line in str(text or "").splitlines():
        if line.startswith((" ", "\t")) or ":" not in line:
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    if not fields.get("name"):
        return {}
    return {
        "name": fields["name"],
        "version": fields.get("version") or None,
        "location": fields.get("location") or None,
        "editable": fields.get("editable project location") or None,
    }


def wheel_plan(show: Mapping[str, Any] | None, ref: str) -> dict[str, Any]:
    """Whether the wheel method installs, and whether something must go first.

    Args:
        show: :func:`parse_pip_show` of the venv's sglang (``{}`` when none is installed).
        ref: ``sglang_build_version``.

    Returns:
        ``{"needed": bool, "remove_first": bool, "reason": str}``: the release's wheel is
        installed when no sglang is, another version is, or an editable tree is (a source
        build of an earlier run, which pip would take as satisfying ``sglang==<version>``
        and keep: it is removed first).
    """
    wanted = release_version(ref)
    if wanted is None:
        raise ValueError(f"sglang_build_version {ref!r} names no release to install as a wheel")
    show = dict(show or {})
    if not show:
        return {"needed": True, "remove_first": False, "reason": "no sglang in the venv"}
    if show.get("editable"):
        return {
            "needed": True,
            "remove_first": True,
            "reason": f"sglang {show.get('version')} is installed editable from {show['editable']}",
        }
    try:
        same = Version(str(show.get("version"))) == Version(wanted)
    except InvalidVersion:
        same = False
    if not same:
        return {
            "needed": True,
            "remove_first": True,
            "reason": f"sglang {show.get('version')} is installed, not {wanted}",
        }
    return {"needed": False, "remove_first": False, "reason": f"the sglang {wanted} wheel is installed"}


def resolved_wheel(resolved: Any, ref: str) -> list[dict[str, Any]]:
    """The release's wheel in the preflight's resolved set, as a one-entry set, else ``[]``.

    Args:
        resolved: ``cu130_wheels_resolved_target`` (``cuda13_upgrade.resolve.resolved_set``), or
            None when the preflight resolved nothing.
        ref: ``sglang_build_version``.

    Returns:
        ``[{"name": "sglang", "version", "url", "sha256"}]`` when the set holds sglang at the
        release's version as a wheel file (not a git URL: a resolution made for a source build),
        for :func:`cuda13_upgrade.resolve.resolved_requirements`; otherwise ``[]`` (the wheel is
        then installed from the indexes by name and version).
    """
    wanted = release_version(ref)
    found = []
    for item in resolved or []:
        if not isinstance(item, Mapping) or item.get("name") != "sglang":
            continue
        url = str(item.get("url") or "")
        try:
            same = wanted is not None and Version(str(item.get("version"))) == Version(wanted)
        except InvalidVersion:
            same = False
        if same and url.split("#", 1)[0].endswith(".whl"):
            found.append(dict(item))
    return found[:1]


def _under(path: str, directory: str) -> bool:
    return posixpath.normpath(str(path)).startswith(posixpath.normpath(str(directory)).rstrip("/") + "/")


def import_problems(imported: Mapping[str, Any], method: str, ref: str, src: str, venv: str) -> list[str]:
    """What is wrong with the SGLang the new venv imports, for either method.

    Args:
        imported: ``{"version": sglang.__version__, "file": sglang.__file__,
            "dist": importlib.metadata.version("sglang")}`` read with the venv's python.
        method: ``sglang_build_method``.
        ref: ``sglang_build_version``.
        src: ``sglang_build_src``.
        venv: ``sglang_build_venv``.

    Returns:
        One sentence per problem, ``[]`` when none:

        * ``source``: sglang imports from the new tree (``src``). Its version is not compared
          with the ref: SGLang's setuptools-scm derives it from the newest ``v*.*.*`` tag of the
          clone (``git_describe_command`` of its pyproject.toml), not the checked-out one.
        * ``wheel``: sglang imports from the venv itself, from no tree (``src``), and both
          ``sglang.__version__`` and the installed distribution are the release's version.
    """
    file = str(imported.get("file") or "")
    if _method(method) == "source":
        if not _under(file, src):
            return [f"sglang in {venv} imports from {file or '?'}, not from sglang_build_src={src}"]
        return []
    problems = []
    if not _under(file, venv) or _under(file, src):
        problems.append(f"sglang in {venv} imports from {file or '?'}, not from the venv's own site-packages")
    wanted = release_version(ref)
    for what, value in (
        ("sglang.__version__", imported.get("version")),
        ("its distribution", imported.get("dist")),
    ):
        try:
            same = wanted is not None and Version(str(value)) == Version(wanted)
        except InvalidVersion:
            same = False
        if not same:
            problems.append(
                f"{what} in {venv} is {value!r}, not {wanted or ref!r} (sglang_build_version={ref})"
            )
    return problems


def install_record(
    previous: Mapping[str, Any] | None, method: str, ref: str, repo: str, src: str, venv: str
) -> dict[str, Any]:
    """The host's record of the sglang_build step (``sglang_build_record``), for the rollback.

    Written before the step changes anything, like the toolkit step's apt record, and merged
    with the record earlier runs left: a rollback that removes the new stack
    (``rollback_remove_new_stack``) removes every path the record names, so that a tree an
    earlier source build cloned goes too after a later run installed the wheel.

    Args:
        previous: the record on the host, ``{}`` or None when there is none.
        method, ref, repo, src, venv: ``sglang_build_method``, ``_version``, ``_repo``,
            ``_src``, ``_venv``.

    Returns:
        ``{"method", "version", "requirement", "venv", "src", "paths"}``: ``requirement`` what
        pip installs (``sglang==0.5.9``, or the git ref of a source build); ``src`` the tree
        (None for the wheel, which clones nothing); ``paths`` the venv and the tree of this
        run and of the earlier ones, in order, each once.
    """
    method = _method(method)
    mine = [venv, src] if method == "source" else [venv]
    earlier = [p for p in (previous or {}).get("paths") or [] if isinstance(p, str) and p]
    return {
        "method": method,
        "version": ref,
        "requirement": requirement(method, repo, ref),
        "venv": venv,
        "src": src if method == "source" else None,
        "paths": list(dict.fromkeys([*earlier, *mine])),
    }
