"""Wheel versions of the serving stack: local labels, pip freeze, consistency.

The CUDA build of a wheel is in its PEP 440 *local version label*:
``torch 2.10.0+cu128`` is built for CUDA 12.8, ``flashinfer-jit-cache
0.5.3+cu130`` for CUDA 13.0. PyTorch's and the sgl-kernel / flashinfer
indexes name their CUDA variants this way (``https://download.pytorch.org/whl/cu130``).

The stack is consistent when torch, the SGLang kernel wheel (``sgl-kernel``, renamed
``sglang-kernel``) and ``flashinfer-jit-cache`` carry the same label (their C++/CUDA
extensions are built against one torch ABI and one CUDA runtime), and
``flashinfer-python``, ``flashinfer-cubin`` and ``flashinfer-jit-cache`` have the same
public version (flashinfer checks this at import and refuses mismatched caches).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlparse

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from cuda13_upgrade.errors import Cuda13Error, ParseError

__all__ = [
    "FLASHINFER_DISTRIBUTIONS",
    "KERNEL_DISTRIBUTIONS",
    "check_stack_consistency",
    "cuda_label",
    "cuda_tag_of_label",
    "local_label",
    "normalize_name",
    "parse_pip_freeze",
]

#: The SGLang kernel wheel, under its old and new distribution names.
KERNEL_DISTRIBUTIONS: tuple[str, ...] = ("sgl-kernel", "sglang-kernel")
#: The flashinfer distributions that must share one public version.
FLASHINFER_DISTRIBUTIONS: tuple[str, ...] = (
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
)

_LABEL_RE = re.compile(r"^cu(\d{2,3})$")
_RELEASE_RE = re.compile(r"^(\d+)\.(\d)$")
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PINNED_RE = re.compile(rf"^(?P<name>{_NAME})(?:\[[^\]]*\])?\s*===?\s*(?P<version>\S+)$")
_DIRECT_RE = re.compile(rf"^(?P<name>{_NAME})(?:\[[^\]]*\])?\s+@\s+(?P<url>\S+)$")
_EDITABLE_COMMENT_RE = re.compile(rf"^#.*\((?P<name>{_NAME})==(?P<version>[^)\s]+)\)\s*$")
_EGG_RE = re.compile(rf"[#&]egg=(?P<name>{_NAME})")


def normalize_name(name: str) -> str:
    """PEP 503 normalised distribution name: ``"SGL_Kernel"`` -> ``"sgl-kernel"``."""
    return canonicalize_name(name)


def local_label(version: str) -> str | None:
    """Return the local version label of a wheel version, or ``None`` if it has none.

    ``local_label("2.10.0+cu128") == "cu128"``, ``local_label("2.11.0.dev20251201+cu130")
    == "cu130"``, ``local_label("0.5.3") is None``.

    Raises:
        Cuda13Error: when ``version`` is not a PEP 440 version (the value is named).
    """
    if not isinstance(version, str):
        raise Cuda13Error(
            "wheel version must be a string",
            version,
            option="version",
            remedy="pass the version as pip reports it, e.g. '2.10.0+cu128'",
        )
    try:
        return Version(version).local
    except InvalidVersion:
        raise Cuda13Error(
            "not a PEP 440 version",
            version,
            option="version",
            remedy="pass the version as pip reports it, e.g. '2.10.0+cu128'",
        ) from None  # the message names the value already


def cuda_tag_of_label(label: str) -> str:
    """Turn a CUDA wheel label into its release: ``"cu130"`` -> ``"13.0"``.

    The last digit is the minor version (``cu118`` -> 11.8, ``cu92`` -> 9.2), the
    convention of the PyTorch indexes.

    Raises:
        Cuda13Error: for labels that are not ``cu`` + digits (``"cpu"``, ``"rocm6.4"``).
    """
    match = _LABEL_RE.match(label) if isinstance(label, str) else None
    if match is None:
        raise Cuda13Error(
            "not a CUDA wheel label of the form cuXYZ",
            label,
            option="label",
            remedy="use a label such as 'cu128' or 'cu130'; 'cpu' and 'rocm' builds have no CUDA",
        )
    digits = match.group(1)
    return f"{int(digits[:-1])}.{digits[-1]}"


def cuda_label(release: str) -> str:
    """Turn a CUDA release into its wheel label: ``"13.0"`` -> ``"cu130"``.

    Raises:
        Cuda13Error: for anything but MAJOR.MINOR with a one-digit minor.
    """
    match = _RELEASE_RE.match(release.strip()) if isinstance(release, str) else None
    if match is None:
        raise Cuda13Error(
            "not a CUDA release of the form MAJOR.MINOR",
            release,
            option="release",
            remedy="use a release such as '13.0'",
        )
    return f"cu{match.group(1)}{match.group(2)}"


def _version_from_url(url: str) -> str | None:
    filename = unquote(urlparse(url).path.rsplit("/", 1)[-1])
    try:
        return str(parse_wheel_filename(filename)[1])
    except InvalidWheelFilename:
        pass
    try:
        return str(parse_sdist_filename(filename)[1])
    except InvalidSdistFilename:
        return None


def parse_pip_freeze(text: str) -> dict[str, str | None]:
    """Parse ``pip freeze`` (or ``pip list --format=freeze``) output.

    Understood lines:

    * ``torch==2.10.0+cu128`` (and ``===``);
    * ``sgl-kernel @ file:///wheels/sgl_kernel-0.3.21%2Bcu130-cp310-abi3-manylinux2014_x86_64.whl``:
      the version is read from the wheel (or sdist) file name, else ``None``
      (e.g. ``@ git+https://...``);
    * ``-e git+https://github.com/sgl-project/sglang.git@<sha>#egg=sglang&subdirectory=python``;
    * ``# Editable install with no version control (sglang==0.5.8)`` followed by
      ``-e /opt/sglang/python``: the comment gives name and version;
    * other comments, blank lines and options (``--index-url ...``) are skipped.

    Returns:
        ``{normalised name: version or None}``, e.g. ``{"torch": "2.10.0+cu128",
        "sgl-kernel": "0.3.21+cu130", "sglang": None}``.

    Raises:
        ParseError: for a line of another shape, quoting it.
    """
    if not isinstance(text, str):
        raise ParseError("pip freeze output must be text", text, option="text", remedy="pass its stdout")
    dists: dict[str, str | None] = {}
    pending: tuple[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            comment = _EDITABLE_COMMENT_RE.match(line)
            pending = (comment.group("name"), comment.group("version")) if comment else None
            continue
        if line.startswith(("-e ", "--editable ", "--editable=")):
            target = line.split(None, 1)[1] if " " in line else line.split("=", 1)[1]
            egg = _EGG_RE.search(target)
            name = egg.group("name") if egg else (pending[0] if pending else None)
            if name is None:
                raise ParseError(
                    "editable pip freeze line names no distribution (#egg=NAME or a "
                    "preceding '# Editable install ... (NAME==VERSION)' comment)",
                    raw,
                    remedy="pass the unmodified output of 'pip freeze'",
                )
            version = pending[1] if pending and normalize_name(pending[0]) == normalize_name(name) else None
            dists[normalize_name(name)] = version
            pending = None
            continue
        pending = None
        if line.startswith("-"):
            continue
        pinned = _PINNED_RE.match(line)
        if pinned:
            dists[normalize_name(pinned.group("name"))] = pinned.group("version")
            continue
        direct = _DIRECT_RE.match(line)
        if direct:
            dists[normalize_name(direct.group("name"))] = _version_from_url(direct.group("url"))
            continue
        raise ParseError(
            "pip freeze line is not NAME==VERSION, NAME @ URL or -e ...",
            raw,
            remedy="pass the unmodified output of 'pip freeze'",
        )
    return dists


def _describe(name: str, version: str | None) -> str:
    return f"{name} {version}" if version else f"{name} (version unknown)"


def check_stack_consistency(
    dists: Mapping[str, str | None],
    *,
    default_labels: Mapping[str, str] | None = None,
) -> list[str]:
    """List what is inconsistent in a serving stack's wheels.

    Args:
        dists: ``{distribution: version}`` as from :func:`parse_pip_freeze`
            (names are normalised here, so ``"SGL_Kernel"`` works too).
        default_labels: labels to assume for wheels that carry none, e.g.
            ``{"sgl-kernel": "cu128"}`` for a PyPI build whose CUDA variant is
            known from its index. Without it an unlabeled torch, sgl-kernel,
            sglang-kernel or flashinfer-jit-cache is reported, because its CUDA
            build cannot be checked.

    Checks:
        * torch, sgl-kernel / sglang-kernel and flashinfer-jit-cache carry the
          same CUDA label (one torch ABI, one CUDA runtime);
        * sgl-kernel and sglang-kernel are not both installed (both ship the
          ``sgl_kernel`` module);
        * flashinfer-python, flashinfer-cubin and flashinfer-jit-cache have equal
          public versions (``0.5.3`` == ``0.5.3+cu130``).

    Returns:
        Problems, one sentence each naming the distributions, versions and the
        fix; an empty list when the stack is consistent.

    Raises:
        Cuda13Error: a version that is not PEP 440 (the value is named).
    """
    if not isinstance(dists, Mapping):
        raise Cuda13Error(
            "distributions must be a mapping of name to version",
            dists,
            option="dists",
            remedy="pass the result of parse_pip_freeze / cuda13_parse_pip_freeze",
        )
    d = {normalize_name(k): v for k, v in dists.items()}
    defaults = {normalize_name(k): v for k, v in (default_labels or {}).items()}
    problems: list[str] = []

    def label(name: str) -> str | None:
        version = d.get(name)
        found = local_label(version) if version else None
        return found or defaults.get(name)

    kernels = [name for name in KERNEL_DISTRIBUTIONS if name in d]
    if len(kernels) == 2:
        problems.append(
            f"both {_describe('sgl-kernel', d['sgl-kernel'])} and "
            f"{_describe('sglang-kernel', d['sglang-kernel'])} are installed and both ship "
            "the sgl_kernel module; uninstall the one that does not match torch"
        )
    dependents = kernels + (["flashinfer-jit-cache"] if "flashinfer-jit-cache" in d else [])

    if dependents and "torch" not in d:
        problems.append(
            f"torch is not installed, so the CUDA build of {', '.join(dependents)} has nothing "
            "to match; install torch from the PyTorch index of the target CUDA release"
        )
    elif dependents:
        torch_desc = _describe("torch", d["torch"])
        torch_label = label("torch")
        if torch_label is None:
            problems.append(
                f"{torch_desc} has no local version label (such as +cu130), so its CUDA build "
                "cannot be checked; install torch from the PyTorch cuXYZ index or declare its "
                "label in default_labels"
            )
        elif not _LABEL_RE.match(torch_label):
            problems.append(
                f"{torch_desc} is a '{torch_label}' build without CUDA; install torch from the "
                "PyTorch cuXYZ index of the target CUDA release"
            )
        else:
            torch_cuda = cuda_tag_of_label(torch_label)
            for name in dependents:
                desc = _describe(name, d[name])
                dep_label = label(name)
                if dep_label is None:
                    problems.append(
                        f"{desc} has no local version label, so its CUDA build cannot be checked "
                        f"against {torch_desc} ({torch_label}); install the +{torch_label} wheel "
                        "of it or declare its label in default_labels"
                    )
                elif dep_label != torch_label:
                    dep_cuda = (
                        f"CUDA {cuda_tag_of_label(dep_label)}" if _LABEL_RE.match(dep_label) else "no CUDA"
                    )
                    problems.append(
                        f"{desc} is built for {dep_cuda} ({dep_label}) but {torch_desc} for "
                        f"CUDA {torch_cuda} ({torch_label}); install the +{torch_label} wheel "
                        f"of {name}"
                    )

    present = {name: d[name] for name in FLASHINFER_DISTRIBUTIONS if name in d}
    publics: dict[str, str] = {}
    for name, version in present.items():
        if version is None:
            problems.append(
                f"{name} has no known version (installed from a direct reference), so it "
                "cannot be compared with the other flashinfer distributions; install released "
                "wheels"
            )
            continue
        try:
            publics[name] = Version(version).public
        except InvalidVersion:
            raise Cuda13Error(
                "not a PEP 440 version", version, option=name, remedy="check the pip freeze"
            ) from None  # the message names the value already
    if len(set(publics.values())) > 1:
        listed = ", ".join(f"{name} {present[name]}" for name in publics)
        problems.append(
            f"flashinfer distributions differ in version ({listed}); install the same version of each"
        )
    return problems
