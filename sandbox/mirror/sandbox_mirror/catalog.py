"""Names, versions and relations that the sandbox's stand-in packages carry.

Everything here imitates a real artifact; where a value comes from is said beside it.
Values marked *unverified* are the closest public evidence found, not a copy of the real
metadata file: change them here and every index, wheel and .deb follows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandbox_mirror import records

# Fixed time of every file in the mirror and of the apt Release "Date" (2025-11-10T00:00:00Z):
# deterministic archives, and a date in the past so apt never finds the Release "not valid yet".
SOURCE_DATE_EPOCH = 1762732800

# --------------------------------------------------------------------------------------
# CUDA toolkit releases (NVIDIA's flat apt repository, debian12/x86_64)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA toolkit release as NVIDIA's apt repository ships it.

    ``toolkit``/``nvcc``/``cudart`` are Debian versions (upstream-revision) of the
    ``cuda-toolkit-X-Y``, ``cuda-nvcc-X-Y`` and ``cuda-cudart-X-Y`` packages; ``built_on``
    and ``build`` are the lines of that release's ``nvcc --version``.
    """

    major: int
    minor: int
    toolkit: str
    nvcc: str
    cudart: str
    built_on: str
    build: str

    @property
    def dotted(self) -> str:
        """``12.8``: the release as in ``/usr/local/cuda-12.8``."""
        return f"{self.major}.{self.minor}"

    @property
    def dashed(self) -> str:
        """``12-8``: the release as in package names (``cuda-toolkit-12-8``)."""
        return f"{self.major}-{self.minor}"

    @property
    def priority(self) -> int:
        """update-alternatives priority: major*10+minor (128, 130, 131), growing with releases."""
        return self.major * 10 + self.minor

    @property
    def sdk_version(self) -> str:
        """``12.8.1``: the toolkit version without Debian revision (``version.json`` "cuda")."""
        return self.toolkit.split("-")[0]

    @property
    def nvcc_upstream(self) -> str:
        return self.nvcc.split("-")[0]

    @property
    def cudart_upstream(self) -> str:
        return self.cudart.split("-")[0]

    def nvcc_version_text(self) -> str:
        """The exact text ``nvcc --version`` prints for this release (five lines)."""
        return (
            "nvcc: NVIDIA (R) Cuda compiler driver\n"
            "Copyright (c) 2005-2025 NVIDIA Corporation\n"
            f"Built on {self.built_on}\n"
            f"Cuda compilation tools, release {self.dotted}, V{self.nvcc_upstream}\n"
            f"Build {self.build}\n"
        )


# Versions and nvcc banners as given for the project (the real 12.8.1 / 13.0.2 / 13.1.0).
CUDA_RELEASES: tuple[CudaRelease, ...] = (
    CudaRelease(
        12,
        8,
        toolkit="12.8.1-1",
        nvcc="12.8.93-1",
        cudart="12.8.90-1",
        built_on="Fri_Feb_21_20:23:50_PST_2025",
        build="cuda_12.8.r12.8/compiler.35583870_0",
    ),
    CudaRelease(
        13,
        0,
        toolkit="13.0.2-1",
        nvcc="13.0.88-1",
        cudart="13.0.96-1",
        built_on="Wed_Aug_20_01:58:59_PM_PDT_2025",
        build="cuda_13.0.r13.0/compiler.36424714_0",
    ),
    CudaRelease(
        13,
        1,
        toolkit="13.1.0-1",
        nvcc="13.1.80-1",
        cudart="13.1.80-1",
        built_on="Fri_Nov__7_07:23:37_PM_PST_2025",
        build="cuda_13.1.r13.1/compiler.36836380_0",
    ),
)


@dataclass(frozen=True)
class DriverChain:
    """NVIDIA's metapackages above ``cuda-toolkit-X-Y`` for one release, down to the driver.

    ``cuda-X-Y`` Depends ``cuda-runtime-X-Y (>= X.Y.Z)`` and ``cuda-toolkit-X-Y (>= X.Y.Z)``;
    ``cuda-runtime-X-Y`` Depends ``cuda-drivers (>= <driver>)``; ``cuda-drivers`` (at ``driver``
    with Debian revision) Depends ``nvidia-driver (>= <driver>)``, and the repository carries
    ``nvidia-driver``, ``nvidia-alternative``, ``libnvidia-ml1`` and ``libcuda1`` at that
    version. Installing ``cuda-X-Y`` on a host with an older driver therefore upgrades the
    driver's packages: the hazard the toolkit step's apt transaction refuses.

    Which of these facts come from a record of the real repository and which are *unverified*
    is written in ``records/apt/nvidia-cuda-metapackages.md``: the shape of the three stanzas
    is NVIDIA's (``cuda-11-5``, ``cuda-runtime-11-8``, ``cuda-drivers`` of ubuntu2604), the
    13.0 / 580.95.05 stanzas themselves were not found.
    """

    release: str
    driver: str

    @property
    def driver_upstream(self) -> str:
        """``580.95.05``: the driver version without Debian revision."""
        return self.driver.split("-")[0]


