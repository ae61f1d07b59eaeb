"""The restart plan (cuda13_upgrade.restarts)."""

from __future__ import annotations

import base64
import re
import shlex
from pathlib import Path

import pytest

from cuda13_upgrade import restarts

PLAIN = {"name": "plain", "server_args": []}
# inventory/blackwell's EAGLE-3 profile: speculative arguments on both stacks,
# one more on the new stack only.
EAGLE3 = {
    "name": "eagle3",
    "server_args": ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"],
    "new_stack_args": ["--enable-flashinfer-allreduce-fusion"],
}
EXEC = "/opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m --port 30000"


def test_two_profiles_restart_three_times_per_upgrade_and_twice_per_rollback():
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=[])
    # Baseline: plain is what runs (no restart), eagle3 restarts; no restore: the switch follows.
    assert [(s["profile"], s["restart"]) for s in plan["baseline"]["steps"]] == [
        ("plain", False),
        ("eagle3", True),
    ]
    assert plan["baseline"]["restore"] is False
    # The switch starts the new stack straight into eagle3 (with its new-stack argument).
    assert plan["switch_args"] == EAGLE3["server_args"] + EAGLE3["new_stack_args"]
    # Candidate: eagle3 is running, plain (the own command) comes last: no restore.
    assert [(s["profile"], s["restart"]) for s in plan["candidate"]["steps"]] == [
        ("eagle3", False),
        ("plain", True),
    ]
    assert plan["candidate"]["restore"] is False
    assert plan["restarts_upgrade"] == 3
    assert plan["rollback_args"] == EAGLE3["server_args"]
    assert [s["profile"] for s in plan["rollback"]["steps"]] == ["eagle3", "plain"]
    assert plan["restarts_rollback"] == 2


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_at_most_2p_minus_1_restarts_per_upgrade_and_p_per_rollback(count):
    profiles = [PLAIN] + [{"name": f"p{i}", "server_args": [f"--x{i}"]} for i in range(1, count)]
    plan = restarts.plan_upgrade(profiles, running=[])
    assert plan["restarts_upgrade"] == 2 * count - 1
    assert plan["restarts_rollback"] == count
    # Every profile is measured once per phase.
    for phase in ("baseline", "candidate", "rollback"):
        assert sorted(s["profile"] for s in plan[phase]["steps"]) == sorted(p["name"] for p in profiles)
    # The service ends on its own command on the new stack and after a rollback.
    assert plan["candidate"]["steps"][-1]["args"] == []
    assert plan["rollback"]["steps"][-1]["args"] == []


def test_a_recorded_baseline_skips_the_old_stack_restarts():
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=[], baseline_recorded=True)
    assert plan["baseline"] is None
    assert plan["restarts_upgrade"] == 2


def test_an_unknown_running_command_restarts_for_the_first_baseline_profile():
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=None)
    assert [s["restart"] for s in plan["baseline"]["steps"]] == [True, True]
    assert plan["restarts_upgrade"] == 4


def test_a_server_left_on_a_profile_is_measured_first_without_a_restart():
    # A profile drop-in left by an interrupted run: the server runs eagle3's arguments.
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=EAGLE3["server_args"])
    assert [(s["profile"], s["restart"]) for s in plan["baseline"]["steps"]] == [
        ("eagle3", False),
        ("plain", True),
    ]


def test_without_a_profile_on_the_own_command_a_restore_restart_is_planned():
    profiles = [{"name": "a", "server_args": ["--a"]}, {"name": "b", "server_args": ["--b"]}]
    plan = restarts.plan_upgrade(profiles, running=[])
    assert plan["candidate"]["restore"] is True
    assert plan["rollback"]["restore"] is True
    assert plan["restarts_upgrade"] == 2 + 3
    assert plan["restarts_rollback"] == 3


def test_a_new_stack_argument_makes_the_plain_profile_not_the_own_command_on_the_new_stack():
    plain_new = {"name": "plain", "server_args": [], "new_stack_args": ["--y"]}
    plan = restarts.plan_upgrade([plain_new], running=[])
    assert plan["baseline"]["restarts"] == 0
    assert plan["switch_args"] == ["--y"]
    assert plan["candidate"]["restore"] is True
    assert plan["rollback"]["restore"] is False
    assert plan["restarts_rollback"] == 1


def test_without_rollback_verify_the_rollback_restarts_once_into_the_own_command():
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=[], rollback_verify=False)
    assert plan["rollback"] is None
    assert plan["rollback_args"] == []
    assert plan["restarts_rollback"] == 1


