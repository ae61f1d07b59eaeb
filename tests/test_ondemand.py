"""cuda13_upgrade.ondemand: verify's and rollback's drain plan, a host without a snapshot,
alternatives left in manual mode; and how the report and ``status`` show them."""

import json
from pathlib import Path

import pytest

from cuda13_upgrade import fleetstate, hostresult, ondemand, stack
from cuda13_upgrade.summary import fleet_summary

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("command", ["verify", "rollback"])
def test_without_a_drain_hook_the_command_refuses_naming_the_option(command):
    plan = ondemand.drain_plan(command, "gpu-node-03", "sglang.service", "", "")
    assert plan["drain"] is False
    assert plan["refusal"].startswith(f"gpu-node-03: {command} restarts sglang.service")
    assert "cuda13_drain_tasks is empty. Nothing was changed." in plan["refusal"]
    assert plan["refusal"].endswith("-e cuda13_allow_undrained=true.")


def test_allow_undrained_goes_on_without_draining():
    plan = ondemand.drain_plan("verify", "h", "sglang.service", "", "", allow_undrained=True)
    assert plan == {"drain": False, "undrain": False, "refusal": None}


def test_with_the_hooks_the_host_is_drained_and_undrained():
    plan = ondemand.drain_plan("rollback", "h", "s.service", "/p/drain.yml", "/p/undrain.yml")
    assert plan == {"drain": True, "undrain": True, "refusal": None}
    # The rollout's rule: a drain without an undrain hook leaves the host to the operator.
    assert ondemand.drain_plan("rollback", "h", "s.service", "/p/drain.yml", "")["undrain"] is False


def test_an_unknown_command_is_refused():
    with pytest.raises(ValueError, match="unknown on-demand command 'rollout'"):
        ondemand.drain_plan("rollout", "h", "s.service", "", "")


def test_an_auto_group_whose_auto_pick_is_the_new_toolkit_stays_manual():
    """tools/update-alternatives-cuda.txt: Best 13.0 (still installed), Value 12.8."""
    query = stack.parse_alternatives_query((FIXTURES / "tools" / "update-alternatives-cuda.txt").read_text())
    recorded = {"status": "auto", "value": "/usr/local/cuda-12.8", "link": "/usr/local/cuda"}
    restore = ondemand.alternatives_restore("cuda", recorded, query)
    assert restore == {
        "action": "select",
        "left_manual": {
            "group": "cuda",
            "selected": "/usr/local/cuda-12.8",
            "auto_would_select": "/usr/local/cuda-13.0",
        },
    }
    assert ondemand.alternatives_note([restore["left_manual"]]) == (
        "cuda stays in manual mode on /usr/local/cuda-12.8: "
        "update-alternatives --auto cuda would select /usr/local/cuda-13.0."
    )


def test_groups_that_go_back_to_auto_or_were_manual_say_nothing():
    recorded = {"status": "auto", "value": "/usr/local/cuda-12.8", "link": "/usr/local/cuda"}
    best_old = {"status": "manual", "best": "/usr/local/cuda-12.8", "value": "/usr/local/cuda-13.0"}
    assert ondemand.alternatives_restore("cuda", recorded, best_old) == {
        "action": "auto",
        "left_manual": None,
    }
    assert ondemand.alternatives_restore("cuda", recorded, {**best_old, "status": "auto"})["action"] == "none"
    manual = {**recorded, "status": "manual"}
    query = {"status": "manual", "best": "/usr/local/cuda-13.0", "value": "/usr/local/cuda-13.0"}
    assert ondemand.alternatives_restore("cuda", manual, query) == {"action": "select", "left_manual": None}
    assert ondemand.alternatives_restore("cuda", recorded, None) == {"action": "select", "left_manual": None}


LEFT = {"group": "cuda", "selected": "/usr/local/cuda-12.8", "auto_would_select": "/usr/local/cuda-13.0"}


def test_the_report_names_a_group_left_in_manual_mode_and_a_host_with_nothing_to_roll_back(tmp_path):
    run = tmp_path / "r2"
    records = [
        ondemand.rolled_back("gpu-node-01", "r2", 41.5, [LEFT], "2026-12-02T08:00:00+00:00"),
        ondemand.nothing_to_roll_back(
            "gpu-node-02",
            "r2",
            "/var/lib/cuda13-upgrade/snapshots/pre-upgrade.json",
            "2026-12-02T08:00:00+00:00",
        ),
    ]
    for record in records:
        (run / record["host"]).mkdir(parents=True)
        (run / record["host"] / "result.json").write_text(json.dumps(record))
    summary = fleet_summary(run)
    rows = {row["host"]: row for row in summary["rows"]}
    assert rows["gpu-node-01"]["rollback"]["alternatives_manual"] == [LEFT]
    assert rows["gpu-node-02"]["decision"] == "nothing to roll back"
    md = summary["markdown"]
    assert "## Alternatives left in manual mode" in md
    assert (
        "- gpu-node-01: cuda stays in manual mode on /usr/local/cuda-12.8: "
        "update-alternatives --auto cuda would select /usr/local/cuda-13.0." in md
    )
    assert (
        "| gpu-node-02 | nothing to roll back | no | nothing to roll back to: gpu-node-02 has no pre-upgrade "
        "snapshot at /var/lib/cuda13-upgrade/snapshots/pre-upgrade.json" in md
    )


def test_host_result_keeps_the_groups_a_rescue_rollback_left_manual():
    record = hostresult.host_result(
        {
            "host": "h",
            "status": "rolled_back",
            "finished_at": "2026-12-02T08:00:00+00:00",
            "rollback_alternatives_manual": [LEFT],
        }
    )
    assert record["rollback"]["alternatives_manual"] == [LEFT]


def test_status_keeps_the_earlier_state_after_a_rollback_with_nothing_to_roll_back(tmp_path):
    kept = tmp_path / "r1" / "gpu-node-02"
    kept.mkdir(parents=True)
    (kept / "result.json").write_text(
        json.dumps({"host": "gpu-node-02", "status": "failed", "finished_at": "2026-12-01T08:00:00+00:00"})
    )
    later = tmp_path / "r2" / "gpu-node-02"
    later.mkdir(parents=True)
    (later / "result.json").write_text(
        json.dumps(ondemand.nothing_to_roll_back("gpu-node-02", "r2", "/x", "2026-12-02T08:00:00+00:00"))
    )
    [state] = fleetstate.host_states(tmp_path, ["gpu-node-02"])
    assert state["state"] == "failed"
    assert state["run_id"] == "r1"