# 13.0 Update 2 (cuda-toolkit-13-0 13.0.2-1) with the driver it bundles and requires,
# 580.95.05 (CUDA Toolkit Release Notes, Table 3: cuda13_upgrade.versions.DRIVER_TABLE;
# NVIDIA's local installer cuda-repo-<distro>-13-0-local_13.0.2-580.95.05-1).
DRIVER_CHAINS: tuple[DriverChain, ...] = (DriverChain(release="13.0", driver="580.95.05-1"),)


@dataclass(frozen=True)
class DriverBuild:
    """One build of Ubuntu's ``nvidia-graphics-drivers-<branch>`` source package (noble).

    Its stand-ins (``driverdebs.py``) carry the names, version, version bounds and relations
    of ``debian/control`` of canonical/nvidia-graphics-drivers at ``commit`` (branch
    ``git_branch``), quoted in ``records/apt/nvidia-driver-packages-research.md`` (A1, A2);
    what each stand-in keeps and leaves out: ``records/apt/nvidia-driver-standins.md``.
    """

    branch: str
    upstream: str
    version: str
    git_branch: str
    commit: str

    @property
    def source(self) -> str:
        """``nvidia-graphics-drivers-580``: the source package."""
        return f"nvidia-graphics-drivers-{self.branch}"

    @property
    def upper_bound(self) -> str:
        """``580.142-1``: the ``(<= ...)`` bound of the packages bound to one upstream version."""
        return f"{self.upstream}-1"


# debian/changelog tops of the two commits (records/apt/nvidia-driver-packages-research.md, A):
# "nvidia-graphics-drivers-570 (570.211.01-0ubuntu0.24.04.2) noble" ("Release
# 570.211.01-0ubuntu0.24.04.2", 2026-03-06) and "nvidia-graphics-drivers-580
# (580.142-0ubuntu0.24.04.1) noble" (2026-04-28).
DRIVER_BUILDS: tuple[DriverBuild, ...] = (
    DriverBuild(
        branch="570",
        upstream="570.211.01",
        version="570.211.01-0ubuntu0.24.04.2",
        git_branch="570-noble",
        commit="a4ec295b9ea9b14bf9833e1cb3b180ad235ce2af",
    ),
    DriverBuild(
        branch="580",
        upstream="580.142",
        version="580.142-0ubuntu0.24.04.1",
        git_branch="580-noble",
        commit="2eed14444f4f24b1c4c01f15323d34e5e7619f07",
    ),
)
# The flat repository of these stand-ins, signed with the CUDA repository's key.
DRIVER_REPO_PATH = "nvidia-graphics-drivers"
# Ubuntu's debian/control (Source stanza) of both branches names these.
UBUNTU_DRIVER_MAINTAINER = "Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>"
UBUNTU_DRIVER_SECTION = "non-free/libs"
UBUNTU_DRIVER_HOMEPAGE = "http://www.nvidia.com"

APT_REPO_PATH = "cuda/repos/debian12/x86_64"
APT_KEYRING_NAME = "cuda-sandbox-keyring.gpg"
APT_KEY_UID = "CUDA Sandbox Repository <cuda-sandbox@localhost>"
# NVIDIA's packages name this maintainer.
DEB_MAINTAINER = "cudatools <cudatools@nvidia.com>"

# --------------------------------------------------------------------------------------
# Python wheels
# --------------------------------------------------------------------------------------


# Every name, version, Requires-Dist, tag and library below is read from a record in
# sandbox/mirror/records/ (sandbox_mirror.records); a unit test compares each stand-in with
# its record. Only what the records cannot hold is stated here: which index serves a build,
# and torch's arch list (see TORCH_BUILDS).


@dataclass(frozen=True)
class NvidiaWheel:
    """A wheel that holds shared libraries (``nvidia-*``, ``triton``), built from its record.

    ``libs`` are the shared objects' paths inside the real wheel; each becomes a small
    placeholder file. ``imports`` are the packages that get an ``__init__.py`` (``nvidia`` is
    a namespace package and gets none).
    """

    name: str
    version: str
    tag: str
    libs: tuple[str, ...]
    summary: str
    requires: tuple[str, ...] = ()
    requires_python: str | None = None
    imports: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()


