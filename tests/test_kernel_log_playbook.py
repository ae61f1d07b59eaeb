"""The kernel log around the switch on localhost: the mark before the switch (the module
``cuda13_kernel_log``, as the action cuda13_switch takes it), the read and the decision (the
action cuda13_verify, which reads the log since the mark and gates on it), the rescue after the
gate's rollback (cuda13_rollback, which reads the log only where the verify did not) and the
result's ``kernel_log`` (cuda13_result). The tasks of the verify, the gate's fail, the rescue and
the result are roles/upgrade_host/tasks/main.yml's own, taken from the file.

The log is a file printed by a stand-in command, as dmesg prints the ring buffer; the lines
"logged after the switch" are real ones (tests/test_xid.py, with their sources). The service
and the benchmark are the stand-ins of tests/servedouble.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import servedouble
import yaml
from playbook import run_playbook
from test_gate_decide_playbook import EXEC_START, NEW_VENV, _probe, _soak, _trials
from test_xid import LOADING, XID45, XID79

from cuda13_upgrade import restarts

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "roles" / "upgrade_host" / "tasks" / "main.yml"
PROFILES = [{"name": "plain", "server_args": []}]
START_FAILED = "sglang.service (the new stack in /opt/ml-env-cu130) did not generate a token within 900 s."


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from _tasks(node.get(key) or [])


def _task(name_start: str) -> dict:
    """The task of roles/upgrade_host/tasks/main.yml, or of stack.yml it includes, whose name starts so."""
    (task,) = [
        t
        for path in (MAIN, MAIN.with_name("stack.yml"))
        for t in _tasks(yaml.safe_load(path.read_text()))
        if str(t.get("name", "")).startswith(name_start)
    ]
    return task


def _run(
    tmp_path: Path,
    after_switch: list[str],
    *,
    command: str | None = None,
    regressed: bool = False,
    start_fails: bool = False,
) -> dict:
    """Mark, log ``after_switch``, verify (or, with ``start_fails``, fail as a new stack that does
    not start), rescue and record; returns ``{"outcome": "kept" or the failure's message, "result",
    "verify", "rescue"}``."""
    log = tmp_path / "kmsg"
    log.write_text(f"{XID79}\n{LOADING}\n")  # an Xid 79 before the switch is not the new stack's
    show = tmp_path / "show-log"
    show.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(log)!r}).read())\n")
    show.chmod(0o755)
    state = tmp_path / "state"
    plan = restarts.plan_upgrade(PROFILES, running=None, baseline_recorded=True)
    env = servedouble.library(
        tmp_path,
        {
            "plain": {
                "args": [],
                "trials": _trials(92.0),
                # A regressed new stack answers garbage to the probe.
                "probe": _probe("garbage" if regressed else "same"),
                "load": {},
                "soak": _soak(64),
            }
        },
        running=plan["switch_args"],
    )
    values = {
        "cuda13_kernel_log_command": command or str(show),
        "cuda13_state_dir": str(state),
        "cuda13_reports_dir": str(tmp_path / "reports"),
        "cuda13_new_venv": NEW_VENV,
        "cuda13_profiles": PROFILES,
        "verify_throughput_min_trials": 5,
        "cuda13_run_id": "r1",
        # The run so far: this test's switch changes nothing on the host (its drop-in, the
        # alternatives and the restart are not taken here), so the rescue only notes and reads.
        "cuda13_host_run": {
            "run_id": "r1",
            "host": "localhost",
            "started_at": "2026-12-03T09:00:00+00:00",
            "target": {},
            "state_dir": str(state),
            "serving": NEW_VENV,
            "drained": False,
            "changed": False,
            "steps": [
                {"step": "snapshot", "started_at": "2026-12-03T09:00:00+00:00"},
                {"step": "baseline", "started_at": "2026-12-03T09:10:00+00:00"},
                {"step": "switch", "started_at": "2026-12-03T09:20:00+00:00"},
            ],
            "failure": None,
        },
        "__cuda13_host": {"measure": True},
        "__cuda13_snapshot": {"manifest": {"service": {"exec_start": "", "user": ""}}},
        "__cuda13_baseline": {
            "baseline": {"profiles": {"plain": {"trials": _trials(89.5), "probe": _probe(), "load": {}}}},
            "restart_plan": plan,
        },
    }
    (tmp_path / "vars.json").write_text(json.dumps(values))
    switch = {
        "name": "The new stack logs",
        "ansible.builtin.copy": {
            "dest": str(log),
            "content": "".join(f"{line}\n" for line in [XID79, LOADING, *after_switch]),
            "mode": "0644",
        },
    }
    tasks = [
        {"name": "Check every option's value", "cuda13_options": {}},
        # What cuda13_switch does first (cuda13_upgrade.steps.switch.switch).
        {
            "name": "Mark the kernel log before the switch",
            "cuda13_kernel_log": {
                "action": "mark",
                "command": "{{ cuda13_options.cuda13_kernel_log_command }}",
            },
            "register": "__mark",
        },
        {
            "name": "The switch's record",
            "ansible.builtin.set_fact": {
                "__cuda13_switch": {"exec_start": EXEC_START, "kernel_log_mark": "{{ __mark.log }}"}
            },
        },
        switch,
        {
            "block": [
                {
                    "name": "The new stack does not start",
                    "ansible.builtin.fail": {"msg": START_FAILED},
                    "when": start_fails,
                },
                _task("Measure the new stack and decide"),
                _task("Roll back a new stack that failed the gate"),
                {"name": "Kept", "ansible.builtin.set_fact": {"__outcome": "kept"}},
            ],
            # The gate's own rollback goes through the rescue, which reads the log only where
            # the verify did not: the read must survive it.
            "rescue": [
                _task("Roll the host back"),
                {
                    "name": "Rolled back",
                    "ansible.builtin.set_fact": {"__outcome": "{{ ansible_failed_result.msg }}"},
                },
            ],
        },
        _task("Record the host's result"),
        {
            "name": "Result",
            "ansible.builtin.copy": {
                "dest": str(tmp_path / "out.json"),
                "mode": "0644",
                "content": "{{ {'outcome': __outcome, 'result': cuda13_result,"
                " 'verify': __cuda13_verify | default({}), 'rescue': __cuda13_rollback | default({})} | to_json }}",
            },
        },
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False)
    )
    proc = run_playbook(playbook, "-e", f"@{tmp_path / 'vars.json'}", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / "out.json").read_text())


def test_a_gpu_fallen_off_the_bus_after_the_mark_rolls_back_with_its_line(tmp_path):
    out = _run(tmp_path, [XID45, XID79], regressed=True)
    assert out["outcome"].startswith(
        "The new stack fails the gate: the kernel log shows Xid 79 after the switch"
    )
    assert repr(XID79) in out["outcome"] and "RESTART_BM" in out["outcome"]
    assert "; plain: output differs from the old stack: 0 of 8 probe prompts agree" in out["outcome"]
    log = out["result"]["kernel_log"]
    assert log["gated"] is True and log["marker_found"] is True
    # Only the lines after the mark: the Xid 79 logged before the switch is not counted twice.
    assert [e["xid"] for e in log["xid"]] == [45, 79]
    # The rescue kept the verify's read; the result's reason is the gate's, the Xid first.
    assert out["rescue"]["kernel_log_read"] == out["verify"]["kernel_log_read"]
    assert out["verify"]["kernel_log_read"]["since"] == LOADING
    assert out["result"]["reason"] == out["outcome"].removeprefix("The new stack fails the gate: ")


def test_an_application_xid_is_shown_and_the_host_kept(tmp_path):
    out = _run(tmp_path, [XID45])
    assert out["outcome"] == "kept"
    log = out["result"]["kernel_log"]
    assert log["gated"] is False and [(e["xid"], e["gate"]) for e in log["xid"]] == [(45, False)]
    assert out["result"]["status"] == "kept"


def test_a_log_that_cannot_be_read_gates_nothing(tmp_path):
    out = _run(tmp_path, [XID79], command="/nonexistent/journalctl -k")
    assert out["outcome"] == "kept"
    log = out["result"]["kernel_log"]
    assert log["read"] is False and log["gated"] is False
    assert log["message"] == "kernel log not read: /nonexistent/journalctl: No such file or directory"


def test_a_new_stack_that_does_not_start_is_read_in_the_rescue(tmp_path):
    # No verify read the log (the new stack never served): the rescue reads it since the mark,
    # and the result names the Xid before the step's own error.
    out = _run(tmp_path, [XID79], start_fails=True)
    assert out["outcome"] == START_FAILED
    assert out["rescue"]["kernel_log_read"]["lines"][-1] == XID79
    log = out["result"]["kernel_log"]
    assert log["gated"] is True and [e["xid"] for e in log["xid"]] == [79]
    assert out["result"]["reason"].startswith("the kernel log shows Xid 79 after the switch")
    assert out["result"]["reason"].endswith(f"; {START_FAILED}")
