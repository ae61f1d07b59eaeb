"""A flat apt repository shaped like NVIDIA's ``cuda/repos/debian12/x86_64/``.

Per CUDA release X.Y the repository holds NVIDIA's package names (stand-ins built with
``dpkg-deb``, architecture amd64):

* ``cuda-toolkit-X-Y`` (meta): Depends on the pieces at exact versions;
* ``cuda-nvcc-X-Y``: ``/usr/local/cuda-X.Y/bin/nvcc``, a shell script printing that release's
  real ``nvcc --version`` text (any other use: ``nvcc fatal   : No input files specified;
  use option --help for more information``, exit 1);
* ``cuda-cudart-X-Y``: ``targets/x86_64-linux/lib/libcudart.so.X.Y.Z`` (placeholder) with the
  ``libcudart.so.X`` and ``libcudart.so`` links, the ``lib64 -> targets/x86_64-linux/lib``
  link, and ``version.json`` in NVIDIA's shape;
* ``cuda-toolkit-X-Y-config-common``: the alternatives. Its postinst registers
  ``/usr/local/cuda`` (group ``cuda``) and ``/usr/local/cuda-X`` (group ``cuda-X``) ->
  ``/usr/local/cuda-X.Y`` with priority X*10+Y; its prerm removes them. In auto mode the
  highest release wins, so installing 13.0 beside 12.8 moves ``/usr/local/cuda`` by itself
  unless the link was set manually (``update-alternatives --set``) -- the hazard the upgrade
  handles. (NVIDIA's own RPMs carry these lines in the toolkit package's scriptlets, see
  NVIDIA/libnvidia-container#117; which .deb carries them is not verified.)
* ``cuda-toolkit-X-config-common``: ``/etc/ld.so.conf.d/988_cuda-X.conf`` and
  ``cuda-toolkit-config-common``: ``/etc/ld.so.conf.d/000_cuda.conf``, the linker paths
  through the alternatives links (file names as on NVIDIA-installed hosts).

Beside the toolkit, the driver's packages (``driver_packages``): ``nvidia-driver``,
``nvidia-alternative``, ``libnvidia-ml1`` and ``libcuda1`` at two versions each, with the names,
versions and the exact-version dependencies among them (``nvidia-alternative (= V)``) of
Debian 12's real records (``records/apt/nvidia-graphics-drivers-debian12.txt``,
``apt-cache show`` of bookworm and bookworm-backports); dependencies on packages the sandbox
does not carry are left out. NVIDIA's debian12 repository builds the same source package
(nvidia-graphics-drivers) under these names.

Above the toolkit, for each ``catalog.DRIVER_CHAINS`` entry (13.0 with driver 580.95.05-1), the
chain of metapackages NVIDIA's repository has (``metapackages``): ``cuda-X-Y`` Depends
``cuda-runtime-X-Y`` and ``cuda-toolkit-X-Y``, ``cuda-runtime-X-Y`` Depends ``cuda-drivers``,
``cuda-drivers`` Depends ``nvidia-driver``; and the four driver packages at that driver version
(``chain_driver_packages``: Debian's 535.261.03-1 stanzas, their exact-version dependencies
among themselves moved to the new version). So ``apt-get install cuda-13-0`` on a host with
an older driver upgrades the driver, as it does from NVIDIA's repository. What each stand-in
states and where it comes from, or that it is unverified: ``records/apt/nvidia-cuda-metapackages.md``.

The repository is flat (``deb [signed-by=...] URL /``): ``Packages``, ``Packages.gz``,
``Release`` with MD5Sum/SHA1/SHA256/SHA512, ``InRelease`` (clearsigned) and ``Release.gpg``
(``write_signed_index``, which ``driverdebs.py`` uses for the mirror's second repository,
Ubuntu's driver packages at ``nvidia-graphics-drivers/``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

from sandbox_mirror.catalog import (
    APT_KEYRING_NAME,
    DEB_MAINTAINER,
    DRIVER_CHAINS,
    SOURCE_DATE_EPOCH,
    CudaRelease,
    DriverChain,
)
from sandbox_mirror.gpg import Gpg

_TARGET_LIB = "targets/x86_64-linux/lib"


@dataclass
class DebPackage:
    """One binary package: control fields, files, links and maintainer scripts."""

    name: str
    version: str
    synopsis: str
    depends: list[str] = field(default_factory=list)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    conffiles: list[str] = field(default_factory=list)
    postinst: str | None = None
    prerm: str | None = None
    # Further control fields, as dpkg-gencontrol orders them: ``relations`` (Conflicts,
    # Provides, Replaces: lists of entries) after Depends, ``multi_arch`` after Architecture.
    # The defaults below are NVIDIA's CUDA packages' (driverdebs.py sets Ubuntu's).
    relations: dict[str, list[str]] = field(default_factory=dict)
    multi_arch: str | None = None
    source: str | None = None
    maintainer: str = DEB_MAINTAINER
    section: str = "multiverse/devel"
    homepage: str = "http://developer.nvidia.com/cuda-zone"
    # The extended description (lines without their leading space); None: the sandbox's
    # standard text for NVIDIA's CUDA packages.
    long_description: str | None = None

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_amd64.deb"


def placeholder_library(soname: str, origin: str) -> bytes:
    """A text placeholder for a shared library (the sandbox runs no GPU code)."""
    body = json.dumps({"library": soname, "from": origin}, sort_keys=True)
    return f"SANDBOX-PLACEHOLDER-SO\n{body}\n".encode()


def nvcc_script(release: CudaRelease) -> bytes:
    """``nvcc`` stand-in: the release's real ``--version`` text, else the real fatal error."""
    return (
        "#!/bin/sh\n"
        f"# Sandbox stand-in for NVIDIA's nvcc of CUDA {release.dotted}: it compiles nothing.\n"
        "# --version/-V print the real text of this release; anything else fails like\n"
        "# nvcc without input files.\n"
        'for arg in "$@"; do\n'
        '  case "$arg" in\n'
        "    --version|-V)\n"
        "      cat <<'EOF'\n"
        f"{release.nvcc_version_text()}"
        "EOF\n"
        "      exit 0 ;;\n"
        "  esac\n"
        "done\n"
        'echo "nvcc fatal   : No input files specified; '
        'use option --help for more information" >&2\n'
        "exit 1\n"
    ).encode()


