"""Names, versions and relations that the sandbox's stand-in packages carry.

Everything here imitates a real artifact; where a value comes from is said beside it.
Values marked *unverified* are the closest public evidence found, not a copy of the real
metadata file: change them here and every index, wheel and .deb follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

APT_REPO_PATH = "cuda/repos/debian12/x86_64"
APT_KEYRING_NAME = "cuda-sandbox-keyring.gpg"
APT_KEY_UID = "CUDA Sandbox Repository <cuda-sandbox@localhost>"
# NVIDIA's packages name this maintainer.
DEB_MAINTAINER = "cudatools <cudatools@nvidia.com>"

# --------------------------------------------------------------------------------------
# Python wheels
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvidiaWheel:
    """A CUDA runtime wheel (``nvidia-*``) that holds shared libraries only.

    ``libs`` are paths inside the wheel; each becomes a small placeholder file.
    """

    name: str
    version: str
    tags: tuple[str, ...]
    libs: tuple[str, ...]
    summary: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class CudaToolkitWheel:
    """The ``cuda-toolkit`` meta wheel newer PyTorch builds depend on with extras."""

    version: str
    extras: dict[str, str]


@dataclass(frozen=True)
class TorchBuild:
    """A PyTorch wheel build: version with local label, CUDA release, and what it requires."""

    version: str
    cuda: str
    index: str
    arch_list: tuple[str, ...]
    requires: tuple[str, ...]
    cudart_soname: str
    runpath: tuple[str, ...]
    pythons: tuple[str, ...] = ("cp310", "cp311", "cp312")
    platform: str = "manylinux_2_28_x86_64"

    @property
    def label(self) -> str:
        return self.version.split("+", 1)[1]


# Where the CUDA runtime wheel of each CUDA major puts libcudart (relative to site-packages):
# the RUNPATH of the libraries built against it.
RUNTIME_WHEEL_LIBDIR = {12: "nvidia/cuda_runtime/lib", 13: "nvidia/cu13/lib"}

_MANYLINUX_2014 = ("manylinux2014_x86_64", "manylinux_2_17_x86_64")
_MANYLINUX_2_27 = ("manylinux_2_27_x86_64",)
_LINUX = 'platform_system == "Linux"'


def _cu12(name: str, version: str, libs: tuple[str, ...], summary: str, tags=_MANYLINUX_2014):
    return NvidiaWheel(name, version, tags, libs, summary)


# torch 2.10.0+cu128's CUDA dependencies, versions as pip resolves them for torch 2.10.0
# (public listings of "NVIDIA runtime libs (transitive from torch 2.10.0)"). The cu12 wheels
# keep one directory per component: nvidia/<component>/lib.
CU128_WHEELS: tuple[NvidiaWheel, ...] = (
    _cu12(
        "nvidia-cuda-nvrtc-cu12",
        "12.8.93",
        ("nvidia/cuda_nvrtc/lib/libnvrtc.so.12",),
        "NVRTC native runtime libraries",
    ),
    _cu12(
        "nvidia-cuda-runtime-cu12",
        "12.8.90",
        ("nvidia/cuda_runtime/lib/libcudart.so.12",),
        "CUDA Runtime native Libraries",
    ),
    _cu12(
        "nvidia-cuda-cupti-cu12",
        "12.8.90",
        ("nvidia/cuda_cupti/lib/libcupti.so.12",),
        "CUDA profiling tools runtime libs.",
    ),
    _cu12(
        "nvidia-cudnn-cu12",
        "9.10.2.21",
        ("nvidia/cudnn/lib/libcudnn.so.9",),
        "cuDNN runtime libraries",
        _MANYLINUX_2_27,
    ),
    _cu12(
        "nvidia-cublas-cu12",
        "12.8.4.1",
        ("nvidia/cublas/lib/libcublas.so.12", "nvidia/cublas/lib/libcublasLt.so.12"),
        "CUBLAS native runtime libraries",
        _MANYLINUX_2_27,
    ),
    _cu12(
        "nvidia-nccl-cu12",
        "2.27.5",
        ("nvidia/nccl/lib/libnccl.so.2",),
        "NVIDIA Collective Communication Library (NCCL) Runtime",
    ),
    _cu12(
        "nvidia-nvshmem-cu12",
        "3.4.5",
        ("nvidia/nvshmem/lib/libnvshmem_host.so.3",),
        "NVSHMEM creates a global address space for data that spans the memory of multiple GPUs.",
    ),
    _cu12(
        "nvidia-nvtx-cu12",
        "12.8.90",
        ("nvidia/nvtx/lib/libnvToolsExt.so.1",),
        "NVIDIA Tools Extension",
    ),
    _cu12(
        "nvidia-nvjitlink-cu12",
        "12.8.93",
        ("nvidia/nvjitlink/lib/libnvJitLink.so.12",),
        "Nvidia JIT LTO Library",
    ),
)

# CUDA 13 runtime wheels dropped the -cu12 style suffix (nvidia-cuda-runtime, nvidia-cublas,
# ...) and share one directory, nvidia/cu13/lib; cuDNN, NCCL and NVSHMEM keep a -cu13 name
# and their own directories. Versions: the set that cuda-toolkit 13.0.2 pins (runtime
# 13.0.96, nvrtc 13.0.88, cupti 13.0.85, cublas 13.1.0.3, nvjitlink 13.0.88, nvtx 13.0.85).
# cuDNN/NCCL for torch 2.10.0+cu130 are *unverified* (torch 2.9's cu130 pins).
_CU13_COMMON: tuple[NvidiaWheel, ...] = (
    _cu12("nvidia-cuda-nvrtc", "13.0.88", ("nvidia/cu13/lib/libnvrtc.so.13",), "NVRTC runtime"),
    _cu12(
        "nvidia-cuda-runtime",
        "13.0.96",
        ("nvidia/cu13/lib/libcudart.so.13",),
        "CUDA Runtime native Libraries",
    ),
    _cu12(
        "nvidia-cuda-cupti",
        "13.0.85",
        ("nvidia/cu13/lib/libcupti.so.13",),
        "CUDA profiling tools runtime libs.",
    ),
    _cu12(
        "nvidia-cublas",
        "13.1.0.3",
        ("nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/lib/libcublasLt.so.13"),
        "CUBLAS native runtime libraries",
        _MANYLINUX_2_27,
    ),
    _cu12(
        "nvidia-nvjitlink",
        "13.0.88",
        ("nvidia/cu13/lib/libnvJitLink.so.13",),
        "Nvidia JIT LTO Library",
    ),
    _cu12(
        "nvidia-nvtx",
        "13.0.85",
        ("nvidia/cu13/lib/libnvtx3interop.so.1",),
        "NVIDIA Tools Extension",
    ),
    _cu12(
        "nvidia-nvshmem-cu13",
        "3.4.5",
        ("nvidia/nvshmem/lib/libnvshmem_host.so.3",),
        "NVSHMEM creates a global address space for data that spans the memory of multiple GPUs.",
    ),
)

CU130_WHEELS: tuple[NvidiaWheel, ...] = _CU13_COMMON + (
    _cu12(
        "nvidia-cudnn-cu13",
        "9.13.0.50",
        ("nvidia/cudnn/lib/libcudnn.so.9",),
        "cuDNN runtime libraries",
        _MANYLINUX_2_27,
    ),
    _cu12(
        "nvidia-nccl-cu13",
        "2.27.7",
        ("nvidia/nccl/lib/libnccl.so.2",),
        "NVIDIA Collective Communication Library (NCCL) Runtime",
    ),
)

# Nightly 2.11 builds depend on the cuda-toolkit meta wheel with extras (torch >= 2.11),
# plus cuDNN 9.17.1.4 and NCCL 2.28.9 (public 2026-02 nightly install logs).
NIGHTLY_CU130_WHEELS: tuple[NvidiaWheel, ...] = _CU13_COMMON + (
    _cu12(
        "nvidia-cudnn-cu13",
        "9.17.1.4",
        ("nvidia/cudnn/lib/libcudnn.so.9",),
        "cuDNN runtime libraries",
        _MANYLINUX_2_27,
    ),
    _cu12(
        "nvidia-nccl-cu13",
        "2.28.9",
        ("nvidia/nccl/lib/libnccl.so.2",),
        "NVIDIA Collective Communication Library (NCCL) Runtime",
    ),
)

CUDA_TOOLKIT_WHEEL = CudaToolkitWheel(
    version="13.0.2",
    extras={
        "cudart": "nvidia-cuda-runtime==13.0.96.*",
        "nvrtc": "nvidia-cuda-nvrtc==13.0.88.*",
        "cupti": "nvidia-cuda-cupti==13.0.85.*",
        "cublas": "nvidia-cublas==13.1.0.3.*",
        "nvjitlink": "nvidia-nvjitlink==13.0.88.*",
        "nvtx": "nvidia-nvtx==13.0.85.*",
    },
)


def _pins(wheels: tuple[NvidiaWheel, ...]) -> tuple[str, ...]:
    return tuple(f"{w.name}=={w.version}; {_LINUX}" for w in wheels)


# What a torch >= 2.11 build pins itself, beside the cuda-toolkit[...] meta requirement.
_OWN_PINS_CU13 = ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-nvshmem-cu13")


# torch.cuda.get_arch_list() of 2.10.0+cu128 is verified (pytorch/pytorch#182250). The x86_64
# cu130 list is *unverified*: CUDA 13 drops sm_70 and adds sm_110 (Thor); aarch64 cu130
# builds report ['sm_80', 'sm_90', 'sm_100', 'sm_110', 'sm_120'].
TORCH_BUILDS: tuple[TorchBuild, ...] = (
    TorchBuild(
        version="2.10.0+cu128",
        cuda="12.8",
        index="whl/cu128",
        arch_list=("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
        requires=_pins(CU128_WHEELS),
        cudart_soname="libcudart.so.12",
        runpath=("nvidia/cuda_runtime/lib",),
    ),
    TorchBuild(
        version="2.10.0+cu130",
        cuda="13.0",
        index="whl/cu130",
        arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"),
        requires=_pins(CU130_WHEELS),
        cudart_soname="libcudart.so.13",
        runpath=("nvidia/cu13/lib",),
    ),
    TorchBuild(
        version="2.11.0.dev20260215+cu130",
        cuda="13.0",
        index="whl/nightly/cu130",
        arch_list=("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"),
        requires=(
            f"cuda-toolkit[cublas,cudart,cupti,nvjitlink,nvrtc,nvtx]=={CUDA_TOOLKIT_WHEEL.version}; {_LINUX}",
            *_pins(tuple(w for w in NIGHTLY_CU130_WHEELS if w.name in _OWN_PINS_CU13)),
        ),
        cudart_soname="libcudart.so.13",
        runpath=("nvidia/cu13/lib",),
    ),
)

TORCH_INDEX_WHEELS: dict[str, tuple[NvidiaWheel, ...]] = {
    "whl/cu128": CU128_WHEELS,
    "whl/cu130": CU130_WHEELS,
    "whl/nightly/cu130": NIGHTLY_CU130_WHEELS,
}


@dataclass(frozen=True)
class KernelBuild:
    """A CUDA-specific build of a kernel wheel (sgl-kernel, flashinfer-jit-cache)."""

    version: str
    cuda: str
    index: str
    cudart_soname: str
    torch_series: str = ""

    @property
    def label(self) -> str:
        return self.version.split("+", 1)[1]

    @property
    def public(self) -> str:
        return self.version.split("+", 1)[0]


# sgl-kernel wheels as at docs.sglang.ai/whl/cu1xx: cp310-abi3-manylinux2014_x86_64; each
# +cuXXX build is compiled against one torch series and CUDA release.
SGL_KERNEL_TAG = "cp310-abi3-manylinux2014_x86_64"
SGL_KERNEL_BUILDS: tuple[KernelBuild, ...] = (
    KernelBuild("0.3.21+cu128", "12.8", "sgl-whl/cu128", "libcudart.so.12", torch_series="2.10"),
    KernelBuild("0.3.21+cu130", "13.0", "sgl-whl/cu130", "libcudart.so.13", torch_series="2.10"),
)

# flashinfer: flashinfer-python and flashinfer-cubin are pure wheels on PyPI; the jit-cache
# (precompiled kernels) is per CUDA release at flashinfer.ai/whl/cu1xx.
FLASHINFER_VERSION = "0.6.1"
FLASHINFER_JIT_CACHE_TAG = "cp39-abi3-manylinux_2_28_x86_64"
FLASHINFER_JIT_CACHE_BUILDS: tuple[KernelBuild, ...] = (
    KernelBuild("0.6.1+cu128", "12.8", "flashinfer-whl/cu128", "libcudart.so.12"),
    KernelBuild("0.6.1+cu130", "13.0", "flashinfer-whl/cu130", "libcudart.so.13"),
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
SGLANG_AUTHOR = ("SGLang Sandbox", "sglang-sandbox@localhost")
SGLANG_SOURCE_VERSION = "0.5.9"  # the version written in sandbox/sglang-src
