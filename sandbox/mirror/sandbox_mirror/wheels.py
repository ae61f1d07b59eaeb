"""Wheel files and PEP 503 "simple" indexes, written with the standard library only.

A wheel (PEP 427 / the binary distribution format spec) is a zip archive holding the package
files and ``<name>-<version>.dist-info/`` with ``METADATA`` (core metadata 2.1), ``WHEEL``
(``Root-Is-Purelib``, one ``Tag`` line per expanded tag) and ``RECORD`` (``path,sha256=<urlsafe
base64 without padding>,size``). Archives are deterministic: fixed timestamps and sorted
entries, the ``.dist-info`` directory last.

An index (PEP 503) is a root ``index.html`` with one anchor per normalized project name, and
per project ``<name>/index.html`` with anchors to the files carrying ``#sha256=<hex>`` and
``data-requires-python`` (HTML-escaped), as PyTorch's download.pytorch.org/whl/cu1xx pages do.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
import time
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox_mirror.catalog import SOURCE_DATE_EPOCH

_ZIP_TIME = time.gmtime(SOURCE_DATE_EPOCH)[:6]


def normalize(name: str) -> str:
    """PEP 503 normalized project name: ``Flashinfer_Python`` -> ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(name: str) -> str:
    """Name as in wheel file and ``.dist-info`` names: ``sgl-kernel`` -> ``sgl_kernel``."""
    return re.sub(r"[-_.]+", "_", name).lower()


def expand_tag(tag: str) -> list[str]:
    """``py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64`` -> one tag per platform."""
    pyvers, abis, plats = tag.split("-")
    return [f"{p}-{a}-{pl}" for p in pyvers.split(".") for a in abis.split(".") for pl in plats.split(".")]


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class WheelSpec:
    """What goes into one wheel.

    ``files`` maps archive paths to contents; ``metadata`` holds extra core-metadata fields
    in order (repeatable ones as several pairs); ``description`` becomes the message body.
    """

    name: str
    version: str
    tag: str
    files: Mapping[str, bytes]
    metadata: tuple[tuple[str, str], ...] = ()
    description: str = ""
    purelib: bool = False

    @property
    def filename(self) -> str:
        return f"{dist_name(self.name)}-{self.version}-{self.tag}.whl"

    @property
    def dist_info(self) -> str:
        return f"{dist_name(self.name)}-{self.version}.dist-info"

    @property
    def requires_python(self) -> str | None:
        for key, value in self.metadata:
            if key == "Requires-Python":
                return value
        return None


def _metadata_text(spec: WheelSpec) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}"]
    lines += [f"{key}: {value}" for key, value in spec.metadata]
    text = "\n".join(lines) + "\n"
    if spec.description:
        text += "Description-Content-Type: text/markdown\n\n" + spec.description.rstrip() + "\n"
    return text


def _wheel_text(spec: WheelSpec) -> str:
    lines = [
        "Wheel-Version: 1.0",
        "Generator: sandbox-mirror (1.0)",
        f"Root-Is-Purelib: {'true' if spec.purelib else 'false'}",
    ]
    lines += [f"Tag: {t}" for t in expand_tag(spec.tag)]
    return "\n".join(lines) + "\n"


def write_wheel(spec: WheelSpec, out_dir: Path) -> Path:
    """Write ``spec`` as ``out_dir/<filename>`` and return its path."""
    entries: list[tuple[str, bytes]] = sorted(spec.files.items())
    top_level = sorted({p.split("/", 1)[0] if "/" in p else p.removesuffix(".py") for p, _ in entries})
    dist_info = spec.dist_info
    entries += [
        (f"{dist_info}/METADATA", _metadata_text(spec).encode()),
        (f"{dist_info}/WHEEL", _wheel_text(spec).encode()),
        (f"{dist_info}/top_level.txt", "".join(f"{t}\n" for t in top_level).encode()),
    ]
    record_lines = [f"{path},{_record_hash(data)},{len(data)}" for path, data in entries]
    record_lines.append(f"{dist_info}/RECORD,,")
    entries.append((f"{dist_info}/RECORD", ("\n".join(record_lines) + "\n").encode()))

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / spec.filename
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
    return path


@dataclass(frozen=True)
class IndexedFile:
    """A distribution file listed by an index: its project and where it lies."""

    project: str
    path: Path
    requires_python: str | None = None


def _page(title: str, anchors: Iterable[str]) -> str:
    body = "\n".join(anchors)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        '    <meta name="pypi:repository-version" content="1.0">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    )


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_index(index_dir: Path, files: Iterable[IndexedFile]) -> None:
    """Write the PEP 503 pages of ``index_dir`` for ``files`` (which may lie anywhere below it)."""
    projects: dict[str, list[IndexedFile]] = {}
    for item in files:
        projects.setdefault(normalize(item.project), []).append(item)
    index_dir.mkdir(parents=True, exist_ok=True)
    root = [f'    <a href="{p}/">{p}</a><br/>' for p in sorted(projects)]
    (index_dir / "index.html").write_text(_page("Simple index", root), encoding="utf-8")
    for project, items in sorted(projects.items()):
        project_dir = index_dir / project
        project_dir.mkdir(parents=True, exist_ok=True)
        anchors = []
        for item in sorted(items, key=lambda i: i.path.name):
            rel = os.path.relpath(item.path, project_dir)
            href = "/".join(urllib.parse.quote(part) for part in Path(rel).parts)
            attrs = f'href="{href}#sha256={sha256_file(item.path)}"'
            if item.requires_python:
                attrs += f' data-requires-python="{html.escape(item.requires_python)}"'
            anchors.append(f"    <a {attrs}>{html.escape(item.path.name)}</a><br/>")
        (project_dir / "index.html").write_text(_page(f"Links for {project}", anchors), encoding="utf-8")