def version_json(release: CudaRelease) -> bytes:
    """``/usr/local/cuda-X.Y/version.json`` in NVIDIA's shape (name/version per component)."""
    data = {
        "cuda": {"name": "CUDA SDK", "version": release.sdk_version},
        "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": release.cudart_upstream},
        "cuda_nvcc": {"name": "CUDA NVCC", "version": release.nvcc_upstream},
    }
    return (json.dumps(data, indent=3) + "\n").encode()


def _alternatives_postinst(release: CudaRelease) -> str:
    prefix = f"/usr/local/cuda-{release.dotted}"
    return (
        "#!/bin/sh\n"
        "set -e\n"
        'if [ "$1" = "configure" ]; then\n'
        f"    update-alternatives --install /usr/local/cuda cuda {prefix} {release.priority}\n"
        f"    update-alternatives --install /usr/local/cuda-{release.major} "
        f"cuda-{release.major} {prefix} {release.priority}\n"
        "fi\n"
        "exit 0\n"
    )


def _alternatives_prerm(release: CudaRelease) -> str:
    prefix = f"/usr/local/cuda-{release.dotted}"
    return (
        "#!/bin/sh\n"
        "set -e\n"
        'if [ "$1" = "remove" ] || [ "$1" = "deconfigure" ]; then\n'
        f"    update-alternatives --remove cuda {prefix}\n"
        f"    update-alternatives --remove cuda-{release.major} {prefix}\n"
        "fi\n"
        "exit 0\n"
    )


