"""cuda13_upgrade.options_doc: docs/options.md equal to what the specs generate, tiers kept honest."""

import re
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade import options, options_doc
from cuda13_upgrade.steps import options as steps_options

REPO = Path(__file__).resolve().parents[1]
REGENERATE = ".venv/bin/python scripts/options-doc.py"


@pytest.fixture(scope="module")
def specs():
    return options_doc.load_specs(REPO)


def _all_options(specs):
    return set(specs) | set(options.PLAY_OPTIONS)


def test_docs_options_md_is_the_generated_one(specs):
    text = (REPO / "docs" / "options.md").read_text()
    wanted = options_doc.render_file(text, specs)
    assert text == wanted, f"docs/options.md is out of date with the argument specs: run {REGENERATE}"


def test_every_option_has_one_row_with_default_meaning_and_tier(specs):
    text = (REPO / "docs" / "options.md").read_text()
    generated = text.partition(options_doc.MARKER)[2]
    for option in _all_options(specs):
        rows = [line for line in generated.splitlines() if line.startswith(f"| `{option}` |")]
        assert len(rows) == 1, option
        cells = rows[0].split(" | ")
        assert len(cells) == 4, rows[0]  # option, default, meaning, checks (no unescaped pipe)
        assert cells[2].strip(), f"{option} has no meaning: give it a description in its argument spec"


def test_the_roles_are_the_ones_the_preflight_validates():
    assert set(options_doc.ROLES) == set(steps_options.ROLES)


def test_play_options_are_documented():
    assert set(options_doc.PLAY_OPTION_DOCS) == set(options.PLAY_OPTIONS)
    for name, doc in options_doc.PLAY_OPTION_DOCS.items():
        assert doc["description"] and "default" in doc, name


def test_tiers_name_options_that_exist_once(specs):
    known = _all_options(specs)
    lists = {"MUST": options_doc.MUST, "TUNE": options_doc.TUNE, "PLAYBOOKS": options_doc.PLAYBOOKS}
    for name, names in lists.items():
        assert len(set(names)) == len(names), f"{name} names an option twice"
        assert set(names) <= known, f"{name} names options without a spec: {set(names) - known}"
    assert not set(options_doc.MUST) & set(options_doc.TUNE)
    assert not (set(options_doc.MUST) | set(options_doc.TUNE)) & set(options_doc.PLAYBOOKS)


def test_no_alias_is_must_set_or_tune(specs):
    """An alias follows its option: the doc tells the user to set that one."""
    for option in (*options_doc.MUST, *options_doc.TUNE):
        spec = specs.get(option, {})
        assert options_doc.alias_of(spec) is None, f"{option} aliases {options_doc.alias_of(spec)}"


def test_alias_of():
    assert options_doc.alias_of({"default": "{{ cuda13_health_timeout }}"}) == "cuda13_health_timeout"
    assert options_doc.alias_of({"default": "{{ cuda13_new_venv }}/.pip-tmp"}) is None
    assert options_doc.alias_of({"default": "{{ a | default(b) }}"}) is None
    assert options_doc.alias_of({"default": 3}) is None
    assert options_doc.alias_of({}) is None


def _set_by_project(specs):
    """{option: how} for each role option the playbooks and the roles' tasks set:
    'include' (an include_role/import_role's vars), 'vars' (other vars:), 'set_fact'."""
    found: dict[str, set[str]] = {}
    include_keys = {
        "ansible.builtin.include_role",
        "ansible.builtin.import_role",
        "include_role",
        "import_role",
    }

    def walk(node):
        if isinstance(node, dict):
            how = "include" if include_keys & set(node) else "vars"
            if isinstance(node.get("vars"), dict):
                for key in node["vars"]:
                    if key in specs:
                        found.setdefault(key, set()).add(how)
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(node.get(key), dict):
                    for name in node[key]:
                        if name in specs:
                            found.setdefault(name, set()).add("set_fact")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    paths = [*REPO.glob("*.yml"), *REPO.glob("playbooks/**/*.yml"), *REPO.glob("roles/*/tasks/**/*.yml")]
    for path in paths:
        walk(yaml.safe_load(path.read_text()))
    return found


def test_every_option_an_include_role_passes_is_set_by_the_playbooks(specs):
    """A role option given in an include_role's vars wins over the inventory: the doc
    must not offer it as something to set."""
    passed = {name for name, how in _set_by_project(specs).items() if "include" in how}
    missing = passed - set(options_doc.PLAYBOOKS)
    assert not missing, f"add to options_doc.PLAYBOOKS, then run {REGENERATE}: {sorted(missing)}"


def test_every_option_set_by_the_playbooks_is_set_there(specs):
    stale = set(options_doc.PLAYBOOKS) - set(_set_by_project(specs))
    assert not stale, f"no playbook or task sets these any more: {sorted(stale)}"


def test_readme_table_names_the_must_set_options_and_links_the_doc():
    readme = (REPO / "README.md").read_text()
    assert "(docs/options.md)" in readme
    section = readme.partition("## Inventory")[2].partition("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([a-z0-9_]+)`", row.split(" | ")[0])}
    assert named == set(options_doc.MUST)


def test_cells_escape_pipes_and_join_lines():
    assert options_doc._cell("a | b\n  c") == "a \\| b c"
