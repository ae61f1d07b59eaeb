"""Stand-in wheels of two stack faults, for sandbox hosts that inject them into the new venv.

Served by the mirror's ``faults/`` index, which has no real counterpart. Each wheel's
name says it is a sandbox stand-in and its description says which real case it has the
shape of; none carries or claims a real distribution's contents, so none has a record
in ``records/`` (``catalog`` and ``standins.all_specs`` hold the stand-ins of real
distributions only).

* ``sandbox-overlap-standin-a`` and ``sandbox-overlap-standin-b`` 1.0: both install
  ``sandbox_overlap_standin/shared.py``, with different contents, and
  ``sandbox_overlap_standin/__init__.py``, with the same. The shape of
  ``nvidia-cutlass-dsl[cu13]`` before 4.6, whose ``-libs-base`` and ``-libs-cu13`` "write
  to the same `site-packages` paths with different content" (sgl-project/sglang PR
  #25938, NVIDIA/cutlass#3170): pip installs both without a word and the one installed
  last wins.
* ``sandbox-compat-libcuda-standin`` 1.0: ``sandbox_compat_libcuda_standin/lib/libcuda.so.1``
  and ``.../libcuda.so.580.65.06``, the same placeholder bytes (a wheel holds no
  symlinks), standing for the libcuda of NVIDIA's ``cuda-compat-13-0`` package of CUDA
  13.0 GA, which is built from that release's driver, 580.65.06 (NVIDIA CUDA
  Compatibility, "Forward Compatibility"; the CUDA Toolkit Release Notes' Table 3,
  ``cuda13_upgrade.versions.DRIVER_TABLE``): a forward-compatibility libcuda inside the
  venv, the shape of QuipNetwork/quip-miner#24 (an image that bundles
  ``/usr/local/cuda/compat/libcuda.so``).
"""

from __future__ import annotations

import json

from sandbox_mirror.wheels import WheelSpec

#: The mirror's index of these wheels (no real counterpart).
FAULTS_INDEX = "faults"

#: The file both overlap stand-ins install, with different contents (relative to site-packages).
OVERLAP_PATH = "sandbox_overlap_standin/shared.py"
#: The compat libcuda stand-in's files (relative to site-packages) and the version it stands for.
COMPAT_LIBCUDA_DIR = "sandbox_compat_libcuda_standin/lib"
COMPAT_LIBCUDA_VERSION = "580.65.06"

_TAG = "py3-none-any"


def _note(text: str) -> str:
    return (
        "Sandbox stand-in built by sandbox/mirror/build.py of the cuda13-upgrade project and "
        f"served by its index {FAULTS_INDEX}/, which has no real counterpart. {text} It carries "
        "no real distribution's contents."
    )


def overlap_specs() -> list[WheelSpec]:
    """The two overlap stand-ins (see the module docstring)."""
    specs = []
    for letter in ("a", "b"):
        files = {
            "sandbox_overlap_standin/__init__.py": b'"""Sandbox stand-in package, the same in both."""\n',
            OVERLAP_PATH: (
                '"""Sandbox stand-in: written by both sandbox-overlap-standin-a and -b."""\n\n'
                f'WRITTEN_BY = "sandbox-overlap-standin-{letter}"\n'
            ).encode(),
        }
        specs.append(
            WheelSpec(
                name=f"sandbox-overlap-standin-{letter}",
                version="1.0",
                tag=_TAG,
                files=files,
                metadata=(("Summary", "Sandbox stand-in: one of two wheels that write one path"),),
                description=_note(
                    f"It and sandbox-overlap-standin-{'b' if letter == 'a' else 'a'} both install "
                    f"`{OVERLAP_PATH}` with different contents: the shape of nvidia-cutlass-dsl-libs-base "
                    "and -libs-cu13 before 4.6 (sgl-project/sglang PR #25938, NVIDIA/cutlass#3170)."
                ),
                purelib=True,
            )
        )
    return specs


def compat_libcuda_spec() -> WheelSpec:
    """The compat libcuda stand-in (see the module docstring)."""
    placeholder = (
        "SANDBOX-PLACEHOLDER-SO\n"
        + json.dumps(
            {"library": "libcuda.so.1", "stands_for": f"cuda-compat libcuda {COMPAT_LIBCUDA_VERSION}"},
            sort_keys=True,
        )
        + "\n"
    ).encode()
    files = {
        "sandbox_compat_libcuda_standin/__init__.py": b'"""Sandbox stand-in package."""\n',
        f"{COMPAT_LIBCUDA_DIR}/libcuda.so.1": placeholder,
        f"{COMPAT_LIBCUDA_DIR}/libcuda.so.{COMPAT_LIBCUDA_VERSION}": placeholder,
    }
    return WheelSpec(
        name="sandbox-compat-libcuda-standin",
        version="1.0",
        tag=_TAG,
        files=files,
        metadata=(("Summary", "Sandbox stand-in: a forward-compatibility libcuda inside the venv"),),
        description=_note(
            f"It installs `{COMPAT_LIBCUDA_DIR}/libcuda.so.1` and `libcuda.so.{COMPAT_LIBCUDA_VERSION}`, "
            "placeholders standing for the libcuda of NVIDIA's cuda-compat-13-0 (CUDA 13.0 GA, driver "
            f"{COMPAT_LIBCUDA_VERSION}): the shape of QuipNetwork/quip-miner#24."
        ),
        purelib=True,
    )


def fault_specs() -> list[tuple[str, WheelSpec]]:
    """Every fault stand-in as (index path, spec)."""
    return [(FAULTS_INDEX, spec) for spec in [*overlap_specs(), compat_libcuda_spec()]]
