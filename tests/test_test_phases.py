"""scripts/test-phases.py: make test's phases in order, the table of where the time went."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "test-phases.py"
_spec = importlib.util.spec_from_file_location("test_phases", SCRIPT)
phases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(phases)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.test_a" name="test_fast" time="0.010" />
<testcase classname="tests.test_b" name="test_slow" time="70.8" />
<testcase classname="tests.test_c" name="test_middle[x]" time="15.2" />
</testsuite></testsuites>
"""

# make TARGET: "lint" passes, "unit" writes the JUnit report, "molecule" writes
# phases.json, a target named "broken" fails with 7.
FAKE_MAKE = """#!/bin/bash
target="$2"
case "$target" in
  unit) cat "$(dirname "$0")/junit.src" > "$(dirname "$0")/junit.xml" ;;
  molecule) cat "$(dirname "$0")/phases.src" > "$(dirname "$0")/phases.json" ;;
  broken) echo "broken target"; exit 7 ;;
esac
echo "ran $target"
"""

PHASES = {
    "midway": {
        "rc": 0,
        "seconds": 1350.2,
        "phases": {"create": 35.0, "prepare": 12.0, "converge": 1106.0, "setup": 4.0},
    },
    "host-user": {"rc": 1, "seconds": 265.0, "phases": {"create": 15.0, "verify": 8.0}},
}


def test_the_slowest_tests_come_from_the_junit_report(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    assert phases.slowest_tests(tmp_path / "junit.xml", 2) == [
        (70.8, "tests.test_b::test_slow"),
        (15.2, "tests.test_c::test_middle[x]"),
    ]
    assert phases.slowest_tests(tmp_path / "missing.xml") == []


def _run(tmp_path, *targets):
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    (tmp_path / "junit.src").write_text(JUNIT)
    (tmp_path / "phases.src").write_text(json.dumps(PHASES))
    # figures of an earlier run, which must not be shown for this one
    (tmp_path / "junit.xml").write_text(JUNIT.replace("test_slow", "test_stale"))
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--make", str(make), "--junit", str(tmp_path / "junit.xml"),
         "--molecule-phases", str(tmp_path / "phases.json"), *targets],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_every_phase_runs_in_order_and_the_table_shows_tests_and_actions(tmp_path):
    proc = _run(tmp_path, "lint", "unit", "molecule")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.index("ran lint") < out.index("ran unit") < out.index("ran molecule")
    table = out[out.index("== make test: where the time went") :]
    assert "tests.test_b::test_slow" in table and "test_stale" not in table
    assert "molecule midway" in table and "converge 1106" in table and "other 4" in table
    host_user = next(line for line in table.splitlines() if "molecule host-user" in line)
    assert "FAILED (1)" in host_user
    assert table.strip().splitlines()[-1].split()[0] == "total"


def test_a_failing_phase_stops_the_run_and_the_table_is_still_printed(tmp_path):
    proc = _run(tmp_path, "lint", "broken", "molecule")
    assert proc.returncode == 7
    assert "ran molecule" not in proc.stdout
    table = proc.stdout[proc.stdout.index("== make test: where the time went") :]
    assert "FAILED (exit 7)" in table
    assert "not run" in table.splitlines()[3]
