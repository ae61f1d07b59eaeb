#!/usr/bin/env python3
"""The real PyPI CUDA 13 stack on this machine: figures, measured in one run.

Prints:

1. the download of the stack from PyPI (``pip --isolated download``, no pip
   cache) into a fresh directory: wall time, wheels, bytes (``--no-download``
   skips it and reads the size of the machine-wide cache instead);
2. its offline install into a fresh venv (``--no-index --find-links`` the
   cache): wall time and the venv's size on disk;
3. the resolver's time per host: ``pip install --dry-run --ignore-installed
   --report -`` of the same requirements against the cache, in a throwaway venv;
4. the disk the preflight must require for it: venv + the artifact cache's
   copy on the host + the CUDA toolkit + SGLang's source tree and build, with
   a margin, against ``nvidia_driver_check_required_disk_gib``;
5. rebuilding a venv from the installed stack's snapshot (``pip freeze --all
   --isolated``, what the stack_snapshot role records: pip and setuptools
   included), offline from the cache, the way a rollback without a kept venv
   would have to; the rebuilt venv must freeze the same and pass ``pip check``;
   and,
   given ``--rollback-seconds`` (``benchmarks/sandbox_timings.py --rollback``
   measures it), the ratio rebuild / rollback.

Usage: benchmarks/real_stack.py [--no-download] [--rollback-seconds S]
(from the repository root; the cache is $CUDA13_REAL_STACK_CACHE, default
/var/cache/cuda13-upgrade-ci/real-stack, filled by ``make real-stack-cache``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CUDA13_REAL_STACK_CACHE", "/var/cache/cuda13-upgrade-ci/real-stack"))
REQUIREMENTS = ["torch==2.14.1", "sglang-kernel==0.4.10", "flashinfer-python==0.7.2", "sglang==0.5.23"]
#: The snapshot's freeze (src/cuda13_upgrade/hostscripts/snapshot.py): --all keeps pip,
#: setuptools and wheel, which a plain ``pip freeze`` leaves out.
SNAPSHOT_FREEZE = ["-m", "pip", "freeze", "--all", "--isolated"]


def parse_compiler_pins(script: str) -> list[str]:
    """The ``COMPILER_PINS=(...)`` of scripts/real-stack-cache.sh: the CUDA compiler
    components pinned to torch's release, as the cache and the real-stack scenario
    install them. Raises SystemExit when the line is missing."""
    for line in script.splitlines():
        if line.startswith("COMPILER_PINS=(") and line.rstrip().endswith(")"):
            return line.split("(", 1)[1].rstrip()[:-1].split()
    raise SystemExit("COMPILER_PINS=(...) not found in scripts/real-stack-cache.sh")


def stack_requirements() -> list[str]:
    """The requirements the real-stack scenario installs: the stack and the compiler pins."""
    return REQUIREMENTS + parse_compiler_pins((REPO / "scripts" / "real-stack-cache.sh").read_text())


def rebuild_differences(snapshot: str, rebuilt: str) -> list[str]:
    """What a rebuilt venv's freeze lacks or adds against the snapshot's
    (:func:`cuda13_upgrade.stack.freeze_difference`), one line each; [] when equal."""
    sys.path.insert(0, str(REPO / "src"))
    from cuda13_upgrade.stack import freeze_difference, parse_pip_freeze_lines

    diff = freeze_difference(parse_pip_freeze_lines(snapshot), parse_pip_freeze_lines(rebuilt))
    return [f"missing {line}" for line in diff["removed"]] + [f"extra {line}" for line in diff["added"]]


GIB = 1024**3
#: What the preflight's figure adds beyond the Python stack (GiB): the CUDA 13.0
#: toolkit's apt packages (cuda-toolkit-13-0 installs about 6 GiB) and SGLang's
#: source tree with its build (about 1 GiB), then a margin of a quarter for
#: pip's temporary files, the JIT caches the new stack writes, and logs.
TOOLKIT_GIB = 6.0
SGLANG_SOURCE_GIB = 1.0
MARGIN = 1.25


def timed(argv: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(
            f"{' '.join(argv[:6])} ... failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return seconds, done


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = Path(root, name)
            if not p.is_symlink():
                total += p.stat().st_blocks * 512
    return total


def wheels_of(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.suffix == ".whl"]


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run(
        [
            str(path / "bin" / "pip"),
            "--isolated",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(CACHE / "wheels"),
            "pip",
        ],
        check=False,
        capture_output=True,
    )
    return path / "bin" / "pip"


def required_disk_gib() -> int:
    text = (REPO / "roles" / "nvidia_driver_check" / "defaults" / "main.yml").read_text()
    for line in text.splitlines():
        if line.startswith("nvidia_driver_check_required_disk_gib:"):
            return int(line.split(":", 1)[1])
    raise SystemExit("nvidia_driver_check_required_disk_gib not found in the role's defaults")


def freeze_of(pip: Path) -> str:
    """The snapshot's freeze of the venv whose pip is ``pip``."""
    python = pip.parent / "python"
    return subprocess.run([str(python), *SNAPSHOT_FREEZE], capture_output=True, text=True, check=True).stdout


