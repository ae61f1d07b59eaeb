"""testinfra hosts of the midway scenario, by role in the scenario."""

import pytest
import testinfra


@pytest.fixture(scope="module")
def hosts():
    names = ("bad-wheel", "bad-build", "stack-faults", "killed", "paused", "full-disk")
    return {n: testinfra.get_host(f"podman://cuda13-midway-{n}") for n in names}
