"""The baseline (cuda13_upgrade.steps.baseline, action cuda13_baseline), without Ansible: the old
stack measured on tests/stepdoubles.py's server, or the baseline recorded on the host (its state
directory under tmp_path, read and written by cuda13_record's own function) reused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from stepdoubles import OLD_EXEC, Server, options, trials
from test_batch_soak import REFERENCE

from cuda13_upgrade import restarts
from cuda13_upgrade.steps import baseline
from cuda13_upgrade.steps.host import StepFailed

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
PROFILES = [{"name": "plain", "server_args": []}, {"name": "eagle3", "server_args": EAGLE3}]
PROBE = [{"prompt": "p", "output_ids": REFERENCE, "text": "", "completion_tokens": 7, "spec_verify_ct": None}]
MANIFEST = {"service": {"exec_start": OLD_EXEC, "user": "sglang"}}
PROMPTS = {"seed": 1, "prompts": ["p"]}
SWITCH_DROPIN = "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf"


def _setup(tmp_path: Path, *, running: list | None = None, **answers):
    opts = options(
        tmp_path,
        cuda13_profiles=PROFILES,
        verify_throughput_min_trials=3,
        verify_throughput_max_trials=5,
    )
    profiles = {
        "plain": {"args": [], "trials": trials(89.5), "probe": PROBE, **answers},
        "eagle3": {"args": EAGLE3, "trials": trials(54.1), "probe": PROBE},
    }
    return opts, Server(tmp_path, profiles, running=[] if running is None else running)


def _recorded(tmp_path: Path, *, age_hours: float = 1.0, profiles: list | None = None) -> dict:
    record = {
        "run_id": "r0",
        "taken_at": "2026-12-01T10:00:00+00:00",
        "taken_at_epoch": time.time() - age_hours * 3600,
        "profiles": {
            p["name"]: {"server_args": p["server_args"], "trials": trials(89.5, 3), "probe": PROBE}
            for p in profiles or PROFILES
        },
    }
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "baseline.json").write_text(json.dumps(record))
    return record


def _take(host, opts, shown: list | None = None):
    return baseline.take(
        host,
        opts,
        run_id="r1",
        manifest=MANIFEST,
        prompts=PROMPTS,
        on_trial=(lambda name, found: shown.append((name, len(found)))) if shown is not None else None,
    )


def test_the_old_stack_is_measured_in_the_plans_order_and_recorded_on_the_host(tmp_path):
    opts, server = _setup(tmp_path)
    host = server.fake()
    shown: list = []
    taken = _take(host, opts, shown)
    plan = restarts.plan_upgrade(PROFILES, running=[], baseline_recorded=False)
    assert taken["restart_plan"] == plan and host.told == restarts.format_plan(plan)
    # What runs is read; plain runs now: measured first, without a restart; eagle3 after one.
    assert server.log == [
        ("serve", []),
        ("serve", []), ("probe", "plain"), ("trials", "plain"),
        ("restart", EAGLE3), ("probe", "eagle3"), ("trials", "eagle3"),
    ]  # fmt: skip
    assert taken["recorded"] is False and taken["restarts"] == 1 and taken["leftovers"] == []
    assert shown == [("plain", 3), ("eagle3", 3)]
    written = json.loads((tmp_path / "state" / "baseline.json").read_text())
    assert oct((tmp_path / "state" / "baseline.json").stat().st_mode & 0o777) == "0o600"
    assert written["run_id"] == "r1" and set(written["profiles"]) == {"plain", "eagle3"}
    assert written["profiles"]["eagle3"]["server_args"] == EAGLE3
    assert [t["output_tok_s"] for t in written["profiles"]["plain"]["trials"]] == [
        t["output_tok_s"] for t in trials(89.5, 3)
    ]
    assert written["profiles"]["plain"]["probe"] == PROBE
    assert taken["baseline"] == {"run_id": "r1", "profiles": written["profiles"]}
    # The old stack still serves: the switch restarts it anyway.
    assert server.running == EAGLE3


def test_a_recent_baseline_of_the_same_profiles_is_reused_without_a_restart(tmp_path):
    opts, server = _setup(tmp_path)
    recorded = _recorded(tmp_path)
    taken = _take(server.fake(), opts)
    assert taken["recorded"] is True and taken["baseline"] == recorded
    assert taken["measured"] is None and taken["restart_plan"]["baseline"] is None
    assert server.restarts() == [] and [what for what, _ in server.log] == ["serve"]  # the read of what runs
    assert json.loads((tmp_path / "state" / "baseline.json").read_text()) == recorded


@pytest.mark.parametrize(
    "why",
    ["older than cuda13_baseline_max_age_hours", "another set of profiles"],
)
def test_a_baseline_too_old_or_of_other_profiles_is_measured_again(tmp_path, why):
    opts, server = _setup(tmp_path)
    if why.startswith("older"):
        _recorded(tmp_path, age_hours=25)
    else:
        _recorded(tmp_path, profiles=PROFILES[:1])
    taken = _take(server.fake(), opts)
    assert taken["recorded"] is False and taken["measured"]["phase"] == "baseline"
    assert json.loads((tmp_path / "state" / "baseline.json").read_text())["run_id"] == "r1"


def test_a_baseline_recorded_on_another_driver_is_measured_again_and_each_records_its_driver(tmp_path):
    opts, server = _setup(tmp_path)
    server.driver_version = "580.142"
    record = _recorded(tmp_path)
    (tmp_path / "state" / "baseline.json").write_text(json.dumps({**record, "driver_version": "570.211.01"}))
    taken = _take(server.fake(), opts)
    assert taken["recorded"] is False and taken["measured"]["phase"] == "baseline"
    written = json.loads((tmp_path / "state" / "baseline.json").read_text())
    assert (written["run_id"], written["driver_version"]) == ("r1", "580.142")
    # The next run on the same driver reuses it.
    again = _take(server.fake(), opts)
    assert again["recorded"] is True and again["measured"] is None


def test_check_mode_plans_and_shows_the_plan_and_measures_nothing(tmp_path):
    opts, server = _setup(tmp_path, running=EAGLE3)
    host = server.fake(check_mode=True)
    taken = _take(host, opts)
    # What runs is read even in check mode: the plan starts with the profile that runs.
    plan = restarts.plan_upgrade(PROFILES, running=EAGLE3, baseline_recorded=False)
    assert taken["restart_plan"] == plan and [s["profile"] for s in plan["baseline"]["steps"]] == [
        "eagle3",
        "plain",
    ]
    assert host.told == restarts.format_plan(plan)
    assert taken["baseline"] == {"run_id": "r1", "profiles": {}} and taken["measured"] is None
    assert not (tmp_path / "state" / "baseline.json").exists()
    assert [what for what, _ in server.log] == ["serve"] and server.restarts() == []


def test_a_switched_host_without_a_usable_baseline_goes_back(tmp_path):
    opts, server = _setup(tmp_path)
    server.unit_file(SWITCH_DROPIN).parent.mkdir(parents=True)
    server.unit_file(SWITCH_DROPIN).write_text("[Service]\n")
    host = server.fake()
    with pytest.raises(StepFailed) as failed:
        _take(host, opts)
    assert failed.value.msg == (
        f"gpu-node-01 already runs the new stack ({SWITCH_DROPIN}) but has no baseline of the old stack"
        " recorded within cuda13_baseline_max_age_hours=24 for the profiles plain, eagle3: the host goes"
        " back to its old stack now; run the upgrade again to measure both."
    )
    # What the new stack runs is not the old stack's: it is not even read.
    assert not host.called("cuda13_service") and not host.called("cuda13_bench")
    _recorded(tmp_path)
    assert _take(server.fake(), opts)["recorded"] is True


def test_a_benchmark_that_fails_on_every_try_fails_the_step_and_records_nothing(tmp_path):
    opts, server = _setup(tmp_path, fail_trials=3, fail_msg="connection refused")
    with pytest.raises(StepFailed) as failed:
        _take(server.fake(), opts)
    assert failed.value.msg == (
        "gpu-node-01: the decode benchmark of plain/baseline failed on every try (3 tries): connection refused"
    )
    assert failed.value.record == {"recorded": False, "restarts": 0, "leftovers": []}
    assert not (tmp_path / "state" / "baseline.json").exists()


def test_a_failed_try_is_tried_again(tmp_path):
    opts, server = _setup(tmp_path, fail_trials=2, fail_msg="connection refused")
    taken = _take(server.fake(), opts)
    assert len(taken["baseline"]["profiles"]["plain"]["trials"]) == 3
    assert [what for what, name in server.log if name == "plain"] == ["probe", "trials", "trials", "trials"]
