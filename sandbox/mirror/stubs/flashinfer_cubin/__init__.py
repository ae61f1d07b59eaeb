"""Sandbox stand-in for ``flashinfer-cubin`` (PyPI): FlashInfer's prebuilt cubins."""

from __future__ import annotations

import pathlib

from flashinfer_cubin._sandbox_build import __version__ as __version__


def get_cubin_dir() -> str:
    """Directory of the cubins (the real function has this name)."""
    return str(pathlib.Path(__file__).resolve().parent / "cubins")
