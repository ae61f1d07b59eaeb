"""A flat apt repository of Ubuntu's NVIDIA driver packages, two branches (``nvidia-graphics-drivers/``).

For each ``catalog.DRIVER_BUILDS`` entry (570.211.01-0ubuntu0.24.04.2 and
580.142-0ubuntu0.24.04.1) the repository holds stand-ins of five binary packages of Ubuntu's
``nvidia-graphics-drivers-<B>`` source package, with their real names, version, version bounds
and relations (``debian/control`` of canonical/nvidia-graphics-drivers, branches 570-noble and
580-noble, quoted in ``records/apt/nvidia-driver-packages-research.md``, A1) and their files at
the real paths (the ``.install`` / ``.links`` files there, A2); ``<V>`` is the upstream version:

* ``nvidia-driver-<B>-open`` (metapackage): Depends on the four below with the record's bounds;
* ``nvidia-dkms-<B>-open``: ``/usr/src/nvidia-<V>/dkms.conf``; Conflicts, Replaces and
  Provides ``nvidia-dkms-kernel``;
* ``nvidia-kernel-source-<B>-open``: ``/usr/src/nvidia-<V>/Kbuild`` and ``Makefile``;
  Conflicts, Replaces and Provides ``nvidia-kernel-source``;
* ``nvidia-kernel-common-<B>``: Provides ``nvidia-kernel-common`` and
  ``nvidia-kernel-common-<B>-<V>``; Conflicts and Replaces ``nvidia-kernel-common``;
* ``libnvidia-compute-<B>``: ``/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<V>`` (placeholder)
  with the links ``libnvidia-ml.so.1`` and ``libnvidia-ml.so``; Provides ``libnvidia-compute``,
  ``libnvidia-ml.so.1 (= <version>)``, ``libnvidia-ml1 (= <version>)``; Conflicts and
  Replaces ``libnvidia-compute``.

The branches' packages have different names but each pair Conflicts with, Replaces and
Provides one virtual name: the "exclusive virtual package" of Debian's package transition
scenarios (https://wiki.debian.org/PackageTransition, case #4, "such as
mail-transport-agent": Provides, Conflicts and Replaces the virtual name). So
``apt-get install nvidia-driver-580-open`` removes the 570 packages, and with them their
``libnvidia-ml.so.570.211.01`` and ``/usr/src/nvidia-570.211.01``, the files the sandbox's
nvidia-smi and modprobe doubles read the driver's two halves from; installing the 570 packages
again removes the 580 ones the same way. ``nvidia-driver-570-open`` and ``-580-open`` conflict
with nothing (as in the record): apt removes the old metapackage because its dependencies go.

Dependencies on packages the sandbox does not carry are left out (``dkms``,
``nvidia-firmware-<B>-<V>``, ``ocl-icd-libopencl1``, the ``${shlibs:Depends}`` libraries, the
driver's other libraries and utilities), and no maintainer scripts are shipped (Ubuntu's
``nvidia-dkms-<B>-open`` scripts run DKMS, which the sandbox lacks). What each stand-in keeps,
and what is left out or unverified: ``records/apt/nvidia-driver-standins.md``.

The repository is signed like the CUDA repository (``apt.write_signed_index``: the same key,
``Packages``, ``Packages.gz``, ``Release``, ``InRelease``, ``Release.gpg`` and the key
``cuda-sandbox-keyring.gpg``); a host adds it as ``deb
[signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg]
http://127.0.0.1:8080/nvidia-graphics-drivers/ /``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sandbox_mirror import catalog
from sandbox_mirror.apt import DebPackage, RepoLabel, build_deb, placeholder_library, write_signed_index
from sandbox_mirror.gpg import Gpg

LIBDIR = "usr/lib/x86_64-linux-gnu"
DRIVER_REPO_LABEL = RepoLabel(
    "Sandbox",
    "nvidia-graphics-drivers (sandbox)",
    "Sandbox stand-ins of Ubuntu's nvidia-graphics-drivers-570 and -580 packages (noble)",
)

# Each package's synopsis and first paragraph of its description, as debian/control has them
# (both branches word them alike).
_DESCRIPTIONS = {
    "nvidia-driver-{b}-open": "NVIDIA driver (open kernel) metapackage",
    "nvidia-dkms-{b}-open": "NVIDIA DKMS package (open kernel module)",
    "nvidia-kernel-source-{b}-open": "NVIDIA kernel source package",
    "nvidia-kernel-common-{b}": "Shared files used with the kernel module",
    "libnvidia-compute-{b}": "NVIDIA libcompute package",
}


def _package(build: catalog.DriverBuild, pattern: str, **kwargs) -> DebPackage:
    name = pattern.format(b=build.branch)
    files = kwargs.pop("files", {})
    files[f"usr/share/doc/{name}/SANDBOX"] = (
        f"{name} {build.version}: no driver code (sandbox stand-in).\n".encode(),
        0o644,
    )
    return DebPackage(
        name,
        build.version,
        _DESCRIPTIONS[pattern],
        files=files,
        source=build.source,
        maintainer=catalog.UBUNTU_DRIVER_MAINTAINER,
        section=catalog.UBUNTU_DRIVER_SECTION,
        homepage=catalog.UBUNTU_DRIVER_HOMEPAGE,
        long_description=(
            f"Sandbox stand-in of Ubuntu's package of this name and version\n"
            f"(canonical/nvidia-graphics-drivers, {build.git_branch}): the same name, version,\n"
            "relations and paths; no driver code."
        ),
        **kwargs,
    )


def _placeholder(text: str) -> bytes:
    return f"# {text}\n".encode()


def driver_packages(build: catalog.DriverBuild) -> list[DebPackage]:
    """The five stand-ins of one build (see the module docstring), the metapackage first."""
    b, v, full = build.branch, build.upstream, build.version

    def bounded(name: str) -> list[str]:
        return [f"{name} (<= {build.upper_bound})", f"{name} (>= {v})"]

    src = f"usr/src/nvidia-{v}"
    common = _package(
        build,
        "nvidia-kernel-common-{b}",
        relations={
            "Conflicts": ["nvidia-kernel-common"],
            "Provides": ["nvidia-kernel-common", f"nvidia-kernel-common-{b}-{v}"],
            "Replaces": ["nvidia-kernel-common"],
        },
    )
    source = _package(
        build,
        "nvidia-kernel-source-{b}-open",
        multi_arch="foreign",
        relations={
            "Conflicts": ["nvidia-kernel-source"],
            "Provides": ["nvidia-kernel-source"],
            "Replaces": ["nvidia-kernel-source"],
        },
        files={
            f"{src}/{name}": (
                _placeholder(
                    f"Sandbox stand-in of NVIDIA-Linux/kernel-open/{name} {v} "
                    f"(nvidia-kernel-source-{b}-open): no kernel module source."
                ),
                0o644,
            )
            for name in ("Kbuild", "Makefile")
        },
    )
    dkms = _package(
        build,
        "nvidia-dkms-{b}-open",
        multi_arch="foreign",
        depends=bounded(source.name) + bounded(common.name),
        relations={
            "Conflicts": ["nvidia-dkms-kernel"],
            "Provides": ["nvidia-dkms-kernel"],
            "Replaces": ["nvidia-dkms-kernel"],
        },
        files={
            f"{src}/dkms.conf": (
                _placeholder(
                    f"Sandbox stand-in of nvidia-dkms-{b}-open's dkms.conf: the sandbox has no DKMS, "
                    "nothing is built."
                )
                + f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{v}"\n'.encode(),
                0o644,
            )
        },
    )
    ml = f"libnvidia-ml.so.{v}"
    compute = _package(
        build,
        "libnvidia-compute-{b}",
        multi_arch="same",
        depends=[f"nvidia-kernel-common-{b}-{v}"],
        relations={
            "Conflicts": ["libnvidia-compute"],
            "Provides": [
                "libnvidia-compute",
                f"libnvidia-ml.so.1 (= {full})",
                f"libnvidia-ml1 (= {full})",
            ],
            "Replaces": ["libnvidia-compute"],
        },
        files={
            f"{LIBDIR}/{ml}": (
                placeholder_library("libnvidia-ml.so.1", f"libnvidia-compute-{b} {full}"),
                0o644,
            )
        },
        symlinks={f"{LIBDIR}/libnvidia-ml.so.1": ml, f"{LIBDIR}/libnvidia-ml.so": "libnvidia-ml.so.1"},
    )
    meta = _package(
        build,
        "nvidia-driver-{b}-open",
        depends=[
            *bounded(dkms.name),
            *bounded(common.name),
            f"{source.name} (= {full})",
            f"{compute.name} (= {full})",
        ],
    )
    return [meta, dkms, source, common, compute]


def build_driver_repo(
    repo: Path,
    builds: tuple[catalog.DriverBuild, ...],
    gpg: Gpg,
    fingerprint: str,
) -> list[Path]:
    """Build the flat repository in ``repo`` (created), signed with ``fingerprint``; return the .deb files."""
    repo.mkdir(parents=True, exist_ok=True)
    debs: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="sandbox-driver-debs-") as tmp:
        for build in builds:
            for pkg in driver_packages(build):
                debs.append(build_deb(pkg, repo, Path(tmp)))
    write_signed_index(repo, gpg, fingerprint, DRIVER_REPO_LABEL)
    return debs
