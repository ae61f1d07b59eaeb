"""A new user's first commands print no warnings: the sandbox inventory
parses before any sandbox host exists (no "Unable to parse
inventory/sandbox as an inventory source", no "No inventory was parsed")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_sandbox_playbook_starts_without_warnings_before_the_host_exists(tmp_path):
    inventory = tmp_path / "sandbox"
    shutil.copytree(ROOT / "inventory" / "sandbox", inventory, ignore=shutil.ignore_patterns("hosts.yml"))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    bin_dir = Path(sys.executable).parent
    for argv in (
        [
            str(bin_dir / "ansible-playbook"),
            "-i",
            str(inventory),
            str(ROOT / "playbooks" / "sandbox.yml"),
            "--list-tasks",
        ],
        [
            str(bin_dir / "ansible-playbook"),
            "-i",
            str(inventory),
            str(ROOT / "upgrade-cuda13.yml"),
            "--list-hosts",
        ],
    ):
        run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "WARNING" not in run.stdout + run.stderr, run.stdout + run.stderr
