"""Build the whole mirror tree, incrementally.

The inputs (this directory's sources and stubs, ``sandbox/sglang-src``, the scenarios, the
genuine setuptools/wheel wheels, the real shared objects some stand-ins carry
(``catalog.RealObject``, committed under ``tests/fixtures/elf/``) and the signing key's
fingerprint) are hashed into a stamp, ``<out>/.build-stamp``. A rebuild with the same stamp
returns at once and touches nothing.
Otherwise everything is built in a sibling directory and then moved into ``<out>`` entry by
entry, so ``<out>`` itself keeps its inode (the sandbox host bind-mounts it read-only).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sandbox_mirror import apt, catalog, driverdebs, gitrepo, standins
from sandbox_mirror.gpg import Gpg

MIRROR_SRC = Path(__file__).resolve().parent.parent
REPO_ROOT = MIRROR_SRC.parent.parent
SGLANG_SRC = MIRROR_SRC.parent / "sglang-src"
DEFAULT_OUT = REPO_ROOT / ".sandbox" / "mirror"
DEFAULT_GNUPG_HOME = REPO_ROOT / ".sandbox" / "gnupg"
DEFAULT_PYTHON_WHEELS = Path("/usr/share/python-wheels")
STAMP_NAME = ".build-stamp"
FORMAT = "sandbox-mirror/1"


@dataclass(frozen=True)
class BuildResult:
    """What ``build_mirror`` did: the stamp, whether it rebuilt, and what the mirror holds."""

    out: Path
    stamp: str
    rebuilt: bool
    manifest: dict


def _mirror_sources() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(MIRROR_SRC.rglob("*")):
        rel = path.relative_to(MIRROR_SRC)
        if path.is_dir() or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        files[f"mirror/{rel.as_posix()}"] = path.read_bytes()
    return files


def compute_stamp(fingerprint: str, python_wheels: list[Path]) -> str:
    """Hash of every input of the build (see the module docstring)."""
    h = hashlib.sha256(FORMAT.encode())
    inputs = _mirror_sources()
    inputs.update({f"sglang-src/{k}": v for k, v in gitrepo.source_files(SGLANG_SRC).items()})
    inputs.update({f"python-wheels/{p.name}": p.read_bytes() for p in python_wheels})
    inputs.update({f"real-objects/{k}": v for k, v in standins.real_object_sources().items()})
    inputs["gpg-fingerprint"] = fingerprint.encode()
    for name in sorted(inputs):
        h.update(name.encode() + b"\0" + hashlib.sha256(inputs[name]).digest())
    return h.hexdigest()


def _root_page(manifest: dict) -> str:
    items = [f'<li><a href="{p}/">{p}/</a></li>' for p in manifest["indexes"]]
    items.append(f'<li><a href="{catalog.APT_REPO_PATH}/">{catalog.APT_REPO_PATH}/</a></li>')
    items.append(f'<li><a href="{catalog.DRIVER_REPO_PATH}/">{catalog.DRIVER_REPO_PATH}/</a></li>')
    items.append('<li><a href="git/sglang.git/">git/sglang.git/</a></li>')
    return (
        "<!DOCTYPE html>\n<html><head><title>cuda13-upgrade sandbox mirror</title></head>"
        "<body><h1>cuda13-upgrade sandbox mirror</h1><ul>\n"
        + "\n".join(items)
        + "\n</ul><p>See manifest.json.</p></body></html>\n"
    )


def _build_into(tree: Path, gpg: Gpg, fingerprint: str, python_wheels: list[Path]) -> dict:
    debs = apt.build_apt_repo(tree / catalog.APT_REPO_PATH, catalog.CUDA_RELEASES, gpg, fingerprint)
    driver_debs = driverdebs.build_driver_repo(
        tree / catalog.DRIVER_REPO_PATH, catalog.DRIVER_BUILDS, gpg, fingerprint
    )
    indexes = standins.build_indexes(tree, python_wheels)
    tags = gitrepo.build_sglang_repo(SGLANG_SRC, tree / "git" / "sglang.git")
    scenarios = tree / "sglang-sim" / "scenarios"
    scenarios.mkdir(parents=True)
    for path in sorted((MIRROR_SRC / "scenarios").glob("*.json")):
        shutil.copyfile(path, scenarios / path.name)
    manifest = {
        "format": FORMAT,
        "apt": {
            "path": f"{catalog.APT_REPO_PATH}/",
            "keyring": f"{catalog.APT_REPO_PATH}/{catalog.APT_KEYRING_NAME}",
            "key_fingerprint": fingerprint,
            "packages": sorted(p.name for p in debs),
        },
        "driver_apt": {
            "path": f"{catalog.DRIVER_REPO_PATH}/",
            "keyring": f"{catalog.DRIVER_REPO_PATH}/{catalog.APT_KEYRING_NAME}",
            "key_fingerprint": fingerprint,
            "packages": sorted(p.name for p in driver_debs),
        },
        "indexes": indexes,
        "git": {"sglang": {"path": "git/sglang.git", "tags": tags}},
        "scenarios": sorted(p.name for p in scenarios.iterdir()),
    }
    (tree / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (tree / "index.html").write_text(_root_page(manifest))
    return manifest


def _replace_contents(out: Path, tree: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fresh = {p.name for p in tree.iterdir()}
    for old in out.iterdir():
        if old.name not in fresh:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    for name in sorted(fresh):
        dest = out / name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        elif dest.exists() or dest.is_symlink():
            dest.unlink()
        os.replace(tree / name, dest)


def build_mirror(
    out: Path = DEFAULT_OUT,
    gnupg_home: Path = DEFAULT_GNUPG_HOME,
    python_wheels_dir: Path = DEFAULT_PYTHON_WHEELS,
    force: bool = False,
) -> BuildResult:
    """Build (or find up to date) the mirror in ``out``. See the module docstring."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gpg = Gpg(gnupg_home.resolve())
        try:
            fingerprint = gpg.ensure_key()
            python_wheels = standins.genuine_python_wheels(python_wheels_dir)
            stamp = compute_stamp(fingerprint, python_wheels)
            stamp_file = out / STAMP_NAME
            manifest_file = out / "manifest.json"
            if (
                not force
                and stamp_file.is_file()
                and stamp_file.read_text().strip() == stamp
                and manifest_file.is_file()
            ):
                return BuildResult(out, stamp, False, json.loads(manifest_file.read_text()))
            tree = out.parent / f".{out.name}.building"
            if tree.exists():
                shutil.rmtree(tree)
            tree.mkdir()
            try:
                manifest = _build_into(tree, gpg, fingerprint, python_wheels)
                if stamp_file.exists():
                    stamp_file.unlink()
                _replace_contents(out, tree)
            finally:
                shutil.rmtree(tree, ignore_errors=True)
            tmp_stamp = out / f"{STAMP_NAME}.tmp"
            tmp_stamp.write_text(stamp + "\n")
            os.replace(tmp_stamp, stamp_file)
            return BuildResult(out, stamp, True, manifest)
        finally:
            gpg.stop_agent()
