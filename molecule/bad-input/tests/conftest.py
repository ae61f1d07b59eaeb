"""testinfra hosts for the molecule scenarios, reached with podman exec.

testinfra's ansible backend does not know the containers.podman.podman
connection and would run every command through Ansible; the podman backend
talks to the same containers directly.
"""

from __future__ import annotations

import os

import pytest
import testinfra
import yaml


def molecule_host_names() -> list[str]:
    """Names of the instances in molecule's inventory for this scenario."""
    path = os.environ.get("MOLECULE_INVENTORY_FILE")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        inventory = yaml.safe_load(handle) or {}
    return sorted((inventory.get("all", {}).get("hosts") or {}).keys())


@pytest.fixture(scope="module", params=molecule_host_names() or ["cuda13-molecule-sandbox"])
def host(request):
    return testinfra.get_host(f"podman://{request.param}")
