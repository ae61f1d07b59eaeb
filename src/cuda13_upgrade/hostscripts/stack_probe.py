#!/usr/bin/env python3
"""Describe the Python stack of the interpreter that runs this script.

Runs on the managed host, with the venv's own interpreter (``<venv>/bin/python
stack_probe.py [MODULE ...]``), standard library only. The modules to import
default to torch, sgl_kernel, flashinfer and sglang. Prints one JSON object::

    {"python": "3.11.2", "prefix": "/opt/ml-env-cu130",
     "dists": {"torch": "2.10.0+cu130", ...},          # normalized name -> version
     "torch": {"version": "2.10.0+cu130", "cuda": "13.0", "cuda_available": false,
               "device_count": 0, "arch_list": ["sm_75", ...]} | null,
     "imports": {"torch": null, "sgl_kernel": null, "flashinfer": "ImportError: ..."}}

``imports`` maps each module to ``null`` when it imports, or the exception's
last line when it does not (the text a server would die with). Exit status 0
whenever the probe itself ran; the caller decides what the findings mean.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import platform
import re
import sys
import traceback

MODULES = ("torch", "sgl_kernel", "flashinfer", "sglang")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    dists = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if name:
            dists[_normalize(name)] = dist.version
    imports: dict[str, str | None] = {}
    for module in sys.argv[1:] or MODULES:
        try:
            importlib.import_module(module)
            imports[module] = None
        except Exception:  # noqa: BLE001 - the text is what is reported
            imports[module] = traceback.format_exc().strip().splitlines()[-1]
    torch_info = None
    if imports.get("torch") is None:
        torch = sys.modules["torch"]
        cuda = getattr(torch, "cuda", None)
        available = bool(cuda and cuda.is_available())
        torch_info = {
            "version": str(torch.__version__),
            "cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "cuda_available": available,
            "device_count": int(cuda.device_count()) if available else 0,
            "arch_list": list(cuda.get_arch_list()) if cuda else [],
        }
    json.dump(
        {
            "python": platform.python_version(),
            "prefix": sys.prefix,
            "dists": dict(sorted(dists.items())),
            "torch": torch_info,
            "imports": imports,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
