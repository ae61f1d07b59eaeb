"""How sgl-kernel 0.3.x finds and loads its compiled ops, imitated for the sandbox.

The real ``sgl_kernel/load_utils.py`` picks ``sm90/`` or ``sm100/common_ops.abi3.so`` by
the GPU's compute capability, falls back to ``common_ops.*`` beside the package and to a plain
``import common_ops``, and when all fail raises one ``ImportError`` whose text starts with
``[sgl_kernel] CRITICAL: Could not load any common_ops library!`` and lists each attempt's
error. Here the ``.so`` is a placeholder the sandbox loader resolves (see
``torch._sandbox_loader``): a wheel built for another torch/CUDA than the one installed fails
with the real ``...common_ops.abi3.so: undefined symbol: _ZN...`` line, and a missing CUDA
runtime with ``libcudart.so.12: cannot open shared object file: No such file or directory``.

``_preload_cuda_library`` follows the real one (called after the ops are loaded): find
``CUDA_HOME`` (``$CUDA_HOME``, ``$CUDA_PATH``, the directory above ``nvcc`` on PATH, else
``/usr/local/cuda``) and load ``libcudart.so.<major>`` from its ``lib``/``lib64`` directory
when it is there; ``RuntimeError: Could not find CUDA lib directory.`` when it has neither.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
from pathlib import Path

import torch
from torch import _sandbox_loader

from sgl_kernel import _sandbox_build

logger = logging.getLogger(__name__)


def _get_compute_capability() -> int | None:
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    return major * 10 + minor


def _runpath() -> tuple[str, ...]:
    site = Path(__file__).resolve().parent.parent
    return tuple(str(site / rel) for rel in _sandbox_build.RUNPATH)


def _load_architecture_specific_ops():
    """Load ``common_ops`` for this GPU; ImportError with the real CRITICAL text on failure."""
    compute_capability = _get_compute_capability()
    sgl_kernel_dir = Path(__file__).parent
    if compute_capability == 90:
        ops_subdir, variant_name = "sm90", "SM90 (Hopper/H100 with fast math optimization)"
    elif compute_capability is not None:
        ops_subdir = "sm100"
        variant_name = f"SM{compute_capability} (precise math for compatibility)"
    else:
        ops_subdir, variant_name = "sm100", "CPU/No GPU detected (using precise math)"

    errors: list[Exception] = []
    ops_pattern = str(sgl_kernel_dir / ops_subdir / "common_ops.*")
    matching_files = sorted(glob.glob(ops_pattern))
    for path in matching_files[:1]:
        try:
            return _sandbox_loader.load_extension(path, _runpath())
        except ImportError as exc:
            errors.append(exc)

    alt_pattern = str(sgl_kernel_dir / "common_ops.*")
    alt_matching_files = sorted(glob.glob(alt_pattern))
    for path in alt_matching_files[:1]:
        try:
            return _sandbox_loader.load_extension(path, _runpath())
        except ImportError as exc:
            errors.append(exc)

    try:
        import common_ops  # noqa: F401  (the backward-compatible last attempt)
    except ImportError as exc:
        errors.append(exc)

    details = "\n".join(f"- {type(err).__name__}: {err}" for err in errors)
    raise ImportError(
        f"""
[sgl_kernel] CRITICAL: Could not load any common_ops library!

Attempted locations:
1. Architecture-specific pattern: {ops_pattern} - found files: {matching_files}
2. Fallback pattern: {alt_pattern} - found files: {alt_matching_files}
3. Standard Python import: common_ops - failed

GPU Info:
- Compute capability: {compute_capability}
- Expected variant: {variant_name}

Please ensure sgl_kernel is properly installed with:
pip install --upgrade sgl_kernel

Error details from previous import attempts:
{details}
"""
    )


def _find_cuda_home() -> str:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home is None:
        nvcc_path = shutil.which("nvcc")
        if nvcc_path is not None:
            cuda_home = os.path.dirname(os.path.dirname(nvcc_path))
        else:
            cuda_home = "/usr/local/cuda"
    return cuda_home


def _preload_cuda_library() -> None:
    """Load ``libcudart.so.<major>`` from CUDA_HOME like the real wheel (RTLD_GLOBAL)."""
    soname = _sandbox_build.CUDART_SONAME
    cuda_home = Path(_find_cuda_home())
    if (cuda_home / "lib").is_dir():
        cuda_path = cuda_home / "lib"
    elif (cuda_home / "lib64").is_dir():
        cuda_path = cuda_home / "lib64"
    else:
        for path in cuda_home.rglob(soname):
            cuda_path = path.parent
            break
        else:
            raise RuntimeError("Could not find CUDA lib directory.")
    if (cuda_path / soname).exists():
        _sandbox_loader.load_library(soname, (str(cuda_path),))
