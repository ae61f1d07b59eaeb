"""The mirror's ``nvidia-graphics-drivers/`` repository: stand-ins of Ubuntu's driver packages.

The control fields are checked against ``debian/control`` of canonical/nvidia-graphics-drivers
as ``records/apt/nvidia-driver-packages-research.md`` quotes it (A1: 580-noble; 570-noble is the
same with the branch and version changed, A1's note and ``nvidia-driver-standins.md``), the file
lists against its ``.install`` / ``.links`` files (A2). Then real apt and dpkg install the
repository into a throw-away root: 570, moved to 580 by ``apt-get install
nvidia-driver-580-open``, and back; after each move only the installed branch's
``libnvidia-ml.so.<V>`` and ``/usr/src/nvidia-<V>`` are left, which is what the nvidia-smi and
modprobe doubles read.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_mirror import builder, catalog, driverdebs

from cuda13_upgrade.hostscripts import aptstate

REPO = Path(__file__).resolve().parents[1]
RESEARCH = REPO / "sandbox/mirror/records/apt/nvidia-driver-packages-research.md"
STANDINS = REPO / "sandbox/mirror/records/apt/nvidia-driver-standins.md"
HOST = REPO / "sandbox" / "host"
BUILDS = {b.branch: b for b in catalog.DRIVER_BUILDS}
R570, R580 = BUILDS["570"], BUILDS["580"]
RELATIONS = ("Depends", "Conflicts", "Provides", "Replaces")


def driver_dir(mirror) -> Path:
    return mirror.out / catalog.DRIVER_REPO_PATH


def deb_path(mirror, name: str, build: catalog.DriverBuild) -> Path:
    return driver_dir(mirror) / f"{name}_{build.version}_amd64.deb"


def control(deb: Path) -> dict[str, str]:
    text = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if line[:1] != " ":
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def recorded_stanzas(build: catalog.DriverBuild) -> dict[str, dict[str, list[str]]]:
    """A1's stanzas of ``build``: relation entries as an amd64 build writes them (substitution
    variables filled or, for ``${misc:Depends}``/``${shlibs:Depends}``, dropped; architecture
    qualifiers and the record's ``[...]`` cut marks removed)."""
    text = RESEARCH.read_text(encoding="utf-8")
    block = text.split("### A1.", 1)[1].split("```", 2)[1]
    if build is R570:
        block = block.replace("580.142", "570.211.01").replace("580", "570")
    stanzas: dict[str, dict[str, list[str]]] = {}
    for stanza in block.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith(" "):
                fields[key] += " " + line.strip()
            elif ":" in line and not line.startswith("["):
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        relations: dict[str, list[str]] = {}
        for name in RELATIONS:
            value = re.sub(r"\[[^\]]*\]", "", fields.get(name, ""))
            value = value.replace("${binary:Version}", build.version).replace(
                "${source:Version}", build.version
            )
            relations[name] = [" ".join(e.split()) for e in entries(value) if not e.startswith("${")]
        relations["Description"] = [fields["Description"]]
        stanzas[fields["Package"]] = relations
    return stanzas


# What each stand-in states, exactly; every entry is also checked against the record below.
def expected(build: catalog.DriverBuild) -> dict[str, dict[str, list[str]]]:
    b, v, full, up = build.branch, build.upstream, build.version, build.upper_bound
    return {
        f"nvidia-driver-{b}-open": {
            "Depends": [
                f"nvidia-dkms-{b}-open (<= {up})",
                f"nvidia-dkms-{b}-open (>= {v})",
                f"nvidia-kernel-common-{b} (<= {up})",
                f"nvidia-kernel-common-{b} (>= {v})",
                f"nvidia-kernel-source-{b}-open (= {full})",
                f"libnvidia-compute-{b} (= {full})",
            ],
        },
        f"nvidia-dkms-{b}-open": {
            "Depends": [
                f"nvidia-kernel-source-{b}-open (<= {up})",
                f"nvidia-kernel-source-{b}-open (>= {v})",
                f"nvidia-kernel-common-{b} (<= {up})",
                f"nvidia-kernel-common-{b} (>= {v})",
            ],
            "Conflicts": ["nvidia-dkms-kernel"],
            "Provides": ["nvidia-dkms-kernel"],
            "Replaces": ["nvidia-dkms-kernel"],
        },
        f"nvidia-kernel-source-{b}-open": {
            "Conflicts": ["nvidia-kernel-source"],
            "Provides": ["nvidia-kernel-source"],
            "Replaces": ["nvidia-kernel-source"],
        },
        f"nvidia-kernel-common-{b}": {
            "Conflicts": ["nvidia-kernel-common"],
            "Provides": ["nvidia-kernel-common", f"nvidia-kernel-common-{b}-{v}"],
            "Replaces": ["nvidia-kernel-common"],
        },
        f"libnvidia-compute-{b}": {
            "Depends": [f"nvidia-kernel-common-{b}-{v}"],
            "Conflicts": ["libnvidia-compute"],
            "Provides": ["libnvidia-compute", f"libnvidia-ml.so.1 (= {full})", f"libnvidia-ml1 (= {full})"],
            "Replaces": ["libnvidia-compute"],
        },
    }


