"""setuptools entry of the stand-in SGLang: records what the tree is built against.

Everything else is declared in ``pyproject.toml``, as in SGLang's ``python/`` directory. Each
build (``pip install -e python/``, a wheel build) first writes ``sglang/_build_info.json``:

* ``cuda_home`` -- ``$CUDA_HOME``, else ``$CUDA_PATH``, else ``/usr/local/cuda`` (and the path
  it resolves to, e.g. ``/usr/local/cuda-12.8`` through the alternatives links);
* ``cuda_version``/``nvcc_version`` -- from ``$CUDA_HOME/bin/nvcc --version``
  (``Cuda compilation tools, release 12.8, V12.8.93``), null when there is no nvcc;
* ``torch_cuda_arch_list`` -- ``$TORCH_CUDA_ARCH_LIST``;
* ``torch_version``/``torch_cuda`` -- of the torch importable at build time, if any;
* ``git_commit`` -- ``git rev-parse HEAD`` of the source tree, if it is a git checkout.

At run time the server needs ``libcudart.so.<major of cuda_version>`` (see
``sglang/srt/stack.py``), like a build whose extensions link the CUDA runtime of the toolkit
they were compiled with.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
BUILD_INFO = HERE / "sglang" / "_build_info.json"


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _torch_build() -> tuple[str | None, str | None]:
    code = "import torch; print(torch.__version__); print(torch.version.cuda)"
    lines = (_run([sys.executable, "-c", code]) or "").split()
    return (lines[0], lines[1]) if len(lines) >= 2 else (None, None)


def _now() -> str:
    utc = datetime.timezone.utc  # noqa: UP017 (datetime.UTC needs Python 3.11; SGLang runs on 3.10)
    return datetime.datetime.now(utc).isoformat(timespec="seconds")


def build_info() -> dict:
    """What this build is made against (see the module docstring)."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc_out = _run([os.path.join(cuda_home, "bin", "nvcc"), "--version"]) or ""
    match = re.search(r"release (\d+\.\d+), V(\d+(?:\.\d+)*)", nvcc_out)
    commit = _run(["git", "rev-parse", "HEAD"], cwd=HERE)
    torch_version, torch_cuda = _torch_build()
    return {
        "cuda_home": cuda_home,
        "cuda_home_resolved": os.path.realpath(cuda_home),
        "cuda_version": match.group(1) if match else None,
        "nvcc_version": match.group(2) if match else None,
        "torch_cuda_arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        "torch_version": torch_version,
        "torch_cuda": None if torch_cuda == "None" else torch_cuda,
        "git_commit": commit.strip() if commit else None,
        "built_at": _now(),
    }


def write_build_info() -> dict:
    info = build_info()
    BUILD_INFO.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if info["cuda_version"] is None:
        print(f"sglang: no nvcc under {info['cuda_home']}: built without CUDA")
    else:
        print(f"sglang: building against CUDA {info['cuda_version']} ({info['cuda_home']})")
    return info


write_build_info()
setup()