def release_packages(release: CudaRelease) -> list[DebPackage]:
    """The stand-in packages of one CUDA release (see the module docstring)."""
    d, dot, major = release.dashed, release.dotted, release.major
    prefix = f"usr/local/cuda-{dot}"
    lib = f"{prefix}/{_TARGET_LIB}"
    cudart_so = f"libcudart.so.{release.cudart_upstream}"
    config_x_y = DebPackage(
        f"cuda-toolkit-{d}-config-common",
        release.cudart,
        f"Common config package for CUDA Toolkit {dot}.",
        dirs=[prefix],
        # A file of its own: a package whose paths are all shared directories
        # is "disappeared" by dpkg when the toolkit's other packages unpack.
        files={
            f"usr/share/doc/cuda-toolkit-{d}-config-common/README": (
                f"CUDA Toolkit {dot}: alternatives /usr/local/cuda and /usr/local/cuda-{major}.\n".encode(),
                0o644,
            )
        },
        postinst=_alternatives_postinst(release),
        prerm=_alternatives_prerm(release),
    )
    ld_conf_x = f"etc/ld.so.conf.d/988_cuda-{major}.conf"
    config_x = DebPackage(
        f"cuda-toolkit-{major}-config-common",
        release.cudart,
        f"Common config package for CUDA Toolkit {major}.",
        files={ld_conf_x: (f"/usr/local/cuda-{major}/{_TARGET_LIB}\n".encode(), 0o644)},
        conffiles=[f"/{ld_conf_x}"],
    )
    ld_conf = "etc/ld.so.conf.d/000_cuda.conf"
    config = DebPackage(
        "cuda-toolkit-config-common",
        release.cudart,
        "Common config package for CUDA Toolkit.",
        files={ld_conf: (f"/usr/local/cuda/{_TARGET_LIB}\n".encode(), 0o644)},
        conffiles=[f"/{ld_conf}"],
    )
    config_deps = [config_x_y.name, config_x.name, config.name]
    cudart = DebPackage(
        f"cuda-cudart-{d}",
        release.cudart,
        "CUDA Runtime native Libraries",
        depends=list(config_deps),
        files={
            f"{lib}/{cudart_so}": (
                placeholder_library(f"libcudart.so.{major}", f"cuda-cudart-{d} {release.cudart}"),
                0o644,
            ),
            f"{prefix}/version.json": (version_json(release), 0o644),
        },
        symlinks={
            f"{lib}/libcudart.so.{major}": cudart_so,
            f"{lib}/libcudart.so": f"libcudart.so.{major}",
            f"{prefix}/lib64": _TARGET_LIB,
        },
    )
    nvcc = DebPackage(
        f"cuda-nvcc-{d}",
        release.nvcc,
        "CUDA nvcc",
        depends=[f"cuda-cudart-{d} (>= {release.cudart_upstream})"],
        files={f"{prefix}/bin/nvcc": (nvcc_script(release), 0o755)},
    )
    toolkit = DebPackage(
        f"cuda-toolkit-{d}",
        release.toolkit,
        f"CUDA Toolkit {dot} meta-package",
        depends=[
            f"{nvcc.name} (= {nvcc.version})",
            f"{cudart.name} (= {cudart.version})",
            f"{config_x_y.name} (= {config_x_y.version})",
            config_x.name,
            config.name,
        ],
    )
    return [toolkit, nvcc, cudart, config_x_y, config_x, config]


_RECORDS = Path(__file__).resolve().parents[1] / "records"
DRIVER_RECORD = _RECORDS / "apt" / "nvidia-graphics-drivers-debian12.txt"


def driver_packages(record: Path = DRIVER_RECORD) -> list[DebPackage]:
    """Stand-ins of the driver's packages, one per stanza of ``record`` (``apt-cache show``).

    Each keeps its record's ``Package`` and ``Version`` and those of its ``Depends`` that name
    another stand-in (alternatives of one dependency are kept only when all are stand-ins).
    """
    stanzas = [s for s in record.read_text(encoding="utf-8").split("\n\n") if "Package:" in s]
    fields = []
    for stanza in stanzas:
        f: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "#") and ":" in line:
                key, value = line.split(":", 1)
                f[key] = value.strip()
        fields.append(f)
    names = {f["Package"] for f in fields}
    out = []
    for f in fields:
        depends = [
            d.strip()
            for d in f.get("Depends", "").split(",")
            if d.strip() and all(alt.split()[0] in names for alt in d.split("|"))
        ]
        name, version = f["Package"], f["Version"]
        out.append(
            DebPackage(
                name,
                version,
                f"{name} (sandbox stand-in of Debian's nvidia-graphics-drivers)",
                depends=depends,
                files={
                    f"usr/share/doc/{name}/SANDBOX": (f"{name} {version}: no driver code.\n".encode(), 0o644)
                },
            )
        )
    return out


