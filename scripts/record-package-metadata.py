#!/usr/bin/env python3
"""Record the real metadata of the distributions the sandbox imitates.

Run by hand, with PyPI reachable, when the imitated versions change; never at test time:

    .venv/bin/python scripts/record-package-metadata.py torch==2.9.1 sglang==0.5.9 ...
    .venv/bin/python scripts/record-package-metadata.py --follow-cuda torch==2.9.1

Each requirement ``name==version`` is fetched with ``pip --isolated download --no-deps``
from PyPI only (``--index-url https://pypi.org/simple``; sdists of SGLang with
``--no-binary :all:``) into a cache outside the repository (``~/.cache/cuda13-upgrade/records``,
torch wheels are ~900 MB), and one JSON record per distribution and version is written to
``sandbox/mirror/records/<name>-<version>.json`` with:

* ``source``: the file name, its URL and sha256 (PyPI's JSON API), the pip command, the date;
* ``metadata``: ``Name``, ``Version``, ``Requires-Python``, ``Requires-Dist``, ``Provides-Extra``,
  ``Summary`` from the wheel's ``METADATA`` (an sdist's ``PKG-INFO``);
* ``wheel``: the ``Tag`` lines and ``Root-Is-Purelib`` of ``WHEEL``;
* ``import_names``: ``top_level.txt``, else the top-level packages of ``RECORD``;
* ``runtime``: what the package reports at run time where the wheel states it
  (``torch/version.py``: ``__version__``, ``cuda``);
* ``shared_objects``: the ``.so`` files of the wheel and, for each, the CUDA libraries in its
  ELF ``NEEDED`` entries (``readelf -d``), e.g. ``libcudart.so.13``;
* for an SGLang sdist, ``pyproject_dependencies``: ``[project].dependencies`` of its
  ``pyproject.toml`` (the file at that release's ``python/`` directory).

A release recorded both ways (``--sdist sglang==0.5.9``, then ``sglang==0.5.9``, in either
order) keeps one record: the sdist's facts and ``source``, the wheel's ``wheel``,
``import_names``, ``runtime`` and ``shared_objects``, and the wheel's own ``source`` as
``wheel_source``. The two are merged only when the wheel's ``METADATA`` and the sdist's
``PKG-INFO`` give the same fields (name, version, Requires-Dist, ...); otherwise the recorder
stops and names the difference.

``--follow-cuda`` also records every ``nvidia-*``, ``cuda-*`` and ``triton`` distribution a
recorded wheel pins with ``==`` (markers evaluated for this machine).
"""

from __future__ import annotations

