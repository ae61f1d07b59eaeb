"""Stand-in for loading FlashInfer's ahead-of-time compiled kernels.

The real package loads a kernel module (through tvm-ffi's ``dlopen``) when an op first runs;
SGLang runs them while it warms up and captures CUDA graphs, so a jit-cache built for another
CUDA major fails the server's start. The stand-in loads every kernel placeholder of the AOT
directory at import and raises the loader's ``OSError`` for a CUDA runtime it cannot find.
"""

from __future__ import annotations

import pathlib

from torch import _sandbox_loader


def load_prebuilt_kernels(aot_dir: pathlib.Path) -> list[str]:
    """Load the placeholders under ``aot_dir``; return their paths. OSError if a lib is missing."""
    paths = sorted(str(p) for p in aot_dir.rglob("*.so")) if aot_dir.is_dir() else []
    for path in paths:
        try:
            _sandbox_loader.load_extension(path)
        except ImportError as exc:
            raise OSError(str(exc)) from None
    return paths
