#!/usr/bin/env python3
"""Write a PEP 503 "simple" directory index over directories of wheels.

    pep503_index.py OUT WHEEL_DIR [WHEEL_DIR ...]

OUT/index.html lists every project; OUT/<project>/index.html links each of its
files (relative links, so the index works when OUT and the wheel directories
are served by one static HTTP server, e.g. ``python3 -m http.server``), each
with its ``#sha256=`` digest (PEP 503: "the URL SHOULD include a hash"). The
project name is the wheel's distribution part, normalised as PEP 503 says
(``re.sub(r"[-_.]+", "-", name).lower()``). Standard library only. Rewrites OUT
only when the set of files changed (the digests of 4 GB take a while).
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import sys
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    files = sorted(
        p for d in argv[1:] for p in Path(d).iterdir() if p.suffix == ".whl" or p.name.endswith(".tar.gz")
    )
    stamp = out / ".files"
    listing = "\n".join(f"{p} {p.stat().st_size}" for p in files) + "\n"
    if stamp.exists() and stamp.read_text() == listing:
        return 0
    projects: dict[str, list[Path]] = {}
    for path in files:
        projects.setdefault(normalize(path.name.split("-", 1)[0]), []).append(path)
    out.mkdir(parents=True, exist_ok=True)
    for project, paths in sorted(projects.items()):
        links = []
        for path in paths:
            sha = hashlib.sha256()
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    sha.update(chunk)
            digest = sha.hexdigest()
            href = os.path.relpath(path, out / project)
            links.append(f'<a href="{html.escape(href)}#sha256={digest}">{html.escape(path.name)}</a><br>')
        (out / project).mkdir(exist_ok=True)
        (out / project / "index.html").write_text(
            "<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        )
    (out / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n"
        + "\n".join(f'<a href="{p}/">{p}</a><br>' for p in sorted(projects))
        + "\n</body></html>\n"
    )
    stamp.write_text(listing)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