import argparse
import datetime
import email.parser
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "sandbox" / "mirror" / "records"
CACHE = Path.home() / ".cache" / "cuda13-upgrade" / "records"
PYPI = "https://pypi.org/simple"
_CUDA_LIB = re.compile(
    r"^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl|nvrtc|nvJitLink|cufft|curand|cusolver|cusparse"
    r"|cusparseLt|cupti|nvshmem|nvToolsExt|cufile|nvptxcompiler)[\w.]*\.so"
)
_META = (".dist-info", ".data")
_FOLLOW = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pypi_file(name: str, filename: str) -> dict:
    """URL and sha256 of ``filename`` from PyPI's simple JSON API (PEP 691)."""
    req = urllib.request.Request(
        f"{PYPI}/{canonicalize_name(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        data = json.load(resp)
    for item in data["files"]:
        if item["filename"] == filename:
            return {"url": item["url"], "sha256": item["hashes"].get("sha256")}
    return {"url": None, "sha256": None}


def download(req: str, sdist: bool) -> tuple[Path, list[str]]:
    """``pip --isolated download --no-deps`` ``req`` into the cache; return the file and argv."""
    name, version = req.split("==")
    dest = CACHE / canonicalize_name(name)
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--index-url", PYPI]
    # An sdist's metadata is prepared with its build requirements as wheels.
    argv += ["--no-binary", canonicalize_name(name)] if sdist else ["--only-binary", ":all:"]
    argv += ["-d", str(dest), req]
    before = set(dest.iterdir())
    subprocess.run(argv, check=True)
    files = [p for p in dest.iterdir() if _matches(p.name, name, version)]
    if not files:
        raise SystemExit(f"no file for {req} in {dest}; new: {set(dest.iterdir()) - before}")
    shown = ["pip", *argv[3:-3], req]
    return sorted(files, key=lambda p: p.stat().st_mtime)[-1], shown


def _matches(filename: str, name: str, version: str) -> bool:
    """Whether ``filename`` is a wheel or sdist of ``name`` at ``version`` (PEP 440 equal:
    ``cuda-toolkit==13.0.3`` is ``cuda_toolkit-13.0.3.0-...whl``)."""
    try:
        if filename.endswith(".whl"):
            got_name, got_version, _, _ = parse_wheel_filename(filename)
        else:
            got_name, got_version = parse_sdist_filename(filename)
    except ValueError:
        return False
    return got_name == canonicalize_name(name) and got_version == Version(version)


def _metadata(text: bytes) -> dict:
    msg = email.parser.BytesParser().parsebytes(text, headersonly=True)
    return {
        "Metadata-Version": msg.get("Metadata-Version"),
        "Name": msg.get("Name"),
        "Version": msg.get("Version"),
        "Summary": msg.get("Summary"),
        "Requires-Python": msg.get("Requires-Python"),
        "Requires-Dist": msg.get_all("Requires-Dist") or [],
        "Provides-Extra": msg.get_all("Provides-Extra") or [],
    }


def _needed(data: bytes) -> list[str]:
    with tempfile.NamedTemporaryFile(suffix=".so") as tmp:
        tmp.write(data)
        tmp.flush()
        out = subprocess.run(["readelf", "-d", tmp.name], capture_output=True, text=True).stdout
    libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    return sorted(lib for lib in libs if _CUDA_LIB.match(lib))


def _runtime(zf: zipfile.ZipFile) -> dict:
    if "torch/version.py" not in zf.namelist():
        return {}
    text = zf.read("torch/version.py").decode()
    found = {}
    for key in ("__version__", "cuda", "git_version"):
        m = re.search(rf"^{key}\s*(?::[^=]+)?=\s*['\"]?([^'\"\n]*)['\"]?", text, re.M)
        if m:
            found[key] = m.group(1)
    return {"torch/version.py": found}


def record_wheel(path: Path) -> dict:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        meta = _metadata(zf.read(f"{info}/METADATA"))
        wheel = email.parser.BytesParser().parsebytes(zf.read(f"{info}/WHEEL"), headersonly=True)
        if f"{info}/top_level.txt" in names:
            imports = sorted(zf.read(f"{info}/top_level.txt").decode().split())
        else:
            tops = {n.split("/")[0] for n in names}
            imports = sorted({t.removesuffix(".py") for t in tops if not t.endswith(_META)})
        shared = {}
        for n in names:
            if re.search(r"\.so(\.\d+)*$", n):
                shared[n] = _needed(zf.read(n))
        runtime = _runtime(zf)
    return {
        "metadata": meta,
        "wheel": {
            "tags": wheel.get_all("Tag") or [],
            "root_is_purelib": wheel.get("Root-Is-Purelib") == "true",
        },
        "import_names": imports,
        "runtime": runtime,
        "shared_objects": shared,
    }


def record_sdist(path: Path) -> dict:
    with tarfile.open(path) as tf:
        members = {m.name: m for m in tf.getmembers()}
        top = path.name.removesuffix(".tar.gz")
        pkg_info = tf.extractfile(members[f"{top}/PKG-INFO"]).read()
        pyproject = tomllib.loads(tf.extractfile(members[f"{top}/pyproject.toml"]).read().decode())
    return {
        "metadata": _metadata(pkg_info),
        "pyproject_dependencies": pyproject.get("project", {}).get("dependencies", []),
        "pyproject_optional_dependencies": pyproject.get("project", {}).get("optional-dependencies", {}),
    }


_WHEEL_FACTS = ("wheel", "import_names", "runtime", "shared_objects")


def _kind(data: dict) -> str:
    return "sdist" if data["source"]["filename"].endswith(".tar.gz") else "wheel"


def merge(existing: dict, new: dict) -> dict:
    """The record of one release from both its sdist and its wheel (see the module docstring).

    ``new`` replaces ``existing`` when it is of the same kind and ``existing`` holds nothing of
    the other kind; otherwise the sdist's facts and ``source`` are kept with the wheel's facts
    and its ``source`` as ``wheel_source``.
    """
    kinds = {_kind(existing), _kind(new)}
    if kinds == {"wheel"} or (kinds == {"sdist"} and "wheel_source" not in existing):
        return new
    if existing["metadata"] != new["metadata"]:
        differ = sorted(
            k
            for k in {*existing["metadata"], *new["metadata"]}
            if existing["metadata"].get(k) != new["metadata"].get(k)
        )
        raise SystemExit(
            f"{new['name']} {new['version']}: the wheel's METADATA and the sdist's PKG-INFO differ "
            f"in {differ}; record them apart"
        )
    if _kind(new) == "wheel":
        sdist, wheel = existing, new
    elif _kind(existing) == "wheel":
        sdist, wheel = new, existing
    else:  # a new sdist beside a record that holds a wheel already
        sdist, wheel = new, {**existing, "source": existing["wheel_source"]}
    merged = {k: v for k, v in sdist.items() if k not in _WHEEL_FACTS and k != "wheel_source"}
    merged.update({k: wheel[k] for k in _WHEEL_FACTS if k in wheel})
    merged["wheel_source"] = wheel["source"]
    return merged


def record(req: str, sdist: bool) -> dict:
    name, version = req.split("==")
    path, argv = download(req, sdist)
    facts = record_sdist(path) if path.name.endswith(".tar.gz") else record_wheel(path)
    source = {
        "kind": "recorded",
        "filename": path.name,
        **_pypi_file(name, path.name),
        "sha256_downloaded": _sha256(path),
        "command": " ".join(argv),
        "date": datetime.date.today().isoformat(),
    }
    data = {"name": canonicalize_name(name), "version": version, "source": source, **facts}
    out = RECORDS / f"{canonicalize_name(name)}-{version}.json"
    if out.is_file():
        data = merge(json.loads(out.read_text()), data)
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"recorded {out.relative_to(ROOT)}")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("requirements", nargs="+", help="name==version")
    ap.add_argument("--sdist", action="store_true", help="record the sdist (PKG-INFO, pyproject.toml)")
    ap.add_argument("--follow-cuda", action="store_true", help="also record the nvidia-*/cuda-*/triton pins")
    args = ap.parse_args(argv)
    RECORDS.mkdir(parents=True, exist_ok=True)
    todo = list(args.requirements)
    done: set[str] = set()
    while todo:
        req = todo.pop(0)
        if req in done:
            continue
        done.add(req)
        data = record(req, args.sdist)
        if not args.follow_cuda:
            continue
        for line in data["metadata"]["Requires-Dist"]:
            r = Requirement(line)
            if r.marker is not None and not r.marker.evaluate({"extra": ""}):
                continue
            pins = [s.version for s in r.specifier if s.operator == "=="]
            if _FOLLOW.match(canonicalize_name(r.name)) and pins and "*" not in pins[0]:
                todo.append(f"{canonicalize_name(r.name)}=={pins[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
