"""The rollout's plan (cuda13_upgrade.plan): each host's path, batch and what the
rollout would do to it, the fleet's summary, and the text the terminal shows."""

from __future__ import annotations

import copy

import pytest

from cuda13_upgrade import plan, rerun

PROFILES = [
    {"name": "plain", "server_args": []},
    {"name": "eagle3", "server_args": ["--speculative-algorithm", "EAGLE3"]},
]
TARGET = {
    "toolkit_release": "13.0",
    "toolkit_package_version": "13.0.2-1",
    "requirements": ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"],
    "sglang_version": "v0.5.9",
    "sglang_method": "source",
    "profiles": PROFILES,
}
RESOLVED = [
    {"name": "sgl-kernel", "version": "0.3.21+cu130", "url": "file:///srv/mirror/a.whl", "sha256": None},
    {"name": "torch", "version": "2.9.1+cu130", "url": "file:///srv/mirror/b.whl", "sha256": None},
]
PINS = ["sgl-kernel==0.3.21+cu130", "torch==2.9.1+cu130"]
# cuda13_upgrade.aptplan.check_transaction's record of a toolkit that installs
TRANSACTION = {
    "ok": True,
    "actions": [],
    "install": ["cuda-toolkit-13-0=13.0.2-1", "cuda-nvcc-13-0=13.0.88-1"],
    "refused": [],
    "reason": "",
}
PREFLIGHT = {
    "ok": True,
    "failures": [],
    "passed": [
        {"check": "driver", "value": "580.95.05", "message": "driver 580.95.05 >= 580.65.06"},
        {
            "check": "space",
            "value": 67108864000,
            "message": "the filesystem at / (ext4) holds the new venv /opt/ml-env-cu130 "
            "(cuda13_new_venv) 12.8 GiB: needs 12.8 GiB, 62.5 GiB free",
        },
    ],
}
KEPT_RESULT = {"status": "kept", "run_id": "20261201T020000Z", "out_of_service_s": 412.5, "target": TARGET}


def _full(host="gpu-node-01", **changes):
    given = {
        "verdict": {"already_kept": False, "reason": "", "previous": {}, "notice": ""},
        "state": {"result": None, "step": None, "lock": None, "staged": None, "errors": {}},
        "target": TARGET,
        "preflight": PREFLIGHT,
        "toolkit": {"package": "cuda-toolkit-13-0", "to_install": True, "transaction": TRANSACTION},
        "resolved": RESOLVED,
        "wheels_bytes": 4_340_000_000,
        "wheels_record": "stack-space.yml, stack pypi-sglang-0.5.23: 207 wheels, 4.34 GB",
        "profiles": PROFILES,
        "drain_tasks": "/etc/cuda13/drain.yml",
        "undrain_tasks": "/etc/cuda13/undrain.yml",
    }
    given.update(changes)
    return plan.host_plan(host, **given)


def test_a_host_never_upgraded_takes_the_full_path_with_what_it_installs():
    record = _full()
    assert record["path"] == plan.FULL
    assert record["why"] == "never upgraded"
    assert record["apt"] == {
        "package": "cuda-toolkit-13-0",
        "to_install": True,
        "install": ["cuda-toolkit-13-0=13.0.2-1", "cuda-nvcc-13-0=13.0.88-1"],
    }
    assert record["wheels"]["count"] == 2
    assert record["wheels"]["distributions"] == PINS
    assert record["wheels"]["bytes"] == 4_340_000_000
    assert record["space"] == [PREFLIGHT["passed"][1]["message"]]
    # two profiles, what runs now unknown: a restart into each on the old stack, the
    # switch, one more on the new one (cuda13_upgrade.restarts.plan_upgrade)
    assert record["restarts"]["upgrade"] == 4
    assert record["restarts"]["rollback"] == 2
    assert record["warnings"] == []
    assert record["out_of_service_s"] is None