def metapackages(release: CudaRelease, chain: DriverChain) -> list[DebPackage]:
    """``cuda-X-Y``, ``cuda-runtime-X-Y`` and ``cuda-drivers`` of one release (see the module
    docstring; the dependencies' form is that of NVIDIA's stanzas quoted in
    ``records/apt/nvidia-cuda-metapackages.md``). Dependencies on packages the sandbox does not
    carry (``cuda-libraries-X-Y``, the driver's other packages) are left out."""
    d, dot = release.dashed, release.dotted
    drivers = DebPackage(
        "cuda-drivers",
        chain.driver,
        "CUDA Driver meta-package, branch-agnostic",
        depends=[f"nvidia-driver (>= {chain.driver_upstream})"],
    )
    runtime = DebPackage(
        f"cuda-runtime-{d}",
        release.toolkit,
        f"CUDA Runtime {dot} meta-package",
        depends=[f"{drivers.name} (>= {chain.driver_upstream})"],
    )
    cuda = DebPackage(
        f"cuda-{d}",
        release.toolkit,
        f"CUDA {dot} meta-package",
        depends=[
            f"{runtime.name} (>= {release.sdk_version})",
            f"cuda-toolkit-{d} (>= {release.sdk_version})",
        ],
    )
    return [cuda, runtime, drivers]


def chain_driver_packages(chain: DriverChain, record: Path = DRIVER_RECORD) -> list[DebPackage]:
    """The driver's packages at ``chain.driver``: each package of ``record``'s newest version
    (Debian 12's 535.261.03-1), its exact-version dependencies on the others moved to
    ``chain.driver``. NVIDIA's own stanzas of that version were not found (the record file
    says so); the names and the dependencies among them are Debian's."""
    newest: dict[str, DebPackage] = {}
    for pkg in driver_packages(record):
        if pkg.name not in newest or _dpkg_newer(pkg.version, newest[pkg.name].version):
            newest[pkg.name] = pkg
    out = []
    for name, pkg in newest.items():
        out.append(
            DebPackage(
                name,
                chain.driver,
                f"{name} (sandbox stand-in of NVIDIA's debian12 build of nvidia-graphics-drivers)",
                depends=[d.replace(f"(= {pkg.version})", f"(= {chain.driver})") for d in pkg.depends],
                files={
                    f"usr/share/doc/{name}/SANDBOX": (
                        f"{name} {chain.driver}: no driver code.\n".encode(),
                        0o644,
                    )
                },
            )
        )
    return out


def _dpkg_newer(a: str, b: str) -> bool:
    """Whether Debian version ``a`` is newer than ``b`` (``dpkg --compare-versions``)."""
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False).returncode == 0


_RELATION_ORDER = ("Conflicts", "Provides", "Replaces")
_CUDA_LONG_DESCRIPTION = (
    "Sandbox stand-in of NVIDIA's package of this name and version:\n"
    "same names, versions, paths and maintainer scripts; no GPU code."
)


def _control(pkg: DebPackage, installed_kib: int) -> str:
    unknown = set(pkg.relations) - set(_RELATION_ORDER)
    if unknown:
        raise ValueError(f"{pkg.name}: relation fields {sorted(unknown)} not among {list(_RELATION_ORDER)}")
    fields = [("Package", pkg.name)]
    if pkg.source:
        fields.append(("Source", pkg.source))
    fields += [("Version", pkg.version), ("Architecture", "amd64")]
    if pkg.multi_arch:
        fields.append(("Multi-Arch", pkg.multi_arch))
    fields += [
        ("Maintainer", pkg.maintainer),
        ("Installed-Size", str(max(installed_kib, 1))),
    ]
    if pkg.depends:
        fields.append(("Depends", ", ".join(pkg.depends)))
    fields += [(name, ", ".join(pkg.relations[name])) for name in _RELATION_ORDER if pkg.relations.get(name)]
    long_description = pkg.long_description or _CUDA_LONG_DESCRIPTION
    body = "".join(f"\n {line}" if line else "\n ." for line in long_description.splitlines())
    fields += [
        ("Section", pkg.section),
        ("Priority", "optional"),
        ("Homepage", pkg.homepage),
        ("Description", f"{pkg.synopsis}{body}"),
    ]
    return "".join(f"{k}: {v}\n" for k, v in fields)


