#!/usr/bin/env python3
"""Build the sandbox's package mirror: what the simulated Blackwell host installs from.

Usage: ``python3 sandbox/mirror/build.py [--out .sandbox/mirror] [--gnupg-home .sandbox/gnupg]``

The host serves the result at ``http://127.0.0.1:8080/`` (``python3 -m http.server
--directory /srv/mirror``, a read-only bind mount of the output directory). It holds:

* ``cuda/repos/debian12/x86_64/`` -- a flat apt repository shaped like NVIDIA's, signed with a
  key generated once per checkout (``--gnupg-home``, never committed); the public key is
  ``cuda/repos/debian12/x86_64/cuda-sandbox-keyring.gpg``;
* ``whl/cu128/``, ``whl/cu130/``, ``whl/nightly/cu130/``, ``sgl-whl/cu1xx/``,
  ``sgl-whl/cu130-mixed/``, ``flashinfer-whl/cu1xx/``, ``pypi/simple/`` -- PEP 503 indexes of
  stand-in wheels;
* ``git/sglang.git`` -- a bare repository of the stand-in SGLang (tags v0.5.8, v0.5.9);
* ``sglang-sim/scenarios/`` -- the simulated server's scenario files;
* ``manifest.json`` -- what was built (packages, files, tags, key fingerprint).

Only the standard library and Debian tools (dpkg-deb, dpkg-scanpackages, gpg, git) are used.
Rebuilding with unchanged inputs changes nothing (see ``sandbox_mirror/builder.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sandbox_mirror.builder import (  # noqa: E402
    DEFAULT_GNUPG_HOME,
    DEFAULT_OUT,
    DEFAULT_PYTHON_WHEELS,
    build_mirror,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="mirror directory")
    parser.add_argument(
        "--gnupg-home", type=Path, default=DEFAULT_GNUPG_HOME, help="GnuPG home of the signing key"
    )
    parser.add_argument(
        "--python-wheels-dir",
        type=Path,
        default=DEFAULT_PYTHON_WHEELS,
        help="where Debian's python3-setuptools-whl/python3-wheel-whl put their wheels",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    result = build_mirror(args.out, args.gnupg_home, args.python_wheels_dir, args.force)
    pypi = result.manifest["indexes"].get("pypi/simple", [])
    if not any(name.startswith("wheel-") for name in pypi):
        print(
            f"warning: no wheel-*.whl in {args.python_wheels_dir}: pypi/simple lacks 'wheel', "
            "so SGLang cannot be built from source offline (apt-get install python3-wheel-whl)",
            file=sys.stderr,
        )
    state = "built" if result.rebuilt else "up to date"
    print(f"{result.out}: {state} (stamp {result.stamp[:16]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
