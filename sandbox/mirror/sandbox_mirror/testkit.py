"""Helpers to exercise the mirror and the simulated SGLang on one machine, without containers.

Used by the pytest suite (``tests/conftest.py``, ``tests/test_mirror.py``,
``tests/test_sim_server.py``, ``tests/test_bench_serving.py``) and handy by hand:

* ``MirrorServer`` -- ``python3 -m http.server`` on a free loopback port, as the host runs it;
* ``clean_env`` -- an environment without the machine's pip settings (``PIP_*`` variables and
  config files: ``PIP_CONFIG_FILE=/dev/null``), CUDA or loader variables, so that only the
  mirror and the given toolkit are seen;
* ``make_venv``/``pip``/``install_stack``/``install_sglang`` -- a venv with a cu128 or cu130
  stack from the mirror and the stand-in SGLang built from a clone of ``git/sglang.git``;
* ``extract_toolkit`` -- a CUDA toolkit as the .debs install it (``dpkg-deb -x``) into a
  directory, to serve as ``CUDA_HOME``;
* ``SimServer`` -- ``python -m sglang.launch_server`` started and waited for (``/health``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sandbox_mirror.catalog import APT_REPO_PATH, CudaRelease

_DROP_PREFIXES = ("PIP_", "PYTHON", "VIRTUAL_ENV", "CUDA_", "LD_", "SGLANG_", "SANDBOX_", "TORCH_")


def clean_env(**extra: str) -> dict[str, str]:
    """``os.environ`` without pip/CUDA/loader settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_PREFIXES)}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", LC_ALL="C.UTF-8")
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen) -> None:
    """Terminate one process this module started, then kill it if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class MirrorServer:
    """``python3 -m http.server --bind 127.0.0.1 <port> --directory <mirror>``."""

    def __init__(self, directory: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "wb")  # noqa: SIM115 (kept open while the server runs)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                str(self.port),
                "--directory",
                str(directory),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
        )
        if not wait_port(self.port, 15, self.proc):
            self.close()
            raise RuntimeError(f"http.server did not start on {self.url}; see {log}")

    def close(self) -> None:
        stop(self.proc)
        self._log.close()


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300):
    """Run ``cmd``; raise with its output when it fails."""
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def make_venv(path: Path) -> Path:
    """A fresh venv made with this interpreter; returns its python."""
    run([sys.executable, "-m", "venv", str(path)], clean_env())
    return path / "bin" / "python"


def pip(python: Path, *args: str, env: dict[str, str] | None = None):
    """``python -m pip install`` with no cache and no configuration but ``args``."""
    cmd = [
        str(python),
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--disable-pip-version-check",
        *args,
    ]
    return run(cmd, env or clean_env())


def stack_requirements(tag: str) -> list[str]:
    """The stack of one CUDA tag, pinned with local labels: ``cu128`` the sandbox's running
    stack (SGLang 0.5.8's pins), ``cu130`` the target (SGLang 0.5.9's pins)."""
    flashinfer = FLASHINFER_OF_TAG[tag]
    return [
        f"torch==2.9.1+{tag}",
        f"sgl-kernel==0.3.21+{tag}",
        f"flashinfer-python=={flashinfer}",
        f"flashinfer-cubin=={flashinfer}",
        f"flashinfer-jit-cache=={flashinfer}+{tag}",
        "wheel",
    ]


# flashinfer of each stack: SGLang 0.5.8 pins 0.6.1, 0.5.9 pins 0.6.3 (their PKG-INFO).
FLASHINFER_OF_TAG = {"cu128": "0.6.1", "cu130": "0.6.3"}


def index_args(mirror_url: str, tag: str, kernel_index: str | None = None) -> list[str]:
    """``--index-url`` PyTorch's index, extra indexes for sgl-kernel (``kernel_index``, default
    ``sgl-whl/<tag>``), flashinfer and PyPI."""
    return [
        "--index-url",
        f"{mirror_url}/whl/{tag}",
        "--extra-index-url",
        f"{mirror_url}/{kernel_index or f'sgl-whl/{tag}'}",
        "--extra-index-url",
        f"{mirror_url}/flashinfer-whl/{tag}",
        "--extra-index-url",
        f"{mirror_url}/pypi/simple",
    ]


def install_stack(python: Path, mirror_url: str, tag: str, kernel_index: str | None = None) -> None:
    """torch first (the way the PyTorch docs say), then the kernels and flashinfer
    (sgl-kernel from ``kernel_index``, see :func:`index_args`)."""
    pip(
        python,
        "--index-url",
        f"{mirror_url}/whl/{tag}",
        "--extra-index-url",
        f"{mirror_url}/pypi/simple",
        f"torch==2.9.1+{tag}",
    )
    pip(python, *index_args(mirror_url, tag, kernel_index), *stack_requirements(tag)[1:])


def extract_toolkit(mirror_dir: Path, release: CudaRelease, root: Path) -> Path:
    """Unpack ``cuda-nvcc-X-Y`` and ``cuda-cudart-X-Y`` into ``root``; return the CUDA home."""
    repo = mirror_dir / APT_REPO_PATH
    for deb in (
        f"cuda-nvcc-{release.dashed}_{release.nvcc}_amd64.deb",
        f"cuda-cudart-{release.dashed}_{release.cudart}_amd64.deb",
    ):
        run(["dpkg-deb", "-x", str(repo / deb), str(root)], clean_env())
    return root / "usr" / "local" / f"cuda-{release.dotted}"


def clone_sglang(mirror_url: str, tag: str, dest: Path) -> Path:
    run(
        [
            "git",
            "-c",
            "advice.detachedHead=false",
            "clone",
            "-q",
            "--branch",
            tag,
            f"{mirror_url}/git/sglang.git",
            str(dest),
        ],
        clean_env(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1"),
    )
    return dest


def install_sglang(python: Path, source: Path, cuda_home: Path, *extra: str) -> dict:
    """``pip install --no-index --no-build-isolation <extra> source/python`` against ``cuda_home``.

    ``extra`` are more pip arguments (``-e`` for editable, ``--no-deps --target DIR``...); the
    dependencies must already be installed. Returns the build info the build wrote.
    """
    env = clean_env(CUDA_HOME=str(cuda_home))
    pip(python, "--no-index", "--no-build-isolation", *extra, str(source / "python"), env=env)
    return json.loads((source / "python" / "sglang" / "_build_info.json").read_text())


@dataclass
class StackVenv:
    """A venv with a stack, and the SGLang clone installed into it."""

    tag: str
    python: Path
    sglang: Path
    cuda_home: Path


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class SimServer:
    """``python -m sglang.launch_server`` on a free loopback port, waited for until healthy."""

    def __init__(self, python: Path, env: dict[str, str], log_dir: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = log_dir / f"server-{self.port}.out"
        self.stderr_path = log_dir / f"server-{self.port}.err"
        self._out = open(self.stdout_path, "wb")  # noqa: SIM115
        self._err = open(self.stderr_path, "wb")  # noqa: SIM115
        cmd = [
            str(python),
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/sandbox-model",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *args,
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=self._err)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if http_get(self.url + "/health", timeout=1)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.close()
        raise RuntimeError(f"server did not become healthy:\n{self.stderr_path.read_text()}")

    def close(self) -> None:
        stop(self.proc)
        self._out.close()
        self._err.close()