def test_measuring_what_serves_ends_on_the_own_command():
    # playbooks/verify.yml: no switch follows, so the service goes back to its own command.
    phase = restarts.plan_phase([EAGLE3, PLAIN], "baseline", running=[])
    assert [(s["profile"], s["restart"]) for s in phase["steps"]] == [("plain", False), ("eagle3", True)]
    assert phase["restore"] is True
    assert phase["restarts"] == 2
    unknown = restarts.plan_phase([EAGLE3, PLAIN], "baseline", running=None)
    assert [s["profile"] for s in unknown["steps"]] == ["eagle3", "plain"]
    assert unknown["restarts"] == 2 and unknown["restore"] is False


def test_running_args_read_proc_cmdline():
    cmdline = "\0".join(EXEC.split() + ["--speculative-algorithm", "EAGLE3"]) + "\0"
    assert restarts.running_args(cmdline.encode(), EXEC) == ["--speculative-algorithm", "EAGLE3"]
    assert restarts.running_args("\0".join(EXEC.split()) + "\0", EXEC) == []
    assert restarts.running_args(b"", EXEC) is None
    assert restarts.running_args(b"/usr/bin/other\0", EXEC) is None
    assert restarts.running_args("x\0", "unbalanced 'quote") is None


def test_the_venv_the_server_runs_is_read_from_its_program_not_the_units_files():
    # midway's killed host: the killed run had written the new stack's drop-ins
    # but the service still ran the old venv's Python with EAGLE-3's arguments.
    old = "\0".join(EXEC.split() + ["--speculative-algorithm", "EAGLE3"]) + "\0"
    assert restarts.main_process_venv(old.encode()) == "/opt/ml-env"
    new = old.replace("/opt/ml-env/bin/python", "/opt/ml-env-cu130/bin/python3.11")
    assert restarts.main_process_venv(new) == "/opt/ml-env-cu130"
    assert restarts.main_process_venv("/opt//ml-env/bin/python3\0-m\0sglang\0") == "/opt/ml-env"
    # A wrapper script, a system Python, nothing running: unknown, not a venv.
    assert restarts.main_process_venv("/bin/bash\0/usr/local/bin/start-sglang\0") is None
    assert restarts.main_process_venv("/usr/bin/python3\0-m\0sglang\0") == "/usr"
    assert restarts.main_process_venv("python3\0-m\0sglang\0") is None
    assert restarts.main_process_venv(b"") is None
    assert restarts.main_process_venv(None) is None


def test_the_venv_and_command_of_a_cmdline():
    cmdline = b"/opt/ml-env/bin/python\0-m\0sglang.launch_server\0--model-path\0/m x\0"
    assert restarts.main_process_venv(cmdline) == "/opt/ml-env"
    assert (
        shlex.join(restarts.main_process_argv(cmdline))
        == "/opt/ml-env/bin/python -m sglang.launch_server --model-path '/m x'"
    )
    assert restarts.main_process_argv(b"") == []


def test_bad_profiles_are_refused_with_the_value():
    with pytest.raises(ValueError, match="at least one profile"):
        restarts.plan_upgrade([], running=[])
    with pytest.raises(ValueError, match="unique"):
        restarts.plan_upgrade([PLAIN, PLAIN], running=[])
    with pytest.raises(ValueError, match="server_args must be a list, got '--x'"):
        restarts.plan_upgrade([{"name": "x", "server_args": "--x"}], running=[])
    with pytest.raises(ValueError, match="phase must be one of"):
        restarts.plan_phase([PLAIN], "verify")


def test_format_plan_names_each_phase_and_the_counts():
    lines = restarts.format_plan(restarts.plan_upgrade([PLAIN, EAGLE3], running=[]))
    assert lines[0] == "baseline (old stack): plain (no restart, it runs now), eagle3 (restart) (1 restarts)"
    assert lines[1] == (
        "switch: one restart into the new stack with --speculative-algorithm EAGLE3 "
        "--speculative-num-steps 3 --enable-flashinfer-allreduce-fusion"
    )
    assert (
        lines[2] == "candidate (new stack): eagle3 (started by the step before), plain (restart) (2 restarts)"
    )
    assert lines[-1] == "restarts: 3 per upgrade, 2 more for a rollback"
    recorded = restarts.format_plan(restarts.plan_upgrade([PLAIN], running=[], baseline_recorded=True))
    assert recorded[0] == "baseline (old stack): recorded baseline, no restart"