# -- control fields ---------------------------------------------------------------------


def test_the_two_builds_are_the_recorded_ones():
    text = RESEARCH.read_text(encoding="utf-8")
    assert [(b.branch, b.upstream, b.version) for b in catalog.DRIVER_BUILDS] == [
        ("570", "570.211.01", "570.211.01-0ubuntu0.24.04.2"),
        ("580", "580.142", "580.142-0ubuntu0.24.04.1"),
    ]
    assert "`nvidia-graphics-drivers-580 (580.142-0ubuntu0.24.04.1) noble; urgency=medium`" in text
    assert '"Release\n  570.211.01-0ubuntu0.24.04.2"' in text
    for build in catalog.DRIVER_BUILDS:
        assert f"branch `{build.git_branch}`, commit `{build.commit}`" in text


@pytest.mark.parametrize("build", catalog.DRIVER_BUILDS, ids=lambda b: b.branch)
def test_control_fields_are_the_record_s_reduced_to_the_stand_ins(sandbox_mirror, build):
    record = recorded_stanzas(build)
    want = expected(build)
    assert [p.name for p in driverdebs.driver_packages(build)] == list(want)
    for name, relations in want.items():
        fields = control(deb_path(sandbox_mirror, name, build))
        assert fields["Package"] == name
        assert fields["Version"] == build.version
        assert fields["Source"] == f"nvidia-graphics-drivers-{build.branch}"
        assert fields["Architecture"] == "amd64"
        assert fields["Maintainer"] == "Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>"
        assert fields["Description"] == record[name]["Description"][0]
        for relation in RELATIONS:
            stated = entries(fields.get(relation, ""))
            assert stated == relations.get(relation, []), (name, relation)
            # every entry is the record's, in the record's order
            assert [e for e in record[name][relation] if e in stated] == stated, (name, relation)


@pytest.mark.parametrize("build", catalog.DRIVER_BUILDS, ids=lambda b: b.branch)
def test_left_out_relations_are_only_those_the_sandbox_cannot_carry(build):
    """What the record has and the stand-ins drop: packages the sandbox does not carry."""
    record = recorded_stanzas(build)
    b, v = build.branch, build.upstream
    dropped = {
        (name, relation, e)
        for name, relations in expected(build).items()
        for relation in RELATIONS
        for e in record[name][relation]
        if e not in relations.get(relation, [])
    }
    libcuda = {e for e in record[f"libnvidia-compute-{b}"]["Provides"] if e.startswith("libcuda")}
    assert libcuda >= {f"libcuda.so.1 (= {build.version})", f"libcuda1 (= {build.version})", "libcuda-12.8-1"}
    assert {e for _, _, e in dropped} - libcuda == {
        f"libnvidia-gl-{b} (= {build.version})",
        f"libnvidia-extra-{b} (= {build.version})",
        f"nvidia-compute-utils-{b} (= {build.version})",
        f"libnvidia-decode-{b} (= {build.version})",
        f"libnvidia-encode-{b} (= {build.version})",
        f"nvidia-utils-{b} (= {build.version})",
        f"xserver-xorg-video-nvidia-{b} (= {build.version})",
        f"libnvidia-cfg1-{b} (= {build.version})",
        f"libnvidia-fbc1-{b} (= {build.version})",
        "dkms",
        f"nvidia-firmware-{b}-{v}",
        "ocl-icd-libopencl1",
        "nvidia-opencl-icd",
        "opencl-icd",
    }


# -- files ------------------------------------------------------------------------------


def listing(deb: Path) -> list[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(None, 5)[5] for line in out.splitlines() if not line.endswith("/"))


