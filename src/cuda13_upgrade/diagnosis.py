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
``cuda_not_initialized``    ``Error 802: system not yet initialized`` (torch's
                            ``cudaGetDeviceCount()`` at CUDA initialization: the
                            NVSwitch fabric is not ready, the fabric manager not running)
``cpu_fallback``            SGLang's ``No accelerator (...) is available. - Falling back
                            to CPU`` / ``Auto-configed device: cpu``
``jit_arch_unsupported``    ptxas's ``Instruction '...'`` / ``Feature '...' not supported on
                            .target 'sm_NNN'`` (arch-specific instructions built for the
                            generic target)
``jit_ptxas_error``         any other ``ptxas <ptx>, line N; error : ...`` (e.g.
                            ``Unexpected instruction types specified for '_mma'``)
``jit_no_target_arch``      flashinfer's ``No supported CUDA architectures found for major
                            versions [...]``, ``SM 12.x requires CUDA >= 12.9``, ``FlashInfer
                            requires GPUs with sm75 or higher``
``driver_too_old``          torch's ``The NVIDIA driver on your system is too old
                            (found version NNNNN)``
``no_accelerator``          SGLang's ``No accelerator (...) or platform plugin is
                            available`` (the server found no GPU at all)
==========================  ====================================================

Every remedy follows the stack that failed when the context names it (``stack``,
``stack_cuda``, ``venv``: the old stack after a rollback, the new one at the switch
and the verify): the build to install is that stack's CUDA build, into that stack's
venv, and the driver named is the one that stack's CUDA release needs. Without
them the remedy follows the target (``target_cuda``), into the new venv.
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
    """The CUDA release remedies follow (major, "major.minor" or None): the failing
    stack's ``stack_cuda`` (``"12.8"``), else ``target_cuda`` (``"13.0"`` or ``"13"``),
    else the label of ``torch_version`` (``2.14.1+cu130``). The old stack's release is never the
    target's: without ``stack_cuda`` it is not known."""
    found = _TARGET_RE.match(context.get("stack_cuda", ""))
    if context.get("stack") == "old" and not found:
        return None, None
    found = found or _TARGET_RE.match(context.get("target_cuda", ""))
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
    if context.get("stack") == "old":
        return "build for the old stack's CUDA release"
    return "build for the target CUDA release"


def _stack_name(context: Mapping[str, str]) -> str:
    """``"the old stack"`` / ``"the new stack"`` (context ``stack``); ``"the new stack"``
    when the context does not say (the target's)."""
    return "the old stack" if context.get("stack") == "old" else "the new stack"


def _venv_phrase(context: Mapping[str, str]) -> str:
    """Where the failing stack's packages go: ``"the old venv (/opt/ml-env)"``; ``"the new
    venv"`` when the context names no stack."""
    stack = context.get("stack")
    if stack not in ("old", "new"):
        return "the new venv"
    venv = context.get("venv")
    return f"the {stack} venv ({venv})" if venv else f"the {stack} venv"


def _stack_release(context: Mapping[str, str]) -> str:
    """``"the old stack (CUDA 12.8)"`` when the context names the stack and its release,
    ``"the old stack"`` without the release, ``""`` when it names no stack."""
    if context.get("stack") not in ("old", "new"):
        return ""
    _major, release = _target(context)
    return f"{_stack_name(context)} (CUDA {release})" if release else _stack_name(context)


