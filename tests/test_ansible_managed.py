"""``ansible_managed`` appears only in templates; the drop-ins the package writes carry its header.

Ansible defines ``ansible_managed`` for the template module alone; in a task's
arguments (a ``copy`` module's ``content``, a ``set_fact``) it is undefined and
the task fails when it runs ("'ansible_managed' is undefined"). The switch's and
the rollback's profile drop-ins were once written that way, so every switch to a
profile with arguments failed (molecule midway). The drop-ins are now rendered in
Python - the profile drop-in by ``hostscripts/service_cycle.py``'s ``profile_dropin``
(every start into a profile, ``cuda13_upgrade.steps.serve``), the switch's by
``cuda13_upgrade.steps.switch.dropin`` - and each carries the header Ansible's
templates carry, Ansible's default ``ansible_managed``, as its first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible import constants
from fakehost import FakeHost

from cuda13_upgrade.hostscripts.service_cycle import profile_dropin
from cuda13_upgrade.steps import serve, switch

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p for folder in ("roles", "playbooks", "molecule") for p in (ROOT / folder).rglob("*.yml") if p.is_file()
) + [ROOT / "upgrade-cuda13.yml"]
USE = re.compile(r"\{\{-?\s*ansible_managed\b")
HEADER = f"# {constants.config.get_config_value('DEFAULT_MANAGED_STR')}"
EXEC_START = "/opt/ml-env/bin/python -m sglang.launch_server --model-path /models/m"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_task_uses_ansible_managed(path):
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if USE.search(line)]
    assert not lines, f"{path.relative_to(ROOT)}: ansible_managed outside a template, lines {lines}"


def test_the_drop_ins_rendered_in_python_carry_the_managed_header():
    profile = profile_dropin(
        EXEC_START, ["--tp", "2"], unit="sglang.service", about="a profile", managed=serve.MANAGED
    )
    options = {
        "stack_switch_cache_root": "/var/cache/cuda13",
        "stack_switch_stack_name": "cu130",
        "stack_switch_service_name": "sglang.service",
        "cuda13_toolkit_release": "13.0",
        "stack_switch_old_venv": "/opt/ml-env",
        "stack_switch_cuda_home": "/usr/local/cuda-13.0",
    }
    switched = switch.dropin(options, EXEC_START.replace("ml-env", "ml-env-cu130"))
    for text in (profile, switched):
        assert text.splitlines()[0] == HEADER == "# Ansible managed"
        assert "[Service]\n" in text and "ExecStart=\nExecStart=" in text


def test_the_profile_drop_in_written_on_the_host_carries_the_header():
    # What serve() hands the host's module cuda13_service to write, for a profile with arguments.
    host = FakeHost(handlers={"cuda13_service": lambda args: {"changed": False, "cycle": None}})
    serve.serve(host, service="sglang.service", exec_start=EXEC_START, args=["--tp", 2], check=False)
    (args,) = host.called("cuda13_service")
    assert args["dropin_path"] == "/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf"
    assert args["dropin_content"].splitlines()[0] == HEADER
    assert args["dropin_content"].endswith(f"ExecStart={EXEC_START} --tp 2\n")
