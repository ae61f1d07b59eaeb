"""Stand-in for ``torch._C`` (the compiled core): only the build facts the sandbox needs."""

from __future__ import annotations

from torch import _sandbox_build


def _cuda_getArchFlags() -> str:  # noqa: N802 (the real private name)
    """Space-separated architectures this build carries code for, e.g. ``sm_90 sm_100``."""
    return " ".join(_sandbox_build.CUDA_ARCH_LIST)


def _cuda_getCompiledVersion() -> int:  # noqa: N802 (the real private name)
    """CUDA version the build was compiled with, as an integer (12080 for 12.8)."""
    major, minor = _sandbox_build.CUDA_VERSION.split(".")
    return int(major) * 1000 + int(minor) * 10
