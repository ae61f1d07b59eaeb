"""Sandbox stand-in for ``flashinfer-jit-cache`` (flashinfer.ai/whl/cu1xx).

Holds FlashInfer's precompiled kernels for one CUDA release; its version carries the CUDA
label (``0.6.1+cu130``). The kernels here are placeholders naming the CUDA runtime they were
linked against (see ``torch._sandbox_loader``).
"""

from __future__ import annotations

import pathlib

from flashinfer_jit_cache._sandbox_build import __version__ as __version__


def get_jit_cache_dir() -> str:
    """Directory of the precompiled kernels (the real function has this name)."""
    return str(pathlib.Path(__file__).resolve().parent / "jit_cache")
