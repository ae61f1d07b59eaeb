"""The actions no other playbook test runs, through ansible-playbook on localhost, once with --check and
once for real.

Control node (``CONTROL``): cuda13_plan (one host's plan, then the rollout's plan.json, after the
real cuda13_fleet start and cuda13_host_state), cuda13_report_file, cuda13_batch_soak (its watch
answered by a stand-in of cuda13_bench written here: the test machine serves no model) and
cuda13_result's ``interrupted`` mode (roles/upgrade_host/tasks/interrupted.yml's task).

Measuring (``MEASURING``): cuda13_baseline and cuda13_measure against the stand-ins of
tests/servedouble.py, and cuda13_switch in --check only: for real it writes its drop-in under
/etc/systemd/system and points /usr/local/cuda at the new toolkit on the machine that runs the
test (the switch's real effects are tests/test_switch_step.py's, under tmp_path).

The state and report directories are under tmp_path; each test runs its playbook once, in one mode,
and asserts each action's outcome from what the play kept (``records.json``, written by its last
task, in check mode too) and what it wrote.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import servedouble
from playbook import REPO, run_playbook
from test_batch_soak import REFERENCE, UNIT

RUN_ID = "20261203T090000Z"
SERVICE = "nosuch-cuda13-actions-test.service"
OLD_EXEC = "/opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m --port 30000"
PROBE = [{"prompt": "p", "output_ids": REFERENCE, "text": "", "completion_tokens": 7, "spec_verify_ct": None}]
# A watch record of hostscripts/completion_bench.py --watch-seconds (tests/test_batch_soak.py's shape).
WATCH = {
    "seconds": 30,
    "interval_s": 15,
    "deadline_s": 60.0,
    "max_new_tokens": 32,
    "watched_s": 30.2,
    "checks": [
        {"at_s": at, "outcome": "served", "detail": "", "output_ids": list(REFERENCE)}
        for at in (0.0, 15.0, 30.0)
    ],
    "unit_before": UNIT,
    "unit_after": UNIT,
    "journal_tail": [],
}

BENCH_WATCH = '''#!/usr/bin/python
"""Stand-in of cuda13_bench that answers the watch of the soak between batches (tests/test_actions_playbook.py)."""
import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.completion_bench import BENCH_SPEC

RECORD = {record!r}
LOG = {log!r}


def main():
    module = AnsibleModule(argument_spec=BENCH_SPEC, supports_check_mode=True)
    p = module.params
    with open(LOG, "a") as handle:
        handle.write(json.dumps({{"mode": p["mode"], "watch_seconds": p["watch_seconds"], "unit": p["unit"]}}) + "\\n")
    if p["mode"] != "watch":
        module.fail_json(msg="the stand-in only watches")
    with open(RECORD) as handle:
        module.exit_json(changed=False, bench={{"url": p["url"], "watch": json.load(handle)}})


if __name__ == "__main__":
    main()
'''

CONTROL = """---
- hosts: all
  gather_facts: false
  tasks:
    - name: Plan the rollout's batches
      cuda13_fleet:
        action: start
        run_id: "{{ cuda13_run_id }}"
        reports_dir: "{{ cuda13_reports_dir }}"
        started: "2026-12-03T09:00:00Z"

    - name: Check every option's value
      cuda13_options: {}
      register: __options

    - name: Read the host's state and decide
      cuda13_host_state:
        options: "{{ cuda13_options }}"
        run_id: "{{ cuda13_run_id }}"
      register: __host

    - name: Decide what the rollout would do with the host
      cuda13_plan:
        action: host
        options_check: "{{ __options }}"
        options: "{{ cuda13_options }}"
        state: "{{ __host }}"
      register: __cuda13_plan

    - name: Put the hosts' plans together, write plan.json and show it
      cuda13_plan:
        action: rollout
        run_id: "{{ cuda13_run_id }}"
        reports_dir: "{{ cuda13_reports_dir }}"
      register: __plan

    - name: Write a file of the run's report
      cuda13_report_file:
        path: "{{ note }}"
        content: "checked by {{ cuda13_run_id }}\\n"
        mode: "0640"
      register: __note

    - name: Watch the kept host in service before the next batch
      cuda13_batch_soak:
        options: "{{ cuda13_options }}"
        verify:
          batch_soak: {watch: true, seconds: 30, why: watched 30 s in service before the next batch starts}
          measured: {results: {plain: {probe: "{{ probe }}"}}}
      register: __soak

    - name: Record where the interrupted run left the host and release its lock
      cuda13_result:
        mode: interrupted
        options: "{{ cuda13_options }}"
        run_id: "{{ cuda13_run_id }}"
        step: wheels
      register: __interrupted

    - name: Keep the records for the test
      ansible.builtin.copy:
        dest: "{{ records }}"
        content: "{{ {'host': __host, 'host_plan': __cuda13_plan, 'plan': __plan, 'note': __note,
                      'soak': __soak, 'interrupted': __interrupted} | to_json }}"
        mode: "0644"
      check_mode: false
