"""cuda13_upgrade.steps.lost: the record of a host Ansible lost, and how it is counted."""

from __future__ import annotations

from cuda13_upgrade import budget, hostresult
from cuda13_upgrade.steps import lost, result

#: ssh's refusal as Ansible words an unreachable host (tests/test_lost_host_playbook.py records it).
REFUSED = (
    'Data could not be sent to remote host "10.0.0.5". Make sure this host can be reached over ssh: '
    "ssh: connect to host 10.0.0.5 port 22: Connection refused\r\n"
)


def test_the_loss_is_found_in_the_fact_or_in_the_failed_result_a_rescue_passes():
    record = lost.lost_record("switch", "Switch the service to the new stack", REFUSED)
    assert record["error"].endswith("port 22: Connection refused")
    assert lost.found({lost.LOST_FACT: record}, {}) == record
    assert lost.found({}, {"failed": {lost.LOST_FACT: record, "failed": True}}) == record
    assert lost.found({}, {"failed": {"failed": True, "msg": "rolled back"}}) is None
    assert lost.found({lost.LOST_FACT: {}}, {}) is None


def test_the_result_of_a_lost_drained_host_is_unreachable_at_its_step_and_says_it_stays_drained():
    record = lost.lost_record("verify", "Measure the new stack and decide", REFUSED)
    options = {"cuda13_old_venv": "/opt/ml-env", "cuda13_new_venv": "/opt/ml-env-cu130"}
    rescue = lost.rescue_record("gpu-node-05", record)
    done = result.record_lost(
        "gpu-node-05",
        options,
        {
            "run_id": "R",
            "drained": True,
            "steps": [{"step": "verify", "started_at": "2026-12-06T01:00:00+00:00"}],
        },
        {"rollback": rescue},
        record,
        check_mode=False,
    )
    assert done["status"] == "unreachable" and done["failed_step"] == "verify"
    assert done["rollback"]["performed"] is False
    assert done["error"].endswith("It stays drained: the undrain hook did not run.")
    assert hostresult.failure_message(done).startswith(
        "gpu-node-05: unreachable at step 'verify': gpu-node-05: Ansible lost the host at step verify "
        '(Measure the new stack and decide): Data could not be sent to remote host "10.0.0.5".'
    )
    assert "its lock stays for the next run to take over" in done["error"]


def test_a_lost_host_counts_against_the_budget_like_a_rolled_back_one():
    counted = budget.failed_hosts(
        ["a", "b", "c"], ["c"], ["a", "b", "c"], {"a": "unreachable", "b": "kept", "c": None}
    )
    assert counted == [("a", "unreachable")]


def test_a_loss_recorded_by_another_run_is_not_this_run_s():
    # A fact cache that keeps facts across runs must not make tonight's run skip the host.
    record = lost.lost_record(
        "verify", "Measure the new stack and decide", REFUSED, run_id="20261205T010000Z"
    )
    assert lost.found({lost.LOST_FACT: record}, {}, "20261206T010000Z") is None
    assert lost.found({lost.LOST_FACT: record}, {}, "20261205T010000Z") == record


def test_a_host_lost_during_its_rollback_says_the_rollback_may_be_partial_and_keeps_its_reason():
    record = lost.lost_record("rollback", "Roll the host back", REFUSED)
    regressed = {"failed": True, "msg": "plain: median 80.0 tok/s on the new stack vs 89.5 tok/s: regressed"}
    rescue = lost.rescue_record("gpu-node-05", record, regressed)
    assert "The rollback was interrupted and may be partial" in rescue["error"]
    assert "no rollback" not in rescue["error"]
    assert rescue["error"].endswith(f"The rollback was for: {regressed['msg']}")
    done = result.record_lost(
        "gpu-node-05", {}, {"drained": True}, {"rollback": rescue}, record, check_mode=False
    )
    assert done["failed_step"] == "rollback"
    assert f"The rollback was for: {regressed['msg']}" in done["error"]
    assert done["error"].endswith("It stays drained: the undrain hook did not run.")
    # Lost earlier: the rescue's own input is the loss, no other reason.
    earlier = lost.rescue_record("gpu-node-05", record, {"failed": True, lost.LOST_FACT: record, "msg": "x"})
    assert "The rollback was for" not in earlier["error"]


def test_a_host_lost_while_its_result_is_written_is_not_said_to_have_skipped_rollback_or_undrain():
    record = lost.lost_record("result", "Record the host's result", REFUSED)
    text = lost.message("gpu-node-05", record)
    assert "Its result could not be written on the host" in text
    assert "no rollback" not in text and "no undrain" not in text