def recorded_wheel(name: str, version: str) -> NvidiaWheel:
    """The stand-in description of ``name`` ``version`` from its record."""
    rec = records.load(name, version)
    meta = rec["metadata"]
    return NvidiaWheel(
        name=meta["Name"],
        version=meta["Version"],
        tag=records.wheel_tag(rec),
        libs=tuple(records.shared_objects(rec)),
        summary=meta.get("Summary") or "",
        requires=tuple(imitated_requirements(rec)),
        requires_python=meta.get("Requires-Python"),
        imports=tuple(i for i in rec.get("import_names", []) if i != "nvidia"),
        extras=tuple(meta.get("Provides-Extra", [])),
    )


# Distributions the sandbox builds stand-ins of. A stand-in keeps the Requires-Dist lines of
# its record that name one of these, verbatim, and drops the others (pure-Python libraries
# such as filelock or jinja2 that the simulated server does not need; the record keeps them).
_IMITATED_PATTERN = re.compile(
    r"^(torch|triton|sgl-kernel|flashinfer-python|flashinfer-cubin|flashinfer-jit-cache"
    r"|nvidia-(cuda-nvrtc|cuda-runtime|cuda-cupti|cublas|cufft|curand|cusolver|cusparse|cufile|nvtx"
    r"|nvjitlink)(-cu12)?|nvidia-(cudnn|cusparselt|nccl|nvshmem)-cu1[23])$"
)


def is_imitated(name: str) -> bool:
    """Whether the sandbox's mirror holds a stand-in of the distribution ``name``."""
    return bool(_IMITATED_PATTERN.match(records.normalize(name)))


def imitated_requirements(record: dict) -> list[str]:
    """The record's ``Requires-Dist`` lines that name an imitated distribution, verbatim."""
    return [r for r in records.requires_dist(record) if is_imitated(records.requirement_name(r))]


def _pinned_closure(record: dict, seen: dict[str, NvidiaWheel]) -> None:
    """Add every library wheel ``record`` pins with ``==`` (and what those pin) to ``seen``."""
    for line in imitated_requirements(record):
        name = records.requirement_name(line)
        if not re.match(r"^(nvidia-|triton$|cuda-toolkit$)", name):
            continue
        version = records.exact_pin(record, name)
        if version is None or "*" in version or name in seen:
            continue
        seen[name] = recorded_wheel(name, version)
        _pinned_closure(records.load(name, version), seen)


def library_wheels(record: dict) -> tuple[NvidiaWheel, ...]:
    """The library wheels a torch record pins (CUDA runtime wheels, triton), by name."""
    seen: dict[str, NvidiaWheel] = {}
    _pinned_closure(record, seen)
    return tuple(seen[n] for n in sorted(seen))


@dataclass(frozen=True)
class TorchBuild:
    """A PyTorch wheel build, its facts read from ``records/torch-<version>.json``.

    ``arch_list`` (``torch.cuda.get_arch_list()``) is not in any file of the wheel that the
    recorder reads; where it comes from is said at TORCH_BUILDS.
    """

    version: str
    index: str
    arch_list: tuple[str, ...]
    pythons: tuple[str, ...] = ("cp310", "cp311", "cp312")
    platform: str = "manylinux_2_28_x86_64"

    @property
    def record(self) -> dict:
        return records.load("torch", self.version)

    @property
    def label(self) -> str:
        return self.version.split("+", 1)[1]

    @property
    def cuda(self) -> str:
        """``torch.version.cuda`` as the record states it (``torch/version.py``)."""
        return self.record["runtime"]["torch/version.py"]["cuda"]

    @property
    def requires(self) -> tuple[str, ...]:
        return tuple(imitated_requirements(self.record))

    @property
    def requires_python(self) -> str:
        return self.record["metadata"]["Requires-Python"]

    @property
    def cudart_soname(self) -> str:
        soname = records.cuda_runtime_needed(self.record)
        if soname is None:
            raise ValueError(f"record of torch {self.version} names no libcudart in NEEDED")
        return soname

    @property
    def runpath(self) -> tuple[str, ...]:
        return (RUNTIME_WHEEL_LIBDIR[int(self.cuda.split(".")[0])],)

    @property
    def library_wheels(self) -> tuple[NvidiaWheel, ...]:
        return library_wheels(self.record)