"""

MEASURING = """---
- hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {}

    - name: Measure the old stack, or reuse its recorded baseline
      cuda13_baseline:
        options: "{{ cuda13_options }}"
        run_id: "{{ cuda13_run_id }}"
        snapshot: "{{ snapshot }}"
      register: __baseline

    - name: Measure what the host serves now
      cuda13_measure:
        options: "{{ cuda13_options }}"
        run_id: "{{ cuda13_run_id }}"
        exec_start: "{{ snapshot.manifest.service.exec_start }}"
        venv: /opt/ml-env
      register: __measure

    - name: Move the service to the new stack
      cuda13_switch:
        options: "{{ cuda13_options }}"
        snapshot: "{{ snapshot }}"
        baseline: "{{ __baseline }}"
      register: __switch
      when: ansible_check_mode

    - name: Keep the records for the test
      ansible.builtin.copy:
        dest: "{{ records }}"
        content: "{{ {'baseline': __baseline, 'measure': __measure, 'switch': __switch} | to_json }}"
        mode: "0644"
      check_mode: false
"""


def _vars(root: Path, **more) -> Path:
    values = {
        "cuda13_run_id": RUN_ID,
        "cuda13_state_dir": str(root / "state"),
        "cuda13_reports_dir": str(root / "reports"),
        "cuda13_cache_root": str(root / "cache"),
        "cuda13_new_venv": str(root / "venv"),
        "cuda13_service_name": SERVICE,
        "cuda13_soak_seconds": 30,
        "nvidia_driver_check_nvidia_smi": str(REPO / "sandbox" / "host" / "nvidia-smi"),
        "records": str(root / "records.json"),
        **more,
    }
    path = root / "vars.json"
    path.write_text(json.dumps(values))
    return path


def _run(root: Path, play: str, check: bool, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    playbook = root / "play.yml"
    playbook.write_text(play)
    args = ["-e", f"@{root / 'vars.json'}", *(["--check"] if check else [])]
    proc = run_playbook(playbook, *args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((root / "records.json").read_text())


def _control(root: Path, mode: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The control node's actions, run in ``mode`` (check or real)."""
    lock = root / "state" / "run.lock"
    lock.mkdir(parents=True)
    (lock / "owner.json").write_text(json.dumps({"run_id": RUN_ID, "control_node": "cn", "pid": 1}))
    (root / "watch.json").write_text(json.dumps(WATCH))
    lib = root / "standin-library"
    lib.mkdir()
    (lib / "cuda13_bench.py").write_text(
        BENCH_WATCH.format(record=str(root / "watch.json"), log=str(root / "bench.log"))
    )
    _vars(root, note=str(root / "reports" / RUN_ID / "note.txt"), probe=PROBE)
    env = {"ANSIBLE_LIBRARY": os.pathsep.join([str(lib), str(REPO / "library")])}
    return _run(root, CONTROL, mode == "check", env)


