"""Sandbox stand-in for sgl-kernel (``sgl_kernel``, wheels of docs.sglang.ai/whl/cu1xx).

Each wheel is built for one CUDA release and one torch series (``0.3.21+cu130`` for torch
2.10 built with CUDA 13.0). ``import sgl_kernel`` does what the real package does at import:
imports torch, loads ``sm100/common_ops.abi3.so``, then preloads the CUDA runtime from
``CUDA_HOME`` (``RuntimeError: Could not find CUDA lib directory.`` when it has none). The
ops fail to load with the real ``ImportError`` text when the wheel does not match the
installed torch (``undefined symbol``) or its CUDA runtime is missing
(``libcudart.so.N: cannot open shared object file``). See ``sgl_kernel.load_utils``.
"""

from __future__ import annotations

import torch

from sgl_kernel.load_utils import _load_architecture_specific_ops, _preload_cuda_library
from sgl_kernel.version import __version__ as __version__

# The real order: load the ops for this GPU, then preload the CUDA runtime of CUDA_HOME.
common_ops = _load_architecture_specific_ops()
if torch.version.cuda is not None:
    _preload_cuda_library()

__all__ = ["__version__", "common_ops"]
