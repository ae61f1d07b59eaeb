"""testinfra hosts for the molecule scenarios, reached with podman exec.

The playbooks reach the containers over SSH (.config/molecule/config.yml);
the checks read them directly with testinfra's podman backend, which needs
neither the SSH key nor Ansible's inventory.
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
