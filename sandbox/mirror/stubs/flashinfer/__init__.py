"""Sandbox stand-in for FlashInfer (``flashinfer-python``, pure wheel on PyPI).

``import flashinfer`` does what the real 0.6 package does at import that matters to the
upgrade:

* when ``flashinfer-cubin`` or ``flashinfer-jit-cache`` is installed, its version must equal
  flashinfer-python's public version, else the real ``RuntimeError: flashinfer-jit-cache
  version (0.6.0+cu130) does not match flashinfer version (0.6.1). Please install the same
  version of both packages. Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check.``
  (``flashinfer/jit/env.py``);
* the jit-cache's precompiled kernels are linked against one CUDA runtime
  (``libcudart.so.12`` for ``+cu128``, ``.so.13`` for ``+cu130``); loading them where that
  runtime is missing fails with ``OSError: libcudart.so.12: cannot open shared object file:
  No such file or directory`` (see ``flashinfer.jit.core``).
"""

from __future__ import annotations

import torch  # noqa: F401  (the real package imports torch first)

from flashinfer.jit import core as _core
from flashinfer.jit import env as _env
from flashinfer.version import __version__ as __version__

FLASHINFER_AOT_DIR = _env.FLASHINFER_AOT_DIR
_core.load_prebuilt_kernels(FLASHINFER_AOT_DIR)

__all__ = ["FLASHINFER_AOT_DIR", "__version__"]