def member(deb: Path, path: str) -> bytes:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    return subprocess.run(
        ["tar", "-xO", f".{path}"], input=tar.stdout, capture_output=True, check=True
    ).stdout


@pytest.mark.parametrize("build", catalog.DRIVER_BUILDS, ids=lambda b: b.branch)
def test_files_land_where_the_install_and_links_files_put_them(sandbox_mirror, build):
    b, v = build.branch, build.upstream
    lib, src = "./usr/lib/x86_64-linux-gnu", f"./usr/src/nvidia-{v}"

    def files(name: str) -> list[str]:
        return [f for f in listing(deb_path(sandbox_mirror, name, build)) if "/share/doc/" not in f]

    assert files(f"libnvidia-compute-{b}") == [
        f"{lib}/libnvidia-ml.so -> libnvidia-ml.so.1",
        f"{lib}/libnvidia-ml.so.1 -> libnvidia-ml.so.{v}",
        f"{lib}/libnvidia-ml.so.{v}",
    ]
    assert files(f"nvidia-dkms-{b}-open") == [f"{src}/dkms.conf"]
    assert files(f"nvidia-kernel-source-{b}-open") == [f"{src}/Kbuild", f"{src}/Makefile"]
    assert files(f"nvidia-kernel-common-{b}") == []
    assert files(f"nvidia-driver-{b}-open") == []
    # the .links and .install records of this build
    research = RESEARCH.read_text(encoding="utf-8")
    if build is R580:
        assert re.search(r"NVIDIA-Linux/libnvidia-ml\.so\.580\.142 +usr/lib/x86_64-linux-gnu\n", research)
        assert re.search(r"debian/open-kernel/dkms\.conf +usr/src/nvidia-580\.142\n", research)
        assert re.search(r"NVIDIA-Linux/kernel-open/Kbuild +usr/src/nvidia-580\.142\n", research)
    else:
        assert "`NVIDIA-Linux/libnvidia-ml.so.570.211.01\nusr/lib/x86_64-linux-gnu`" in research
        assert "`debian/open-kernel/dkms.conf usr/src/nvidia-570.211.01`" in research
    dkms_conf = member(
        deb_path(sandbox_mirror, f"nvidia-dkms-{b}-open", build), f"/usr/src/nvidia-{v}/dkms.conf"
    )
    assert dkms_conf.decode().splitlines()[1:] == ['PACKAGE_NAME="nvidia"', f'PACKAGE_VERSION="{v}"']
    assert "sandbox has no DKMS" in dkms_conf.decode().splitlines()[0]
    so = member(
        deb_path(sandbox_mirror, f"libnvidia-compute-{b}", build),
        f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{v}",
    )
    assert so.startswith(b"SANDBOX-PLACEHOLDER-SO\n")


# -- the repository ---------------------------------------------------------------------