def test_a_toolkit_already_installed_has_no_apt_transaction():
    record = _full(toolkit={"package": "cuda-toolkit-13-0", "to_install": False, "transaction": None})
    assert record["apt"]["to_install"] is False
    assert record["apt"]["install"] == []
    assert "nothing to install" in plan.render_text(plan.rollout_plan([record]))


def test_a_host_kept_for_this_target_is_already_kept_and_nothing_else_is_planned():
    verdict = rerun.kept_rerun(KEPT_RESULT, TARGET, None)
    verdict = {**verdict, "already_kept": True, "reason": "kept by run 20261201T020000Z, its stack unchanged"}
    record = _full(verdict={**verdict, "previous": KEPT_RESULT, "notice": ""}, preflight=None, resolved=None)
    assert record["path"] == plan.ALREADY_KEPT
    assert record["why"] == "kept by run 20261201T020000Z, its stack unchanged"
    assert record["apt"] is None and record["wheels"] is None and record["restarts"] is None


def test_a_host_staged_for_this_target_and_resolution_is_staged():
    staged = {
        "run_id": "stage-1",
        "staged_at": "2026-12-01T18:00:00+00:00",
        "target": copy.deepcopy(TARGET),
        "resolved_target": PINS,
        "freeze": ["torch==2.9.1+cu130"],
    }
    record = _full(state={"staged": staged})
    assert record["path"] == plan.STAGED
    assert "staged by run stage-1 at 2026-12-01T18:00:00+00:00" in record["why"]
    assert record["apt"] is None and record["wheels"] is None  # built already
    assert record["restarts"]["upgrade"] == 4


@pytest.mark.parametrize(
    "change",
    [
        {"resolved_target": ["sgl-kernel==0.3.20+cu130", "torch==2.9.1+cu130"]},
        {"target": {**TARGET, "sglang_version": "v0.5.8"}},
    ],
    ids=["resolution-moved", "other-target"],
)
def test_a_host_staged_for_something_else_takes_the_full_path(change):
    staged = {"run_id": "stage-1", "staged_at": "x", "target": TARGET, "resolved_target": PINS, **change}
    assert _full(state={"staged": staged})["path"] == plan.FULL


def test_a_refused_host_carries_every_refusal_with_its_remedy():
    failed = {
        "ok": False,
        "passed": [],
        "failures": [
            {
                "check": "driver",
                "value": "570.172.08",
                "option": None,
                "message": "driver 570.172.08 is older than 580.65.06, the minimum for CUDA 13.0. "
                "Fix: install driver >= 580.65.06",
            }
        ],
    }
    record = _full(
        "gpu-node-02",
        preflight=failed,
        refusals=["gpu-node-02 fails the preflight for CUDA 13.0; nothing was changed:\n- driver ..."],
    )
    assert record["path"] == plan.REFUSED
    assert record["refusals"][0].startswith("gpu-node-02 fails the preflight")
    assert "Fix: install driver >= 580.65.06" in record["refusals"][1]
    assert record["apt"] is None


def test_without_a_drain_hook_the_plan_warns_that_traffic_reaches_the_host():
    record = _full(drain_tasks="", undrain_tasks="", allow_undrained=True)
    assert record["warnings"] == [
        "no drain hook (cuda13_drain_tasks), allowed by cuda13_allow_undrained: the host keeps taking "
        "traffic while its service restarts"
    ]
    whole = plan.rollout_plan([record])
    assert (
        "no drain hook for gpu-node-01 (cuda13_allow_undrained): traffic reaches them while they restart"
        in whole["summary"]["lines"]
    )


