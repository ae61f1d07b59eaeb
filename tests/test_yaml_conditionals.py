"""Every conditional in the project's YAML is a string, as Ansible requires.

A plain YAML scalar that holds ``": "`` is a mapping, not a string: the check
``- __log is search('TASK \\[upgrade_host : Take the upgrade lock\\]')`` under
``that:`` loads as ``{"__log is search('TASK \\[upgrade_host": "Take ..."}``,
and ansible-core 2.19 fails the task with "Conditional expressions must be
strings" only when it runs (ansible-lint and ``--syntax-check`` pass it). A
regex in a conditional writes the separator as ``.`` (``upgrade_host . Take``)
or the whole item is quoted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p
    for folder in ("roles", "playbooks", "molecule", "sandbox/roles")
    for p in (ROOT / folder).rglob("*.yml")
    if p.is_file()
)
CONDITIONALS = ("that", "when", "failed_when", "changed_when", "until")


def non_string_conditionals(node, where: str = ""):
    """(key path, item) of every conditional item that is a mapping or a list."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITIONALS:
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, (dict, list)):
                        yield f"{where}/{key}", item
            yield from non_string_conditionals(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from non_string_conditionals(value, f"{where}[{index}]")


def test_a_colon_in_a_plain_conditional_is_found():
    play = yaml.safe_load("- assert:\n    that:\n      - __log is search('TASK \\[upgrade_host : Take\\]')\n")
    assert [where for where, _ in non_string_conditionals(play)] == ["[0]/assert/that"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_conditional_is_a_string(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(non_string_conditionals(data)) == []
