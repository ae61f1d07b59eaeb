"""Load the GPU stack the way SGLang's start does, and describe what was loaded.

``check_stack`` imports, in this order, torch, sgl_kernel and flashinfer (each raises its own
real error when the installed builds do not fit together), then loads the CUDA runtime this
SGLang tree was built against (``_build_info.json``, written by ``python/setup.py``). That
last step fails like the dynamic linker:
``OSError: libcudart.so.12: cannot open shared object file: No such file or directory`` when
``libcudart.so.<major>`` is neither already loaded (by torch) nor in ``LD_LIBRARY_PATH``, the
toolkit at ``$CUDA_HOME/lib64`` (``CUDA_HOME`` defaults to ``/usr/local/cuda``) or the venv's
nvidia runtime wheel (``nvidia/cuda_runtime/lib``, ``nvidia/cu13/lib``).

Unlike the wheels' libraries (``torch._sandbox_loader``), this check does not look in
``/etc/ld.so.conf.d``: a tree built against CUDA 12.8 must not start in a CUDA 13 venv just
because the 12.8 toolkit is still installed beside 13.x -- the upgrade must rebuild the tree.
"""

from __future__ import annotations

import glob
import importlib
import importlib.metadata
import json
import os
import sys
import sysconfig
from pathlib import Path

BUILD_INFO_PATH = Path(__file__).resolve().parents[1] / "_build_info.json"


def read_build_info() -> dict:
    """The build record of this tree, ``{}`` when it was never built."""
    try:
        return json.loads(BUILD_INFO_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cuda_home() -> str:
    return os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"


def cudart_search_dirs() -> list[str]:
    """Where ``libcudart.so.N`` is looked for, in order (see the module docstring)."""
    site = sysconfig.get_paths()["purelib"]
    env = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    toolkit = [os.path.join(cuda_home(), "lib64")]
    wheels = [os.path.join(site, "nvidia", "cuda_runtime", "lib")]
    wheels += sorted(glob.glob(os.path.join(site, "nvidia", "cu[0-9]*", "lib")))
    return [*env, *toolkit, *wheels]


def _loaded_by_torch() -> dict[str, str]:
    try:
        from torch import _sandbox_loader
    except ImportError:
        return {}
    return _sandbox_loader.loaded()


def load_cuda_runtime(info: dict) -> str | None:
    """Find the ``libcudart`` this tree was built against; OSError like ``dlopen`` if absent."""
    version = info.get("cuda_version")
    if not version:
        return None
    soname = f"libcudart.so.{version.split('.')[0]}"
    already = _loaded_by_torch().get(soname)
    if already:
        return already
    for directory in cudart_search_dirs():
        candidate = os.path.join(directory, soname)
        if os.path.exists(candidate):
            return candidate
    raise OSError(f"{soname}: cannot open shared object file: No such file or directory")


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_stack() -> dict:
    """Import torch, sgl_kernel, flashinfer and load SGLang's CUDA runtime; describe them.

    Raises whatever the first failing layer raises (OSError, ImportError, RuntimeError),
    with the real text; the caller lets it end the process.
    """
    # In SGLang's order: torch, the kernels its layers import, the attention backend.
    torch = importlib.import_module("torch")
    importlib.import_module("sgl_kernel")
    importlib.import_module("flashinfer")

    info = read_build_info()
    cudart = load_cuda_runtime(info)
    return {
        "python": sys.executable,
        "venv": sys.prefix,
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda},
        "torch_cuda_available": torch.cuda.is_available(),
        "sgl_kernel": _dist_version("sgl-kernel"),
        "flashinfer_python": _dist_version("flashinfer-python"),
        "flashinfer_cubin": _dist_version("flashinfer-cubin"),
        "flashinfer_jit_cache": _dist_version("flashinfer-jit-cache"),
        "cuda_home": cuda_home(),
        "cuda_home_resolved": os.path.realpath(cuda_home()),
        "build_info": info,
        "sglang_cudart": cudart,
        "loaded_libraries": _loaded_by_torch(),
    }
