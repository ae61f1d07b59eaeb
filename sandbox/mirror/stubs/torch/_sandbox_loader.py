"""What the dynamic linker would do with the stand-in wheels' shared libraries.

The sandbox has no GPU and its wheels hold no machine code: every ``.so`` in them is a small
text placeholder. This module resolves a library name (``libcudart.so.13``) the way
``ld.so(8)`` does, in this order:

1. libraries this process already loaded (a soname is loaded once per process);
2. ``LD_LIBRARY_PATH``;
3. the loading object's RUNPATH (for the wheels: their ``nvidia/*/lib`` directories);
4. the directories of ``/etc/ld.so.conf.d/*.conf`` (what ``ldconfig`` caches; NVIDIA's
   ``cuda-toolkit-*-config-common`` packages put ``/usr/local/cuda*/targets/*/lib`` there).
   ``SANDBOX_LD_SO_CONF_D`` replaces that directory (tests point it at an empty one);
5. the default directories ``/lib/x86_64-linux-gnu``, ``/usr/lib/x86_64-linux-gnu``, ``/lib``,
   ``/usr/lib``.

A library that is not found fails with the real loader's message,
``OSError: libcudart.so.12: cannot open shared object file: No such file or directory``.

An extension placeholder (``common_ops.abi3.so`` of sgl-kernel, the kernels of
flashinfer-jit-cache) is a first line ``SANDBOX-PLACEHOLDER-SO`` followed by JSON:
``{"needed": [sonames], "torch": {"series": "2.10", "cuda": "13.0"}}`` -- its DT_NEEDED
entries and the libtorch build whose C++ symbols it links against.
"""

from __future__ import annotations

import glob
import json
import os

PLACEHOLDER_MAGIC = "SANDBOX-PLACEHOLDER-SO"
DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib")

_loaded: dict[str, str] = {}


def cannot_open(soname: str) -> OSError:
    """The error ``dlopen`` reports for a library found nowhere (as ctypes raises it)."""
    return OSError(f"{soname}: cannot open shared object file: No such file or directory")


def ld_so_conf_dirs() -> list[str]:
    """Directories listed in ``/etc/ld.so.conf.d/*.conf`` (or ``$SANDBOX_LD_SO_CONF_D``)."""
    conf_d = os.environ.get("SANDBOX_LD_SO_CONF_D", "/etc/ld.so.conf.d")
    dirs: list[str] = []
    for conf in sorted(glob.glob(os.path.join(conf_d, "*.conf"))):
        try:
            with open(conf, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("include"):
                dirs.append(line)
    return dirs


def search_dirs(runpath: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The directories searched for a library not yet loaded, in the dynamic linker's order."""
    env = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return [*env, *runpath, *ld_so_conf_dirs(), *DEFAULT_DIRS]


def find_library(soname: str, runpath: tuple[str, ...] | list[str] = ()) -> str | None:
    """Path the dynamic linker would use for ``soname``, or None when it has none."""
    if soname in _loaded:
        return _loaded[soname]
    for directory in search_dirs(runpath):
        candidate = os.path.join(directory, soname)
        if os.path.exists(candidate):
            return candidate
    return None


def load_library(soname: str, runpath: tuple[str, ...] | list[str] = ()) -> str:
    """Load ``soname`` into this process (record it) and return its path; OSError if absent."""
    path = find_library(soname, runpath)
    if path is None:
        raise cannot_open(soname)
    _loaded.setdefault(soname, path)
    return path


def loaded() -> dict[str, str]:
    """Sonames loaded so far in this process, with the file each came from."""
    return dict(_loaded)


def read_placeholder(path: str) -> dict:
    """The JSON description of an extension placeholder (``{}`` for a plain library)."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().strip()
        if first != PLACEHOLDER_MAGIC:
            raise ImportError(f"{path}: invalid ELF header")
        body = fh.read().strip()
    return json.loads(body) if body else {}


def load_extension(path: str, runpath: tuple[str, ...] | list[str] = ()) -> dict:
    """``dlopen`` an extension placeholder: resolve its DT_NEEDED, then its torch symbols.

    Raises ImportError with the loader's text: ``<soname>: cannot open shared object file``
    for a missing library, ``<path>: undefined symbol: <mangled name>`` when the libtorch in
    this process is not the build the extension was linked against.
    """
    desc = read_placeholder(path)
    for soname in desc.get("needed", []):
        try:
            load_library(soname, runpath)
        except OSError as exc:
            raise ImportError(str(exc)) from None
    wanted = desc.get("torch")
    if wanted:
        from torch import version  # the libtorch this process loaded

        series = ".".join(version.__version__.split("+")[0].split(".")[:2])
        if series != wanted["series"]:
            raise ImportError(f"{path}: undefined symbol: {wanted['symbol_other_torch']}")
        if version.cuda != wanted["cuda"]:
            raise ImportError(f"{path}: undefined symbol: {wanted['symbol_other_cuda']}")
    return desc
