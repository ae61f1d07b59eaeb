#!/usr/bin/env python3
"""Rewrite docs/options.md's generated part from the roles' argument specs.

The text above the marker line (cuda13_upgrade.options_doc.MARKER) is kept as
written; everything after it is cuda13_upgrade.options_doc.options_doc().
tests/test_options_doc.py fails until this has been run after a change to a
role's meta/argument_specs.yml or to a tier.

Usage: .venv/bin/python scripts/options-doc.py [--check]
Exit status: 0 written (or, with --check, already equal); 1 with --check when
the file differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cuda13_upgrade.options_doc import load_specs, render_file  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the file is up to date")
    args = parser.parse_args(argv)
    path = REPO / "docs" / "options.md"
    current = path.read_text(encoding="utf-8")
    wanted = render_file(current, load_specs(REPO))
    if args.check:
        if wanted != current:
            print(f"{path} is out of date: run .venv/bin/python scripts/options-doc.py", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
