"""What the sandbox benchmarks share: the checkout's paths, the environment their commands run
in (the checkout's ansible.cfg, podman's containers.conf, the venv first on PATH), running a
command from the checkout's root, and replacing the sandbox hosts (``playbooks/sandbox.yml``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
ENV = {
    **os.environ,
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    "CONTAINERS_CONF": str(REPO / "sandbox" / "containers.conf"),
    "PATH": f"{BIN}:{os.environ['PATH']}",
}
PREFIX = "cuda13-sandbox"


def call(
    argv: list[str], *, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run ``argv`` from the repository root, its output captured; with ``check``, exit with its
    output's tail when it fails."""
    proc = subprocess.run(argv, cwd=REPO, env=env or ENV, capture_output=True, text=True)
    if check and proc.returncode != 0:
        sys.exit(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
        )
    return proc


def run(argv: list[str], *, env: dict[str, str] | None = None, check: bool = True) -> float:
    """:func:`call`, returning its wall time in seconds."""
    start = time.perf_counter()
    call(argv, env=env, check=check)
    return time.perf_counter() - start


def playbook(*args: str, env: dict[str, str] | None = None, check: bool = True) -> float:
    """``ansible-playbook ARGS`` from the venv; its wall time in seconds."""
    return run([str(BIN / "ansible-playbook"), *args], env=env, check=check)


def remove_sandbox(check: bool = True) -> None:
    playbook("playbooks/sandbox.yml", "-e", "sandbox_state=absent", check=check)


def fresh_sandbox(count: int = 1, **variables: object) -> list[str]:
    """Replace the sandbox hosts with ``count`` new ones (``variables``: more of
    ``playbooks/sandbox.yml``'s, e.g. ``sandbox_host_scenario``); their names."""
    remove_sandbox()
    playbook("playbooks/sandbox.yml", "-e", json.dumps({"sandbox_count": count, **variables}))
    return [f"{PREFIX}-{i}" for i in range(1, count + 1)]
