"""testinfra hosts of the fleet scenario, by name."""

import pytest
import testinfra


@pytest.fixture(scope="module")
def fleet():
    return {n: testinfra.get_host(f"podman://cuda13-fleet-{n}") for n in range(1, 5)}
