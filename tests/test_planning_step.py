"""The plan of a rollout (cuda13_upgrade.steps.planning, action cuda13_plan): one host's plan from
the records of the read-only passes (cuda13_options, cuda13_host_state, cuda13_preflight with
``refuse`` false), and the hosts' plans put together with the batch plan of cuda13_fleet. The
stacks' space figures are the role's own (roles/nvidia_driver_check/files/stack-space.yml). A host
refused by its options is tests/test_steps.py's."""

from __future__ import annotations

from pathlib import Path

import yaml

from cuda13_upgrade import plan, space
from cuda13_upgrade.steps import fleet, planning

REPO = Path(__file__).resolve().parents[1]
FIGURES = yaml.safe_load((REPO / "roles" / "nvidia_driver_check" / "files" / "stack-space.yml").read_text())
RESOLVED = [{"name": "torch", "version": "2.14.1"}, {"name": "sglang", "version": "0.5.23"}]
OPTIONS = {
    "nvidia_driver_check_space_stack": "pypi-sglang-0.5.23",
    "cuda13_profiles": [{"name": "plain", "server_args": []}],
    "cuda13_rollback_verify": True,
    "cuda13_drain_tasks": "playbooks/hooks/sglang-router-drain.yml",
    "cuda13_undrain_tasks": "playbooks/hooks/sglang-router-undrain.yml",
}
STATE = {
    "already_kept": False,
    "reason": "",
    "previous": {},
    "notice": "",
    "staged_state": {},
    "target": {"toolkit_release": "13.0"},
}
PREFLIGHT = {
    "report": {"ok": True, "passed": [{"check": "space", "message": "/opt: 40 GiB free"}], "failures": []},
    "toolkit": {
        "package": "cuda-toolkit-13-0",
        "version": "13.0.2-1",
        "to_install": True,
        "transaction": {"install": ["cuda-toolkit-13-0"]},
    },
    "resolved": RESOLVED,
    "refusals": [],
}


def _host(name: str = "gpu-node-01", **records) -> dict:
    given = {"options_check": {"changed": False}, "options": OPTIONS, "state": STATE, "preflight": PREFLIGHT}
    given.update(records)
    return planning.host(name, figures=FIGURES, **given)


def test_a_host_that_passed_every_pass_is_planned_in_full_with_its_apt_wheels_and_restarts():
    planned = _host()
    assert planned["path"] == "full" and planned["why"] == "never upgraded" and planned["refusals"] == []
    assert planned["apt"] == {
        "package": "cuda-toolkit-13-0=13.0.2-1",
        "to_install": True,
        "install": ["cuda-toolkit-13-0"],
    }
    wheels_bytes = space.stack_figures(FIGURES, "pypi-sglang-0.5.23")["bytes"]["wheels"]
    assert planned["wheels"]["count"] == 2 and planned["wheels"]["bytes"] == wheels_bytes
    assert planned["wheels"]["distributions"] == ["torch==2.14.1", "sglang==0.5.23"]
    assert planned["wheels"]["record"].startswith(
        "stack-space.yml, stack pypi-sglang-0.5.23: 207 wheels, 4.34 GB"
    )
    assert planned["space"] == ["/opt: 40 GiB free"]
    # One profile: the baseline's restart into it, the switch's into the new stack; one for a rollback.
    assert (planned["restarts"]["upgrade"], planned["restarts"]["rollback"]) == (2, 1)
    assert planned["restarts"]["lines"][-1] == "restarts: 2 per upgrade, 1 more for a rollback"
    assert planned["drain"] == {
        "drain": OPTIONS["cuda13_drain_tasks"],
        "undrain": OPTIONS["cuda13_undrain_tasks"],
    }
    assert planned["warnings"] == []


def test_a_preflight_refusal_and_a_failed_state_read_refuse_the_host():
    refused = _host(
        preflight={
            **PREFLIGHT,
            "refusals": ["gpu-node-01 fails the preflight for CUDA 13.0.2; nothing was changed"],
        }
    )
    assert refused["path"] == "refused"
    assert refused["refusals"] == ["gpu-node-01 fails the preflight for CUDA 13.0.2; nothing was changed"]
    assert refused["why"] == "the rollout's preflight refuses it; no host is changed while one is refused"
    unread = _host(
        state={
            "failed": True,
            "msg": "gpu-node-01: its step.json cannot be read (x); nothing of the upgrade has run.",
        }
    )
    assert unread["path"] == "refused" and unread["refusals"][0].startswith(
        "gpu-node-01: its step.json cannot be read"
    )