def test_running_args_and_the_plan_of_two_profiles():
    cmdline = ("\0".join(EXEC.split()) + "\0").encode()
    assert restarts.running_args(cmdline, EXEC) == []
    assert restarts.running_args(b"", EXEC) is None
    plan = restarts.plan_upgrade([PLAIN, EAGLE3], running=[], baseline_recorded=False, rollback_verify=True)
    assert plan["restarts_upgrade"] == 3
    assert restarts.format_plan(plan)[-1] == "restarts: 3 per upgrade, 2 more for a rollback"
    with pytest.raises(ValueError, match="profile names must be unique"):
        restarts.plan_upgrade([PLAIN, PLAIN], running=None)


# --- the recorded baseline -------------------------------------------------------

NOW = 1_767_000_000.0


def _baseline(age_hours: float = 1.0, **profiles) -> dict:
    measured = profiles or {
        "plain": {"server_args": [], "trials": [100.0], "probe": []},
        "eagle3": {"server_args": EAGLE3["server_args"], "trials": [180.0], "probe": []},
    }
    return {"run_id": "r1", "taken_at_epoch": NOW - age_hours * 3600, "profiles": measured}


def test_a_young_baseline_of_the_same_profiles_is_reused():
    verdict = restarts.recorded_baseline(_baseline(), [PLAIN, EAGLE3], max_age_hours=24, now=NOW)
    assert verdict == {"usable": True, "record": _baseline()}


def test_a_baseline_older_than_the_limit_is_measured_again():
    verdict = restarts.recorded_baseline(_baseline(25), [PLAIN, EAGLE3], max_age_hours=24, now=NOW)
    assert verdict["usable"] is False
    assert verdict["record"]["run_id"] == "r1"


def test_a_profile_missing_from_the_baseline_or_one_more_there_is_measured_again():
    assert not restarts.recorded_baseline(
        _baseline(plain={"server_args": [], "trials": [1.0], "probe": []}),
        [PLAIN, EAGLE3],
        max_age_hours=24,
        now=NOW,
    )["usable"]
    assert not restarts.recorded_baseline(_baseline(), [PLAIN], max_age_hours=24, now=NOW)["usable"]


def test_other_server_arguments_or_no_probe_make_the_baseline_unusable():
    changed = {**EAGLE3, "server_args": ["--speculative-algorithm", "EAGLE3"]}
    assert not restarts.recorded_baseline(_baseline(), [PLAIN, changed], max_age_hours=24, now=NOW)["usable"]
    no_probe = _baseline(plain={"server_args": [], "trials": [1.0]})
    assert not restarts.recorded_baseline(no_probe, [PLAIN], max_age_hours=24, now=NOW)["usable"]


def test_no_baseline_or_one_without_profiles_is_unusable():
    assert restarts.recorded_baseline(None, [PLAIN], max_age_hours=24, now=NOW) == {
        "usable": False,
        "record": {},
    }
    assert restarts.recorded_baseline({"run_id": "r"}, [PLAIN], max_age_hours=24, now=NOW) == {
        "usable": False,
        "record": {"run_id": "r"},
    }


def test_a_baseline_of_a_minute_ago_is_usable_now():
    import time

    record = {"taken_at_epoch": time.time() - 60, "profiles": {"plain": {"server_args": [], "probe": []}}}
    assert restarts.recorded_baseline(record, [PLAIN], max_age_hours=24.0, now=time.time()) == {
        "usable": True,
        "record": record,
    }


# restarts.serve_outcome: what one start into a profile came to, from the JSON
# hostscripts/service_cycle.py prints.
FAILURES = Path(__file__).resolve().parent / "fixtures" / "failures"
SERVE = {
    "service": "sglang.service",
    "what": "profile eagle3, candidate phase",
    "exec_start": "/opt/ml-env-cu130/bin/python -m sglang.launch_server",
    "venv": "/opt/ml-env-cu130/",
    "args": ["--speculative-num-steps", 3],
    "check": True,
    "url": "http://127.0.0.1:30000",
    "timeout": 900,
    "leftover_timeout": 30,
}
RUNS = b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0--speculative-num-steps\0003\0"


def _cycle(**fields) -> dict:
    return {
        "restarted": True,
        "release": {"free": True, "waited_s": 0.5, "leftovers": [], "signalled": {}, "still_running": []},
        "start_error": None,
        "ready": {"generated": True, "endpoint": "/health_generate", "waited_s": 41.0, "last": "200"},
        "journal": [],
        "cmdline_b64": base64.b64encode(RUNS).decode(),
        **fields,
    }


