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
    assert plan == {
        "drain": False,
        "undrain": False,
        "refusal": None,
        "warning": "no drain hook (cuda13_drain_tasks), allowed by cuda13_allow_undrained: the host keeps "
        "taking traffic while its service restarts",
    }


def test_with_the_hooks_the_host_is_drained_and_undrained():
    plan = ondemand.drain_plan("rollback", "h", "s.service", "/p/drain.yml", "/p/undrain.yml")
    assert plan == {"drain": True, "undrain": True, "refusal": None, "warning": None}
    # The rollout's rule: a drain without an undrain hook leaves the host to the operator.
    assert ondemand.drain_plan("rollback", "h", "s.service", "/p/drain.yml", "")["undrain"] is False


def test_an_unknown_command_is_refused():
    with pytest.raises(ValueError, match="unknown command 'rollout': one of verify, rollback, upgrade"):
        ondemand.drain_plan("rollout", "h", "s.service", "", "")


def test_the_rollout_follows_the_same_rule():
    """One rule for every command that restarts or loads a serving host."""
    plan = ondemand.drain_plan("upgrade", "gpu-node-01", "sglang.service", "", "")
    assert plan["refusal"] == (
        "gpu-node-01: the rollout restarts sglang.service into each profile on both stacks and sends it "
        "the gate's benchmark load, and no drain hook takes the host out of service first: "
        "cuda13_drain_tasks is empty. Nothing was changed. Set cuda13_drain_tasks and cuda13_undrain_tasks "
        "(playbooks/hooks/sglang-router-drain.yml and -undrain.yml with cuda13_router_url), or run it "
        "while the host serves with -e cuda13_allow_undrained=true."
    )
    assert ondemand.drain_plan("upgrade", "h", "s", "/p/d.yml", "/p/u.yml")["refusal"] is None
    assert ondemand.drain_plan("upgrade", "h", "s", "", "", allow_undrained=True)["refusal"] is None


def test_a_hook_file_that_does_not_exist_is_refused_with_where_it_was_looked_for(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "d.yml").write_text("---\n")
    (tmp_path / "hooks" / "u.yml").write_text("---\n")
    assert ondemand.hook_failures(str(tmp_path / "hooks" / "d.yml"), "hooks/u.yml", [tmp_path]) == []
    failures = ondemand.hook_failures(str(tmp_path / "nosuch.yml"), "hooks/u.yml", [tmp_path / "a", tmp_path])
    assert failures == [
        {
            "option": "cuda13_drain_tasks",
            "value": str(tmp_path / "nosuch.yml"),
            "message": (
                "the drain hook is no task file on the control node (a relative path is looked up in "
                f"{tmp_path / 'a'}, {tmp_path}): {str(tmp_path / 'nosuch.yml')!r}. Option: cuda13_drain_tasks. "
                'Fix: give the path of the hook\'s task file, e.g. "{{ playbook_dir }}/hooks/sglang-router-drain.yml".'
            ),
        }
    ]
    # Relative: the role's tasks/ (and a tasks/ under each place), as include_tasks looks.
    assert ondemand.resolve_hook("d.yml", [tmp_path / "hooks"]) == tmp_path / "hooks" / "d.yml"
    assert ondemand.resolve_hook("nosuch.yml", [tmp_path]) is None


@pytest.mark.parametrize(
    ("drain", "undrain", "option", "text"),
    [
        (
            "/p/d.yml",
            "",
            "cuda13_undrain_tasks",
            "a drain hook (/p/d.yml) without an undrain hook: a drained host "
            "would stay out of the load balancer after its upgrade: ''. Option: cuda13_undrain_tasks.",
        ),
        (
            "",
            "/p/u.yml",
            "cuda13_drain_tasks",
            "an undrain hook (/p/u.yml) without a drain hook: nothing takes the "
            "host out of the load balancer before it restarts: ''. Option: cuda13_drain_tasks.",
        ),
    ],
)
def test_drain_and_undrain_come_as_a_pair(drain, undrain, option, text):
    failures = ondemand.hook_failures(drain, undrain, None)
    assert [f["option"] for f in failures] == [option]
    assert failures[0]["message"].startswith(text)


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