def test_records_of_passes_that_did_not_run_count_as_none():
    planned = _host(
        state={"skipped": True},
        preflight={"skipped": True},
        options={
            **OPTIONS,
            "cuda13_drain_tasks": "",
            "cuda13_undrain_tasks": "",
            "cuda13_allow_undrained": True,
        },
    )
    assert planned["path"] == "full" and planned["wheels"] is None
    assert planned["apt"] == {"package": "", "to_install": True, "install": []}
    assert planned["warnings"] == [
        "no drain hook (cuda13_drain_tasks), allowed by cuda13_allow_undrained: the host keeps taking "
        "traffic while its service restarts"
    ]


def test_a_host_without_a_drain_hook_is_planned_as_refused():
    """plan says what the rollout's preflight would: refused, with its message."""
    planned = _host(
        state={"skipped": True},
        preflight={"skipped": True},
        options={**OPTIONS, "cuda13_drain_tasks": "", "cuda13_undrain_tasks": ""},
    )
    assert planned["path"] == "refused"
    assert planned["refusals"][0].startswith("gpu-node-01: the rollout restarts ")
    assert planned["refusals"][0].endswith(
        "or run it while the host serves with -e cuda13_allow_undrained=true."
    )


def test_an_already_kept_host_is_planned_to_stay_as_it_is():
    kept = {
        **STATE,
        "already_kept": True,
        "previous": {"run_id": "r0", "verified_in_run": "r0", "status": "kept"},
    }
    planned = _host(state=kept)
    assert planned["path"] == "already kept"
    assert planned["why"] == "run r0 verified this target and the stack it kept is unchanged"
    assert planned["apt"] is None and planned["wheels"] is None


def test_the_rollout_puts_the_hosts_in_batches_with_the_windows_and_the_budgets_lines():
    hosts = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    the_fleet = fleet.plan(
        hosts,
        {
            "cuda13_serial": 1,
            "cuda13_window": {"start": "01:00", "end": "05:00", "timezone": "UTC"},
            "cuda13_max_failed_hosts": 0,
        },
        "2026-12-01T00:00:00Z",
    )
    refused = _host("gpu-node-03", preflight={**PREFLIGHT, "refusals": ["gpu-node-03: no GPU"]})
    plan = planning.rollout(
        [_host("gpu-node-01"), _host("gpu-node-02"), refused], the_fleet, "r1", allow_partial=True
    )
    assert plan["run_id"] == "r1" and plan["batches"] == [["gpu-node-01"], ["gpu-node-02"]]
    assert [h["batch"] for h in plan["hosts"]] == [1, 2, None]
    lines = plan["summary"]["lines"]
    assert "gpu-node-03 refused; cuda13_preflight_allow_partial=true upgrades the others" in lines
    assert f"batches start only inside the window cuda13_window: {the_fleet['window_text']}" in lines
    assert (
        "no batch starts once more than 0 host(s) of the fleet failed or rolled back (cuda13_max_failed_hosts)"
        in lines
    )
    stopped = planning.rollout([_host("gpu-node-01"), refused], the_fleet, "r1")
    assert stopped["summary"]["stops"] is True and stopped["summary"]["changes"] == 0


