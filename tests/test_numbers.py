"""cuda13_upgrade.numbers.finite_number: the values YAML and JSON give for a number, and those that
are not one (the inputs the alert gate, the notifications and the estimate were given)."""

from __future__ import annotations

import pytest

from cuda13_upgrade.numbers import finite_number


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, 30.0), (2.5, 2.5), (0, 0.0), (-1, -1.0), (" 30 ", 30.0), ("1e3", 1000.0)],
)
def test_numbers_and_numeric_strings(value, expected):
    assert finite_number(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        True,  # YAML's yes: not 1
        10**400,  # YAML reads a 1 and 400 zeros as an int no float holds
        float("inf"),  # YAML's .inf, JSON's 1e999
        float("nan"),  # YAML's .nan
        "inf",
        "nan",
        "",
        "thirty",
        None,
        [30],
        {"s": 30},
    ],
)
def test_what_is_not_a_finite_number(value):
    assert finite_number(value) is None


def test_strings_only_when_asked():
    assert finite_number("30", strings=False) is None
    assert finite_number(30, strings=False) == 30.0
