"""Stand-in for ``torch.cuda``: device queries answered from environment variables.

The sandbox has no GPU, so by default this behaves like real torch on a machine without a
driver: ``is_available()`` is False, ``device_count()`` is 0, ``get_arch_list()`` is ``[]``
(real torch returns an empty list when CUDA is unavailable) and the per-device queries raise
the real ``RuntimeError: Found no NVIDIA driver on your system. ...``.

``SANDBOX_TORCH_CUDA_AVAILABLE=1`` pretends a driver and GPUs are there:

* ``SANDBOX_TORCH_DEVICE_COUNT`` (default ``8``),
* ``SANDBOX_TORCH_DEVICE_NAME`` (default ``NVIDIA RTX PRO 6000 Blackwell Server Edition``),
* ``SANDBOX_TORCH_DEVICE_CAPABILITY`` (default ``12.0``),
* ``SANDBOX_TORCH_DEVICE_MEMORY_MIB`` (default ``97887``).

``get_arch_list()`` then returns the build's list (``torch._C._cuda_getArchFlags()``),
like the real wheel's, e.g. ``['sm_70', ..., 'sm_100', 'sm_120']`` for 2.10.0+cu128.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch import _C

_NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
    "installed a driver from http://www.nvidia.com/Download/index.aspx"
)


@dataclass(frozen=True)
class _CudaDeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
            f"minor={self.minor}, total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def is_available() -> bool:
    """True only when ``SANDBOX_TORCH_CUDA_AVAILABLE=1`` (the sandbox has no GPU)."""
    return os.environ.get("SANDBOX_TORCH_CUDA_AVAILABLE") == "1"


def device_count() -> int:
    """Number of visible GPUs: 0 without a driver, else ``SANDBOX_TORCH_DEVICE_COUNT``."""
    if not is_available():
        return 0
    return int(os.environ.get("SANDBOX_TORCH_DEVICE_COUNT", "8"))


def get_arch_list() -> list[str]:
    """Architectures this build was compiled for; ``[]`` when CUDA is unavailable."""
    if not is_available():
        return []
    return _C._cuda_getArchFlags().split()


def _lazy_init() -> None:
    if not is_available():
        raise RuntimeError(_NO_DRIVER)


def _check_device(device: int | None) -> int:
    _lazy_init()
    index = 0 if device is None else int(getattr(device, "index", device) or 0)
    if not 0 <= index < device_count():
        raise RuntimeError("CUDA error: invalid device ordinal")
    return index


def current_device() -> int:
    """Index of the current device (always 0)."""
    _lazy_init()
    return 0


def get_device_capability(device: int | None = None) -> tuple[int, int]:
    """Compute capability ``(major, minor)``, ``(12, 0)`` for RTX PRO 6000 Blackwell."""
    _check_device(device)
    major, minor = os.environ.get("SANDBOX_TORCH_DEVICE_CAPABILITY", "12.0").split(".")
    return int(major), int(minor)


def get_device_name(device: int | None = None) -> str:
    """Marketing name of the device."""
    _check_device(device)
    return os.environ.get("SANDBOX_TORCH_DEVICE_NAME", "NVIDIA RTX PRO 6000 Blackwell Server Edition")


def get_device_properties(device: int | None = None) -> _CudaDeviceProperties:
    """Name, capability, memory (bytes) and SM count of the device."""
    major, minor = get_device_capability(device)
    mib = int(os.environ.get("SANDBOX_TORCH_DEVICE_MEMORY_MIB", "97887"))
    return _CudaDeviceProperties(get_device_name(device), major, minor, mib * 1024 * 1024, 188)