# Where the CUDA runtime wheel of each CUDA major puts libcudart (relative to site-packages):
# the RUNPATH of the libraries built against it (records: nvidia-cuda-runtime-cu12 12.8.90
# ships nvidia/cuda_runtime/lib/libcudart.so.12, nvidia-cuda-runtime 13.0.96
# nvidia/cu13/lib/libcudart.so.13).
RUNTIME_WHEEL_LIBDIR = {12: "nvidia/cuda_runtime/lib", 13: "nvidia/cu13/lib"}

# torch.cuda.get_arch_list() of the cu128 builds is verified for 2.10.0+cu128
# (pytorch/pytorch#182250) and taken for 2.9.1+cu128 (same CUDA 12.8 build matrix). The x86_64
# cu130 list is *unverified*: CUDA 13 drops sm_70 and adds sm_110 (Thor); aarch64 cu130
# builds report ['sm_80', 'sm_90', 'sm_100', 'sm_110', 'sm_120'].
_ARCH_CU128 = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
_ARCH_CU130 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120")
TORCH_BUILDS: tuple[TorchBuild, ...] = (
    TorchBuild(version="2.9.1+cu128", index="whl/cu128", arch_list=_ARCH_CU128),
    TorchBuild(version="2.9.1+cu130", index="whl/cu130", arch_list=_ARCH_CU130),
)


@dataclass(frozen=True)
class KernelBuild:
    """A CUDA-specific build of a kernel wheel (sgl-kernel, flashinfer-jit-cache), from its record."""

    name: str
    version: str
    index: str
    torch_series: str = ""

    @property
    def record(self) -> dict:
        return records.load(self.name, self.version)

    @property
    def label(self) -> str:
        return self.version.split("+", 1)[1]

    @property
    def public(self) -> str:
        return self.version.split("+", 1)[0]

    @property
    def cuda(self) -> str:
        """``12.8`` for ``+cu128``: the CUDA release the local label names."""
        digits = self.label.removeprefix("cu")
        return f"{digits[:-1]}.{digits[-1]}"

    @property
    def cudart_soname(self) -> str:
        soname = records.cuda_runtime_needed(self.record)
        if soname is None:
            raise ValueError(f"record of {self.name} {self.version} names no libcudart in NEEDED")
        return soname

    @property
    def tag(self) -> str:
        return records.wheel_tag(self.record)

    @property
    def requires(self) -> tuple[str, ...]:
        return tuple(imitated_requirements(self.record))

    @property
    def requires_python(self) -> str | None:
        return self.record["metadata"].get("Requires-Python")

    @property
    def summary(self) -> str:
        return self.record["metadata"].get("Summary") or ""


# sgl-kernel wheels as at docs.sglang.ai/whl/cu1xx; each +cuXXX build is compiled against one
# torch series (SGLang 0.5.8 and 0.5.9 pin sgl-kernel 0.3.21 with torch 2.9.1).
SGL_KERNEL_BUILDS: tuple[KernelBuild, ...] = (
    KernelBuild("sgl-kernel", "0.3.21+cu128", "sgl-whl/cu128", torch_series="2.9"),
    KernelBuild("sgl-kernel", "0.3.21+cu130", "sgl-whl/cu130", torch_series="2.9"),
)


@dataclass(frozen=True)
class RealObject:
    """A real shared object, its bytes unchanged, that a stand-in wheel carries.

    ``source`` is the committed copy (relative to the repository root); ``path`` its path
    inside the real wheel (= relative to site-packages), where the stand-in puts it too;
    ``sha256`` the file's, ``wheel`` and ``wheel_sha256`` the real wheel it was taken from,
    ``needed`` the CUDA libraries among its ELF ``NEEDED`` entries (``readelf -d``), in order.
    Each value is the row of ``tests/fixtures/elf/SOURCES.md`` that records the file (a unit
    test compares them); the build refuses a copy whose sha256 differs.
    """

    source: str
    path: str
    sha256: str
    wheel: str
    wheel_sha256: str
    needed: tuple[str, ...]


# sglang-kernel 0.4.0's spatial_ops (PyPI, a CUDA 12 build), tests/fixtures/elf/SOURCES.md.
SPATIAL_OPS_CUDA_12 = RealObject(
    source="tests/fixtures/elf/sglang_kernel-0.4.0/sgl_kernel/spatial_ops.abi3.so",
    path="sgl_kernel/spatial_ops.abi3.so",
    sha256="5acce66b49bb55c2494bca314dc6be5bb4234d88b908f327c8d1f66fd480e129",
    wheel="sglang_kernel-0.4.0-cp310-abi3-manylinux2014_x86_64.whl",
    wheel_sha256="859eb83c312b327d1998ba05b7cfb759d438192117fded43d475ef9f32f284d8",
    needed=("libnvrtc.so.12", "libcuda.so.1", "libcudart.so.12"),
)