def test_the_repository_is_signed_like_the_cuda_repository(sandbox_mirror):
    repo = driver_dir(sandbox_mirror)
    cuda = sandbox_mirror.out / catalog.APT_REPO_PATH
    keyring = repo / catalog.APT_KEYRING_NAME
    assert keyring.read_bytes() == (cuda / catalog.APT_KEYRING_NAME).read_bytes()
    for args in (["InRelease"], ["Release.gpg", "Release"]):
        proc = subprocess.run(
            ["gpgv", "--keyring", str(keyring), *args], cwd=repo, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert "Good signature" in proc.stderr
    release = (repo / "Release").read_text()
    for algo, header, end in (("sha256", "SHA256:\n", "SHA512:"), ("md5", "MD5Sum:\n", "SHA1:")):
        listed = {
            line.split()[2]: line.split()[0]
            for line in release.split(header, 1)[1].split(end, 1)[0].strip().splitlines()
        }
        assert listed == {
            n: hashlib.new(algo, (repo / n).read_bytes()).hexdigest() for n in ("Packages", "Packages.gz")
        }
    assert set(release.split("SHA256:", 1)[0].splitlines()[:2]) == {
        "Origin: Sandbox",
        "Label: nvidia-graphics-drivers (sandbox)",
    }
    packages = (repo / "Packages").read_text()
    names = sorted(re.findall(r"^Package: (.+)\nSource: .+\nVersion: (.+)$", packages, re.M))
    assert names == sorted(
        (name, build.version) for build in catalog.DRIVER_BUILDS for name in expected(build)
    )
    manifest = sandbox_mirror.manifest["driver_apt"]
    assert manifest["path"] == "nvidia-graphics-drivers/"
    assert manifest["key_fingerprint"] == sandbox_mirror.manifest["apt"]["key_fingerprint"]
    assert len(manifest["packages"]) == 10


def test_the_module_and_the_records_are_inputs_of_the_stamp():
    sources = builder._mirror_sources()
    assert "mirror/sandbox_mirror/driverdebs.py" in sources
    assert "mirror/records/apt/nvidia-driver-packages-research.md" in sources


# -- real apt and dpkg in a throw-away root ---------------------------------------------


class AptRoot:
    """apt-get and dpkg on a root directory of their own (APT_CONFIG, dpkg --root), the
    repository added as a host adds it (signed-by its keyring, never trusted=yes)."""

    def __init__(self, root: Path, repo: Path) -> None:
        self.root = root
        for d in (
            "etc/apt/sources.list.d",
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg/info",
            "var/lib/dpkg/updates",
            "var/log/apt",
        ):
            (root / d).mkdir(parents=True)
        (root / "var/lib/dpkg/status").touch()
        keyring = root / "usr/share/keyrings" / catalog.APT_KEYRING_NAME
        keyring.parent.mkdir(parents=True)
        shutil.copyfile(repo / catalog.APT_KEYRING_NAME, keyring)
        (root / "etc/apt/sources.list.d/nvidia-graphics-drivers.list").write_text(
            f"deb [signed-by={keyring}] file:{repo} /\n"
        )
        self.config = root / "apt.conf"
        self.config.write_text(
            f'Dir "{root}/";\n'
            f'Dir::State::status "{root}/var/lib/dpkg/status";\n'
            'Dir::Bin::dpkg "/usr/bin/dpkg";\n'
            f'DPkg::Options {{ "--root={root}"; }};\n'
            'APT::Sandbox::User "root";\n'
            'APT::Architecture "amd64";\n'
            'Debug::NoLocking "true";\n'
        )
        self.prefix = [] if os.geteuid() == 0 else ["fakeroot"]

    def run(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("APT_")}
        env.update(APT_CONFIG=str(self.config), DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
        return subprocess.run(
            [*self.prefix, *argv],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def apt_get(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("apt-get", "-y", *args)

    def installed(self) -> dict[str, str]:
        out = self.run(
            "dpkg-query",
            f"--admindir={self.root}/var/lib/dpkg",
            "-W",
            "-f=${Package} ${Version} ${db:Status-Abbrev}\n",
        )
        return {
            p: v
            for p, v, status in (line.split(None, 2) for line in out.stdout.splitlines())
            if status[1:2] == "i"  # installed (ii, or hi when held)
        }

    def driver_files(self) -> tuple[list[str], list[str]]:
        """What the doubles' default globs find under the root."""
        libs = glob.glob(str(self.root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*"))
        srcs = glob.glob(str(self.root / "usr/src/nvidia-*"))
        return sorted(Path(p).name for p in libs), sorted(Path(p).name for p in srcs)


def _needs_root():
    if os.geteuid() != 0 and shutil.which("fakeroot") is None:
        pytest.skip("installing with dpkg needs root or fakeroot")


def set_of(build: catalog.DriverBuild) -> dict[str, str]:
    return {name: build.version for name in expected(build)}


def test_apt_moves_the_driver_from_570_to_580_and_back(sandbox_mirror, tmp_path):
    _needs_root()
    apt = AptRoot(tmp_path / "root", driver_dir(sandbox_mirror))
    update = apt.apt_get("update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    first = apt.apt_get("install", f"nvidia-driver-570-open={R570.version}")
    assert first.returncode == 0, first.stdout + first.stderr
    assert apt.installed() == set_of(R570)
    assert apt.driver_files() == (["libnvidia-ml.so.570.211.01"], ["nvidia-570.211.01"])
    assert (
        os.readlink(apt.root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1") == "libnvidia-ml.so.570.211.01"
    )

    up = apt.apt_get("install", "nvidia-driver-580-open")
    assert up.returncode == 0, up.stdout + up.stderr
    removed = up.stdout.split("The following packages will be REMOVED:\n", 1)[1].split("The following", 1)[0]
    assert sorted(removed.split()) == sorted(set_of(R570))
    assert apt.installed() == set_of(R580)
    assert apt.driver_files() == (["libnvidia-ml.so.580.142"], ["nvidia-580.142"])
    assert os.readlink(apt.root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1") == "libnvidia-ml.so.580.142"

    down = apt.apt_get("install", "--allow-downgrades", f"nvidia-driver-570-open={R570.version}")
    assert down.returncode == 0, down.stdout + down.stderr
    assert apt.installed() == set_of(R570)
    assert apt.driver_files() == (["libnvidia-ml.so.570.211.01"], ["nvidia-570.211.01"])


def test_a_held_driver_blocks_the_move(sandbox_mirror, tmp_path):
    """As sandbox_host_driver_packages leaves it: the metapackage on hold (dpkg selections)."""
    _needs_root()
    apt = AptRoot(tmp_path / "root", driver_dir(sandbox_mirror))
    assert apt.apt_get("update").returncode == 0
    assert apt.apt_get("install", "nvidia-driver-570-open").returncode == 0
    hold = apt.run("dpkg", f"--root={apt.root}", "--set-selections", stdin="nvidia-driver-570-open hold\n")
    assert hold.returncode == 0, hold.stderr
    up = apt.apt_get("install", "nvidia-driver-580-open")
    assert up.returncode == 100
    assert (
        "E: Error, pkgProblemResolver::Resolve generated breaks, this may be caused by held packages."
        in up.stderr
    )
    assert apt.installed() == set_of(R570)
    # The driver window's simulation releases the holds in a copy of dpkg's status
    # (cuda13_upgrade.hostscripts.aptstate.released_holds): apt then resolves the move.
    status = (apt.root / "var/lib/dpkg/status").read_text()
    assert "Status: hold ok installed" in status
    copy = tmp_path / "status"
    copy.write_text(aptstate.released_holds(status, ["nvidia-driver-570-open"]))
    assert "Status: hold " not in copy.read_text()
    simulated = apt.run(
        "apt-get", "-s", "-o", f"Dir::State::status={copy}", "install", "nvidia-driver-580-open"
    )
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert f"Remv nvidia-driver-570-open [{R570.version}]" in simulated.stdout
    assert apt.installed() == set_of(R570)


def test_the_doubles_read_the_installed_branch(sandbox_mirror, tmp_path):
    """The nvidia-smi and modprobe doubles on the packages' files: the module loaded from the
    570 install, then the 580 packages installed without reloading it (the NVML mismatch),
    then reloaded."""
    _needs_root()
    apt = AptRoot(tmp_path / "root", driver_dir(sandbox_mirror))
    assert apt.apt_get("update").returncode == 0
    assert apt.apt_get("install", "nvidia-driver-570-open").returncode == 0
    state = json.loads((HOST / "nvidia-smi-states" / "driver-r570-halves.json").read_text(encoding="utf-8"))
    assert state["driver_version"] == R570.upstream
    state["driver_halves"].update(
        library_glob=str(apt.root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*"),
        module_source_glob=str(apt.root / "usr/src/nvidia-*"),
        module_state=str(tmp_path / "run" / "module.json"),
    )
    (tmp_path / "state.json").write_text(json.dumps(state), encoding="utf-8")
    (tmp_path / "processes").mkdir()
    env = {
        **os.environ,
        "NVIDIA_SMI_DOUBLE_STATE": str(tmp_path / "state.json"),
        "NVIDIA_SMI_DOUBLE_PROCESSES": str(tmp_path / "processes"),
    }

    def double(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(HOST / name), *args], env=env, capture_output=True, text=True, timeout=30
        )

    query = ("--query-gpu=driver_version", "--format=csv,noheader")
    assert double("modprobe-double", "nvidia").returncode == 0
    assert set(double("nvidia-smi", *query).stdout.split()) == {"570.211.01"}
    assert apt.apt_get("install", "nvidia-driver-580-open").returncode == 0
    mismatch = double("nvidia-smi", *query)
    assert mismatch.returncode == 18
    assert mismatch.stdout.endswith("NVML library version: 580.142\n")
    assert double("modprobe-double", "-r", "nvidia").returncode == 0
    assert double("modprobe-double", "nvidia").returncode == 0
    assert set(double("nvidia-smi", *query).stdout.split()) == {"580.142"}


def test_the_standins_document_names_every_stand_in():
    text = STANDINS.read_text(encoding="utf-8")
    for build in catalog.DRIVER_BUILDS:
        assert build.version in text and build.commit in text
        for name in expected(build):
            assert f"`{name}`" in text or f"`{name.replace(build.branch, '<B>')}`" in text
