"""CUDA component skew: the pip CUDA component wheels, the toolkit's nvcc and torch's CUDA.

NVIDIA ships the CUDA toolkit's components as separate wheels
(``nvidia-cuda-nvcc``, ``nvidia-cuda-crt``, ``nvidia-cuda-cccl``,
``nvidia-nvvm``, ``nvidia-cuda-runtime``, ``nvidia-cuda-nvrtc``,
``nvidia-cuda-cupti``; ``-cu12`` suffixed for CUDA 12), versioned
independently (``13.0.88``, ``13.3.73``). A resolver left free picks each
one's newest release, so a venv can hold nvcc 13.3 next to runtime headers
13.0: CCCL then refuses to compile ("CUDA compiler and CUDA toolkit headers
are incompatible", tests/fixtures/failures/cccl-headers-incompatible.txt), and
FlashInfer's JIT fails at the first request. The release each component
belongs to is its ``major.minor`` (CUDA Toolkit Release Notes, Table 1
"Component Versions": every component of 13.0 Update 1 is 13.0.x).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["CUDA_COMPONENTS", "component_releases", "cuda_component_skew", "toolkit_skew"]

#: The CUDA component wheels whose releases must agree (normalised names, no ``-cu1x``).
CUDA_COMPONENTS: tuple[str, ...] = (
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-nvvm",
    "nvidia-cuda-runtime",
    "nvidia-cuda-nvrtc",
    "nvidia-cuda-cupti",
)

_SUFFIX = re.compile(r"-cu1\d$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def _release(version: str | None) -> str | None:
    match = _RELEASE.match(str(version or ""))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def component_releases(dists: Mapping[str, str | None]) -> dict[str, str]:
    """``{component: "13.0"}`` for the CUDA component wheels in ``dists``.

    ``dists`` maps distribution names (any case, ``_`` or ``-``, with or
    without ``-cu12``/``-cu13``) to versions, as ``pip freeze`` or the stack
    probe gives them.
    """
    out: dict[str, str] = {}
    for name, version in dists.items():
        base = _SUFFIX.sub("", re.sub(r"[-_.]+", "-", str(name)).lower())
        release = _release(version)
        if base in CUDA_COMPONENTS and release:
            out[base] = release
    return out


def cuda_component_skew(
    dists: Mapping[str, str | None],
    *,
    torch_cuda: str | None = None,
    nvcc_release: str | None = None,
) -> list[str]:
    """Name every CUDA release skew of a stack.

    Args:
        dists: ``{distribution: version}`` of the venv.
        torch_cuda: ``torch.version.cuda`` (``"13.0"``), the release torch was built for.
        nvcc_release: the toolkit's ``nvcc --version`` release (``"13.0"``), when
            the toolkit (``CUDA_HOME``) builds the stack's extensions.

    Returns:
        One sentence per skew, naming the wheels, their versions and releases:
        the component wheels on more than one release; components on another
        release than torch's CUDA; the toolkit's nvcc on another release than
        torch's CUDA. Empty when everything agrees.
    """
    releases = component_releases(dists)
    problems: list[str] = []
    by_release: dict[str, list[str]] = {}
    for name, release in sorted(releases.items()):
        by_release.setdefault(release, []).append(name)
    if len(by_release) > 1:
        listing = "; ".join(f"{release}: {', '.join(names)}" for release, names in sorted(by_release.items()))
        problems.append(
            f"the CUDA component wheels are on {len(by_release)} releases ({listing}); nvcc and "
            "the CUDA headers must be one release (CCCL refuses 'CUDA compiler and CUDA toolkit "
            "headers are incompatible')"
        )
    torch_release = _release(torch_cuda)
    if torch_release:
        other = sorted(name for name, release in releases.items() if release != torch_release)
        if other:
            found = ", ".join(f"{name} is {releases[name]}" for name in other)
            problems.append(
                f"torch was built for CUDA {torch_release} but {found}: "
                f"pin the component wheels to {torch_release}.x"
            )
        nvcc = _release(nvcc_release)
        if nvcc and nvcc != torch_release:
            problems.append(
                f"the toolkit's nvcc is CUDA {nvcc} but torch was built for CUDA {torch_release}: "
                f"point CUDA_HOME at a {torch_release} toolkit"
            )
    return problems


def toolkit_skew(nvcc_version_text: str, torch_cuda: str | None) -> list[str]:
    """The skew between the toolkit an extension builds against and torch's CUDA.

    Args:
        nvcc_version_text: the whole output of ``$CUDA_HOME/bin/nvcc --version``.
        torch_cuda: ``torch.version.cuda`` of the venv (``"13.0"``); None or
            empty when torch reports none (a CPU build), which is not compared.

    Returns:
        One sentence when the releases differ (the toolkit's nvcc and the CUDA
        headers torch's extensions include must be one release: FlashInfer's
        JIT and SGLang's source build compile with ``CUDA_HOME``), else ``[]``.

    Raises:
        cuda13_upgrade.errors.ParseError: the text is not nvcc's ``--version``.
    """
    from cuda13_upgrade.nvcc import parse_nvcc_version

    release = parse_nvcc_version(nvcc_version_text)["release"]
    return cuda_component_skew({}, torch_cuda=torch_cuda or None, nvcc_release=release)
