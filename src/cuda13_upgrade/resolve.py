"""Whether a set of pinned distributions resolves against their real metadata.

A *pin set* is what an inventory installs into the new venv, e.g.
``["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130", "flashinfer-python==0.6.3"]``, plus the
requirements of the SGLang release built into it (its ``python/pyproject.toml``
``[project].dependencies``). *Metadata* is, per pinned distribution, its real ``Requires-Dist``
lines (core metadata, PEP 566), e.g. from ``sandbox/mirror/records/``.

Rules (PEP 440 and PEP 508, as pip's resolver applies them, evaluated with
``packaging``):

* a requirement on a pinned distribution holds when the pinned version is in its specifier
  set; a specifier without a local label matches any local label (``torch==2.9.1`` accepts
  ``2.9.1+cu130``), pre-releases included;
* a requirement whose environment marker is false for the target (Linux x86_64, CPython of
  ``python_version``) does not apply; ``extra`` markers apply only for the extras requested;
* requirements on distributions outside the pin set are not judged here (pip resolves them
  from the index).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from cuda13_upgrade.errors import Cuda13Error

__all__ = [
    "Conflict",
    "ResolutionFailure",
    "TARGET_ENVIRONMENT",
    "parse_pip_resolution_error",
    "pin_conflicts",
    "pinned_versions",
    "refusal_message",
    "resolution_leaders",
    "resolved_requirements",
    "resolved_set",
]

# The target of the upgrade: a Linux x86_64 host with CPython (python_version set per call).
TARGET_ENVIRONMENT: dict[str, str] = {
    "platform_system": "Linux",
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


@dataclass(frozen=True)
class Conflict:
    """One requirement that the pin set does not satisfy.

    ``required_by`` is ``"sglang 0.5.9"`` or ``"flashinfer-python 0.6.3"``; ``requirement`` the
    real ``Requires-Dist`` line; ``pinned`` the pin it contradicts (``"torch==2.10.0+cu130"``).
    """

    required_by: str
    requirement: str
    pinned: str

    def __str__(self) -> str:
        return f"{self.required_by} requires {self.requirement}, but the pins install {self.pinned}"


def pinned_versions(
    pins: Iterable[str], option: str = "cu130_wheels_requirements"
) -> dict[str, tuple[str, set[str]]]:
    """``["flashinfer-python[cu13]==0.7.2"]`` -> ``{"flashinfer-python": ("0.7.2", {"cu13"})}``.

    Raises:
        Cuda13Error: a pin that is not ``name==version`` (naming ``option``).
    """
    out: dict[str, tuple[str, set[str]]] = {}
    for pin in pins:
        try:
            req = Requirement(pin)
        except InvalidRequirement as exc:
            raise Cuda13Error("not a requirement", pin, option=option, remedy="write name==version") from exc
        exact = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(exact) != 1:
            raise Cuda13Error(
                "not an exact pin",
                pin,
                option=option,
                remedy="pin one version: name==version (with its local label)",
            )
        out[canonicalize_name(req.name)] = (exact[0], set(req.extras))
    return out


def pin_conflicts(
    pins: Iterable[str],
    metadata: Mapping[str, Iterable[str]],
    *,
    sglang: tuple[str, Iterable[str]] | None = None,
    python_version: str = "3.11",
) -> list[Conflict]:
    """The requirements among ``pins`` (and of ``sglang``) that the pinned versions break.

    Args:
        pins: exact pins, ``name==version`` (extras allowed).
        metadata: normalized name of each pinned distribution -> its ``Requires-Dist`` lines
            (a distribution without an entry contributes no requirements).
        sglang: ``(version, dependencies)`` of the SGLang release to build, or None.
        python_version: ``"3.11"``: the host Python, for markers.

    Returns:
        One :class:`Conflict` per unsatisfied requirement, in the order found; ``[]`` when the
        pin set is coherent.
    """
    pinned = pinned_versions(pins)
    sources: list[tuple[str, Iterable[str], set[str]]] = [
        (f"{name} {version}", metadata.get(name, ()), extras) for name, (version, extras) in pinned.items()
    ]
    if sglang is not None:
        sources.insert(0, (f"sglang {sglang[0]}", sglang[1], set()))
    conflicts: list[Conflict] = []
    for required_by, lines, extras in sources:
        for line in lines:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name not in pinned or not _applies(req, extras, python_version):
                continue
            version = pinned[name][0]
            if not req.specifier.contains(Version(version), prereleases=True):
                conflicts.append(Conflict(required_by, line, f"{name}=={version}"))
    return conflicts


def _applies(req: Requirement, extras: set[str], python_version: str) -> bool:
    if req.marker is None:
        return True
    env = dict(TARGET_ENVIRONMENT, python_version=python_version, python_full_version=f"{python_version}.0")
    return any(req.marker.evaluate(dict(env, extra=e)) for e in (extras or {""}))


# -- pip's resolver output -----------------------------------------------------------------

# pip (>= 20.3, src/pip/_internal/resolution/resolvelib/factory.py) reports an impossible
# resolution as "Cannot install A and B because these package versions have conflicting
# dependencies." followed by "The conflict is caused by:" and one indented line per cause
# ("The user requested torch==2.10.0", "sglang 0.5.9 depends on torch==2.9.1"); a pin no index
# has as "No matching distribution found for torch==2.99.0+cu130", after "Could not find a
# version that satisfies the requirement ... (from versions: ...)".
_CAUSES = re.compile(r"The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)")
_MISSING = re.compile(r"No matching distribution found for (\S+)")
_FROM_VERSIONS = re.compile(
    r"Could not find a version that satisfies the requirement (\S+) "
    r"\(from versions: ([^)]*)\)"
)

RESOLVE_OPTIONS = "cu130_wheels_requirements, sglang_build_version"


@dataclass(frozen=True)
class ResolutionFailure:
    """Why pip's resolver refused a target.

    ``causes``: pip's cause lines verbatim (``"sglang 0.5.9 depends on torch==2.9.1"``);
    ``missing``: the requirement no index has a version of, with the versions it has
    (``available``, as pip lists them; ``"none"`` when pip lists none).
    """

    causes: tuple[str, ...] = ()
    missing: str | None = None
    available: str | None = None

    def message(self) -> str:
        """One paragraph naming the conflicting requirements and the options to change."""
        if self.causes:
            what = "the target stack does not resolve: " + "; ".join(self.causes)
        elif self.missing:
            what = f"no index has {self.missing} (versions there: {self.available or 'none'})"
        else:
            what = "pip's resolver refused the target stack"
        return (
            f"{what}. Change {RESOLVE_OPTIONS}: pin the versions the SGLang release requires "
            "(its python/pyproject.toml at that ref), or choose the release that requires your pins."
        )


def parse_pip_resolution_error(text: str) -> ResolutionFailure | None:
    """Read pip's refusal from its stderr (``pip install --dry-run --report -``).

    Args:
        text: pip's stderr, as printed (``ERROR:`` lines and the indented cause lines).

    Returns:
        A :class:`ResolutionFailure`, or None when ``text`` holds no resolver refusal (a
        network error, for instance, is not one).
    """
    text = text.replace("\r\n", "\n")
    match = _CAUSES.search(text)
    if match:
        causes = tuple(line.strip() for line in match.group(1).splitlines() if line.strip())
        return ResolutionFailure(causes=causes)
    missing = _MISSING.search(text)
    if missing:
        versions = _FROM_VERSIONS.search(text)
        return ResolutionFailure(missing=missing.group(1), available=versions.group(2) if versions else None)
    return None


def refusal_message(stderr: str) -> str:
    """The message for a host whose target pip refused: the parsed reason, else pip's last lines.

    Args:
        stderr: pip's stderr of ``pip install --dry-run --report -``.
    """
    failure = parse_pip_resolution_error(stderr)
    if failure is not None:
        return failure.message()
    tail = " ".join(line.strip() for line in stderr.strip().splitlines()[-3:])
    return (
        f"pip's resolver failed on the target stack: {tail} Check the indexes "
        "(cuda13_wheels_index_url, cuda13_wheels_extra_index_urls) and "
        f"{RESOLVE_OPTIONS}."
    )


def resolved_set(report: dict) -> list[dict]:
    """The distributions of a pip installation report (``--report``, format version 1).

    Args:
        report: the parsed JSON report.

    Returns:
        ``[{"name": "torch", "version": "2.9.1+cu130", "url": "...", "sha256": "..." or None}]``,
        sorted by name: the run's target, exact versions and the hashes the index gave.

    Raises:
        ValueError: ``report`` is not a pip installation report.
    """
    if not isinstance(report, dict) or not isinstance(report.get("install"), list):
        raise ValueError(f"not a pip installation report (no 'install' list): {str(report)[:200]!r}")
    out = []
    for item in report["install"]:
        meta = item.get("metadata", {})
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        out.append(
            {
                "name": canonicalize_name(meta.get("name", "")),
                "version": meta.get("version"),
                "url": info.get("url"),
                "sha256": hashes.get("sha256"),
            }
        )
    return sorted(out, key=lambda d: d["name"])


def resolved_requirements(resolved: list[dict], exclude: Iterable[str] = ()) -> str:
    """The requirements file that installs exactly a resolved set (:func:`resolved_set`).

    One ``name==version`` line per distribution, sorted by name, each with
    ``--hash=sha256:<hex>`` when every distribution has a sha256 (pip's hash-checking mode
    applies to the whole file once one line has a hash, so a set with a distribution the index
    gave no hash for is written without hashes). Install it with ``--no-deps``: the set is
    already closed under its dependencies (pip's resolver made it).

    Args:
        resolved: ``[{"name", "version", "sha256" (hex or None), ...}]``.
        exclude: names of distributions to leave out (``["sglang"]``: built by sglang_build).

    Returns:
        The file's text, ending in a newline; ``""`` when nothing is left.

    Raises:
        ValueError: an entry without a name or version, or a sha256 that is not 64 hex digits.
    """
    skip = {canonicalize_name(name) for name in exclude}
    entries = []
    for item in resolved:
        if not isinstance(item, dict) or not item.get("name") or not item.get("version"):
            raise ValueError(f"not a resolved distribution (name and version): {item!r}")
        if canonicalize_name(item["name"]) in skip:
            continue
        sha = item.get("sha256")
        if sha is not None and not re.fullmatch(r"[0-9a-f]{64}", str(sha)):
            raise ValueError(f"not a sha256 (64 hex digits) for {item['name']}: {sha!r}")
        entries.append((canonicalize_name(item["name"]), str(item["version"]), sha))
    entries.sort()
    hashed = all(sha for _, _, sha in entries)
    return "".join(
        f"{name}=={version}" + (f" --hash=sha256:{sha}" if hashed else "") + "\n"
        for name, version, sha in entries
    )


def resolution_leaders(keys: Mapping[str, str], hosts: Iterable[str]) -> dict[str, str]:
    """Which host resolves for which: one resolution per distinct target of a run.

    Args:
        keys: host name -> the key of what its resolution reads (its pins, SGLang
            requirement, sources, pip arguments and Python, e.g. their JSON's sha1).
        hosts: the run's hosts in inventory order (the first of a key resolves for the rest).

    Returns:
        host -> the host whose resolution it installs (itself for the first of each key).

    Raises:
        ValueError: a host without a key.
    """
    first: dict[str, str] = {}
    out: dict[str, str] = {}
    for host in hosts:
        if host not in keys:
            raise ValueError(f"no resolution key for host {host!r}")
        out[host] = first.setdefault(keys[host], host)
    return out
