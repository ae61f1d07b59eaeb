"""cuda13_upgrade.filtering: the package's errors as Ansible's, for every filter alike."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from cuda13_upgrade.errors import Cuda13Error, UsageError
from cuda13_upgrade.filtering import ansible_filters


def _raise(exc):
    def func(value):
        raise exc

    return func


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (Cuda13Error("CUDA toolkit release is invalid", "13.x", option="cuda13_toolkit_release"),
         "cuda13_f: CUDA toolkit release is invalid: '13.x'. Option: cuda13_toolkit_release."),
        (ValueError("not a number"), "cuda13_f: not a number"),
        (UsageError("--playbook: no such file: x.yml"), "cuda13_f: --playbook: no such file: x.yml"),
    ],
)  # fmt: skip
def test_the_package_errors_name_the_filter_and_chain_the_cause(exc, message):
    f = ansible_filters({"cuda13_f": _raise(exc)})["cuda13_f"]
    with pytest.raises(AnsibleFilterError) as info:
        f("x")
    assert str(info.value) == message
    assert info.value.__cause__ is exc


def test_results_and_the_filters_own_errors_pass_through():
    own = AnsibleFilterError("cuda13_f expects a dict, got 'x'")
    filters = ansible_filters({"cuda13_ok": lambda value, n=1: [value] * n, "cuda13_f": _raise(own)})
    assert filters["cuda13_ok"]("a", n=2) == ["a", "a"]
    with pytest.raises(AnsibleFilterError) as info:
        filters["cuda13_f"]("x")
    assert info.value is own
    with pytest.raises(TypeError):  # a bug, not a bad value: not dressed as one
        ansible_filters({"cuda13_t": _raise(TypeError("bug"))})["cuda13_t"]("x")
