"""Diagnosis of failure texts: what a failed import, start or command means.

One place maps the text that a failure leaves (a failed ``import sgl_kernel``,
the journal of a server that did not become healthy, a failed nvidia-smi,
torch's warnings, pip/apt/git output) to a *kind*, a *cause* and a *remedy*,
so that the host's result and the fleet report say why, not only what.

Every rule below is keyed on a text printed by the real tool; the texts, with
their sources, are in ``tests/fixtures/failures/`` (see its SOURCES.md) and
``tests/fixtures/nvidia-smi/failure-*.txt``.

Kinds (:data:`KINDS`), most specific first:

==========================  ====================================================
kind                        text it is recognised by
==========================  ====================================================
``no_space``                ``No space left on device`` (pip ``[Errno 28]``, dpkg
                            ``failed to write``, apt ``Write error``, git
                            ``fatal: write error``)
``service_exec_denied``     systemd's ``Failed at step EXEC spawning <path>: Permission
                            denied`` (also ``Failed to execute <path>:`` /
                            ``Failed to locate executable <path>:``; the unit ends
                            with ``status=203/EXEC``)
``kernel_torch_abi``        ``undefined symbol: _ZN3c10...`` / ``_ZN5torch...`` /
                            ``_ZN2at...`` (a C++ symbol of torch: the extension
                            was built against another torch)
``driver_api_missing``      ``undefined symbol: cu...`` (a CUDA driver API entry
                            point such as ``cuGreenCtxStreamCreate``: the driver
                            is older than the CUDA release the extension needs)
``cuda_library_missing``    ``libcudart.so.N`` / ``libnvrtc.so.N`` / ``libcublas*.so.N``
                            ``cannot open shared object file`` with N the target's
                            major (context ``target_cuda``): its nvidia-* wheel is missing
``cuda13_on_cuda12``        the same with N = 13 under another (or no known) target
``cuda12_on_cuda13``        the same for ``.so.12``
``libcuda_missing``         ``libcuda.so.1: cannot open shared object file``
``cccl_headers_mismatch``   CCCL's ``CUDA compiler and (CUDA) toolkit headers are
                            incompatible``
``flashinfer_jit_cache_mismatch``  flashinfer's ``flashinfer-jit-cache version (X) does
                            not match flashinfer version (Y)`` (also ``-cubin``)
``torch_arch_unsupported``  torch's ``with CUDA capability sm_XY is not compatible
                            with the current PyTorch installation``
``no_kernel_image``         ``no kernel image is available for execution on the device``
``driver_too_old``          torch's ``The NVIDIA driver on your system is too old
                            (found version NNNNN)``
==========================  ====================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from cuda13_upgrade.versions import stack_driver_floor
from cuda13_upgrade.wheels import MODULE_DISTRIBUTIONS, describe_package, failing_package, package_of_path

__all__ = ["KINDS", "Diagnosis", "cuda_version_from_int", "diagnose"]


@dataclass(frozen=True)
class Diagnosis:
    """What a failure text means.

    Attributes:
        kind: one of :data:`KINDS`, or ``"unknown"``.
        cause: one sentence: what is wrong, with the values the text names.
        remedy: one sentence: what the operator does.
        evidence: the line of the text that decided (stripped), ``""`` when
            nothing was recognised.
        source: where the text came from (``"import"``, ``"journal"``,
            ``"nvidia-smi"``, ``"pip"``, ...), as the caller said.
    """

    kind: str
    cause: str
    remedy: str
    evidence: str
    source: str = ""

    @property
    def known(self) -> bool:
        """True when a rule recognised the text."""
        return self.kind != "unknown"

    def to_dict(self) -> dict[str, object]:
        """Plain dict of the attributes plus ``known`` (for Ansible and JSON)."""
        return {**asdict(self), "known": self.known}


def cuda_version_from_int(value: int | str) -> str:
    """CUDA's integer version as a release: ``12080`` -> ``"12.8"``, ``11040`` -> ``"11.4"``.

    The integer is ``1000 * major + 10 * minor`` (``CUDA_VERSION`` in cuda.h,
    ``cudaDriverGetVersion``), what torch prints as "found version".

    Raises:
        ValueError: for a value that is not a non-negative integer.
    """
    number = int(value)
    if number < 0:
        raise ValueError(f"CUDA version integer must be non-negative, got {value!r}")
    return f"{number // 1000}.{(number % 1000) // 10}"


#: A builder returns (cause, remedy), or None when the text is not this kind after
#: all (a missing CUDA library is ``cuda_library_missing`` only under its own major).
_Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], dict[str, str]], tuple[str, str] | None]]

_TARGET_RE = re.compile(r"^(?P<major>\d+)(?:\.(?P<minor>\d+))?")
_LABEL_RE = re.compile(r"\+cu(?P<major>\d+)(?P<minor>\d)$")


def _target(context: Mapping[str, str]) -> tuple[int | None, str | None]:
    """The target CUDA (major, "major.minor" or None) from ``target_cuda`` (``"13.0"``
    or ``"13"``), else from the label of ``torch_version`` (``2.14.1+cu130``)."""
    found = _TARGET_RE.match(context.get("target_cuda", ""))
    if found:
        major, minor = int(found.group("major")), found.group("minor")
        return major, f"{major}.{minor}" if minor is not None else None
    label = _LABEL_RE.search(context.get("torch_version", ""))
    if label:
        return int(label.group("major")), f"{int(label.group('major'))}.{label.group('minor')}"
    return None, None


def _target_build(context: Mapping[str, str]) -> str:
    """``"CUDA 13.0 build (+cu130)"``, ``"CUDA 13 build"``, or ``"build for the target CUDA release"``."""
    major, release = _target(context)
    if release:
        return f"CUDA {release} build (+cu{release.replace('.', '')})"
    if major is not None:
        return f"CUDA {major} build"
    return "build for the target CUDA release"


def _driver_floor(context: Mapping[str, str]) -> str:
    """What driver the target needs, by NVIDIA's tables (:func:`stack_driver_floor`):
    ``">= 580.65.06, the minimum for CUDA 13.0 (CUDA Toolkit Release Notes,
    Table 3; >= 580 runs CUDA 13.x without PTX JIT, Table 2)"``; "" when the target
    is not known."""
    major, release = _target(context)
    if major is None:
        return ""
    if release is None:
        floor = stack_driver_floor(torch_cuda=f"{major}.0", jit=False)
        if not floor["floor"]:
            return ""
        return (
            f">= {floor['floor']}, the minimum for CUDA {major}.x (CUDA Toolkit Release "
            "Notes, Table 2, minor version compatibility; the release's own Table 3 row is higher)"
        )
    floor = stack_driver_floor(torch_cuda=release)
    if floor["jit_floor"]:
        mvc = (
            f"; >= {floor['mvc_floor']} runs CUDA {major}.x without PTX JIT, Table 2"
            if floor["mvc_floor"]
            else ""
        )
        return (
            f">= {floor['jit_floor']}, the minimum for CUDA {release} (CUDA Toolkit "
            f"Release Notes, Table 3{mvc})"
        )
    if floor["mvc_floor"]:
        return f">= {floor['mvc_floor']} for CUDA {major}.x (CUDA Toolkit Release Notes, Table 2)"
    return ""


def _no_space(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        "a file system the step writes to is full (No space left on device)",
        "free space where the new stack, the pip/apt caches and /tmp live (df -h), "
        "then run the upgrade again; the preflight's disk check "
        "(nvidia_driver_check_required_disk_gib) sets the margin",
    )


def _exec_denied(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    path = m.group("path")
    unit = m.group("unit") or "the service"
    user = context.get("service_user")
    who = f"its User= ({user})" if user else "its User="
    check = f"sudo -u {user} test -x {path}" if user else f"sudo -u <User> test -x {path}"
    return (
        f"systemd could not execute {path} for {unit} (status=203/EXEC, Permission denied): "
        f"{who} may not execute that file, or a directory above it is not searchable (x) "
        "for that user",
        f"give {who} execute permission on {path} and search permission on every directory "
        f"above it (namei -l {path} shows each one; {check} checks), e.g. create the new "
        "venv where that user can reach it, then restart the service",
    )


def _library(m: re.Match[str], context: Mapping[str, str] | None = None) -> str:
    """The component a shared object belongs to, named by its distribution:
    ``sglang-kernel / sgl-kernel (sgl_kernel/sm100/common_ops.abi3.so)`` from
    ``.../dist-packages/sgl_kernel/sm100/common_ops.abi3.so``. The package is the
    one under site-packages/dist-packages in the path, else the traceback's last
    frame above the error (``__package``); a bare file name stays as it is."""
    path = m.group("lib") or ""
    package = package_of_path(path) or (context or {}).get("__package")
    if not path:
        return describe_package(package) if package else "a compiled extension"
    parts = [p for p in path.split("/") if p]
    inside = parts[-1]
    if package and package in parts:
        inside = "/".join(parts[parts.index(package) :])
    elif package:
        inside = f"{package}: {parts[-1]}"
    if package:
        dist = MODULE_DISTRIBUTIONS.get(package)
        return f"{dist} ({inside})" if dist else f"the package {package} ({inside})"
    if len(parts) >= 2 and parts[-2] not in (".", "..", "..."):
        return f"{parts[-2]} ({parts[-1]})"
    return parts[-1]


def _torch_abi(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    torch = context.get("torch_version")
    wanted = f"torch {'.'.join(torch.split('+')[0].split('.')[:2])}" if torch else "the installed torch"
    return (
        f"{_library(m, context)} was built for another torch: it needs the C++ symbol {m.group('sym')} "
        "of the torch it was compiled against, which the installed "
        f"{'torch ' + torch if torch else 'torch'} does not export",
        f"install the kernel wheel built for {wanted} (the sgl-kernel/sglang-kernel version "
        "that pins it), or the torch that the kernel wheel pins; never mix them",
    )


def _upgrade_driver(context: Mapping[str, str]) -> str:
    floor = _driver_floor(context)
    if floor:
        return f"upgrade the NVIDIA driver to {floor}"
    return (
        "upgrade the NVIDIA driver to one that supports the target CUDA release "
        "(the preflight's driver table)"
    )


def _driver_api(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    lib = _library(m, context)
    return (
        f"{lib} calls the CUDA driver API {m.group('sym')}, which the installed NVIDIA "
        "driver lacks: the driver is older than the CUDA release the extension was built for",
        f"{_upgrade_driver(context)}; the new stack cannot run on this driver",
    )


_OBJECT_RE = re.compile(r"(?P<object>[^\s:'\"]+\.so(?:\.\d+)*): lib")


def _package(context: Mapping[str, str]) -> str:
    """The package the text points at; else the extension its error line names
    (``Failed to load .../deep_gemm/_C.so: libcudart.so.13: ...``)."""
    if not context.get("__package") and context.get("__object"):
        return f"the extension {context['__object']}"
    return describe_package(context.get("__package"))


def _cuda_library_missing(m: re.Match[str], context: dict[str, str]) -> tuple[str, str] | None:
    major, _release = _target(context)
    if major is None or int(m.group("major")) != major:
        return None
    return (
        f"{_package(context)} links {m.group('so')}, a CUDA {major} library of the target that "
        "no library of this environment provides",
        f"install the nvidia-* wheel that provides {m.group('so')} into the new venv (the "
        f"{_target_build(context)} of {_package(context)} declares it; pip check lists what is missing)",
    )


def _other_major(m: re.Match[str], context: dict[str, str], built: int) -> tuple[str, str]:
    major, _release = _target(context)
    where = f"the CUDA {major} stack" if major is not None else "this environment"
    return (
        f"{_package(context)} is a CUDA {built} build: it links {m.group('so')}, which {where} "
        "does not provide",
        f"install the {_target_build(context)} of {_package(context)} from the target's index "
        "into the new venv",
    )


def _cuda13_on_12(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return _other_major(m, context, 13)


def _cuda12_on_13(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return _other_major(m, context, 12)


def _libcuda(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        "the NVIDIA driver's user-space library libcuda.so.1 is not found: the driver is "
        "not installed on the host, or not visible inside the service's environment",
        "install the driver's user-space libraries (libcuda1 / libnvidia-compute-<branch>) "
        "or, in a container, run it with the NVIDIA runtime; check 'ldconfig -p | grep libcuda'",
    )


def _cccl(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        "the toolkit's nvcc and the CUDA headers it compiles against differ: the CUDA "
        "component wheels (nvidia-cuda-nvcc, -crt, -cccl vs -runtime) or the toolkit "
        "and the pip CUDA headers are from different CUDA releases",
        "install every nvidia-cuda-* component wheel at the release torch was built for "
        "(torch.version.cuda), e.g. all 13.0.x for a cu130 torch, and point CUDA_HOME at "
        "the matching toolkit",
    )


def _torch_arch(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        f"the installed torch has no kernels for {m.group('gpu').strip()} ({m.group('sm')}): "
        "it was built for older architectures only",
        f"install a torch {_target_build(context)} whose arch list includes {m.group('sm')} "
        "(torch.cuda.get_arch_list())",
    )


def _jit_cache(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        f"{m.group('dist')} {m.group('cache')} and flashinfer {m.group('fi')} are different "
        "versions: its precompiled kernels were built for another flashinfer",
        f"install {m.group('dist')} at the version of flashinfer-python ({m.group('fi')}, with "
        "the stack's CUDA label), from the same index",
    )


def _no_kernel_image(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        "a CUDA kernel was launched on a GPU architecture the build has no code for "
        "(no SASS for this compute capability and no PTX to JIT-compile)",
        "install wheels built for the GPUs' compute capability (torch.cuda.get_arch_list() "
        "must cover it) or rebuild the extension with TORCH_CUDA_ARCH_LIST set to it",
    )


def _driver_too_old(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    found = m.group("found")
    try:
        release = f"CUDA {cuda_version_from_int(found)}"
    except ValueError:  # pragma: no cover - the pattern admits digits only
        release = f"CUDA version {found}"
    return (
        f"the NVIDIA driver supports up to {release} (torch found version {found}), older "
        "than the CUDA release torch was built for",
        f"{_upgrade_driver(context)}; until then the new stack cannot reach the GPUs",
    )


# The CUDA runtime libraries an extension links by major version (libcudart.so.13).
_CUDA_LIBS = r"lib(?:cudart|nvrtc|cublas\w*|cusparse|cufft|curand|nvJitLink)"

#: (kind, pattern, cause/remedy builder), most specific first.
_RULES: tuple[_Rule, ...] = (
    ("no_space", re.compile(r"No space left on device|\[Errno 28\]"), _no_space),
    (
        "service_exec_denied",
        re.compile(
            r"(?:(?P<unit>[\w@:.\\-]+\.service): )?Failed (?:at step EXEC spawning|to execute|"
            r"to locate executable) (?P<path>/\S*): Permission denied"
        ),
        _exec_denied,
    ),
    (
        "kernel_torch_abi",
        re.compile(
            r"(?P<lib>[\w./<>-]*\.so)?:?\s*undefined symbol: "
            r"(?P<sym>_ZN?K?(?:\d+c10|\d+at|\d+torch)\w*)"
        ),
        _torch_abi,
    ),
    (
        "driver_api_missing",
        re.compile(r"(?P<lib>[\w./<>-]*\.so)?:?\s*undefined symbol: (?P<sym>cu[A-Z]\w*)"),
        _driver_api,
    ),
    (
        "cuda_library_missing",
        re.compile(rf"(?P<so>{_CUDA_LIBS}\.so\.(?P<major>\d+)): cannot open shared object file"),
        _cuda_library_missing,
    ),
    (
        "cuda13_on_cuda12",
        re.compile(rf"(?P<so>{_CUDA_LIBS}\.so\.13): cannot open shared object file"),
        _cuda13_on_12,
    ),
    (
        "cuda12_on_cuda13",
        re.compile(rf"(?P<so>{_CUDA_LIBS}\.so\.12): cannot open shared object file"),
        _cuda12_on_13,
    ),
    ("libcuda_missing", re.compile(r"libcuda\.so\.1: cannot open shared object file"), _libcuda),
    (
        "cccl_headers_mismatch",
        re.compile(r"CUDA compiler and (?:CUDA )?toolkit headers are incompatible", re.IGNORECASE),
        _cccl,
    ),
    (
        "torch_arch_unsupported",
        re.compile(
            r"(?P<gpu>\S.*?) with CUDA capability (?P<sm>sm_\d+) is not compatible with the current "
            r"PyTorch installation"
        ),
        _torch_arch,
    ),
    (
        "flashinfer_jit_cache_mismatch",
        re.compile(
            r"(?P<dist>flashinfer-(?:jit-cache|cubin)) version \((?P<cache>[^)]+)\) does not match "
            r"flashinfer version "
            r"\((?P<fi>[^)]+)\)"
        ),
        _jit_cache,
    ),
    (
        "no_kernel_image",
        re.compile(r"no kernel image is available for execution on the device"),
        _no_kernel_image,
    ),
    (
        "driver_too_old",
        re.compile(r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)"),
        _driver_too_old,
    ),
)

#: Every kind :func:`diagnose` can return besides ``"unknown"``.
KINDS: tuple[str, ...] = tuple(kind for kind, _pattern, _build in _RULES)


def _lines(text: str | Iterable[str] | None) -> list[str]:
    if text is None:
        return []
    if isinstance(text, str):
        return text.splitlines()
    return [line for item in text for line in str(item).splitlines()]


def diagnose(
    text: str | Iterable[str] | None,
    *,
    source: str = "",
    context: Mapping[str, object] | None = None,
) -> Diagnosis:
    """Say what a failure text means and what to do.

    The rules are tried in the order of :data:`KINDS` over the whole text; the
    first that matches any line decides (a full disk explains the ``undefined
    symbol`` that a half-written wheel leaves, so it comes first).

    Args:
        text: the failure output: a string, or lines (``stdout_lines`` +
            ``stderr_lines``, a journal). ``None`` reads as empty.
        source: where the text came from, copied to :attr:`Diagnosis.source`.
        context: facts that sharpen the remedy: ``torch_version``
            (``"2.10.0+cu130"``: "install the kernel wheel built for torch 2.10"),
            ``service_user`` (the unit's ``User=``, named in the remedy of
            ``service_exec_denied``), ``target_cuda`` (the target CUDA release,
            ``"13.0"``, or its major, ``"13"``; else the label of
            ``torch_version``): every remedy follows it (the build to install,
            the driver the target needs by NVIDIA's tables), and a missing
            CUDA library of the target's own major is ``cuda_library_missing``.
            The package a remedy names is the one the text points at: the
            shared object's directory under site-packages/dist-packages, else
            the traceback's last frame there above the error line.

    Returns:
        A :class:`Diagnosis`; ``kind == "unknown"`` (cause naming the first
        non-empty line) when no rule matched.
    """
    lines = _lines(text)
    facts = {str(k): str(v) for k, v in (context or {}).items() if v not in (None, "")}
    for kind, pattern, build in _RULES:
        for index, line in enumerate(lines):
            match = pattern.search(line)
            if match:
                package = package_of_path(line) or failing_package(lines, upto=index)
                extension = _OBJECT_RE.search(line)
                found = build(
                    match,
                    {
                        **facts,
                        "__package": package or "",
                        "__object": extension.group("object") if extension else "",
                    },
                )
                if found is None:
                    continue
                cause, remedy = found
                return Diagnosis(kind, cause, remedy, line.strip(), source)
    first = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return Diagnosis(
        "unknown",
        f"no known failure text; last line: {first!r}" if first else "the step failed without output",
        "read the full output and the service journal (journalctl -u <unit>)",
        "",
        source,
    )
