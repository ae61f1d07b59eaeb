#!/usr/bin/env python3
"""Run make test's phases in order and end with a table of where the time went.

Each phase is a make target (``lint``, ``unit``, ``molecule``), run with
``make --no-print-directory TARGET``; the run stops at the first phase that
fails, as make would, and the table is printed either way. Besides each
phase's wall time the table shows the unit tests' ten slowest (from pytest's
JUnit XML, ``--junit``) and each molecule scenario's actions (create,
prepare, converge, idempotence, verify, destroy, from ``molecule-lanes.py``'s
``phases.json``, ``--molecule-phases``), so that every CI log says where its
minutes went.

Usage: test-phases.py [--junit FILE] [--molecule-phases FILE] TARGET...
Exit status: that of the first failing phase, else 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def slowest_tests(junit: Path, count: int = 10) -> list[tuple[float, str]]:
    """The ``count`` slowest test cases of a JUnit XML report as (seconds, node id), slowest first."""
    if not junit.is_file():
        return []
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        cases.append((float(case.get("time") or 0.0), name))
    return sorted(cases, reverse=True)[:count]


def molecule_rows(path: Path) -> list[str]:
    """One line per scenario: its result, wall time and seconds per action, longest first."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    order = ("create", "prepare", "check", "converge", "idempotence", "side_effect", "verify", "destroy")
    lines = []
    for name, row in sorted(data.items(), key=lambda item: -item[1].get("seconds", 0.0)):
        phases = row.get("phases", {})
        shown = [f"{p} {phases[p]:.0f}" for p in order if p in phases]
        other = sum(v for p, v in phases.items() if p not in order)
        if other >= 1:
            shown.append(f"other {other:.0f}")
        verdict = "passed" if row.get("rc") == 0 else f"FAILED ({row.get('rc')})"
        lines.append(
            f"  molecule {name:<12} {row.get('seconds', 0.0):6.0f} s  {verdict:<11} {', '.join(shown)}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="make targets, run in this order")
    parser.add_argument("--junit", type=Path, help="pytest's JUnit XML of the unit phase")
    parser.add_argument("--molecule-phases", type=Path, help="molecule-lanes.py's phases.json")
    parser.add_argument("--make", default="make", help="the make command (default: make)")
    args = parser.parse_args(argv)

    # Stale figures from an earlier run must not pass for this one's.
    for stale in (args.junit, args.molecule_phases):
        if stale is not None and stale.exists():
            stale.unlink()
    start = time.monotonic()
    times: list[tuple[str, float, int | None]] = []
    rc = 0
    for target in args.targets:
        began = time.monotonic()
        rc = subprocess.run([args.make, "--no-print-directory", target]).returncode
        times.append((target, time.monotonic() - began, rc))
        if rc != 0:
            break
    for target in args.targets[len(times) :]:
        times.append((target, 0.0, None))
    total = time.monotonic() - start

    print("== make test: where the time went", flush=True)
    for target, seconds, code in times:
        verdict = "not run" if code is None else ("passed" if code == 0 else f"FAILED (exit {code})")
        print(f"  {target:<21} {seconds:6.0f} s  {verdict}")
        if target == "unit" and args.junit:
            for secs, name in slowest_tests(args.junit):
                print(f"    {secs:6.1f} s  {name}")
        if target == "molecule" and args.molecule_phases:
            for line in molecule_rows(args.molecule_phases):
                print(line)
    print(f"  {'total':<21} {total:6.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