def test_the_driver_windows_lines_are_planned_and_shown_under_the_host():
    window = {
        "current": "570.86.15",
        "floor": "580.95.05",
        "needs_move": True,
        "target": "580.95.05",
        "current_branch": 570,
        "target_branch": 580,
        "flavour": "open",
        "requests": ["nvidia-driver-pinning-580.95.05", "nvidia-open"],
        "changes": [],
        "activation": "reload",
        "activation_why": "nothing outside the stopped units holds the GPUs",
        "blockers": [],
        "ready": True,
    }
    planned = _host(preflight={**PREFLIGHT, "driver_window": window})
    assert planned["driver"][0] == (
        "driver window: 570.86.15 -> 580.95.05 (open kernel modules; below the floor 580.95.05)"
    )
    assert "  apt installs: nvidia-driver-pinning-580.95.05 nvidia-open" in planned["driver"]
    assert planned["driver"][-1] == "  then the stack: the CUDA 13 upgrade follows in the same run"
    alone = _host(
        options={**OPTIONS, "cuda13_driver_only": True}, preflight={**PREFLIGHT, "driver_window": window}
    )
    assert alone["driver"][-1] == (
        "  then the stack: left as it is (cuda13-upgrade driver); a later rollout upgrades it"
    )
    text = plan.render_text({"hosts": [planned], "summary": {"lines": []}})
    assert "gpu-node-01: full (no batch): never upgraded\n  driver window: 570.86.15 -> 580.95.05" in text, (
        text
    )
    assert _host()["driver"] == []


def test_the_summary_counts_the_hosts_below_the_driver_floor_ready_or_blocked():
    at_floor = {
        "current": "590.48.01",
        "floor": "580.95.05",
        "needs_move": False,
        "ready": True,
        "blockers": [],
    }
    ready = {**at_floor, "current": "570.86.15", "needs_move": True, "target": "R580", "blockers": []}
    blocked = {
        **ready,
        "ready": False,
        "blockers": [{"check": "headers", "problem": "p", "remedy": "r", "option": None, "value": "k"}],
    }
    refusal = ["gpu-node: fails the preflight for CUDA 13.0.2; nothing was changed"]
    hosts = [
        _host("gpu-node-01", preflight={**PREFLIGHT, "driver_window": at_floor}),
        _host("gpu-node-02", preflight={**PREFLIGHT, "driver_window": ready, "refusals": refusal}),
        _host("gpu-node-03", preflight={**PREFLIGHT, "driver_window": blocked, "refusals": refusal}),
    ]
    assert [h["driver_move"]["state"] for h in hosts] == ["at_floor", "ready", "blocked"]
    lines = plan.rollout_plan(hosts)["summary"]["lines"]
    assert (
        "driver window: 2 hosts below the driver floor, 1 ready for the move (gpu-node-02), 1 blocked:"
        " gpu-node-03 (headers); the rollout moves the ready ones first, measured and rolled back like the"
        " stack (docs/driver.md), and refuses the blocked ones"
    ) in lines
    assert (
        "driver window: the host meets the driver floor, no driver change"
        in plan.rollout_plan(hosts[:1])["summary"]["lines"]
    )
    assert not any(
        line.startswith("driver window") for line in plan.rollout_plan([_host()])["summary"]["lines"]
    )


def test_the_plan_of_the_driver_window_alone_names_the_hosts_it_moves_and_no_stack_change():
    at_floor = {
        "current": "590.48.01",
        "floor": "580.95.05",
        "needs_move": False,
        "ready": True,
        "blockers": [],
    }
    ready = {**at_floor, "current": "570.86.15", "needs_move": True, "target": "R580"}
    driver_only = {**OPTIONS, "cuda13_driver_only": True}
    hosts = [
        _host("gpu-node-01", options=driver_only, preflight={**PREFLIGHT, "driver_window": at_floor}),
        _host("gpu-node-02", options=driver_only, preflight={**PREFLIGHT, "driver_window": ready}),
    ]
    summary = plan.rollout_plan(hosts)["summary"]
    assert summary["driver_only"] is True and summary["driver_ready"] == ["gpu-node-02"]
    assert (
        "driver window: 1 host below the driver floor, 1 ready for the move (gpu-node-02);"
        " cuda13-upgrade driver moves the ready ones, measured and rolled back like the stack"
        " (docs/driver.md), leaves every stack as it is, and refuses the blocked ones"
    ) in summary["lines"]
    assert not any("service restarts in all" in line for line in summary["lines"]), summary["lines"]
    # The rollout's plan of the same hosts: the stack changes too.
    rollout = plan.rollout_plan([_host("gpu-node-02", preflight={**PREFLIGHT, "driver_window": ready})])
    assert rollout["summary"]["driver_only"] is False
    assert any("service restarts in all" in line for line in rollout["summary"]["lines"])
