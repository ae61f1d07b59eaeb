"""CUDA version rules: toolkit releases, driver minimums, compute capabilities.

Sources (each rule below names the one it follows):

* NVIDIA, *CUDA Toolkit Release Notes*, section "CUDA Driver", Table 3
  "CUDA Toolkit and Corresponding Driver Versions" (Linux x86_64 column), read
  in the 13.2 Update 2 edition of the notes. It is the minimum driver for
  *every* feature of a toolkit release, PTX JIT compilation included.
* Same notes, Table 2 "CUDA Toolkit and Minimum Required Driver Version for
  CUDA Minor Version Compatibility" (13.x: >= 580; 12.x: >= 525.60.13 as printed
  in the 12.x editions, ">= 525" in the 13.x editions), and NVIDIA's *CUDA
  Compatibility* guide, "Minor Version Compatibility". Minor version
  compatibility lets an application built with a newer 13.x toolkit run on an
  older 13.x driver, *with a limited feature set*: PTX that the driver must JIT
  compile (flashinfer's JIT kernels, Triton) is not covered. So a stack that JIT
  compiles needs the release's own minimum from Table 3.
* NVIDIA, *CUDA GPU Compute Capability* (developer.nvidia.com/cuda-gpus), for the
  Blackwell compute capabilities.
* NVIDIA, *CUDA C++ Programming Guide*, "Binary Compatibility" and "PTX
  Compatibility", and the nvcc documentation of the ``a`` (architecture-specific)
  and ``f`` (family-specific) target suffixes, for :func:`arch_list_covers`.

Version strings in this module:

* toolkit release: ``"13.0"`` (GA) or ``"13.0.2"`` (13.0 Update 2), the numbering
  of NVIDIA's packages (``cuda-toolkit-13-0`` 13.0.2) and download pages. From
  CUDA 13.4 the third digit is a build number that starts at 1: 13.4 GA is
  versioned ``13.4.1`` and 13.4 Update 1 ``13.4.2`` (NVIDIA's archive lists
  docs.nvidia.com/cuda/archive/13.4.2/ as "CUDA Toolkit 13.4 Update 1");
  :func:`parse_toolkit_version` reads each release by its own numbering;
* driver version: ``"590.48.01"`` or ``"570.26"``, compared numerically part by
  part (``"570.124.06" > "570.26"``);
* compute capability: ``"12.0"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from packaging.version import InvalidVersion, Version

from cuda13_upgrade.errors import Cuda13Error, UnknownReleaseError

__all__ = [
    "BLACKWELL_COMPUTE_CAPABILITIES",
    "CUDA13_MIN_COMPUTE_CAPABILITY",
    "DEFAULT_ALLOWED_COMPUTE_CAPABILITIES",
    "BUILD_NUMBERED_FROM",
    "DRIVER_TABLE",
    "MIN_DRIVER_OPTION",
    "MINOR_VERSION_COMPATIBILITY",
    "CompatResult",
    "arch_list_covers",
    "driver_cuda_version_supports",
    "driver_supports",
    "known_releases",
    "parse_compute_capability",
    "parse_driver_version",
    "parse_toolkit_release",
    "parse_toolkit_version",
    "toolkit_version_from_package",
    "default_allowed_compute_capabilities",
    "min_compute_capability",
    "release_name",
    "release_string",
    "stack_driver_floor",
    "STACK_CUDA_COMPONENTS",
    "torch_cuda_arch_list",
]

#: The Ansible variable that overrides the driver table (documented in the role).
MIN_DRIVER_OPTION = "nvidia_driver_check_min_driver_version"

_TABLE3 = (
    "CUDA Toolkit Release Notes, 'CUDA Driver', Table 3 "
    "'CUDA Toolkit and Corresponding Driver Versions' (Linux x86_64)"
)
_TABLE2 = (
    "CUDA Toolkit Release Notes, 'CUDA Driver', Table 2 "
    "'CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility'"
)

#: Minimum Linux x86_64 driver per toolkit release, keyed by (major, minor, update).
#: Source: CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit and Corresponding
#: Driver Versions", 13.2 Update 2 edition. The two 13.3 rows (>= 610.43.02) could
#: only be cross-checked against third-party quotes of the 13.3 edition. 13.0
#: Update 3 (package 13.0.3-1) and 13.1 Update 2 (13.1.2-1) came after the 13.0
#: and 13.1 editions: their rows are the drivers their runfiles bundle
#: (cuda_13.0.3_580.126.20_linux.run, cuda_13.1.2_590.48.01_linux.run), which is
#: what Table 3 lists for every earlier update. Anything from 13.4 on is unknown
#: on purpose: those toolkits no longer bundle a driver, so the user states the
#: minimum (nvidia_driver_check_min_driver_version).
DRIVER_TABLE: dict[tuple[int, int, int], str] = {
    (12, 0, 0): "525.60.13",
    (12, 0, 1): "525.85.12",
    (12, 1, 0): "530.30.02",
    (12, 1, 1): "530.30.02",
    (12, 2, 0): "535.54.03",
    (12, 2, 1): "535.86.09",
    (12, 2, 2): "535.104.05",
    (12, 3, 0): "545.23.06",
    (12, 3, 1): "545.23.08",
    (12, 4, 0): "550.54.14",
    (12, 4, 1): "550.54.15",
    (12, 5, 0): "555.42.02",
    (12, 5, 1): "555.42.06",
    (12, 6, 0): "560.28.03",
    (12, 6, 1): "560.35.03",
    (12, 6, 2): "560.35.03",
    (12, 6, 3): "560.35.05",
    (12, 8, 0): "570.26",
    (12, 8, 1): "570.124.06",
    (12, 9, 0): "575.51.03",
    (12, 9, 1): "575.57.08",
    (13, 0, 0): "580.65.06",
    (13, 0, 1): "580.82.07",
    (13, 0, 2): "580.95.05",
    (13, 0, 3): "580.126.20",
    (13, 1, 0): "590.44.01",
    (13, 1, 1): "590.48.01",
    (13, 1, 2): "590.48.01",
    (13, 2, 0): "595.45.04",
    (13, 2, 1): "595.58.03",
    (13, 2, 2): "595.71.05",
    (13, 3, 0): "610.43.02",
    (13, 3, 1): "610.43.02",
}

#: Minimum driver for CUDA minor version compatibility, per toolkit major version.
#: Source: CUDA Toolkit Release Notes, Table 2 (13.x: ">= 580"; 12.x: ">= 525.60.13"
#: in the 12.x editions) and the CUDA Compatibility guide. Not valid for PTX JIT.
MINOR_VERSION_COMPATIBILITY: dict[int, str] = {
    12: "525.60.13",
    13: "580",
}

#: Blackwell compute capabilities. Source: NVIDIA "CUDA GPU Compute Capability"
#: (developer.nvidia.com/cuda-gpus): 10.0 B200/GB200, 10.3 B300/GB300, 11.0 Jetson
#: T5000/T4000 (Thor), 12.0 RTX PRO 6000 Blackwell Server Edition and the other
#: RTX PRO / GeForce RTX 50 boards, 12.1 GB10 (DGX Spark).
BLACKWELL_COMPUTE_CAPABILITIES: tuple[str, ...] = ("10.0", "10.3", "11.0", "12.0", "12.1")

#: The Blackwell platforms per host architecture (``uname -m``). Source: as
#: above; 11.0 (Jetson Thor) and 12.1 (GB10, DGX Spark) are arm64 systems only,
#: so an x86_64 host that reports them is not one of these platforms, and
#: NVIDIA's x86_64 repository and wheels were never meant for it.
DEFAULT_ALLOWED_COMPUTE_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "x86_64": ("10.0", "10.3", "12.0"),
    "aarch64": ("10.0", "10.3", "11.0", "12.0", "12.1"),
}

#: The oldest compute capability each toolkit major release builds for. Source:
#: CUDA 13.0 release notes, "Deprecated or Dropped Features": CUDA 13 drops
#: offline compilation and library support for Maxwell, Pascal and Volta
#: (compute capability < 7.5); 12.x supports 5.0 and newer.
_MIN_COMPUTE_CAPABILITY: dict[int, tuple[int, int]] = {12: (5, 0), 13: (7, 5)}

#: CUDA 13's architecture floor: no allowed list lifts it.
CUDA13_MIN_COMPUTE_CAPABILITY = "7.5"

#: The first release whose third version digit is a build number (GA = 1).
BUILD_NUMBERED_FROM: tuple[int, int] = (13, 4)

_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
_DRIVER_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$")
_ARCH_SM_RE = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")
_ARCH_DOTTED_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+PTX)?$", re.IGNORECASE)


@dataclass(frozen=True)
class CompatResult:
    """The answer to "does this driver support that CUDA release?".

    Attributes:
        ok: True when the driver is new enough.
        required: the minimum driver version (or CUDA version, for
            :func:`driver_cuda_version_supports`) the rule asks for, e.g.
            ``"580.65.06"``.
        rule: which rule decided: ``"toolkit-driver"`` (release notes Table 3),
            ``"minor-version-compatibility"`` (Table 2), ``"override"`` (the
            ``nvidia_driver_check_min_driver_version`` setting) or
            ``"driver-cuda-version"`` (nvidia-smi's "CUDA Version").
        message: one sentence for a human, naming the values and the source.
        driver_version: the driver version (or driver CUDA version) checked.
        toolkit_release: the toolkit release checked, as given.
    """

    ok: bool
    required: str
    rule: str
    message: str
    driver_version: str
    toolkit_release: str

    def to_dict(self) -> dict[str, object]:
        """Return the result as a plain dict (for Ansible and JSON)."""
        return asdict(self)


def _require_str(value: object, what: str, option: str | None, example: str) -> str:
    if not isinstance(value, str):
        raise Cuda13Error(
            f"{what} must be a string, got {type(value).__name__}",
            value,
            option=option,
            remedy=f"write it as a quoted string such as '{example}' (an unquoted "
            f"YAML {example} is read as a number)",
        )
    return value.strip()


def parse_toolkit_version(value: str, *, option: str | None = "toolkit_release") -> tuple[int, int, int]:
    """Parse a toolkit release into ``(major, minor, update)``.

    Args:
        value: ``"13.0"`` (GA, update 0) or ``"13.0.2"`` (Update 2); from 13.4
            on, NVIDIA's build numbering: ``"13.4.1"`` is 13.4 GA, ``"13.4.2"``
            13.4 Update 1 (:data:`BUILD_NUMBERED_FROM`).
        option: the option name to quote in error messages.

    Returns:
        A tuple of three ints, e.g. ``(13, 0, 2)``; ``"13.4.2"`` gives
        ``(13, 4, 1)``.

    Raises:
        Cuda13Error: (a ``ValueError``) for anything else: ``"13"``,
            ``"cu130"``, ``"13.x"``, ``""``, or a non-string such as the float
            ``13.0`` that an unquoted YAML value becomes.
    """
    text = _require_str(value, "CUDA toolkit release", option, "13.0")
    match = _RELEASE_RE.match(text)
    if match is None:
        raise Cuda13Error(
            "CUDA toolkit release is not of the form MAJOR.MINOR or MAJOR.MINOR.UPDATE",
            value,
            option=option,
            remedy="give the release as '13.0' (GA) or '13.0.2' (13.0 Update 2); "
            "'cu130' is a wheel label, not a release",
        )
    try:
        release = Version(text).release
    except InvalidVersion as exc:  # pragma: no cover - the regex admits only valid versions
        raise Cuda13Error("CUDA toolkit release is invalid", value, option=option) from exc
    major, minor = release[0], release[1]
    update = release[2] if len(release) > 2 else 0
    if (major, minor) >= BUILD_NUMBERED_FROM and len(release) > 2:
        if update < 1:
            raise Cuda13Error(
                f"CUDA {major}.{minor} versions count from {major}.{minor}.1 (GA); the third "
                "digit is a build number",
                value,
                option=option,
                remedy=f"write '{major}.{minor}' or '{major}.{minor}.1' for GA, "
                f"'{major}.{minor}.2' for Update 1",
            )
        update -= 1
    return major, minor, update


def toolkit_version_from_package(
    value: str, *, option: str | None = "cuda13_toolkit_package_version"
) -> tuple[int, int, int]:
    """The release an apt package version of ``cuda-toolkit-X-Y`` installs.

    ``"13.0.3-1"`` -> ``(13, 0, 3)`` (13.0 Update 3); ``"13.4.1-1"`` ->
    ``(13, 4, 0)`` (13.4 GA, build numbering); the Debian revision after the
    last ``-`` is dropped, an epoch (``1:``) too.

    Raises:
        Cuda13Error: a version whose upstream part is not a release.
    """
    text = _require_str(value, "CUDA toolkit package version", option, "13.0.2-1")
    upstream = text.split(":", 1)[-1].rsplit("-", 1)[0] if "-" in text else text.split(":", 1)[-1]
    return parse_toolkit_version(upstream, option=option)


def parse_toolkit_release(value: str, *, option: str | None = "toolkit_release") -> tuple[int, int]:
    """Parse a toolkit release into ``(major, minor)``.

    ``parse_toolkit_release("13.0") == (13, 0)`` and
    ``parse_toolkit_release("13.0.2") == (13, 0)`` (the update is dropped; use
    :func:`parse_toolkit_version` to keep it).

    Raises:
        Cuda13Error: for ``"13"``, ``"cu130"``, ``"13.x"``, ``""`` and non-strings,
            naming the value and ``option``.
    """
    major, minor, _update = parse_toolkit_version(value, option=option)
    return major, minor


def release_name(version: tuple[int, int, int]) -> str:
    """Name a toolkit release the way the release notes do: ``"CUDA 13.0 Update 2"``."""
    major, minor, update = version
    return f"CUDA {major}.{minor} " + ("GA" if update == 0 else f"Update {update}")


def release_string(version: tuple[int, int, int]) -> str:
    """Write a release as NVIDIA's packages do: ``(13, 0, 2)`` -> ``"13.0.2"``,
    ``(13, 0, 0)`` -> ``"13.0"``, ``(13, 4, 1)`` -> ``"13.4.2"`` (build numbering)."""
    major, minor, update = version
    if (major, minor) >= BUILD_NUMBERED_FROM:
        return f"{major}.{minor}.{update + 1}"
    return f"{major}.{minor}" if update == 0 else f"{major}.{minor}.{update}"


def known_releases() -> list[str]:
    """Return the releases in :data:`DRIVER_TABLE` as ``"13.0"`` / ``"13.0.2"`` strings, sorted."""
    return [release_string(version) for version in sorted(DRIVER_TABLE)]


def min_compute_capability(toolkit_release: str, *, option: str | None = "toolkit_release") -> str | None:
    """The oldest compute capability a toolkit release supports: ``"13.0"`` -> ``"7.5"``.

    Source: the release notes' "Deprecated or Dropped Features" (CUDA 13 drops
    Maxwell, Pascal and Volta). ``None`` for a major release without a row.

    Raises:
        Cuda13Error: a malformed release.
    """
    major, _minor, _update = parse_toolkit_version(toolkit_release, option=option)
    floor = _MIN_COMPUTE_CAPABILITY.get(major)
    return None if floor is None else _cc_str(floor)


def default_allowed_compute_capabilities(architecture: str | None) -> list[str]:
    """The default allowed list for a host architecture (``uname -m``).

    ``"x86_64"`` (also ``"amd64"``) -> ``["10.0", "10.3", "12.0"]``;
    ``"aarch64"`` (also ``"arm64"``) -> the five Blackwell capabilities. An
    unknown or missing architecture gets the x86_64 list (NVIDIA's x86_64
    repository is this package's default).
    """
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(str(architecture or ""), str(architecture or ""))
    return list(
        DEFAULT_ALLOWED_COMPUTE_CAPABILITIES.get(arch, DEFAULT_ALLOWED_COMPUTE_CAPABILITIES["x86_64"])
    )


def parse_driver_version(value: str, *, option: str | None = "driver_version") -> tuple[int, int, int]:
    """Parse an NVIDIA Linux driver version for numeric comparison.

    Args:
        value: ``"590.48.01"``, ``"580.65.06"``, ``"570.86.15"`` or a two-part
            version such as ``"570.26"`` or ``"580.142"``.
        option: the option name to quote in error messages.

    Returns:
        ``(branch, minor, patch)`` as ints, padded with 0: ``"570.26"`` gives
        ``(570, 26, 0)``, so ``"570.124.06" > "570.26"`` compares as numbers.

    Raises:
        Cuda13Error: for ``""``, ``"N/A"``, ``"590"``, ``"abc"`` and non-strings.
    """
    text = _require_str(value, "driver version", option, "590.48.01")
    match = _DRIVER_RE.match(text)
    if match is None:
        raise Cuda13Error(
            "driver version is not of the form BRANCH.MINOR[.PATCH]",
            value,
            option=option,
            remedy="pass the 'driver_version' that nvidia-smi reports, e.g. '590.48.01'; "
            "'N/A' or an empty value means nvidia-smi could not reach the driver",
        )
    branch, minor, patch = match.groups()
    return int(branch), int(minor), int(patch or 0)


def driver_supports(
    driver_version: str,
    toolkit_release: str,
    *,
    jit: bool = True,
    min_driver_version: str | None = None,
    release_option: str = "toolkit_release",
    driver_option: str = "driver_version",
    min_driver_option: str = MIN_DRIVER_OPTION,
) -> CompatResult:
    """Decide whether an installed driver supports a CUDA toolkit release.

    Rules, in order:

    1. ``min_driver_version`` given: it replaces the table (rule ``"override"``).
    2. The release's own minimum from the release notes' Table 3 "CUDA Toolkit and
       Corresponding Driver Versions" (rule ``"toolkit-driver"``). ``"13.0"`` means
       13.0 GA (>= 580.65.06); ``"13.0.2"`` means 13.0 Update 2 (>= 580.95.05).
       Note that NVIDIA's ``cuda-toolkit-13-0`` package installs the latest update,
       so pass the update you will really install.
    3. Only when ``jit`` is False: CUDA minor version compatibility, Table 2
       (13.x >= 580, 12.x >= 525.60.13; rule ``"minor-version-compatibility"``).
       It does not cover PTX JIT compilation (flashinfer JIT, Triton), which is
       why ``jit=True`` (the default) requires rule 2.

    Args:
        driver_version: installed driver, e.g. ``"590.48.01"``.
        toolkit_release: target release, ``"13.0"`` or ``"13.0.2"``.
        jit: whether the stack JIT-compiles PTX (SGLang with flashinfer and
            Triton does).
        min_driver_version: explicit minimum that overrides the table, the
            value of ``nvidia_driver_check_min_driver_version``.
        release_option, driver_option, min_driver_option: option names quoted
            in error messages.

    Returns:
        A :class:`CompatResult`; ``ok`` is False when the driver is too old.

    Raises:
        Cuda13Error: malformed driver version, release or override.
        UnknownReleaseError: the release is not in :data:`DRIVER_TABLE` (and,
            with ``jit=False``, its major version has no minor version
            compatibility row), and no override is given.
    """
    driver = parse_driver_version(driver_version, option=driver_option)
    release = parse_toolkit_version(toolkit_release, option=release_option)
    name = release_name(release)

    if min_driver_version is not None and min_driver_version != "":
        required = parse_driver_version(min_driver_version, option=min_driver_option)
        ok = driver >= required
        verb = "meets" if ok else "is older than"
        message = (
            f"driver {driver_version} {verb} {min_driver_version}, the minimum set by "
            f"{min_driver_option} for {name}"
        )
        if not ok:
            message += f"; upgrade the driver or lower {min_driver_option}"
        return CompatResult(ok, min_driver_version, "override", message, driver_version, toolkit_release)

    table_min = DRIVER_TABLE.get(release)
    if table_min is not None:
        required_t = parse_driver_version(table_min, option=None)
        if driver >= required_t:
            return CompatResult(
                True,
                table_min,
                "toolkit-driver",
                f"driver {driver_version} supports {name} (needs >= {table_min}; {_TABLE3})",
                driver_version,
                toolkit_release,
            )
        if jit:
            message = (
                f"driver {driver_version} is older than {table_min}, the minimum for {name} "
                f"({_TABLE3}); this stack JIT-compiles PTX (flashinfer, Triton), which CUDA "
                f"minor version compatibility does not cover; upgrade the driver to "
                f"{table_min} or newer, or target a release this driver supports"
            )
            return CompatResult(False, table_min, "toolkit-driver", message, driver_version, toolkit_release)

    if jit:
        raise UnknownReleaseError(
            f"{name} is not in the driver table (it knows {known_releases()[0]} to {known_releases()[-1]})",
            toolkit_release,
            option=release_option,
            remedy=f"look up the minimum Linux x86_64 driver for this release in the CUDA "
            f"Toolkit Release Notes ('CUDA Toolkit and Corresponding Driver Versions') and set "
            f"{min_driver_option} to it",
        )

    mvc = MINOR_VERSION_COMPATIBILITY.get(release[0])
    if mvc is None:
        raise UnknownReleaseError(
            f"CUDA {release[0]}.x has no minor version compatibility row and {name} is not "
            "in the driver table",
            toolkit_release,
            option=release_option,
            remedy=f"set {min_driver_option} to the minimum driver NVIDIA documents for it",
        )
    required_m = parse_driver_version(mvc + ("" if "." in mvc else ".0"), option=None)
    ok = driver >= required_m
    if ok:
        message = (
            f"driver {driver_version} runs {name} through CUDA minor version compatibility "
            f"(needs >= {mvc}; {_TABLE2}); PTX JIT compilation is not covered"
        )
    else:
        message = (
            f"driver {driver_version} is older than {mvc}, the minimum for CUDA "
            f"{release[0]}.x minor version compatibility ({_TABLE2}); upgrade the driver"
        )
    return CompatResult(ok, mvc, "minor-version-compatibility", message, driver_version, toolkit_release)


def driver_cuda_version_supports(
    driver_cuda: str,
    toolkit_release: str,
    *,
    jit: bool = True,
    release_option: str = "toolkit_release",
) -> CompatResult:
    """Check nvidia-smi's "CUDA Version" against a toolkit release.

    The ``CUDA Version: 13.1`` in the header of ``nvidia-smi`` is the newest CUDA
    release the installed driver supports natively (CUDA Compatibility guide).
    A toolkit release up to it is supported (rule ``"driver-cuda-version"``).
    A newer minor release of the same major version runs only through minor
    version compatibility, which is accepted only when ``jit`` is False.

    Args:
        driver_cuda: the header's CUDA version, e.g. ``"13.1"``.
        toolkit_release: ``"13.0"`` or ``"13.0.2"``.
        jit: whether the stack JIT-compiles PTX.

    Raises:
        Cuda13Error: when either version is malformed (``"N/A"`` included: nvidia-smi
            prints it when libcuda is not found).
    """
    drv = parse_toolkit_release(driver_cuda, option="driver CUDA Version")
    rel = parse_toolkit_release(toolkit_release, option=release_option)
    target = f"{rel[0]}.{rel[1]}"
    if drv >= rel:
        return CompatResult(
            True,
            target,
            "driver-cuda-version",
            f"the driver supports up to CUDA {driver_cuda}, which covers {target}",
            driver_cuda,
            toolkit_release,
        )
    if not jit and drv[0] == rel[0]:
        return CompatResult(
            True,
            f"{rel[0]}.0",
            "minor-version-compatibility",
            f"the driver supports up to CUDA {driver_cuda}; {target} runs through minor "
            "version compatibility, without PTX JIT",
            driver_cuda,
            toolkit_release,
        )
    return CompatResult(
        False,
        target,
        "driver-cuda-version",
        f"the driver supports up to CUDA {driver_cuda}, older than {target}; upgrade the "
        "driver or target an older release",
        driver_cuda,
        toolkit_release,
    )


def parse_compute_capability(value: str, *, option: str | None = "compute_capability") -> tuple[int, int]:
    """Parse a compute capability: ``"12.0"`` -> ``(12, 0)``.

    Raises:
        Cuda13Error: for ``"12"``, ``"sm_120"``, ``"12.0a"``, ``""``, non-strings.
    """
    text = _require_str(value, "compute capability", option, "12.0")
    match = _CC_RE.match(text)
    if match is None:
        raise Cuda13Error(
            "compute capability is not of the form MAJOR.MINOR",
            value,
            option=option,
            remedy="use nvidia-smi's compute_cap notation, e.g. '12.0' for sm_120",
        )
    return int(match.group(1)), int(match.group(2))


def _cc_str(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


@dataclass(frozen=True)
class _Target:
    ptx: bool
    major: int
    minor: int
    suffix: str  # "", "a" or "f"

    def covers(self, cc: tuple[int, int], allow_ptx: bool) -> bool:
        mine = (self.major, self.minor)
        if self.suffix == "a":
            return cc == mine
        if self.suffix == "f" or not self.ptx:
            return cc[0] == self.major and cc[1] >= self.minor
        return allow_ptx and cc >= mine


def _parse_arch(entry: object) -> list[_Target]:
    if not isinstance(entry, str):
        raise Cuda13Error(
            "architecture list entry must be a string",
            entry,
            option="arch_list",
            remedy="use entries such as 'sm_120', 'compute_120' or '12.0+PTX'",
        )
    text = entry.strip()
    match = _ARCH_SM_RE.match(text)
    if match:
        kind, digits, suffix = match.groups()
        return [_Target(kind == "compute", int(digits[:-1]), int(digits[-1]), suffix)]
    match = _ARCH_DOTTED_RE.match(text)
    if match:
        major, minor, suffix, ptx = match.groups()
        targets = [_Target(False, int(major), int(minor), suffix)]
        if ptx:
            targets.append(_Target(True, int(major), int(minor), suffix))
        return targets
    raise Cuda13Error(
        "architecture list entry is not sm_XY, compute_XY or X.Y[+PTX]",
        entry,
        option="arch_list",
        remedy="use torch.cuda.get_arch_list() entries such as 'sm_120' or "
        "TORCH_CUDA_ARCH_LIST entries such as '12.0+PTX'",
    )


def arch_list_covers(
    arch_list: Iterable[str],
    capabilities: Iterable[str],
    *,
    allow_ptx: bool = False,
) -> list[str]:
    """Return the compute capabilities that a build's architecture list does not run on.

    Args:
        arch_list: what a build was compiled for, e.g. ``torch.cuda.get_arch_list()``
            (``["sm_90", "sm_100", "sm_120"]``), or TORCH_CUDA_ARCH_LIST entries
            (``["9.0", "12.0+PTX"]``). ``sm_XY`` is SASS; ``compute_XY`` is PTX;
            an ``a`` suffix (``sm_100a``) is architecture-specific, an ``f`` suffix
            (``sm_120f``) family-specific.
        capabilities: the GPUs' compute capabilities, e.g. ``["12.0"] * 8``.
        allow_ptx: count PTX that the driver would JIT-compile as coverage.
            Off by default: JIT-compiling a whole framework at start-up is not an
            acceptable way to serve on an inference host.

    Rules (CUDA C++ Programming Guide, "Binary Compatibility" / "PTX
    Compatibility"; nvcc docs for ``a``/``f``): SASS for X.y runs on X.z with
    z >= y; ``a`` targets run only on exactly X.y; ``f`` targets on the same
    major with z >= y; PTX for X.y can be JIT-compiled for any capability >= X.y.

    Returns:
        The uncovered capabilities, normalised (``"12.0"``), unique, sorted;
        an empty list when everything is covered.

    Raises:
        Cuda13Error: for a malformed entry in either list.
    """
    targets = [target for entry in arch_list for target in _parse_arch(entry)]
    caps = {parse_compute_capability(cc, option="capabilities") for cc in capabilities}
    missing = [cc for cc in caps if not any(t.covers(cc, allow_ptx) for t in targets)]
    return [_cc_str(cc) for cc in sorted(missing)]


def torch_cuda_arch_list(capabilities: Iterable[str]) -> str:
    """Build a TORCH_CUDA_ARCH_LIST value from GPU compute capabilities.

    ``torch_cuda_arch_list(["12.0"] * 8) == "12.0"`` and
    ``torch_cuda_arch_list(["12.0", "9.0", "12.0"]) == "9.0;12.0"``: sorted
    numerically, unique, joined with ``;`` (the separator PyTorch's
    ``torch.utils.cpp_extension`` splits on).

    Raises:
        Cuda13Error: for an empty list, a non-list string, or a malformed capability.
    """
    if isinstance(capabilities, str | bytes):
        raise Cuda13Error(
            "capabilities must be a list of strings, not one string",
            capabilities,
            option="capabilities",
            remedy="pass a list such as ['12.0']",
        )
    caps = sorted({parse_compute_capability(cc, option="capabilities") for cc in capabilities})
    if not caps:
        raise Cuda13Error(
            "no compute capability given",
            [],
            option="capabilities",
            remedy="pass the compute_cap of each GPU, e.g. ['12.0']",
        )
    return ";".join(_cc_str(cc) for cc in caps)


#: The distributions of a resolved target whose version is a CUDA release and so
#: sets a driver floor (normalised names, ``-cu12``/``-cu13`` suffix removed).
#: ``cuda-bindings`` / ``cuda-python`` are versioned by the CUDA release they bind
#: (NVIDIA/cutlass#2866: "13.0+ cuda-python requires 580+ driver").
STACK_CUDA_COMPONENTS: tuple[str, ...] = (
    "nvidia-cuda-runtime",
    "nvidia-nvjitlink",
    "nvidia-cuda-nvrtc",
    "cuda-bindings",
    "cuda-python",
)

_DIST_SUFFIX_RE = re.compile(r"-cu1\d$")
_COMPONENT_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)")


def _component_floor(name: str, version: str, release: tuple[int, int, int]) -> dict[str, object]:
    mvc = MINOR_VERSION_COMPATIBILITY.get(release[0])
    table = DRIVER_TABLE.get(release)
    cuda = release_name(release) if name == "cuda-toolkit" else f"CUDA {release[0]}.{release[1]}"
    label = (
        f"torch built for CUDA {release[0]}.{release[1]}" if name == "torch" else f"{name} {version} ({cuda})"
    )
    return {
        "component": name,
        "version": version,
        "release": release_string(release),
        "label": label,
        "mvc_floor": mvc,
        "jit_floor": table,
    }


def _driver_key(value: str) -> tuple[int, int, int]:
    return parse_driver_version(value if "." in value else value + ".0", option=None)


def stack_driver_floor(
    dists: Mapping[str, str | None] | None = None,
    *,
    torch_cuda: str | None = None,
    toolkit_release: str | None = None,
    jit: bool = True,
) -> dict[str, object]:
    """The minimum driver for every CUDA component of a resolved target, and who sets it.

    Each component's CUDA release gives two floors, from :data:`DRIVER_TABLE`
    (release notes Table 3: the release's own minimum, needed for PTX JIT) and
    :data:`MINOR_VERSION_COMPATIBILITY` (Table 2: the major's floor, enough to
    run prebuilt code, not PTX JIT). A component wheel's version names only its
    ``major.minor`` (``nvidia-cuda-runtime`` 13.0.96 is CUDA 13.0, release notes
    Table 1 "Component Versions"), so its JIT floor is that release's GA row;
    the apt toolkit's release may name its update (``"13.0.2"``).

    Args:
        dists: ``{distribution: version}`` of the resolved target (``pip freeze``
            names; ``-cu12``/``-cu13`` suffixes accepted); only
            :data:`STACK_CUDA_COMPONENTS` are read.
        torch_cuda: torch's CUDA build, ``torch.version.cuda`` (``"13.0"``).
        toolkit_release: the apt toolkit's release (``"13.0"`` or ``"13.0.2"``).
        jit: the stack JIT-compiles PTX (flashinfer, Triton): the floor is then
            the Table 3 one, else the Table 2 one.

    Returns:
        ``{"floor": "580.95.05" or None, "set_by": label,
        "rule": "toolkit-driver" | "minor-version-compatibility", "jit": bool,
        "mvc_floor": "580", "jit_floor": "580.95.05" or None,
        "unknown": [components whose release has no Table 3 row],
        "components": [{"component", "version", "release", "label", "mvc_floor",
        "jit_floor"}]}``; ``set_by`` is the label of the component with the highest
        floor (``"torch built for CUDA 13.0"``, ``"cuda-bindings 13.1.0 (CUDA 13.1)"``,
        ``"cuda-toolkit 13.0.2 (CUDA 13.0 Update 2)"``).
        ``floor`` is None when no component was given. With ``jit`` and a
        component whose release Table 3 does not list, the floor is the highest
        known one and ``unknown`` names the rest (set
        ``nvidia_driver_check_min_driver_version`` for them).

    Raises:
        Cuda13Error: a malformed ``torch_cuda`` or ``toolkit_release``.
    """
    rows: list[dict[str, object]] = []
    if torch_cuda:
        major, minor, _update = parse_toolkit_version(str(torch_cuda), option="torch.version.cuda")
        rows.append(_component_floor("torch", str(torch_cuda), (major, minor, 0)))
    for raw, version in sorted((dists or {}).items()):
        name = _DIST_SUFFIX_RE.sub("", re.sub(r"[-_.]+", "-", str(raw)).lower())
        match = _COMPONENT_RELEASE_RE.match(str(version or ""))
        if name in STACK_CUDA_COMPONENTS and match:
            release = (int(match.group(1)), int(match.group(2)), 0)
            rows.append(_component_floor(name, str(version), release))
    if toolkit_release:
        release = parse_toolkit_version(str(toolkit_release), option="toolkit_release")
        rows.append(_component_floor("cuda-toolkit", str(toolkit_release), release))

    def highest(key: str) -> dict[str, object] | None:
        known = [row for row in rows if row[key]]
        return max(known, key=lambda row: _driver_key(str(row[key])), default=None)

    mvc_row, jit_row = highest("mvc_floor"), highest("jit_floor")
    unknown = [f"{row['component']} {row['version']}" for row in rows if jit and not row["jit_floor"]]
    chosen, key, rule = (jit_row, "jit_floor", "toolkit-driver") if jit else (mvc_row, "mvc_floor", "")
    if not jit:
        rule = "minor-version-compatibility"
    elif mvc_row and (
        chosen is None or _driver_key(str(mvc_row["mvc_floor"])) > _driver_key(str(chosen["jit_floor"]))
    ):
        chosen, key, rule = mvc_row, "mvc_floor", "minor-version-compatibility"
    return {
        "floor": None if chosen is None else chosen[key],
        "set_by": None if chosen is None else chosen["label"],
        "rule": rule if chosen is not None else None,
        "jit": jit,
        "mvc_floor": None if mvc_row is None else mvc_row["mvc_floor"],
        "jit_floor": None if jit_row is None else jit_row["jit_floor"],
        "unknown": unknown,
        "components": rows,
    }