def _plan(mode: str, root: Path, proc: subprocess.CompletedProcess, records: dict) -> None:
    """cuda13_plan: the host's plan, then plan.json (written in check mode too: the plan changes no host)."""
    host_plan = records["host_plan"]["plan"]
    assert (
        host_plan["host"] == "localhost"
        and host_plan["path"] == "full"
        and host_plan["why"] == "never upgraded"
    )
    assert host_plan["refusals"] == [] and records["host_plan"]["changed"] is False
    plan = records["plan"]["plan"]
    assert records["plan"]["path"] == str(root / "reports" / RUN_ID / "plan.json")
    written = json.loads(Path(records["plan"]["path"]).read_text())
    assert written == plan and plan["run_id"] == RUN_ID and plan["batches"] == [["localhost"]]
    assert plan["summary"]["lines"][0] == "1 host: 1 full"
    assert "1 host changes, in 1 batch; 2 service restarts in all" in " ".join(proc.stdout.split())
    # The host's state was read (cuda13_host_state), its run record started.
    assert records["host"]["measure"] is True and records["host"]["run"]["run_id"] == RUN_ID


def _report_file(mode: str, root: Path, records: dict) -> None:
    """cuda13_report_file: written only for real, with its mode."""
    note = root / "reports" / RUN_ID / "note.txt"
    assert records["note"]["changed"] is True and records["note"]["path"] == str(note)
    if mode == "check":
        assert not note.exists()
    else:
        assert note.read_text() == f"checked by {RUN_ID}\n"
        assert stat.S_IMODE(note.stat().st_mode) == 0o640


def _batch_soak(mode: str, root: Path, records: dict) -> None:
    """cuda13_batch_soak: the host watched (the stand-in's record judged) only for real."""
    soak = records["soak"]
    assert soak["changed"] is False and soak["rollback"] is False and soak["reason"] == ""
    if mode == "check":
        assert soak["batch_soak"]["outcome"] == "not watched" and not (root / "bench.log").exists()
        return
    assert soak["batch_soak"]["healthy"] is True and soak["batch_soak"]["outcome"] == "healthy"
    assert (soak["batch_soak"]["checks"], soak["batch_soak"]["served"]) == (3, 3)
    assert soak["batch_soak"]["output_compared"] is True
    calls = [json.loads(line) for line in (root / "bench.log").read_text().splitlines()]
    assert calls == [{"mode": "watch", "watch_seconds": 30.0, "unit": SERVICE}]
    # The step began in the host's run record, and on the host.
    assert json.loads((root / "state" / "step.json").read_text())["step"] == "batch_soak"


def _interrupted(mode: str, root: Path, records: dict) -> None:
    """cuda13_result mode interrupted: recorded on the host and the lock released only for real; the
    control node's copy in both modes."""
    done = records["interrupted"]
    assert (done["held"], done["recorded"], done["changed"]) == (True, True, True)
    assert done["result"]["status"] == "interrupted" and done["result"]["failed_step"] == "wheels"
    report = json.loads((root / "reports" / RUN_ID / "localhost" / "result.json").read_text())
    assert report == done["result"]
    on_host = root / "state" / "result.json"
    if mode == "check":
        assert sorted(p.name for p in (root / "state").iterdir()) == ["run.lock"]
        assert (root / "state" / "run.lock" / "owner.json").exists()
    else:
        assert json.loads(on_host.read_text()) == done["result"]
        assert not (root / "state" / "run.lock").exists()


@pytest.mark.parametrize("mode", ["check", "real"])
def test_the_control_nodes_actions(tmp_path, mode):
    proc, records = _control(tmp_path, mode)
    _plan(mode, tmp_path, proc, records)
    _report_file(mode, tmp_path, records)
    _batch_soak(mode, tmp_path, records)
    _interrupted(mode, tmp_path, records)


