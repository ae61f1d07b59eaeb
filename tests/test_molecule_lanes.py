"""scripts/molecule-lanes.py: scenarios in lanes, each log printed whole, every failure reported.

A stand-in ``molecule`` (a shell script) records when each scenario starts and ends; a
scenario that must see another one running waits for that one's start file, so the test
shows two lanes really overlap without timing anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANES = ROOT / "scripts" / "molecule-lanes.py"

# molecule test -s NAME: writes NAME.started, prints three lines, waits for the file named
# in $WAIT_<NAME> if any (up to 20 s), writes NAME.ended, exits 1 for a scenario named bad*.
FAKE = """#!/bin/bash
name="$3"
dir="$(dirname "$0")"
echo "$name" >> "$dir/order"
touch "$dir/$name.started"
echo "$name line 1"
var="WAIT_${name//-/_}"
if [ -n "${!var:-}" ]; then
  for _ in $(seq 200); do [ -e "$dir/${!var}.started" ] && break; sleep 0.1; done
  [ -e "$dir/${!var}.started" ] || { echo "$name: ${!var} never started"; exit 3; }
fi
echo "$name line 2"
echo "$name line 3"
touch "$dir/$name.ended"
case "$name" in bad*) exit 1;; esac
"""


def _run(tmp_path, *args, env=None):
    fake = tmp_path / "molecule"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    return subprocess.run(
        [sys.executable, str(LANES), "--molecule", str(fake), "--log-dir", str(tmp_path / "logs"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        cwd=tmp_path,
    )


def test_two_lanes_overlap_and_every_log_is_printed_in_one_piece(tmp_path):
    # a waits until b has started: with two lanes both run at once.
    proc = _run(tmp_path, "--lanes", "2", "a", "b", "c", env={"WAIT_a": "b"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for name in ("a", "b", "c"):
        assert f"{name} line 1\n{name} line 2\n{name} line 3\n" in out
        log = (tmp_path / "logs" / f"{name}.log").read_text()
        assert log == f"== {tmp_path}/molecule test -s {name}\n{name} line 1\n{name} line 2\n{name} line 3\n"
        assert f"== molecule test -s {name}: passed in " in out
    assert "== molecule: 2 lane(s)," in out
    assert "never started" not in out


def test_one_lane_runs_the_first_ones_first_then_the_rest_in_order(tmp_path):
    proc = _run(tmp_path, "--lanes", "1", "--first", "c nosuch b", "a", "b", "c", "d")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "order").read_text().split() == ["c", "b", "a", "d"]
    assert "== 4 scenarios in 1 lane(s): c b a d" in proc.stdout


def test_a_failed_scenario_fails_the_run_and_the_others_still_run(tmp_path):
    proc = _run(tmp_path, "--lanes", "2", "bad-one", "a", "b")
    assert proc.returncode == 1
    out = proc.stdout
    assert "== molecule test -s bad-one: FAILED (exit 1) in " in out
    assert all((tmp_path / f"{n}.ended").exists() for n in ("bad-one", "a", "b"))
    assert "== molecule: failed: bad-one (logs in " in out
    summary = out[out.index("== molecule: 2 lane(s)") :]
    assert "bad-one" in summary and "FAILED (exit 1)" in summary
    assert summary.count("passed") == 2


def test_a_command_before_a_scenario_runs_in_its_lane_and_its_failure_fails_the_scenario(tmp_path):
    proc = _run(
        tmp_path,
        "--lanes",
        "2",
        "--before",
        "a=echo fetching; touch before-a",
        "--before",
        "b=exit 4",
        "a",
        "b",
        "c",
    )
    assert proc.returncode == 1
    log = (tmp_path / "logs" / "a.log").read_text()
    assert log.startswith("== bash -c 'echo fetching; touch before-a'\nfetching\n== ")
    assert "a line 3" in log
    assert "== molecule test -s b: FAILED (exit 4) in " in proc.stdout
    assert not (tmp_path / "b.started").exists()  # molecule test -s b never ran
    assert "== molecule test -s c: passed in " in proc.stdout


def test_zero_lanes_is_refused_naming_the_value(tmp_path):
    proc = _run(tmp_path, "--lanes", "0", "a")
    assert proc.returncode == 2
    assert "--lanes 0: must be 1 or more" in proc.stderr


# molecule 26's action headers, as a scenario's log has them (colour on: ANSI codes
# around each part; colour off: "[scenario > action]").
HEADERS = {
    "create": "\x1b[36mINFO    \x1b[0m \x1b[32mdefault\x1b[0m ➜ \x1b[33mcreate\x1b[0m: \x1b[36mExecuting\x1b[0m\n",
    "converge": "INFO     [host-apt > converge] Executing\n",
}
FAKE_ACTIONS = """#!/bin/bash
printf 'INFO     [%s > destroy] Executing\\n' "$3"
printf 'INFO     [%s > create] Executing\\n' "$3"
sleep 0.3
printf 'TASK [a task > converge] Executing\\n'
printf 'INFO     [%s > converge] Executing\\n' "$3"
sleep 0.6
printf 'INFO     [%s > destroy] Executing\\n' "$3"
"""


def _lanes_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("molecule_lanes", LANES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_molecule_s_action_headers_are_recognised_and_nothing_else():
    lanes = _lanes_module()
    for action, line in HEADERS.items():
        assert lanes.phase_of(line.encode()) == action
    assert lanes.phase_of(b"TASK [foo > bar] Executing\n") is None
    assert lanes.phase_of(b"INFO     default: Executing the converge playbook\n") is None


def test_each_scenario_s_time_is_split_by_action_in_the_table_and_phases_json(tmp_path):
    fake = tmp_path / "molecule"
    fake.write_text(FAKE_ACTIONS)
    fake.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, str(LANES), "--molecule", str(fake), "--log-dir", str(tmp_path / "logs"), "one"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    phases = json.loads((tmp_path / "logs" / "phases.json").read_text())["one"]
    assert phases["rc"] == 0
    # the task named like a header did not start an action: converge is one stretch of ~0.6 s
    assert set(phases["phases"]) >= {"create", "converge", "destroy"}
    assert 0.25 <= phases["phases"]["create"] < 0.6
    assert 0.5 <= phases["phases"]["converge"] < 1.5
    assert "seconds per scenario and action" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.strip().startswith("one "))
    assert "converge" not in row and row.split()[-1].endswith("s")
    assert "% busy" in proc.stdout and "% idle" in proc.stdout


def test_cpu_use_is_the_share_between_two_readings():
    lanes = _lanes_module()
    assert (
        lanes.cpu_use((100, 10, 1000), (700, 110, 2000)) == "CPU 60 % busy, 10 % waiting for I/O, 30 % idle"
    )
    assert lanes.cpu_use(None, (1, 1, 1)).startswith("CPU use not measured")
