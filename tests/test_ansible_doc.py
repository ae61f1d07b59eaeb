"""``ansible-doc`` reads the documentation of every module of library/ and every filter.

Two modules once had YAML that did not parse: ``ansible-doc`` then prints a warning or an error
instead of the page, and a test that only imports the files does not see it. Here the real
``ansible-doc`` runs from the repository root with the project's ansible.cfg (ANSIBLE_CONFIG),
as an operator runs it, once per plugin type, and any ``[WARNING]``, ``[ERROR]`` or
``[DEPRECATION WARNING]`` line fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")
MODULES = sorted(p.stem for p in (REPO / "library").glob("*.py") if not p.name.startswith("_"))
FILTERS = sorted(p.stem for p in (REPO / "filter_plugins").glob("*.yml"))

#: Python's warning about the ssh agent's DSA import, printed by the cryptography package of this
#: machine's virtual environment whatever is documented: not the project's.
_ENVIRONMENT = re.compile(r"CryptographyDeprecationWarning|^\s*from cryptography\.")


def _ansible_doc(kind: str, names: list[str]) -> tuple[dict, list[str]]:
    done = subprocess.run(
        [str(ANSIBLE_DOC), "-t", kind, "--json", *names],
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = [line for line in done.stderr.splitlines() if line.strip() and not _ENVIRONMENT.search(line)]
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), said


pytestmark = pytest.mark.skipif(not ANSIBLE_DOC.exists(), reason="ansible-doc is not installed")


def test_the_plugins_are_found():
    assert "cuda13_lock" in MODULES and "cuda13_stack_probe" in MODULES
    assert FILTERS == ["cuda13_deprecated_alias", "cuda13_failure_message"]


@pytest.mark.parametrize(("kind", "names"), [("module", MODULES), ("filter", FILTERS)])
def test_ansible_doc_shows_each_page_without_a_warning_or_an_error(kind, names):
    docs, said = _ansible_doc(kind, names)
    assert said == []
    assert sorted(docs) == names
    for name in names:
        page = docs[name]["doc"]
        assert page.get("short_description"), f"{name}: no short_description"
        assert page.get("description"), f"{name}: no description"
        # EXAMPLES and RETURN are YAML too: ansible-doc gives them as text, so parse them here.
        examples = docs[name].get("examples")
        if examples:
            parsed = yaml.safe_load(examples)  # raises on YAML that does not parse
            if kind == "module":
                assert isinstance(parsed, list), f"{name}: EXAMPLES is not a list of tasks"
        assert docs[name].get("return"), f"{name}: no RETURN"