def test_a_server_that_runs_the_profile_passes_and_says_it_restarted():
    out = restarts.serve_outcome(_cycle(), **SERVE)
    assert out["failed"] is False and out["msg"] == ""
    assert out["restarted"] is True and out["running_args"] == ["--speculative-num-steps", "3"]
    assert out["running_venv"] == "/opt/ml-env-cu130"
    assert out["report"] == ["sglang.service serves profile eagle3, candidate phase after a restart."]


def test_leftovers_that_were_stopped_are_named_with_their_memory_and_the_signals():
    leftover = {
        "pid": 4242,
        "command": "/opt/ml-env/bin/python -m sglang.launch_server",
        "gpu_memory_mib": 81234,
    }
    release = {"free": True, "waited_s": 42.0, "leftovers": [leftover], "signalled": {"4242": "SIGTERM"}}
    out = restarts.serve_outcome(_cycle(release=release), **SERVE)
    assert out["failed"] is False and out["leftovers"] == [leftover]
    assert out["report"][1] == (
        "sglang.service left 1 process(es) after it stopped: pid 4242 (/opt/ml-env/bin/python -m"
        " sglang.launch_server, 81234 MiB of GPU memory); stopped with SIGTERM after 30 s"
        " (cuda13_leftover_timeout)."
    )


def test_gpus_still_held_fail_before_anything_else_is_said():
    release = {
        "free": False,
        "leftovers": [{"pid": 7, "command": "x", "gpu_memory_mib": 1}],
        "still_running": [7],
    }
    out = restarts.serve_outcome(_cycle(release=release, ready=None), **SERVE)
    assert out["failed"] is True
    assert out["msg"].startswith("sglang.service stopped, but its processes [7] still run or hold GPU memory")
    assert "nvidia-smi --query-compute-apps=pid,used_memory" in out["msg"]


def test_a_server_that_never_generates_fails_with_the_wait_the_option_and_the_journal_in_lines():
    journal = [f"line {i}" for i in range(30)]
    ready = {
        "generated": False,
        "last": "Status code was 503 and not [200]: HTTP Error 503: Service Unavailable",
    }
    out = restarts.serve_outcome(_cycle(ready=ready, journal=journal), **SERVE)
    lines = out["msg"].splitlines()
    assert lines[0] == (
        "sglang.service (profile eagle3, candidate phase) did not generate a token at http://127.0.0.1:30000"
        " within 900 s (last answer: Status code was 503 and not [200]: HTTP Error 503: Service Unavailable)."
    )
    assert "cuda13_health_timeout" in lines[1]
    # the journal's last 15 lines, one per line
    assert lines[2:] == ["Last lines of its journal:", *journal[-15:]]


def test_a_start_the_journal_explains_gets_its_cause_and_remedy_with_the_unit_s_user():
    journal = (FAILURES / "systemd-exec-venv-python-denied.txt").read_text().splitlines()
    error = "systemctl start sglang.service: Job for sglang.service failed."
    out = restarts.serve_outcome(
        _cycle(start_error=error, ready=None, journal=journal), **SERVE, service_user="sglang"
    )
    assert out["msg"].startswith(f"sglang.service (profile eagle3, candidate phase) did not start: {error}.")
    assert "Cause: " in out["msg"] and "sglang" in out["msg"].splitlines()[1]


