"""The fleet's failure budget: cuda13_upgrade.budget, and the plan that carries it."""

from __future__ import annotations

import pytest

from cuda13_upgrade import budget
from cuda13_upgrade.steps import fleet

HOSTS = [f"gpu-node-{i:02d}" for i in range(1, 9)]


@pytest.mark.parametrize(
    ("value", "n_hosts", "expected"),
    [
        (None, 8, 0),
        ("", 8, 0),
        (0, 8, 0),
        (2, 8, 2),
        ("3", 8, 3),
        ("25%", 8, 2),
        ("10%", 8, 0),  # 0.8 hosts: rounded down
        ("30%", 8, 2),  # 2.4
        ("100%", 8, 8),
        ("0%", 8, 0),
        ("50%", 0, 0),
    ],
)
def test_allowed_counts_and_percentages(value, n_hosts, expected):
    assert budget.allowed(value, n_hosts) == expected


@pytest.mark.parametrize("value", [-1, "-1", True, 1.5, "12.5%", "101%", "two", [1], "1 %"])
def test_bad_budgets_name_the_option(value):
    with pytest.raises(ValueError) as caught:
        budget.allowed(value, 8)
    assert str(caught.value).startswith(f"cuda13_max_failed_hosts is not a failure budget: {value!r}. ")
    assert "Option: cuda13_max_failed_hosts." in str(caught.value)


def test_the_first_batch_always_starts():
    decision = budget.decide(HOSTS, HOSTS[:1], HOSTS, {})
    assert decision == {"spent": False, "allowed": 0, "failed": [], "reason": "", "hosts": []}


def test_a_mixed_batch_spends_a_budget_of_0():
    statuses = {"gpu-node-01": "rolled_back", "gpu-node-02": "kept"}
    active = [h for h in HOSTS if h != "gpu-node-01"]
    decision = budget.decide(HOSTS[:4], HOSTS[2:4], active, statuses)
    assert decision["spent"]
    assert (
        decision["reason"]
        == "failure budget spent (hosts gpu-node-01 rolled back; cuda13_max_failed_hosts 0)"
    )
    assert decision["hosts"] == ["gpu-node-03", "gpu-node-04"]


def test_a_failed_canary_spends_a_budget_of_0():
    decision = budget.decide(HOSTS, HOSTS[1:3], HOSTS[1:], {"gpu-node-01": "failed"})
    assert decision["spent"]
    assert decision["failed"] == [{"host": "gpu-node-01", "why": "failed"}]
    assert decision["hosts"] == HOSTS[1:]


def test_a_host_removed_without_a_result_counts():
    # unreachable, or failed before its result was written: Ansible removed it
    active = [h for h in HOSTS if h != "gpu-node-02"]
    counted = budget.failed_hosts(HOSTS, HOSTS[3:5], active, {"gpu-node-01": "kept", "gpu-node-03": "kept"})
    assert counted == [("gpu-node-02", "failed without a result")]


def test_a_host_with_a_result_and_still_active_is_counted_by_its_status():
    # the rescue failed the host again but Ansible kept it in the play (ansible-core 2.19)
    counted = budget.failed_hosts(
        HOSTS, HOSTS[3:5], HOSTS, {"gpu-node-02": "rolled_back", "gpu-node-03": "kept"}
    )
    assert counted == [("gpu-node-02", "rolled_back")]


def test_later_batches_do_not_count():
    counted = budget.failed_hosts(HOSTS, HOSTS[1:3], HOSTS, {"gpu-node-05": "failed"})
    assert counted == []


def test_a_budget_is_spent_only_when_exceeded():
    statuses = {"gpu-node-02": "rolled_back", "gpu-node-04": "failed"}
    assert not budget.decide(HOSTS, HOSTS[5:7], HOSTS, statuses, "25%")["spent"]  # 2 of at most 2
    assert not budget.decide(HOSTS, HOSTS[5:7], HOSTS, statuses, 2)["spent"]
    spent = budget.decide(HOSTS, HOSTS[5:7], HOSTS, statuses, 1)
    assert spent["spent"] and spent["allowed"] == 1
    assert spent["reason"] == (
        "failure budget spent (hosts gpu-node-02 rolled back, gpu-node-04 failed; cuda13_max_failed_hosts 1)"
    )
    assert spent["hosts"] == HOSTS[5:]


def test_a_host_of_an_earlier_batch_that_rolled_back_spends_a_budget_of_0():
    statuses = {h: None for h in HOSTS[:4]}
    statuses["gpu-node-01"] = "rolled_back"
    decision = budget.decide(HOSTS[:4], HOSTS[2:4], HOSTS[1:4], statuses, 0)
    assert decision["spent"]
    assert decision["hosts"] == ["gpu-node-03", "gpu-node-04"]


def test_a_bad_budget_is_refused_by_name():
    with pytest.raises(ValueError, match="cuda13_max_failed_hosts is not a failure budget: 'x'"):
        budget.decide(HOSTS, HOSTS[:1], HOSTS, dict.fromkeys(HOSTS), "x")


def test_the_plan_carries_the_budget_and_its_failures():
    assert fleet.plan(HOSTS, {"cuda13_max_failed_hosts": "25%"})["max_failed_hosts"] == 2
    assert fleet.plan(HOSTS, {})["max_failed_hosts"] == 0
    bad = fleet.plan(HOSTS, {"cuda13_max_failed_hosts": "-1"})
    assert not bad["ok"]
    assert bad["failures"][0].startswith("cuda13_max_failed_hosts is not a failure budget: '-1'.")
