"""Stand-in for ``flashinfer/jit/env.py``: the version checks of the kernel wheels.

The texts are the real ones. A kernel wheel's version may carry a CUDA local label
(``0.6.1+cu130``); only its public version is compared with flashinfer-python's.
``FLASHINFER_DISABLE_VERSION_CHECK`` set to anything skips the checks, as in the real package.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

from flashinfer.version import __version__ as flashinfer_version

_package_root = pathlib.Path(__file__).resolve().parents[1]


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _check(package: str, version: str) -> None:
    if os.getenv("FLASHINFER_DISABLE_VERSION_CHECK"):
        return
    if _public(version) != _public(flashinfer_version):
        raise RuntimeError(
            f"{package} version ({version}) does not match "
            f"flashinfer version ({flashinfer_version}). "
            "Please install the same version of both packages. "
            "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
        )


def has_flashinfer_cubin() -> bool:
    return importlib.util.find_spec("flashinfer_cubin") is not None


def has_flashinfer_jit_cache() -> bool:
    return importlib.util.find_spec("flashinfer_jit_cache") is not None


def _get_cubin_dir() -> pathlib.Path:
    if has_flashinfer_cubin():
        import flashinfer_cubin

        _check("flashinfer-cubin", flashinfer_cubin.__version__)
        return pathlib.Path(flashinfer_cubin.get_cubin_dir())
    return pathlib.Path.home() / ".cache" / "flashinfer" / "cubins"


def _get_aot_dir() -> pathlib.Path:
    if has_flashinfer_jit_cache():
        import flashinfer_jit_cache

        _check("flashinfer-jit-cache", flashinfer_jit_cache.__version__)
        return pathlib.Path(flashinfer_jit_cache.get_jit_cache_dir())
    return _package_root / "data" / "aot"


FLASHINFER_CUBIN_DIR: pathlib.Path = _get_cubin_dir()
FLASHINFER_AOT_DIR: pathlib.Path = _get_aot_dir()