def _driver_floor(context: Mapping[str, str]) -> str:
    """What driver the failing stack (context ``stack_cuda``) or else the target needs, by
    NVIDIA's tables (:func:`stack_driver_floor`):
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
        f"that pins it){_into(context)}, or the torch that the kernel wheel pins; never mix them",
    )


def _into(context: Mapping[str, str]) -> str:
    """``" into the old venv (/opt/ml-env)"`` when the context names the failing stack, else
    ``""`` (the remedy's words stay as they were)."""
    return f" into {_venv_phrase(context)}" if context.get("stack") in ("old", "new") else ""


def _upgrade_driver(context: Mapping[str, str]) -> str:
    floor = _driver_floor(context)
    if floor:
        return f"upgrade the NVIDIA driver to {floor}"
    return (
        f"upgrade the NVIDIA driver to one that supports {_stack_cuda_words(context)} "
        "(the preflight's driver table)"
    )


def _stack_cuda_words(context: Mapping[str, str]) -> str:
    """``"the CUDA release of the old stack"`` when the context names the stack, else
    ``"the target CUDA release"``."""
    if context.get("stack") in ("old", "new"):
        return f"the CUDA release of {_stack_name(context)}"
    return "the target CUDA release"


def _driver_api(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    lib = _library(m, context)
    return (
        f"{lib} calls the CUDA driver API {m.group('sym')}, which the installed NVIDIA "
        "driver lacks: the driver is older than the CUDA release the extension was built for",
        f"{_upgrade_driver(context)}; {_stack_name(context)} cannot run on this driver",
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
    if context.get("stack") in ("old", "new"):
        return (
            f"{_package(context)} links {m.group('so')}, a CUDA {major} library of {_stack_release(context)} "
            f"that no library of {_venv_phrase(context)} provides",
            f"install the nvidia-* wheel that provides {m.group('so')} into {_venv_phrase(context)} (the "
            f"{_target_build(context)} of {_package(context)} declares it; pip check lists what is missing)",
        )
    return (
        f"{_package(context)} links {m.group('so')}, a CUDA {major} library of the target that "
        "no library of this environment provides",
        f"install the nvidia-* wheel that provides {m.group('so')} into the new venv (the "
        f"{_target_build(context)} of {_package(context)} declares it; pip check lists what is missing)",
    )


def _other_major(m: re.Match[str], context: dict[str, str], built: int) -> tuple[str, str]:
    major, _release = _target(context)
    if context.get("stack") in ("old", "new"):
        stack = _stack_release(context)
        venv = _venv_phrase(context)
        which = (
            "the version the pre-upgrade snapshot's pip freeze lists"
            if context.get("stack") == "old"
            else f"the build {_stack_name(context)} was installed with"
        )
        return (
            f"{_package(context)} is a CUDA {built} build: it links {m.group('so')}, which {stack} "
            f"does not provide (it serves from {venv})",
            f"install the {_target_build(context)} of {_package(context)} into {venv} ({which}), or "
            f"remove the CUDA {built} package that got into it",
        )
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
        f"(torch.version.cuda){_into(context)}, e.g. {_example_release(context)}, and point CUDA_HOME "
        "at the matching toolkit",
    )


def _example_release(context: Mapping[str, str]) -> str:
    """``"all 12.8.x for the old stack"`` when the context names the stack and its release,
    else the target's example, ``"all 13.0.x for a cu130 torch"``."""
    _major, release = _target(context)
    if context.get("stack") in ("old", "new") and release:
        return f"all {release}.x for {_stack_name(context)}"
    return "all 13.0.x for a cu130 torch"


def _torch_arch(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        f"the installed torch has no kernels for {m.group('gpu').strip()} ({m.group('sm')}): "
        "it was built for older architectures only",
        f"install a torch {_target_build(context)} whose arch list includes {m.group('sm')} "
        f"(torch.cuda.get_arch_list()){_into(context)}",
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
        f"{_upgrade_driver(context)}; until then {_stack_name(context)} cannot reach the GPUs",
    )


def _not_initialized(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    return (
        "CUDA could not initialise the GPUs (cudaGetDeviceCount: error 802, system not yet "
        "initialized) although the driver lists them: on a host whose GPUs share an NVSwitch "
        "fabric the fabric manager is not running or the GPUs' fabric registration has not "
        "completed, so torch sees no GPU and the server none",
        "check the fabric manager and the GPUs' fabric state: systemctl status "
        "nvidia-fabricmanager (start it, or install the nvidia-fabricmanager package of the "
        "driver's branch) and nvidia-smi -q | grep -A2 Fabric (State must be Completed, Status "
        "Success); then restart the service",
    )


_FOUND_RE = re.compile(r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)")


def _cpu_fallback(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    stack = _stack_name(context)
    found = _FOUND_RE.search(context.get("__text", ""))
    if found:
        release = cuda_version_from_int(found.group("found"))
        return (
            f"the server found no usable GPU and fell back to the CPU: torch says the NVIDIA driver "
            f"supports up to CUDA {release} (found version {found.group('found')}), older than the "
            "CUDA release torch was built for",
            f"{_upgrade_driver(context)}; until then {stack} serves from the CPU, not the GPUs",
        )
    floor = _driver_floor(context)
    needs = (
        f"{stack} needs the NVIDIA driver {floor}"
        if floor
        else f"the driver must support {_stack_cuda_words(context)}"
    )
    return (
        "the server found no usable GPU and fell back to the CPU (device cpu)",
        f"check the driver and what the service sees: {needs} (nvidia-smi shows the driver's version), "
        "and CUDA_VISIBLE_DEVICES in systemctl show -p Environment <unit> must not hide the GPUs; "
        "then restart it",
    )


def _jit_target(sm: str) -> tuple[str, str]:
    """``"sm_120"`` -> (``"12.0"``, ``"120"``): the arch list entry and the compute_ number."""
    number = sm.removeprefix("sm_")
    return f"{int(number) // 10}.{int(number) % 10}", number


_PTXAS_RE = re.compile(r"ptxas (?P<ptx>.+?), line \d+; error\s*: (?P<said>.+?)\s*$")
_UNSUPPORTED_RE = re.compile(
    r"error\s*: (?:Instruction|Feature) '(?P<what>[^']+)' not supported on \.target '(?P<target>sm_\d+)'"
)
# nvcc's temporary PTX: /tmp/tmpxft_000793eb_00000000-6_ds4_mmq.ptx is ds4_mmq's.
_TMPXFT_RE = re.compile(r"^tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_")


def _ptx_source(ptx: str) -> str:
    """The kernel a ptxas line names: ``ds4_mmq.ptx`` from ``/tmp/tmpxft_..._ds4_mmq.ptx``,
    ``"PTX generated at run time (ptxas application ptx input)"`` for a JIT's in-memory PTX."""
    if ptx.strip() == "application ptx input":
        return "PTX generated at run time (ptxas application ptx input)"
    name = ptx.rstrip("/").rsplit("/", 1)[-1]
    return _TMPXFT_RE.sub("", name) or ptx


def _jit_arch(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    target = m.group("target")
    wanted: list[str] = []
    ptx = ""
    for line in context.get("__text", "").splitlines():
        found = _UNSUPPORTED_RE.search(line)
        if found and found.group("target") == target:
            if found.group("what") not in wanted:
                wanted.append(found.group("what"))
            ptxas = _PTXAS_RE.search(line)
            ptx = ptx or (ptxas.group("ptx") if ptxas else "")
    arch, number = _jit_target(target)
    kernel = _ptx_source(ptx) if ptx else "a kernel"
    named = ", ".join(f"'{w}'" for w in wanted[:4])
    return (
        f"ptxas rejected {kernel} compiled for .target '{target}': {named} exist only on the "
        f"architecture-specific target {target}a (and the family target {target}f, CUDA 12.9 on); "
        f"the code was built for the generic {target}",
        f'build it for {target}a or {target}f: FLASHINFER_CUDA_ARCH_LIST="{arch}a" for flashinfer\'s JIT, '
        f'TORCH_CUDA_ARCH_LIST="{arch}a" for a torch extension, -gencode '
        f"arch=compute_{number}a,code={target}a for nvcc (in the service's environment for a JIT), "
        "remove what the JIT cached for it (flashinfer: ~/.cache/flashinfer of the unit's user) and "
        "restart the service",
    )


def _toolkit_home(context: Mapping[str, str]) -> str:
    """The failing stack's toolkit: ``"/usr/local/cuda-13.0 (the CUDA 13.0 toolkit of the new
    stack)"``, or the generic words when its release is not known."""
    _major, release = _target(context)
    if release:
        return f"/usr/local/cuda-{release} (the CUDA {release} toolkit of {_stack_name(context)})"
    return "the toolkit of the CUDA release torch was built with (torch.version.cuda)"


def _jit_ptxas(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    fixed = (
        " (nvidia-cutlass-dsl 4.5.1 fixed this one for block-scaled MMA, NVIDIA/cutlass#3227)"
        if "specified for '_mma'" in m.group("said")
        else ""
    )
    return (
        f"ptxas rejected {_ptx_source(m.group('ptx'))}: {m.group('said')}; the code generator "
        "that wrote the PTX and this toolkit's ptxas disagree on the instruction",
        f"install the code generator's release whose PTX this ptxas accepts{fixed} and run the JIT "
        f"with {_toolkit_home(context)} as CUDA_HOME; remove what the JIT cached and restart the "
        "service, or start the server with another backend for that kernel",
    )


_CUDA_NEEDED_RE = re.compile(r"SM (?P<sm>\d+)\.x requires CUDA >= (?P<need>\d+\.\d+)")
# flashinfer's errors when it has no architecture to compile for (flashinfer/compilation_context.py,
# flashinfer/jit/core.py check_cuda_arch).
_JIT_NO_ARCH_ERROR_RE = re.compile(
    r"No supported CUDA architectures found for major versions \[[^\]]*\]|"
    r"FlashInfer requires GPUs with sm75 or higher"
)


def _jit_no_arch(m: re.Match[str], context: dict[str, str]) -> tuple[str, str] | None:
    text = context.get("__text", "")
    if _CUDA_NEEDED_RE.search(m.group(0)) and _JIT_NO_ARCH_ERROR_RE.search(text):
        return None  # the warning explains; the error a later line raised is the evidence
    needed = _CUDA_NEEDED_RE.search(text)
    if needed:
        why = (
            f"the nvcc it compiles with ($CUDA_HOME/bin/nvcc, else the first nvcc on PATH) is older "
            f"than CUDA {needed.group('need')}, the first release that builds for SM "
            f"{needed.group('sm')}.x, so it dropped the GPUs' architecture"
        )
        arch = f"{needed.group('sm')}.0a"
    else:
        why = "FLASHINFER_CUDA_ARCH_LIST, or the nvcc it compiles with, leaves out the GPUs' architecture"
        arch = "12.0a"
    return (
        f"flashinfer's JIT found no GPU architecture to compile for ({m.group(0).strip()}): {why}",
        f"point the service's CUDA_HOME and PATH at {_toolkit_home(context)}, or set "
        f'FLASHINFER_CUDA_ARCH_LIST="{arch}" in its environment, then restart it',
    )


def _no_accelerator(m: re.Match[str], context: dict[str, str]) -> tuple[str, str]:
    venv = context.get("venv") or "<venv>"
    floor = _driver_floor(context)
    needs = f"; {_stack_name(context)} needs the NVIDIA driver {floor}" if floor else ""
    return (
        "the server found no GPU at all (torch.cuda.is_available() was False when SGLang chose "
        "its device) and did not start",
        "check what the service sees: nvidia-smi, CUDA_VISIBLE_DEVICES in systemctl show -p "
        f"Environment <unit>, and {venv}/bin/python -c 'import torch; "
        "print(torch.cuda.is_available())' as the unit's user; torch's CUDA initialization "
        f"warning in the lines before it, if any, says why{needs}",
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
    # Before driver_too_old: a server that started on the CPU is what the operator sees.
    ("cuda_not_initialized", re.compile(r"Error 802: system not yet initialized"), _not_initialized),
    (
        "cpu_fallback",
        re.compile(
            r"No accelerator \([^)]*\) is available\. - Falling back to CPU|Auto-configed device: cpu\b"
        ),
        _cpu_fallback,
    ),
    ("jit_arch_unsupported", _UNSUPPORTED_RE, _jit_arch),
    ("jit_ptxas_error", _PTXAS_RE, _jit_ptxas),
    (
        "jit_no_target_arch",
        re.compile(
            r"No supported CUDA architectures found for major versions \[[^\]]*\]|"
            r"SM \d+\.x requires CUDA >= \d+\.\d+|FlashInfer requires GPUs with sm75 or higher"
        ),
        _jit_no_arch,
    ),
    (
        "driver_too_old",
        re.compile(r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)"),
        _driver_too_old,
    ),
    # Last: what torch said before it (driver too old, error 802) is the cause.
    (
        "no_accelerator",
        re.compile(r"No accelerator \([^)]*\) or platform plugin is available"),
        _no_accelerator,
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
            ``stack`` (``"old"`` or ``"new"``: the stack whose start or use
            failed), ``stack_cuda`` (that stack's CUDA release, ``"12.8"``) and
            ``venv`` (its venv): when given, every remedy follows that stack
            instead of the target: its CUDA build, installed into its venv, and
            the driver its release needs (a ``libcudart.so.13`` missing on the
            old CUDA 12.8 stack asks for the CUDA 12.8 build in the old venv).
            The package a remedy names is the one the text points at: the
            shared object's directory under site-packages/dist-packages, else
            the traceback's last frame there above the error line.

    Returns:
        A :class:`Diagnosis`; ``kind == "unknown"`` (cause naming the first
        non-empty line) when no rule matched.
    """
    lines = _lines(text)
    facts = {str(k): str(v) for k, v in (context or {}).items() if v not in (None, "")}
    whole = "\n".join(lines)
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
                        "__text": whole,
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
