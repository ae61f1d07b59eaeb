"""Session fixtures of the sandbox's package mirror and simulated SGLang (no containers).

The helpers live in ``sandbox/mirror/sandbox_mirror/testkit.py``; the fixtures below build the
mirror once per session into a temporary directory, serve it with ``python3 -m http.server``
on a free loopback port, and make one venv per CUDA stack with SGLang built into it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# pip reads the machine's global configuration even with --isolated (a build
# machine's /etc/xdg/pip/pip.conf adds "constraint = ...torch<=2.14.1"), and
# that would change what the tests' own indexes resolve: pip loads no
# configuration file at all when PIP_CONFIG_FILE is os.devnull (pip's
# configuration docs), for the tests and the pip runs they start.
os.environ["PIP_CONFIG_FILE"] = os.devnull

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox" / "mirror"))

from sandbox_mirror import builder, catalog, testkit  # noqa: E402

_RELEASES = {r.dotted: r for r in catalog.CUDA_RELEASES}


@pytest.fixture(scope="session")
def sandbox_mirror(tmp_path_factory) -> builder.BuildResult:
    """The mirror, built with a throw-away signing key."""
    root = tmp_path_factory.mktemp("sandbox")
    result = builder.build_mirror(root / "mirror", root / "gnupg")
    if not any(n.startswith("wheel-") for n in result.manifest["indexes"]["pypi/simple"]):
        pytest.fail("no genuine wheel-*.whl for pypi/simple: apt-get install python3-wheel-whl")
    return result


@pytest.fixture(scope="session")
def mirror_url(sandbox_mirror, tmp_path_factory):
    server = testkit.MirrorServer(sandbox_mirror.out, tmp_path_factory.mktemp("http") / "log")
    yield server.url
    server.close()


@pytest.fixture(scope="session")
def toolkits(sandbox_mirror, tmp_path_factory) -> dict[str, Path]:
    """CUDA homes of 12.8 and 13.0 unpacked from the mirror's .debs."""
    root = tmp_path_factory.mktemp("toolkits")
    return {v: testkit.extract_toolkit(sandbox_mirror.out, _RELEASES[v], root) for v in ("12.8", "13.0")}


@pytest.fixture(scope="session")
def no_ld_conf(tmp_path_factory) -> Path:
    """An empty ld.so.conf.d, so that this machine's own CUDA libraries are not seen."""
    return tmp_path_factory.mktemp("ld.so.conf.d")


def _stack_venv(tmp_path_factory, mirror_url, tag, sglang_tag, cuda_home) -> testkit.StackVenv:
    root = tmp_path_factory.mktemp(f"venv-{tag}")
    python = testkit.make_venv(root / "venv")
    testkit.install_stack(python, mirror_url, tag)
    clone = testkit.clone_sglang(mirror_url, sglang_tag, root / "sglang")
    testkit.install_sglang(python, clone, cuda_home, "-e")
    return testkit.StackVenv(tag, python, clone, cuda_home)


@pytest.fixture(scope="session")
def venv_cu128(tmp_path_factory, mirror_url, toolkits) -> testkit.StackVenv:
    """The CUDA 12.8 stack with SGLang v0.5.8 built against the 12.8 toolkit."""
    return _stack_venv(tmp_path_factory, mirror_url, "cu128", "v0.5.8", toolkits["12.8"])


@pytest.fixture(scope="session")
def venv_cu130(tmp_path_factory, mirror_url, toolkits) -> testkit.StackVenv:
    """The CUDA 13 stack with SGLang v0.5.9 built against the 13.0 toolkit."""
    return _stack_venv(tmp_path_factory, mirror_url, "cu130", "v0.5.9", toolkits["13.0"])