@dataclass(frozen=True)
class MixedKernelBuild:
    """A kernel stand-in that mixes CUDA majors: ``build``'s stand-in wheel, the same in every
    file (record, metadata, placeholder objects), plus ``objects``, real shared objects that
    need another CUDA major than the build's label, each at its real path. Served by ``index``,
    which has no real counterpart; the wheel's description says so and names ``field_case``.
    """

    build: KernelBuild
    index: str
    objects: tuple[RealObject, ...]
    field_case: str


# The shape of sgl-project/sglang-omni#620 ("sgl-kernel ships a sm100/common_ops.abi3.so
# binary that is linked against CUDA 12 runtime libraries" on a CUDA 13 host; the report
# names sgl-kernel 0.3.21, no local label): one object of the wheel needs libcudart.so.12.
# Here under the +cu130 label, whose stand-in objects stand for libcudart.so.13 ones, so that
# only a per-object check, blind to the label, can refuse it. The combination is the
# sandbox's: no real sgl-kernel 0.3.21+cu130 wheel is known to carry this object.
MIXED_KERNEL_BUILDS: tuple[MixedKernelBuild, ...] = (
    MixedKernelBuild(
        build=next(b for b in SGL_KERNEL_BUILDS if b.index == "sgl-whl/cu130"),
        index="sgl-whl/cu130-mixed",
        objects=(SPATIAL_OPS_CUDA_12,),
        field_case="sgl-project/sglang-omni#620",
    ),
)

# flashinfer: flashinfer-python and flashinfer-cubin are on PyPI (recorded); the jit-cache
# (precompiled kernels) is per CUDA release at flashinfer.ai/whl/cu1xx. SGLang 0.5.8 pins
# 0.6.1, 0.5.9 pins 0.6.3 (their PKG-INFO).
FLASHINFER_VERSIONS: tuple[str, ...] = ("0.6.1", "0.6.3")
FLASHINFER_JIT_CACHE_BUILDS: tuple[KernelBuild, ...] = (
    KernelBuild("flashinfer-jit-cache", "0.6.1+cu128", "flashinfer-whl/cu128"),
    KernelBuild("flashinfer-jit-cache", "0.6.3+cu128", "flashinfer-whl/cu128"),
    KernelBuild("flashinfer-jit-cache", "0.6.3+cu130", "flashinfer-whl/cu130"),
)

# Symbols the dynamic linker reports missing when sgl-kernel meets another torch build:
# both appear in real sgl-kernel import failures (sgl-project/sglang#13948,
# agentica-project/rllm#8).
UNDEFINED_SYMBOL_OTHER_CUDA = "_ZN3c104cuda9SetDeviceEa"
UNDEFINED_SYMBOL_OTHER_TORCH = "_ZNK3c106SymInt6sym_neERKS0_"

# --------------------------------------------------------------------------------------
# SGLang git repository
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SglangRelease:
    """A release tag of the stand-in SGLang repository, with its fixed commit date."""

    version: str
    date: str
    message: str = field(default="")

    @property
    def tag(self) -> str:
        return f"v{self.version}"


SGLANG_RELEASES: tuple[SglangRelease, ...] = (
    SglangRelease("0.5.8", "2026-01-20T12:00:00+00:00", "Release v0.5.8"),
    SglangRelease("0.5.9", "2026-02-10T12:00:00+00:00", "Release v0.5.9"),
)


def sglang_dependencies(version: str) -> list[str]:
    """What SGLang ``version``'s real ``pyproject.toml`` declares about imitated distributions.

    Read from ``records/sglang-<version>.json`` (the release's sdist, ``pyproject_dependencies``),
    verbatim and in order; the other dependencies (transformers, fastapi, ...) are left out:
    the simulated server needs none of them.
    """
    deps = records.load("sglang", version)["pyproject_dependencies"]
    return [d for d in deps if is_imitated(records.requirement_name(d))]


# Releases whose wheel the mirror's pypi/simple serves (sglang_build_method: wheel), each built
# from the stand-in source tree at that version and from its record's wheel facts (the record
# holds the real wheel under ``wheel_source``: py3-none-any, package ``sglang``, no shared
# objects; its METADATA is the sdist's PKG-INFO).
SGLANG_WHEELS: tuple[str, ...] = ("0.5.9",)

SGLANG_AUTHOR = ("SGLang Sandbox", "sglang-sandbox@localhost")
SGLANG_SOURCE_VERSION = "0.5.9"  # the version written in sandbox/sglang-src
