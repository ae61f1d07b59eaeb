"""Parser of ``nvcc --version`` (standard library only).

Real output of a CUDA 13.0 toolkit (``tests/fixtures/nvcc/``)::

    nvcc: NVIDIA (R) Cuda compiler driver
    Copyright (c) 2005-2025 NVIDIA Corporation
    Built on Wed_Aug_20_01:58:59_PM_PDT_2025
    Cuda compilation tools, release 13.0, V13.0.88
    Build cuda_13.0.r13.0/compiler.36424714_0

The "release" is the toolkit's MAJOR.MINOR; the "V" number is nvcc's own
component version (13.0.88), not the toolkit's update number: the release
notes' "CUDA Toolkit Major Components" table maps one to the other.
"""

from __future__ import annotations

import re

from cuda13_upgrade.errors import ParseError

__all__ = ["parse_nvcc_version"]

_RELEASE_RE = re.compile(
    r"Cuda compilation tools, release (?P<release>\d+\.\d+), V(?P<version>\d+\.\d+\.\d+)"
)
_BUILT_RE = re.compile(r"^Built on (?P<built>\S+)\s*$")
_BUILD_RE = re.compile(r"^Build (?P<build>\S+)\s*$")


def parse_nvcc_version(text: str) -> dict[str, str | None]:
    """Parse the output of ``nvcc --version``.

    Args:
        text: stdout of ``nvcc --version`` (or ``nvcc -V``).

    Returns:
        ``{"release": "13.0", "version": "13.0.88",
        "built_on": "Wed_Aug_20_01:58:59_PM_PDT_2025",
        "build": "cuda_13.0.r13.0/compiler.36424714_0"}``; ``built_on`` and
        ``build`` are ``None`` when those lines are absent.

    Raises:
        ParseError: no ``Cuda compilation tools, release X.Y, VX.Y.Z`` line, or a
            release that disagrees with its V number; the message quotes the
            output (its first line when it is long).
    """
    if not isinstance(text, str):
        raise ParseError(
            "nvcc --version output must be text",
            text,
            option="text",
            remedy="pass the command's stdout",
        )
    match = _RELEASE_RE.search(text)
    if match is None:
        lines = [line for line in text.splitlines() if line.strip()]
        quoted = text if len(lines) <= 1 else lines[0]
        raise ParseError(
            "no 'Cuda compilation tools, release X.Y, VX.Y.Z' line in nvcc --version output",
            quoted,
            remedy="run the toolkit's own nvcc (e.g. /usr/local/cuda-13.0/bin/nvcc --version); "
            "'command not found' means the toolkit is not installed or not on PATH",
        )
    release, version = match.group("release"), match.group("version")
    if not version.startswith(release + "."):
        raise ParseError(
            "nvcc release and version disagree",
            match.group(0),
            remedy="reinstall the CUDA toolkit; its nvcc is inconsistent",
        )
    built_on = build = None
    for line in text.splitlines():
        built = _BUILT_RE.match(line.strip())
        if built:
            built_on = built.group("built")
        build_match = _BUILD_RE.match(line.strip())
        if build_match:
            build = build_match.group("build")
    return {"release": release, "version": version, "built_on": built_on, "build": build}