def _measuring(root: Path, mode: str) -> tuple[subprocess.CompletedProcess, dict, list]:
    """The measuring actions against the stand-ins, run in ``mode``; the stand-ins' calls."""
    trials = [
        {"output_tok_s": 89.5 * f, "decode_tok_s": 89.5 * f}
        for f in (0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0)
    ]
    env = servedouble.library(root, {"plain": {"args": [], "trials": trials, "probe": PROBE}}, running=None)
    _vars(root, snapshot={"manifest": {"service": {"exec_start": OLD_EXEC, "user": "root", "group": "root"}}})
    proc, records = _run(root, MEASURING, mode == "check", env)
    return proc, records, servedouble.calls(root)


def _baseline(mode: str, root: Path, proc: subprocess.CompletedProcess, records: dict, calls: list) -> None:
    """cuda13_baseline: the plan shown; the old stack measured and recorded only for real."""
    baseline = records["baseline"]
    assert baseline["recorded"] is False
    assert [s["profile"] for s in baseline["restart_plan"]["baseline"]["steps"]] == ["plain"]
    assert "baseline (old stack): plain (restart) (1 restarts)" in proc.stdout
    recorded = root / "state" / "baseline.json"
    if mode == "check":
        assert baseline["baseline"] == {"run_id": RUN_ID, "profiles": {}} and baseline["measured"] is None
        assert not recorded.exists()
        # What the service runs is read in check mode too, and nothing else.
        assert calls == [
            {"module": "cuda13_service", "restart": "never", "args": [], "restarted": False, "url": ""}
        ]
        return
    assert baseline["restarts"] == 1 and baseline["measured"]["phase"] == "baseline"
    written = json.loads(recorded.read_text())
    assert written["run_id"] == RUN_ID and written["profiles"] == baseline["baseline"]["profiles"]
    assert len(written["profiles"]["plain"]["trials"]) == 7 and written["profiles"]["plain"]["probe"] == PROBE
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o600


def _measure(mode: str, proc: subprocess.CompletedProcess, records: dict, calls: list) -> None:
    """cuda13_measure: the rate per profile, measured and shown only for real."""
    measured = records["measure"]
    assert (measured["exec_start"], measured["venv"], measured["changed"]) == (OLD_EXEC, "/opt/ml-env", False)
    if mode == "check":
        assert measured["measured"] is None
        return
    plain = measured["measured"]["results"]["plain"]
    assert plain["summary"]["n"] == 7 and plain["summary"]["median"] == pytest.approx(89.5)
    assert "localhost: plain: median 89.5 tok/s (min 88.6, max 90.4, 7 trials)" in proc.stdout
    # The baseline's restart left plain running: the measure reads it and restarts nothing.
    assert [c["restarted"] for c in calls if c["module"] == "cuda13_service"] == [False, True, False, False]


def _switch(mode: str, root: Path, proc: subprocess.CompletedProcess, records: dict) -> None:
    """cuda13_switch in check mode: what it would change, and nothing changed."""
    if mode == "real":
        assert records["switch"]["skipped"] is True
        return
    switch = records["switch"]
    assert switch["exec_start"] == OLD_EXEC.replace("/opt/ml-env/", f"{root}/venv/")
    assert switch["dropin_changed"] is True and switch["kernel_log_mark"] is None
    assert switch["served"]["would_restart"] is True
    out = " ".join(proc.stdout.split())
    assert (
        "Would point /usr/local/cuda at /usr/local/cuda-13.0 (alternatives group cuda, manual mode)." in out
    )
    assert not Path(f"/etc/systemd/system/{SERVICE}.d").exists() and not (root / "cache").exists()


@pytest.mark.parametrize("mode", ["check", "real"])
def test_the_measuring_actions(tmp_path, mode):
    proc, records, calls = _measuring(tmp_path, mode)
    _baseline(mode, tmp_path, proc, records, calls)
    _measure(mode, proc, records, calls)
    _switch(mode, tmp_path, proc, records)
