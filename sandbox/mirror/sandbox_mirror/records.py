"""The committed records of real distributions that every stand-in wheel is built from.

``sandbox/mirror/records/<name>-<version>.json`` holds what
``scripts/record-package-metadata.py`` read from the real file (``source.kind: recorded``:
URL, sha256, the pip command and the date; a release recorded from both its sdist and its
wheel has the wheel's under ``wheel_source``), or, for the builds only PyTorch's, sgl-kernel's
and flashinfer's own indexes serve (unreachable from the build machines), what public evidence
says and what is inferred (``source.kind: inferred`` with ``source.basis``).

Standard library only: the mirror is built by the system Python.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

RECORDS_DIR = Path(__file__).resolve().parent.parent / "records"

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """PEP 503 normalized name: ``Flashinfer_Python`` -> ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def path_of(name: str, version: str) -> Path:
    """Where the record of ``name`` ``version`` lies (``torch-2.9.1+cu130.json``)."""
    return RECORDS_DIR / f"{normalize(name)}-{version}.json"


@functools.cache
def load(name: str, version: str) -> dict:
    """The record of one distribution version; ``KeyError`` naming the recorder when absent."""
    path = path_of(name, version)
    if not path.is_file():
        raise KeyError(
            f"no record of {name} {version} ({path.name}): run "
            f"scripts/record-package-metadata.py {normalize(name)}=={version}"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def all_records() -> list[dict]:
    """Every committed record, sorted by file name."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RECORDS_DIR.glob("*.json"))]


def requirement_name(line: str) -> str:
    """The normalized distribution name a ``Requires-Dist`` line is about."""
    match = _NAME.match(line)
    if not match:
        raise ValueError(f"not a requirement: {line!r}")
    return normalize(match.group(1))


def requires_dist(record: dict) -> list[str]:
    """The ``Requires-Dist`` lines of the record, in the real file's order."""
    return list(record["metadata"]["Requires-Dist"])


def exact_pin(record: dict, name: str) -> str | None:
    """The version ``name==X`` pins in the record's ``Requires-Dist`` (extras kept), else None."""
    for line in requires_dist(record):
        if requirement_name(line) == normalize(name):
            match = re.search(r"==\s*([^\s,;]+)", line)
            return match.group(1) if match else None
    return None


def wheel_tag(record: dict) -> str:
    """The compressed tag of the real wheel's file name (what pip matches), e.g.
    ``py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64``; from its ``Tag`` lines when the
    record has no wheel file name. A release recorded from both its sdist and its wheel keeps
    the wheel's file under ``wheel_source``."""
    filename = (record.get("wheel_source") or record.get("source", {})).get("filename", "")
    if filename.endswith(".whl"):
        return "-".join(filename.removesuffix(".whl").split("-")[-3:])
    pys: list[str] = []
    abis: list[str] = []
    plats: list[str] = []
    for tag in record["wheel"]["tags"]:
        py, abi, plat = tag.split("-")
        for values, value in ((pys, py), (abis, abi), (plats, plat)):
            if value not in values:
                values.append(value)
    return "-".join(".".join(v) for v in (pys, abis, plats))


def shared_objects(record: dict) -> list[str]:
    """Paths of the shared objects in the wheel, sorted."""
    return sorted(record.get("shared_objects", {}))


def cuda_runtime_needed(record: dict) -> str | None:
    """The ``libcudart.so.N`` the wheel's shared objects need (ELF ``NEEDED``), if any."""
    needed = {lib for libs in record.get("shared_objects", {}).values() for lib in libs}
    cudart = sorted(lib for lib in needed if lib.startswith("libcudart.so."))
    return cudart[-1] if cudart else None