@pytest.mark.parametrize(
    ("cmdline", "fails"),
    [
        (b"/opt/ml-env/bin/python\0-m\0sglang.launch_server\0--speculative-num-steps\0003\0", True),
        (b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0", True),
        # a wrapper cannot be read: no check
        (b"/bin/sh\0/usr/local/bin/serve.sh\0", False),
    ],
)
def test_a_server_that_runs_another_stack_or_profile_fails_naming_both(cmdline, fails):
    out = restarts.serve_outcome(_cycle(cmdline_b64=base64.b64encode(cmdline).decode()), **SERVE)
    assert out["failed"] is fails
    if fails:
        assert out["msg"].startswith(
            "sglang.service does not run profile eagle3, candidate phase: its main process runs"
        )
        assert "(the Python of /opt/ml-env-cu130/)" in out["msg"]
    assert (
        restarts.serve_outcome(
            _cycle(cmdline_b64=base64.b64encode(cmdline).decode()), **{**SERVE, "check": False}
        )["failed"]
        is False
    )


@pytest.mark.parametrize(
    ("restart", "files_changed", "would"),
    [
        ("always", False, True),
        ("when-changed", True, True),
        ("when-changed", False, False),
        ("never", True, False),
    ],
)
def test_in_check_mode_the_restart_that_would_follow_is_reported(restart, files_changed, would):
    out = restarts.serve_outcome({}, **SERVE, restart=restart, files_changed=files_changed)
    assert out["would_restart"] is would and out["failed"] is False
    assert out["report"] == [
        "Would restart sglang.service (profile eagle3, candidate phase)."
        if would
        else "sglang.service would not restart."
    ]


# restarts.measure_plan: verify_throughput's plan for one phase, with what the play passes in checked.
def test_measure_plan_plans_from_what_runs_and_keeps_a_given_plan():
    plan = restarts.measure_plan([PLAIN, EAGLE3], "baseline", running=EAGLE3["server_args"], exec_start="x")
    assert [s["profile"] for s in plan["steps"]] == ["eagle3", "plain"]
    given = restarts.plan_phase([PLAIN, EAGLE3], "candidate", entered=True)
    baseline = {"plain": {}, "eagle3": {}}
    assert (
        restarts.measure_plan([PLAIN, EAGLE3], "candidate", plan=given, exec_start="x", baseline=baseline)
        == given
    )


@pytest.mark.parametrize(
    ("profiles", "given", "message"),
    [
        ([], {}, "verify_throughput_profiles must not be empty"),
        ([PLAIN], {"exec_start": ""}, "verify_throughput_exec_start must be set"),
        (
            [PLAIN, EAGLE3],
            {"baseline": {"plain": {}}},
            "in the candidate phase verify_throughput_baseline must hold every profile: it has ['plain'],"
            " without ['eagle3']",
        ),
        (
            [PLAIN],
            {"baseline": {"plain": {}}, "probe": True, "baseline_probe": {}},
            "verify_throughput_baseline_probe must hold every profile",
        ),
        (
            [PLAIN],
            {"baseline": {"plain": {}}, "probe_tokens": 0},
            "verify_throughput_probe_tokens must be at least 1, got 0",
        ),
        (
            [PLAIN],
            {"baseline": {"plain": {}}, "plan": {"steps": [{"profile": "eagle3"}]}},
            "verify_throughput_plan measures ['eagle3'], but verify_throughput_profiles are ['plain']",
        ),
    ],
)
def test_measure_plan_refuses_what_the_play_passes_in_naming_the_option(profiles, given, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        restarts.measure_plan(profiles, "candidate", **{"exec_start": "x", **given})


def test_serve_outcome_carries_the_effective_configuration_when_the_cycle_read_it():
    base = {
        "restarted": True,
        "release": {"free": True, "leftovers": []},
        "ready": {"generated": True},
        "cmdline_b64": "",
    }
    line = "[2026-11-20 09:14:32 TP0] TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
    kwargs = {
        "service": "sglang.service",
        "what": "profile eagle3",
        "exec_start": "/opt/ml-env/bin/python -m sglang.launch_server",
        "venv": "/opt/ml-env",
        "args": [],
        "check": False,
        "url": "http://127.0.0.1:30000",
        "timeout": 60,
        "leftover_timeout": 30.0,
    }
    outcome = restarts.serve_outcome(
        {**base, "server_info": {"enable_torch_symm_mem": True, "version": "0.5.9"}, "startup_log": [line]},
        **kwargs,
    )
    assert outcome["effective"]["args"] == {"enable_torch_symm_mem": True}
    assert [r["path"] for r in outcome["effective"]["disabled"]] == ["torch symmetric memory allreduce"]
    assert restarts.serve_outcome(base, **kwargs)["effective"] is None
    assert restarts.serve_outcome(None, **kwargs)["effective"] is None


def test_a_baseline_taken_on_another_driver_is_measured_again():
    # A run that lost the host during a driver move left the old driver's baseline behind.
    on_570 = {**_baseline(), "driver_version": "570.211.01"}
    judged = [
        restarts.recorded_baseline(on_570, [PLAIN, EAGLE3], max_age_hours=24, now=NOW, driver_version=now)
        for now in ("580.142", "", "570.211.01", None)
    ]
    assert [j["usable"] for j in judged] == [False, False, True, True]
    # A baseline written before baselines recorded their driver still stands.
    assert restarts.recorded_baseline(
        _baseline(), [PLAIN, EAGLE3], max_age_hours=24, now=NOW, driver_version="580.142"
    )["usable"]
