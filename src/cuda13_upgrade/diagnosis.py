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
``cuda13_on_cuda12``        ``libcudart.so.13`` / ``libnvrtc.so.13`` / ``libcublas*.so.13``
                            ``cannot open shared object file``
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
``nvidia_smi_*``            a failed nvidia-smi, by
                            :func:`cuda13_upgrade.nvidia_smi.classify_failure`
                            (``nvidia_smi_driver_library_mismatch``, ...)
==========================  ====================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from cuda13_upgrade.nvidia_smi import classify_failure

__all__ = ["KINDS", "Diagnosis", "cuda_version_from_int", "diagnose", "diagnose_nvidia_smi"]


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


_Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], dict[str, str]], tuple[str, str]]]


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


def _library(m: re.Match[str]) -> str:
    """``sgl_kernel (common_ops.abi3.so)`` from ``.../sgl_kernel/common_ops.abi3.so``."""
    path = m.group("lib")
    if not path:
        return "a compiled extension"
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[-2] not in (".", "..", "..."):
        return f"{parts[-2]} ({parts[-1]})"
    return parts[-1]


def _torch_abi(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    torch = context.get("torch_version")
    wanted = f"torch {'.'.join(torch.split('+')[0].split('.')[:2])}" if torch else "the installed torch"
    return (
        f"{_library(m)} was built for another torch: it needs the C++ symbol {m.group('sym')} "
        "of the torch it was compiled against, which the installed "
        f"{'torch ' + torch if torch else 'torch'} does not export",
        f"install the kernel wheel built for {wanted} (the sgl-kernel/sglang-kernel version "
        "that pins it), or the torch that the kernel wheel pins; never mix them",
    )


def _driver_api(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    lib = _library(m)
    return (
        f"{lib} calls the CUDA driver API {m.group('sym')}, which the installed NVIDIA "
        "driver lacks: the driver is older than the CUDA release the extension was built for",
        "upgrade the NVIDIA driver to one that supports the stack's CUDA release "
        "(the preflight's driver table), or install a kernel wheel built for the driver's CUDA",
    )


def _cuda13_on_12(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        f"a CUDA 13 extension on a CUDA 12 stack: it links {m.group('so')}, which no library "
        "of this environment provides",
        "install the cu128/CUDA 12 build of that package in the CUDA 12 venv (or move the "
        "service to the CUDA 13 venv, where the cu130 wheels bring the CUDA 13 libraries)",
    )


def _cuda12_on_13(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        f"a CUDA 12 extension in a CUDA 13 venv: it links {m.group('so')}, which the CUDA 13 "
        "stack does not provide",
        "install the +cu130 build of that package (sgl-kernel, flashinfer) from the cu130 "
        "index; a +cu128 wheel left in the new venv is the usual cause",
    )


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
        f"install a torch build whose arch list includes {m.group('sm')} (cu128 or newer "
        "for Blackwell: the cu130 wheels of this upgrade)",
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
        "upgrade the NVIDIA driver to one that supports the stack's CUDA release (the "
        "preflight's driver table), or install a torch built for the driver's CUDA",
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

#: Every kind :func:`diagnose` can return besides ``"unknown"`` and ``"nvidia_smi_*"``.
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
            ``service_exec_denied``).

    Returns:
        A :class:`Diagnosis`; ``kind == "unknown"`` (cause naming the first
        non-empty line) when no rule matched.
    """
    lines = _lines(text)
    facts = {str(k): str(v) for k, v in (context or {}).items() if v not in (None, "")}
    for kind, pattern, build in _RULES:
        for line in lines:
            match = pattern.search(line)
            if match:
                cause, remedy = build(match, facts)
                return Diagnosis(kind, cause, remedy, line.strip(), source)
    first = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return Diagnosis(
        "unknown",
        f"no known failure text; last line: {first!r}" if first else "the step failed without output",
        "read the full output and the service journal (journalctl -u <unit>)",
        "",
        source,
    )


def diagnose_nvidia_smi(
    rc: int,
    stdout: str = "",
    stderr: str = "",
    *,
    module_version: str | None = None,
) -> Diagnosis:
    """Diagnose a failed nvidia-smi run (kind ``nvidia_smi_<code>``).

    Args:
        rc: nvidia-smi's return code.
        stdout, stderr: its output.
        module_version: the loaded kernel module's version from
            ``/proc/driver/nvidia/version`` (see
            :func:`cuda13_upgrade.nvidia_smi.parse_proc_driver_version`), named
            in the cause of a driver/library mismatch.

    Returns:
        A :class:`Diagnosis` built from
        :func:`cuda13_upgrade.nvidia_smi.classify_failure`; ``kind`` is
        ``"nvidia_smi_ok"`` when rc is 0 and no failure text is present.
    """
    failure = classify_failure(rc, stdout, stderr)
    cause = "nvidia-smi ran"
    if failure.code != "ok":
        cause = f"nvidia-smi failed (rc {rc}, {failure.code}): {failure.detail}"
    if failure.code == "driver_library_mismatch" and module_version:
        cause += f"; the loaded kernel module is {module_version}"
    return Diagnosis(f"nvidia_smi_{failure.code}", cause, failure.remedy, failure.detail, "nvidia-smi")
