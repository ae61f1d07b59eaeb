"""No Jinja expression in a folded or plain YAML scalar carries a doubled backslash.

YAML keeps backslashes of folded (``>-``) and plain scalars as they are, so
``regex_findall('MainPID=(\\\\d+)')`` there reaches the regex as ``\\\\d``: a
literal backslash, never a digit. The preflight's service pids were empty on
every host this way, and every process of the service counted as another's.
Character classes (``[0-9]``, ``[.]``, ``[+]``) need no escape.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    p
    for folder in ("roles", "playbooks", "molecule", "inventory")
    for p in (ROOT / folder).rglob("*.yml")
    if p.is_file()
)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doubled_backslash_reaches_a_jinja_expression(path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    offending = [s for s in _strings(data) if ("{{" in s or "|" in s) and "\\\\" in s]
    assert not offending, f"{path}: {offending[:3]}"


def test_the_check_sees_a_doubled_backslash_of_a_folded_scalar():
    folded = "x: >-\n  {{ out | regex_findall('MainPID=(\\\\d+)') }}\n"
    assert "\\\\" in yaml.safe_load(folded)["x"]
    quoted = "x: \"{{ out | regex_findall('MainPID=(\\\\d+)') }}\"\n"
    assert "\\\\" not in yaml.safe_load(quoted)["x"]