def test_without_a_drain_hook_nor_allow_undrained_the_plan_refuses_the_host():
    """plan refuses such a host as the rollout does (ondemand.drain_plan), not with a warning only."""
    record = _full(drain_tasks="", undrain_tasks="", service="sglang.service")
    assert record["path"] == plan.REFUSED
    assert record["refusals"] == [
        "gpu-node-01: the rollout restarts sglang.service into each profile on both stacks and sends it "
        "the gate's benchmark load, and no drain hook takes the host out of service first: "
        "cuda13_drain_tasks is empty. Nothing was changed. Set cuda13_drain_tasks and cuda13_undrain_tasks "
        "(playbooks/hooks/sglang-router-drain.yml and -undrain.yml with cuda13_router_url), or run it "
        "while the host serves with -e cuda13_allow_undrained=true."
    ]
    assert plan.rollout_plan([record])["summary"]["stops"] is True


def test_batches_take_the_hosts_that_change_and_the_fleet_summary_counts_them():
    kept = _full("gpu-node-01", verdict={"already_kept": True, "reason": "kept", "previous": KEPT_RESULT})
    hosts = [kept] + [_full(f"gpu-node-0{n}") for n in range(2, 9)]
    whole = plan.rollout_plan(hosts, max_parallel="25%", run_id="r1")
    # seven hosts change: the canary, then doubling capped at 25 % of 7 (1 host)
    assert whole["batches"] == [[f"gpu-node-0{n}"] for n in range(2, 9)]
    assert [h["batch"] for h in whole["hosts"]] == [None, 1, 2, 3, 4, 5, 6, 7]
    summary = whole["summary"]
    assert summary["paths"][plan.ALREADY_KEPT] == ["gpu-node-01"]
    assert summary["changes"] == 7
    assert summary["restarts"] == 28
    assert summary["wheels_bytes"] == 7 * 4_340_000_000
    assert summary["stops"] is False
    # gpu-node-01's last run is the estimate for the others
    assert summary["out_of_service_s"] == 412.5
    assert whole["hosts"][1]["estimate_from"] == "gpu-node-01's last run (the longest recorded)"
    assert summary["lines"][0] == "8 hosts: 7 full, 1 already kept"


def test_a_refused_host_stops_the_rollout_unless_partial_runs_are_allowed():
    hosts = [_full("gpu-node-01"), _full("gpu-node-02", refusals=["gpu-node-02: nvidia-smi failed"])]
    stopped = plan.rollout_plan(hosts)
    assert stopped["summary"]["stops"] is True
    assert stopped["summary"]["changes"] == 0
    assert stopped["summary"]["lines"][1].startswith(
        "the rollout would stop at its preflight and change no host: gpu-node-02 refused"
    )
    partial = plan.rollout_plan(hosts, allow_partial=True)
    assert partial["summary"]["stops"] is False
    assert partial["summary"]["changes"] == 1
    assert partial["batches"] == [["gpu-node-01"]]
    # every host refused: nothing goes on, partial or not
    alone = plan.rollout_plan(hosts[1:], allow_partial=True)
    assert alone["summary"]["stops"] is True
    assert alone["summary"]["changes"] == 0


def test_a_bad_batch_option_is_refused_naming_it():
    with pytest.raises(ValueError, match="cuda13_serial"):
        plan.rollout_plan([_full()], serial="half")


def test_the_text_shows_each_host_then_the_summary():
    hosts = [
        _full("gpu-node-01"),
        _full("gpu-node-02", refusals=["gpu-node-02: nvidia-smi failed (rc 9)\nFix: reload the driver"]),
    ]
    text = plan.render_text(plan.rollout_plan(hosts, allow_partial=True))
    assert text.splitlines()[0] == "gpu-node-01: full (batch 1): never upgraded"
    assert "  apt: installs cuda-toolkit-13-0 (2 packages, simulated)" in text
    assert "  wheels: 2 distributions resolved, 4.0 GiB" in text
    assert "  restarts: at most 4 for the upgrade, 2 more for a rollback" in text
    assert "  drain: /etc/cuda13/drain.yml, undrain: /etc/cuda13/undrain.yml" in text
    assert "  refused: gpu-node-02: nvidia-smi failed (rc 9)\n    Fix: reload the driver" in text
    assert "\nSummary:\n  2 hosts: 1 full, 1 refused\n" in text