def build_deb(pkg: DebPackage, out_dir: Path, work: Path) -> Path:
    """Stage ``pkg`` under ``work`` and build ``out_dir/<filename>`` with dpkg-deb."""
    root = work / f"{pkg.name}_{pkg.version}"
    if root.exists():
        shutil.rmtree(root)
    (root / "DEBIAN").mkdir(parents=True)
    size = 0
    for d in pkg.dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, (data, mode) in pkg.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.chmod(path, mode)
        size += len(data)
    for rel, target in pkg.symlinks.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    debian = root / "DEBIAN"
    (debian / "control").write_text(_control(pkg, (size + 1023) // 1024), encoding="utf-8")
    for script_name in ("postinst", "prerm"):
        text = getattr(pkg, script_name)
        if text:
            (debian / script_name).write_text(text, encoding="utf-8")
            os.chmod(debian / script_name, 0o755)
    if pkg.conffiles:
        (debian / "conffiles").write_text("".join(f"{c}\n" for c in pkg.conffiles))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), (SOURCE_DATE_EPOCH,) * 2, follow_symlinks=False)
        os.chmod(dirpath, 0o755)
    out = out_dir / pkg.filename
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(SOURCE_DATE_EPOCH))
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
        check=True,
        capture_output=True,
        env=env,
    )
    os.utime(out, (SOURCE_DATE_EPOCH,) * 2)
    return out


@dataclass(frozen=True)
class RepoLabel:
    """The ``Origin``, ``Label`` and ``Description`` of a flat repository's ``Release``."""

    origin: str
    label: str
    description: str


CUDA_REPO_LABEL = RepoLabel(
    "NVIDIA", "NVIDIA CUDA (sandbox)", "Sandbox stand-in of NVIDIA's CUDA repository for Debian 12"
)


def _release_file(repo: Path, names: list[str], label: RepoLabel = CUDA_REPO_LABEL) -> bytes:
    lines = [
        f"Origin: {label.origin}",
        f"Label: {label.label}",
        "Architectures: amd64",
        f"Date: {formatdate(SOURCE_DATE_EPOCH, usegmt=True)}",
        f"Description: {label.description}",
    ]
    for field_name, algo in (
        ("MD5Sum", "md5"),
        ("SHA1", "sha1"),
        ("SHA256", "sha256"),
        ("SHA512", "sha512"),
    ):
        lines.append(f"{field_name}:")
        for name in names:
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>8} {name}")
    return ("\n".join(lines) + "\n").encode()


def build_apt_repo(repo: Path, releases: tuple[CudaRelease, ...], gpg: Gpg, fingerprint: str) -> list[Path]:
    """Build the flat repository in ``repo`` (created); return the .deb files."""
    repo.mkdir(parents=True, exist_ok=True)
    debs: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="sandbox-debs-") as tmp:
        for release in releases:
            for pkg in release_packages(release):
                debs.append(build_deb(pkg, repo, Path(tmp)))
        for pkg in driver_packages():
            debs.append(build_deb(pkg, repo, Path(tmp)))
        by_release = {r.dotted: r for r in releases}
        for chain in DRIVER_CHAINS:
            if chain.release not in by_release:
                continue
            for pkg in metapackages(by_release[chain.release], chain) + chain_driver_packages(chain):
                debs.append(build_deb(pkg, repo, Path(tmp)))
    write_signed_index(repo, gpg, fingerprint)
    return debs


def write_signed_index(repo: Path, gpg: Gpg, fingerprint: str, label: RepoLabel = CUDA_REPO_LABEL) -> None:
    """Index the .deb files in ``repo`` as a flat repository and sign it: ``Packages``,
    ``Packages.gz``, ``Release`` (MD5Sum/SHA1/SHA256/SHA512 of both), ``InRelease``
    (clearsigned), ``Release.gpg`` (detached) and the binary public key
    ``catalog.APT_KEYRING_NAME`` for ``signed-by=``; every file at ``SOURCE_DATE_EPOCH``."""
    scan = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    packages = scan.stdout
    (repo / "Packages").write_bytes(packages)
    with open(repo / "Packages.gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(packages)
    release_bytes = _release_file(repo, ["Packages", "Packages.gz"], label)
    (repo / "Release").write_bytes(release_bytes)
    (repo / "InRelease").write_bytes(gpg.clearsign(fingerprint, release_bytes))
    (repo / "Release.gpg").write_bytes(gpg.detach_sign(fingerprint, release_bytes))
    (repo / APT_KEYRING_NAME).write_bytes(gpg.export_public(fingerprint))
    for name in (
        "Packages",
        "Packages.gz",
        "Release",
        "InRelease",
        "Release.gpg",
        APT_KEYRING_NAME,
    ):
        os.utime(repo / name, (SOURCE_DATE_EPOCH,) * 2)
