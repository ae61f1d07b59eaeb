"""The batch plan (cuda13_upgrade.batches): Ansible's serial rule, the ramp, errors."""

import pytest

from cuda13_upgrade import batches


@pytest.mark.parametrize(
    ("n_hosts", "serial", "sizes"),
    [
        (8, 1, [1] * 8),
        (8, "3", [3, 3, 2]),  # -e cuda13_serial=3 gives a string
        (8, [1, "25%", "100%"], [1, 2, 5]),  # today's default: 5 of 8 at once
        (8, ["10%"], [1] * 8),  # 0.8 rounds down to 0, then at least 1
        (10, ["15%", "50%"], [1, 5, 4]),  # down: int(1.5) == 1; the last batch what is left
        (3, [5], [3]),
        (0, [1, "50%"], []),
        (7, [2, 1], [2, 1, 1, 1, 1, 1]),  # the last entry repeats
    ],
)
def test_serial_sizes_follow_ansible(n_hosts, serial, sizes):
    assert batches.serial_sizes(n_hosts, serial) == sizes


def test_serial_sizes_equal_ansibles_own_batches():
    from ansible.utils.helpers import pct_to_int

    for n_hosts in range(1, 30):
        for serial in ([1, "25%", "100%"], ["33%", 2], ["1%"], [4, "50%"]):
            expected, left, index = [], n_hosts, 0
            while left > 0:
                size = min(pct_to_int(serial[min(index, len(serial) - 1)], n_hosts), left)
                expected.append(size)
                left -= size
                index += 1
            assert batches.serial_sizes(n_hosts, serial) == expected, (n_hosts, serial)


@pytest.mark.parametrize(
    ("n_hosts", "cap", "sizes"),
    [
        (8, "25%", [1, 2, 2, 2, 1]),
        (100, "25%", [1, 2, 4, 8, 16, 25, 25, 19]),
        (4, "25%", [1, 1, 1, 1]),
        (3, "25%", [1, 1, 1]),  # a quarter of 3 rounds down to 0: at least 1
        (1, "25%", [1]),
        (0, "25%", []),
        (20, 4, [1, 2, 4, 4, 4, 4, 1]),
        (20, "4", [1, 2, 4, 4, 4, 4, 1]),
        (20, 100, [1, 2, 4, 8, 5]),
        (6, "100%", [1, 2, 3]),
    ],
)
def test_ramp(n_hosts, cap, sizes):
    assert batches.ramp(n_hosts, cap) == sizes
    assert sum(sizes) == n_hosts


def test_default_is_a_canary_then_a_ramp_capped_at_a_quarter():
    assert batches.batch_sizes(8) == [1, 2, 2, 2, 1]
    assert batches.batch_sizes(8, serial="", max_parallel="") == [1, 2, 2, 2, 1]
    assert batches.batch_sizes(8, max_parallel=3) == [1, 2, 3, 2]


def test_serial_wins_over_the_ramp():
    assert batches.batch_sizes(8, serial=[1, "100%"], max_parallel=2) == [1, 7]


def test_plan_names_the_hosts_of_each_batch():
    hosts = [f"gpu-node-0{i}" for i in range(1, 9)]
    plan = batches.plan(hosts)
    assert plan["sizes"] == [1, 2, 2, 2, 1]
    assert plan["batches"] == [hosts[:1], hosts[1:3], hosts[3:5], hosts[5:7], hosts[7:]]
    assert batches.format_plan(plan) == [
        "8 hosts in 5 batches, ramp capped at 2 hosts (cuda13_max_parallel '25%'):",
        "batch 1 of 5 (canary, 1 host): gpu-node-01",
        "batch 2 of 5 (2 hosts): gpu-node-02, gpu-node-03",
        "batch 3 of 5 (2 hosts): gpu-node-04, gpu-node-05",
        "batch 4 of 5 (2 hosts): gpu-node-06, gpu-node-07",
        "batch 5 of 5 (1 host): gpu-node-08",
    ]


def test_plan_from_serial():
    plan = batches.plan(["a", "b", "c"], serial=3)
    assert plan == {"sizes": [3], "batches": [["a", "b", "c"]], "source": "cuda13_serial 3"}
    assert batches.format_plan(plan) == [
        "3 hosts in 1 batch, cuda13_serial 3:",
        "batch 1 of 1 (3 hosts): a, b, c",
    ]


@pytest.mark.parametrize(
    ("serial", "message"),
    [
        (
            0,
            "cuda13_serial holds 0, which is not a batch size: 0. Option: cuda13_serial. Fix: give a host count "
            "(an int >= 1) or a percentage of the fleet from '1%' to '100%', such as '25%', or a list of them.",
        ),
        (
            [1, "12.5%"],
            "cuda13_serial holds '12.5%', which is not a batch size: [1, '12.5%']. Option: cuda13_serial.",
        ),
        ([1, "150%"], "cuda13_serial holds '150%', which is not a batch size"),
        ("-1", "cuda13_serial holds '-1'"),
        ([True], "cuda13_serial holds True"),
        ([], "cuda13_serial is an empty list: []. Option: cuda13_serial."),
        ({"a": 1}, "cuda13_serial holds {'a': 1}"),
    ],
)
def test_bad_serial_names_the_value_and_the_option(serial, message):
    with pytest.raises(ValueError) as error:
        batches.batch_sizes(8, serial=serial)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("cap", [0, "0%", "x", [2], "101%", 2.5])
def test_bad_max_parallel_names_the_option(cap):
    with pytest.raises(ValueError, match=r"Option: cuda13_max_parallel\."):
        batches.batch_sizes(8, max_parallel=cap)


def test_bad_max_parallel_is_refused_also_beside_serial():
    with pytest.raises(ValueError, match=r"cuda13_max_parallel holds 0"):
        batches.batch_sizes(8, serial=1, max_parallel=0)