def rebuild_from_freeze(work: Path, stack_pip: Path) -> tuple[float, int]:
    """Seconds to rebuild a venv from ``stack_pip``'s venv's snapshot freeze, offline from
    the cache (``--no-deps``: the freeze is the whole closure), and the freeze's length.
    Exits when the rebuilt venv freezes otherwise or fails ``pip check``."""
    freeze = freeze_of(stack_pip)
    (work / "freeze.txt").write_text(freeze)
    pip = venv(work / "rebuild")
    seconds, _ = timed(
        [
            str(pip),
            "--isolated",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--find-links",
            str(CACHE / "wheels"),
            "-r",
            str(work / "freeze.txt"),
        ]
    )
    differences = rebuild_differences(freeze, freeze_of(pip))
    if differences:
        sys.exit(f"the rebuilt venv differs from the snapshot: {'; '.join(differences)}")
    timed([str(pip), "--isolated", "check"])
    return seconds, len([x for x in freeze.splitlines() if x.strip()])


def install_stack(work: Path) -> tuple[float, Path]:
    """Seconds to install the real stack (with the compiler pins) offline into a fresh
    venv, and that venv's pip."""
    pip = venv(work / "stack")
    seconds, _ = timed(
        [
            str(pip),
            "--isolated",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(CACHE / "wheels"),
            *stack_requirements(),
        ]
    )
    return seconds, pip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-download", action="store_true", help="do not time a fresh download from PyPI")
    parser.add_argument("--rollback-seconds", type=float, help="a measured rollback time, for the ratio")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    if not (CACHE / "wheels").is_dir():
        sys.exit(f"no real stack in {CACHE}: run make real-stack-cache first")
    work = Path(args.work or tempfile.mkdtemp(prefix="real-stack-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.no_download:
            wheels = wheels_of(CACHE / "wheels")
            print(
                f"download:             not measured (cache: {len(wheels)} wheels, "
                f"{sum(p.stat().st_size for p in wheels) / 1e9:.2f} GB)"
            )
        else:
            seconds, _ = timed(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--isolated",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "download",
                    "--index-url",
                    "https://pypi.org/simple",
                    "--only-binary",
                    ":all:",
                    "--dest",
                    str(work / "download"),
                    *stack_requirements(),
                ]
            )
            wheels = wheels_of(work / "download")
            size = sum(p.stat().st_size for p in wheels)
            print(
                f"download from PyPI:   {seconds:7.1f} s  ({len(wheels)} wheels, {size / 1e9:.2f} GB, "
                f"{size / seconds / 1e6:.1f} MB/s)"
            )
            shutil.rmtree(work / "download")
        # The artifact cache's copy on a host holds the wheels the install reads: the cache's.
        cache_bytes = sum(p.stat().st_size for p in wheels_of(CACHE / "wheels"))

        pip = venv(work / "resolve")
        seconds, done = timed(
            [
                str(pip),
                "--isolated",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                "-",
                "--no-index",
                "--find-links",
                str(CACHE / "wheels"),
                *stack_requirements(),
            ]
        )
        resolved = len(json.loads(done.stdout)["install"])
        print(f"resolver per host:    {seconds:7.1f} s  (pip --dry-run --report, {resolved} distributions)")

        seconds, pip = install_stack(work)
        venv_bytes = tree_bytes(work / "stack")
        print(f"install (offline):    {seconds:7.1f} s  (venv {venv_bytes / GIB:.2f} GiB on disk)")

        need = (venv_bytes + cache_bytes) / GIB + TOOLKIT_GIB + SGLANG_SOURCE_GIB
        print(
            f"disk for the upgrade: {need * MARGIN:7.1f} GiB = ({venv_bytes / GIB:.1f} venv + "
            f"{cache_bytes / GIB:.1f} artifact cache copy + {TOOLKIT_GIB:.0f} toolkit + "
            f"{SGLANG_SOURCE_GIB:.0f} SGLang source) x {MARGIN}; the preflight requires "
            f"{required_disk_gib()} GiB (nvidia_driver_check_required_disk_gib)"
        )

        seconds, lines = rebuild_from_freeze(work, pip)
        print(
            f"rebuild from freeze:  {seconds:7.1f} s  ({lines} requirements, offline, real wheels; "
            "same freeze, pip check passes)"
        )
        if args.rollback_seconds:
            print(
                f"rebuild / rollback:   {seconds / args.rollback_seconds:7.1f} x  "
                f"(rollback {args.rollback_seconds:.1f} s)"
            )
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
