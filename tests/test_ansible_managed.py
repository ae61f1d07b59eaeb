"""``ansible_managed`` appears only in templates.

Ansible defines ``ansible_managed`` for the template module alone; in a task's
arguments (a ``copy`` module's ``content``, a ``set_fact``) it is undefined and
the task fails when it runs ("'ansible_managed' is undefined"). The switch's and
the rollback's profile drop-ins were once written that way, so every switch to a
profile with arguments failed (molecule midway). A drop-in with the header is a
template under the role's ``templates/``: the switch's in stack_switch, the
profile drop-in in cuda13 (entry point serve).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p for folder in ("roles", "playbooks", "molecule") for p in (ROOT / folder).rglob("*.yml") if p.is_file()
) + [ROOT / "upgrade-cuda13.yml"]
USE = re.compile(r"\{\{-?\s*ansible_managed\b")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_task_uses_ansible_managed(path):
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if USE.search(line)]
    assert not lines, f"{path.relative_to(ROOT)}: ansible_managed outside a template, lines {lines}"


def test_the_role_templates_that_carry_the_header_exist():
    headers = [p for p in ROOT.glob("roles/*/templates/*.j2") if USE.search(p.read_text(encoding="utf-8"))]
    assert {p.parent.parent.name for p in headers} >= {"stack_switch", "cuda13"}
