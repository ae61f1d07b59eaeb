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
from collections.abc import Iterable, Mapping
from typing import Any
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
    "IMPORT_FAILURE_CAUSES",
    "KERNEL_DISTRIBUTIONS",
    "check_stack_consistency",
    "classify_import_failure",
    "DRIVER_LIBRARIES",
    "check_shared_objects",
    "cuda_majors_of_needed",
    "cuda_label",
    "cuda_tag_of_label",
    "describe_package",
    "failing_package",
    "local_label",
    "MODULE_DISTRIBUTIONS",
    "package_of_path",
    "variant_key",
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
#: CUDA libraries whose soname major is the CUDA major: libcudart.so.12 in CUDA
#: 12.x, .so.13 in 13.x (CUDA Toolkit release notes, "CUDA Toolkit Major
#: Component Versions"). Seen in the real wheels: nvidia-cuda-runtime 13.0.96
#: ships libcudart.so.13, nvidia-cublas 13.1.1.3 libcublas.so.13,
#: libcublasLt.so.13 and libnvblas.so.13, nvidia-cuda-nvrtc 13.0.88
#: libnvrtc.so.13, nvidia-nvjitlink 13.5.37 libnvJitLink.so.13,
#: nvidia-cuda-cupti 13.0.85 libcupti.so.13; torch 2.10.0 (CUDA 12.8) needs
#: libcudart/cublas/cublasLt/cupti/nvrtc .so.12 (tests/fixtures/elf/REAL_STACK.md).
#: The others number theirs apart from the toolkit and say nothing about the
#: CUDA major: cuFFT (libcufft.so.11 in CUDA 12.8's torch, .so.12 in 13.0's,
#: nvidia-cufft 12.0.0.61), cuSOLVER (.so.11, then .so.12), cuSPARSE (.so.12 in
#: both), cuRAND (.so.10 in both); NCCL (libnccl.so.2), cuDNN (.so.9),
#: cuSPARSELt (.so.0) and NVSHMEM (.so.3) carry their own majors, the same in
#: their -cu12 and -cu13 wheels; the driver's libcuda.so.1 and
#: libnvidia-ml.so.1 (:data:`DRIVER_LIBRARIES`) come with the driver.
_CUDA_LIBRARY_RE = re.compile(r"^lib(?:cudart|cublas|cublasLt|nvblas|nvrtc|nvJitLink|cupti)\.so\.(\d+)$")
#: The NVIDIA driver's own libraries: installed by the driver, not by the
#: CUDA toolkit or a wheel, so a stack's objects are not judged by them.
DRIVER_LIBRARIES: tuple[str, ...] = ("libcuda.so.1", "libnvidia-ml.so.1")
#: A CUDA-major marker in a shared object's file name, as packages that ship
#: one build per CUDA major name them: ``..._cu12.abi3.so`` beside
#: ``..._cu13.abi3.so`` (torch-memory-saver 0.0.10),
#: ``_cutlass_ir.cu13.cpython-311-x86_64-linux-gnu.so`` (nvidia-cutlass-dsl-libs-cu13 4.8.0).
#: ``nvidia_cutlass_dsl/cu12/lib/libcute_dsl_runtime.so`` beside ``.../cu13/lib/...``
#: (nvidia-cutlass-dsl-libs-cu12 / -cu13 4.8.0) puts it in a directory's name.
#: A CUDA toolkit's own directory: NVIDIA's packages install CUDA X.Y under
#: ``/usr/local/cuda-X.Y`` (CUDA Installation Guide for Linux, "Post-installation
#: Actions"); ``/usr/local/cuda`` is a link to one of them.
_TOOLKIT_DIR_RE = re.compile(r"/cuda-(\d+)\.\d+/")
_VARIANT_MARKER_RE = re.compile(r"[._-]cu(\d{2,3})(?=[._-])|(?:^|(?<=/))cu(\d{2,3})(?=/)")
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
    needed_libraries: Mapping[str, Iterable[str]] | None = None,
    target_cuda_major: int | None = None,
) -> list[str]:
    """List what is inconsistent in a serving stack's wheels.

    Args:
        dists: ``{distribution: version}`` as from :func:`parse_pip_freeze`
            (names are normalised here, so ``"SGL_Kernel"`` works too).
        default_labels: labels to assume for wheels that carry none, e.g.
            ``{"torch": "cu130"}`` for a PyPI torch whose ``torch.__version__``
            says ``2.14.1+cu130`` while its distribution version (and ``pip
            freeze``) says ``2.14.1``.
        needed_libraries: ``{distribution: [ELF NEEDED entries of its shared
            objects]}`` (``hostscripts/stack_probe.py``). For a wheel without a
            label, the CUDA major of the libraries it loads
            (:func:`cuda_majors_of_needed`) is its CUDA build: PyPI's
            sglang-kernel 0.4.10 carries no label and loads ``libcudart.so.13``.
            A wheel listed here whose objects load no versioned CUDA library
            (pure Python, such as flashinfer-python) has nothing to compare.
            Without either, an unlabeled torch, sgl-kernel, sglang-kernel or
            flashinfer-jit-cache is reported, because its CUDA build cannot be
            checked.
        target_cuda_major: the CUDA major the stack is for (13 for the cu130
            stack). A torch of another major is the wheel that is wrong: it is
            named with the target's build as the remedy, and the other wheels
            are then checked against the target, not against that torch (so a
            cu130 kernel beside a cu128 torch is not told to become cu128).

    Checks:
        * torch, sgl-kernel / sglang-kernel and flashinfer-jit-cache are built
          for the same CUDA release: equal labels where both carry one, else
          the same CUDA major (label or loaded libraries);
        * sgl-kernel and sglang-kernel are not both installed (both ship the
          ``sgl_kernel`` module);
        * flashinfer-python, flashinfer-cubin and flashinfer-jit-cache, those of
          them that are installed, have equal public versions (``0.5.3`` ==
          ``0.5.3+cu130``; flashinfer-python alone is valid).

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
            remedy="pass the result of parse_pip_freeze",
        )
    d = {normalize_name(k): v for k, v in dists.items()}
    defaults = {normalize_name(k): v for k, v in (default_labels or {}).items()}
    needed = {normalize_name(k): sorted(v) for k, v in (needed_libraries or {}).items()}
    problems: list[str] = []

    def label(name: str) -> str | None:
        version = d.get(name)
        found = local_label(version) if version else None
        return found or defaults.get(name)

    def loads(name: str) -> str:
        libs = [lib for lib in needed.get(name, []) if _CUDA_LIBRARY_RE.match(lib)]
        return ", ".join(libs)

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
        torch_majors = cuda_majors_of_needed(needed.get("torch", []))
        if torch_label is None and len(torch_majors) != 1:
            seen = (
                f" and its libraries load {loads('torch') or 'no versioned CUDA library'}"
                if "torch" in needed
                else ""
            )
            problems.append(
                f"{torch_desc} has no local version label (such as +cu130){seen}, so its CUDA build "
                "cannot be checked; install torch from the PyTorch cuXYZ index or declare its label "
                "in default_labels"
            )
        elif torch_label is not None and not _LABEL_RE.match(torch_label):
            problems.append(
                f"{torch_desc} is a '{torch_label}' build without CUDA; install torch from the "
                "PyTorch cuXYZ index of the target CUDA release"
            )
        else:
            if torch_label is not None:
                torch_cuda = cuda_tag_of_label(torch_label)
                torch_major = int(torch_cuda.split(".")[0])
                torch_build = f"CUDA {torch_cuda} ({torch_label})"
            else:
                torch_major = next(iter(torch_majors))
                torch_build = f"CUDA {torch_major} (it loads {loads('torch')})"
            reference = f"{torch_desc} for {torch_build}"
            if target_cuda_major is not None and torch_major != target_cuda_major:
                problems.append(
                    f"{torch_desc} is built for {torch_build}, not for the target CUDA "
                    f"{target_cuda_major}: install the CUDA {target_cuda_major} build of torch (the "
                    f"PyTorch cu{target_cuda_major}X index, or the PyPI torch whose torch.version.cuda "
                    f"is {target_cuda_major}.x)"
                )
                torch_label, torch_major = None, target_cuda_major
                reference = f"the target CUDA {target_cuda_major}"
            for name in dependents:
                desc = _describe(name, d[name])
                dep_label = label(name)
                if dep_label is not None and torch_label is not None:
                    if dep_label != torch_label:
                        dep_cuda = (
                            f"CUDA {cuda_tag_of_label(dep_label)}"
                            if _LABEL_RE.match(dep_label)
                            else "no CUDA"
                        )
                        problems.append(
                            f"{desc} is built for {dep_cuda} ({dep_label}) but {reference}; "
                            f"install the +{torch_label} wheel of {name}"
                        )
                    continue
                if dep_label is not None:
                    dep_majors = (
                        {int(cuda_tag_of_label(dep_label).split(".")[0])}
                        if _LABEL_RE.match(dep_label)
                        else set()
                    )
                    dep_build = f"({dep_label})"
                elif name in needed:
                    dep_majors = cuda_majors_of_needed(needed[name])
                    if not dep_majors:
                        continue
                    dep_build = f"(it loads {loads(name)})"
                else:
                    wanted = f"+{torch_label}" if torch_label else f"CUDA {torch_major}"
                    against = f"{torch_desc} ({torch_label or torch_build})"
                    if reference.startswith("the target"):
                        against = reference
                    problems.append(
                        f"{desc} has no local version label, so its CUDA build cannot be checked "
                        f"against {against}; install the {wanted} wheel of it or "
                        "declare its label in default_labels"
                    )
                    continue
                if dep_majors != {torch_major}:
                    dep_cuda = (
                        "CUDA " + "/".join(str(m) for m in sorted(dep_majors)) if dep_majors else "no CUDA"
                    )
                    problems.append(
                        f"{desc} is built for {dep_cuda} {dep_build} but {reference}; "
                        f"install the CUDA {torch_major} build of {name}"
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


def cuda_majors_of_needed(needed: Iterable[str]) -> set[int]:
    """The CUDA majors that ELF ``NEEDED`` entries name.

    ``cuda_majors_of_needed(["libcuda.so.1", "libcudart.so.13", "libc.so.6"]) ==
    {13}``. Only libraries whose soname major is the CUDA major count (cudart,
    cuBLAS, cuBLASLt, nvblas, NVRTC, nvJitLink, CUPTI); ``libcuda.so.1``, the
    driver's library, has carried soname major 1 in every release. Returns an
    empty set when none is named.
    """
    majors: set[int] = set()
    for lib in needed:
        match = _CUDA_LIBRARY_RE.match(str(lib))
        if match:
            majors.add(int(match.group(1)))
    return majors


def variant_key(path: str) -> tuple[str, int | None]:
    """A shared object's path without its CUDA-major marker, and that marker's major.

    ``variant_key("torch_memory_saver_hook_mode_preload_cu12.abi3.so") ==
    ("torch_memory_saver_hook_mode_preload.abi3.so", 12)``;
    ``variant_key("nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so") ==
    ("nvidia_cutlass_dsl//lib/libcute_dsl_runtime.so", 13)``; a path without a
    marker is its own key, with None. Markers are ``cuNN`` (the major) or
    ``cuNNN`` (major and one-digit minor, the wheel-label form: ``cu128`` ->
    12), after ``_``, ``-`` or ``.`` in a file name, or a whole directory name.
    Objects whose keys are equal are builds of one object for different CUDA
    majors (:func:`check_shared_objects`).
    """
    path = str(path)
    match = _VARIANT_MARKER_RE.search(path)
    if match is None:
        return path, None
    digits = match.group(1) or match.group(2)
    major = int(digits) if len(digits) == 2 else int(digits[:-1])
    return path[: match.start()] + path[match.end() :], major


def check_shared_objects(
    objects: Mapping[str, Mapping[str, Mapping[str, Any]]],
    target_cuda_major: int,
    *,
    dists: Mapping[str, str | None] | None = None,
    imported: Iterable[str] = (),
    libraries: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, list[str]]:
    """Judge each shared object of a venv by the CUDA libraries it needs, not by labels.

    Args:
        objects: ``{distribution: {path: {"needed": [soname, ...], "mapped":
            bool | None}}}``, the ``objects`` of ``hostscripts/stack_probe.py``:
            every shared object of the venv whose ELF ``NEEDED`` entries name a
            CUDA library, by its path relative to site-packages; ``mapped``
            says whether it was mapped into the probe's process after the
            stack's modules were imported (None: not known).
        target_cuda_major: the CUDA major of the new stack (13).
        dists: ``{distribution: version}`` (the probe's ``dists``), to name versions.
        imported: the modules the probe imported, named in the notes.
        libraries: ``{soname: {"venv": [path, ...], "system": path | None}}``,
            the probe's ``libraries``: where each needed CUDA library can be
            found (files of that name in the venv; the loader's cache,
            ``ldconfig -p``, symlinks resolved). None skips the second check.

    The rule. An object *mismatches* when a library it needs fixes a CUDA
    major (:func:`cuda_majors_of_needed`: cudart, cuBLAS, cuBLASLt, nvblas,
    NVRTC, nvJitLink, CUPTI) other than ``target_cuda_major``; the driver's
    libraries (:data:`DRIVER_LIBRARIES`) and the libraries numbered apart from
    CUDA (cuFFT, cuRAND, cuSOLVER, cuSPARSE, NCCL, cuDNN, ...) are not judged.
    A mismatched object is refused, whatever the distribution's local version
    label says (a ``+cu130`` wheel may carry one object linked against
    ``libcudart.so.12``, which loads while the old toolkit stays installed and
    fails the day it is removed), unless it is a per-major variant that is not
    in use:

    * a *per-major variant*: another shared object of the venv has the same
      path once a CUDA-major marker is taken out of either
      (:func:`variant_key`: ``x_cu12.abi3.so``, ``x_cu13.abi3.so`` and
      ``x.abi3.so`` in one directory; ``pkg/cu12/lib/y.so`` and
      ``pkg/cu13/lib/y.so``), at least one of them carries a marker, and one
      of them is the target's build: it needs the target major's libraries
      and no other major's, or, needing none that fix a major (only
      ``libcuda.so.1``, say), carries the target's marker. That is the build
      the package picks at run time: torch-memory-saver 0.0.10 loads
      ``<stem>_cu<torch.version.cuda major>.*.so``;
    * *not in use*: it was not mapped into the probe's process after the
      stack's modules were imported (``mapped`` false, or None where the
      probe could not read ``/proc/self/maps``). A mapped object is in use,
      variant or not.

    Then, where ``libraries`` is given, each CUDA library that an object
    needs, the driver's aside, must be found without the
    old toolkit: in the venv (a file of that name that one of its
    distributions installed: torch loads the nvidia-* wheels' libraries by
    path, and a later object's ``NEEDED`` is met by the soname already
    loaded), or else through the loader's cache at a path that is not in a
    CUDA toolkit of another major (``/usr/local/cuda-12.8/...``: it goes when
    that toolkit is removed). The object's own ``RUNPATH`` and the service's
    ``LD_LIBRARY_PATH`` are not read. Objects that need another major are
    refused, or let pass, by the first rule alone.

    Returns:
        ``{"problems": [str], "notes": [str]}``: a problem per distribution
        with refused objects, naming each object, the libraries of the other
        major and the distribution, and the remedy (the build of that
        distribution for the target CUDA major); a problem per distribution
        whose objects need a library found only in another major's toolkit or
        nowhere, naming object, library and where it was found; a note per
        distribution whose mismatched objects were let pass, naming them and
        why.
    """
    versions = {normalize_name(k): v for k, v in (dists or {}).items()}
    flat: list[tuple[str, str, list[str], Any]] = []
    for dist, files in (objects or {}).items():
        for path, record in (files or {}).items():
            record = record or {}
            flat.append(
                (normalize_name(dist), str(path), list(record.get("needed") or []), record.get("mapped"))
            )
    groups: dict[str, list[tuple[str, set[int], int | None]]] = {}
    for _dist, path, needed, _mapped in flat:
        key, marker = variant_key(path)
        groups.setdefault(key, []).append((path, cuda_majors_of_needed(needed), marker))

    def target_sibling(path: str) -> str | None:
        members = groups[variant_key(path)[0]]
        if len(members) < 2 or all(marker is None for _p, _m, marker in members):
            return None
        for other, majors, marker in members:
            if other != path and (
                majors == {target_cuda_major} or (not majors and marker == target_cuda_major)
            ):
                return other
        return None

    refused: dict[str, list[str]] = {}
    excused: dict[str, list[str]] = {}
    unresolved: dict[str, list[str]] = {}
    for dist, path, needed, mapped in flat:
        other = [
            lib
            for lib in needed
            if (m := _CUDA_LIBRARY_RE.match(lib)) and int(m.group(1)) != target_cuda_major
        ]
        if not other:
            for lib in needed:
                where = (libraries or {}).get(lib)
                if lib in DRIVER_LIBRARIES or where is None or where.get("venv"):
                    continue
                system = where.get("system")
                toolkit = _TOOLKIT_DIR_RE.search(str(system or ""))
                if system and (toolkit is None or int(toolkit.group(1)) == target_cuda_major):
                    continue
                found = (
                    f"only in {system}, a CUDA {toolkit.group(1)} toolkit's directory"
                    if system
                    else "nowhere (not in the venv, not in the loader's cache)"
                )
                unresolved.setdefault(dist, []).append(f"{path} needs {lib}, found {found}")
            continue
        sibling = target_sibling(path)
        if mapped is True or sibling is None:
            why = " (mapped by the import of the stack)" if mapped is True else ""
            refused.setdefault(dist, []).append(f"{path} needs {', '.join(other)}{why}")
        else:
            excused.setdefault(dist, []).append(f"{path} needs {', '.join(other)} beside {sibling}")

    modules = ", ".join(imported) or "the stack's modules"
    problems = [
        f"{_describe(dist, versions.get(dist))} ships shared objects built for another CUDA major than "
        f"the target CUDA {target_cuda_major}, whatever its version label says: {'; '.join(found)}; "
        f"install the build of {dist} made for CUDA {target_cuda_major} (one whose objects need "
        f"libcudart.so.{target_cuda_major} and its libraries)"
        for dist, found in sorted(refused.items())
    ]
    problems += [
        f"{_describe(dist, versions.get(dist))} needs CUDA libraries that the new venv does not "
        f"provide: {'; '.join(found)}; install the nvidia-* wheels of CUDA {target_cuda_major} that "
        f"provide them into the new venv (the CUDA {target_cuda_major} build of {dist} requires them; "
        "pip check names what is missing)"
        for dist, found in sorted(unresolved.items())
    ]
    notes = [
        f"{_describe(dist, versions.get(dist))} ships per-CUDA-major variants of its objects; "
        f"{'; '.join(found)}; not refused: not mapped after importing {modules}, and the package "
        f"picks the CUDA {target_cuda_major} build"
        for dist, found in sorted(excused.items())
    ]
    return {"problems": problems, "notes": notes}


#: Causes of a failed import, in the order they are looked for in its text.
IMPORT_FAILURE_CAUSES: tuple[str, ...] = (
    "driver_library_missing",
    "cuda_runtime_other_major",
    "torch_abi",
    "driver_api_too_old",
    "cuda_library_missing",
    "other",
)
_DRIVER_LIBRARY_RE = re.compile(r"(libcuda\.so(?:\.1)?): cannot open shared object file")
_CUDA_LIBRARY_MISSING_RE = re.compile(
    r"(lib(?:cudart|cublas|cublasLt|nvrtc|nvJitLink|cupti)\.so\.(\d+)): cannot open shared object file"
)
# Itanium C++ ABI mangled names in PyTorch's namespaces c10, at, torch
# (_ZN3c10..., _ZNK3c10... for const members, _ZN2at..., _ZN5torch...).
_TORCH_SYMBOL_RE = re.compile(r"undefined symbol: (_ZN[KVr]*(?:3c10|2at|5torch)\w*)")
# CUDA driver API entry points are C names cuXxx (CUDA Driver API reference).
_DRIVER_SYMBOL_RE = re.compile(r"undefined symbol: (cu[A-Z]\w*)")


def classify_import_failure(text: str, expected_cuda_major: int) -> dict[str, str]:
    """Name the cause of a failed import from its whole text (traceback included).

    Args:
        text: what the import raised, all of it: the cause is often not on the
            last line (sgl_kernel's loader ends with ``No module named
            'common_ops'`` after listing the real error).
        expected_cuda_major: the CUDA major of the stack (13 for cu130).

    Returns:
        ``{"cause", "detail", "remedy"}``; ``cause`` is one of
        :data:`IMPORT_FAILURE_CAUSES`:

        * ``driver_library_missing``: ``libcuda.so.1: cannot open shared object
          file``, the NVIDIA driver's library is not visible (no driver, or a
          container without it);
        * ``cuda_runtime_other_major``: a CUDA library of another major is
          wanted (``libcudart.so.12`` under a CUDA 13 stack): a wheel built for
          the other CUDA;
        * ``torch_abi``: ``undefined symbol: _ZN3c10...`` (or at::, torch::),
          the extension was built against another torch;
        * ``driver_api_too_old``: ``undefined symbol: cuGreenCtxStreamCreate``,
          a driver API entry point the installed driver lacks;
        * ``cuda_library_missing``: a CUDA library of the stack's own major is
          not found (its nvidia-* wheel is missing);
        * ``other``: none of these; ``detail`` is the last line.
    """
    text = str(text)
    found = _DRIVER_LIBRARY_RE.search(text)
    if found:
        return {
            "cause": "driver_library_missing",
            "detail": found.group(1),
            "remedy": "the NVIDIA driver's libcuda.so.1 is not visible: install the driver, or "
            "make its library visible to this environment (ldconfig, the container runtime)",
        }
    lines = text.splitlines()

    def package(found: re.Match[str]) -> str:
        # The .so named on the error line, else the last frame above it.
        index = text.count("\n", 0, found.start())
        line = lines[index] if index < len(lines) else ""
        return describe_package(package_of_path(line) or failing_package(lines, upto=index))

    for found in _CUDA_LIBRARY_MISSING_RE.finditer(text):
        if int(found.group(2)) != expected_cuda_major:
            return {
                "cause": "cuda_runtime_other_major",
                "detail": found.group(1),
                "remedy": f"{package(found)} is built for CUDA {found.group(2)} and is installed in a "
                f"CUDA {expected_cuda_major} stack: install the CUDA {expected_cuda_major} build of it",
            }
    found = _TORCH_SYMBOL_RE.search(text)
    if found:
        return {
            "cause": "torch_abi",
            "detail": found.group(1),
            "remedy": "the extension was built against another torch: install the build of it "
            "made for the installed torch, or the torch it pins",
        }
    found = _DRIVER_SYMBOL_RE.search(text)
    if found:
        return {
            "cause": "driver_api_too_old",
            "detail": found.group(1),
            "remedy": "the NVIDIA driver is older than the kernel needs: upgrade the driver, "
            "or install a kernel build made for this driver's CUDA release",
        }
    found = _CUDA_LIBRARY_MISSING_RE.search(text)
    if found:
        return {
            "cause": "cuda_library_missing",
            "detail": found.group(1),
            "remedy": f"{package(found)} needs {found.group(1)}, a CUDA {found.group(2)} library "
            f"of the stack that nothing in it provides: install the nvidia-* wheel that provides "
            "it (pip check lists what is missing)",
        }
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return {"cause": "other", "detail": lines[-1] if lines else "", "remedy": "read the whole text"}


#: The distribution that installs each import package of the stack (the kernel's
#: module ``sgl_kernel`` comes from ``sgl-kernel`` up to 0.3.21 and from
#: ``sglang-kernel`` from 0.4.0 on; flashinfer's from ``flashinfer-python``).
MODULE_DISTRIBUTIONS: dict[str, str] = {
    "torch": "torch",
    "sgl_kernel": "sglang-kernel / sgl-kernel",
    "flashinfer": "flashinfer-python",
    "sglang": "sglang",
}
# A path under a Python installation's package directory: site-packages (pip,
# venvs) or dist-packages (Debian's Python).
_PACKAGE_PATH_RE = re.compile(r"/(?:site|dist)-packages/(?P<package>[A-Za-z_][\w]*)(?P<rest>/[^\s\"':]*)?")
_FRAME_RE = re.compile(r'File "(?P<path>[^"]+)", line \d+')


def package_of_path(path: str) -> str | None:
    """The import package a file belongs to, from its path under ``site-packages``
    or ``dist-packages``: ``.../dist-packages/sgl_kernel/sm100/common_ops.abi3.so``
    -> ``"sgl_kernel"``; None for a path elsewhere (``.../deep_gemm/_C.so`` with the
    directories elided, the standard library)."""
    found = _PACKAGE_PATH_RE.search(str(path))
    return found.group("package") if found else None


def failing_package(lines: Iterable[str], upto: int | None = None) -> str | None:
    """The import package whose code raised, from a traceback's lines.

    Python prints a traceback's frames outermost first (``File "<path>", line
    N, in <name>``), so the last frame under ``site-packages`` or
    ``dist-packages`` above the error line is the package whose import failed:
    for ``import sgl_kernel`` that fails inside ``import torch``, it is torch.
    ``upto`` is the index of the error line (frames below it belong to a later
    exception of the chain); None reads every line. Returns None when no frame
    lies in a package directory.
    """
    found = None
    for index, line in enumerate(lines):
        if upto is not None and index > upto:
            break
        frame = _FRAME_RE.search(line)
        if frame:
            package = package_of_path(frame.group("path"))
            if package:
                found = package
    return found


def describe_package(package: str | None) -> str:
    """How a remedy names an import package: ``"sgl_kernel (sglang-kernel / sgl-kernel)"``
    for the stack's own, ``"the package nixl_ep"`` for another, ``"the package that
    failed to import"`` when it is not known."""
    if not package:
        return "the package that failed to import"
    dist = MODULE_DISTRIBUTIONS.get(package)
    if dist == package:
        return package
    return f"{package} ({dist})" if dist else f"the package {package}"
