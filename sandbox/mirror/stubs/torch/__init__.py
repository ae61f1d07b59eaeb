"""Sandbox stand-in for PyTorch (the ``torch`` wheel of download.pytorch.org/whl/cu1xx).

It has no tensors. It imitates what the CUDA 13 upgrade looks at:

* ``torch.__version__`` with the local label (``2.10.0+cu130``) and ``torch.version.cuda``
  (``"13.0"``), as generated into ``torch/version.py`` by the mirror build;
* the import-time load of the CUDA runtime from the ``nvidia-*`` wheels (real torch preloads
  them in ``_load_global_deps``): ``import torch`` fails with
  ``OSError: libcudart.so.13: cannot open shared object file: No such file or directory``
  when the runtime wheel is missing (e.g. installed with ``--no-deps``);
* ``torch.cuda`` queries (``is_available``, ``device_count``, ``get_arch_list``,
  ``get_device_capability``...). The sandbox has no GPU: ``is_available()`` is False unless
  ``SANDBOX_TORCH_CUDA_AVAILABLE=1`` (see ``torch.cuda``).
"""

from __future__ import annotations

import os as _os

from torch import _sandbox_build, _sandbox_loader
from torch.version import __version__ as __version__

_site = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_sandbox_loader.load_library(
    _sandbox_build.CUDART_SONAME,
    tuple(_os.path.join(_site, rel) for rel in _sandbox_build.RUNPATH),
)

from torch import _C as _C  # noqa: E402
from torch import cuda as cuda  # noqa: E402
from torch import version as version  # noqa: E402

__all__ = ["__version__", "cuda", "version"]
