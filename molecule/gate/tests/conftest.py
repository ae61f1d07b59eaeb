"""testinfra hosts of the gate scenario, by name."""

import pytest
import testinfra


@pytest.fixture(scope="module")
def drift():
    return testinfra.get_host("podman://cuda13-gate-1")


@pytest.fixture(scope="module")
def garbage():
    return testinfra.get_host("podman://cuda13-gate-2")


@pytest.fixture(scope="module")
def collapse():
    return testinfra.get_host("podman://cuda13-gate-3")


@pytest.fixture(scope="module")
def crash():
    return testinfra.get_host("podman://cuda13-gate-4")


@pytest.fixture(scope="module")
def stall():
    return testinfra.get_host("podman://cuda13-gate-5")


@pytest.fixture(scope="module")
def batch_fault():
    return testinfra.get_host("podman://cuda13-gate-6")


@pytest.fixture(scope="module")
def r570():
    return testinfra.get_host("podman://cuda13-gate-7")


@pytest.fixture(scope="module")
def r570_slower():
    return testinfra.get_host("podman://cuda13-gate-8")


@pytest.fixture(scope="module")
def two_nights():
    return testinfra.get_host("podman://cuda13-gate-9")
