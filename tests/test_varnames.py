"""cuda13_upgrade.varnames: unknown names with a project prefix, their origin and the closest known
name; every name the playbooks and roles use is known."""

import re
from pathlib import Path

import pytest

from cuda13_upgrade import options, varnames
from cuda13_upgrade.steps import options as steps_options
from cuda13_upgrade.steps.host import StepFailed

REPO = Path(__file__).resolve().parents[1]
KNOWN = varnames.known_names(REPO, options.PLAY_OPTIONS)
_NAME = re.compile(r"(?<![A-Za-z0-9_.])(?:" + "|".join(varnames.PREFIXES) + r")[a-z0-9_]*[a-z0-9]")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("verify_throughput_tolerence_pct", "verify_throughput_tolerance_pct"),
        ("cuda13_max_failed_host", "cuda13_max_failed_hosts"),
        ("cuda13_drain_task", "cuda13_drain_tasks"),
    ],
)
def test_the_issues_typos_are_unknown_with_the_name_meant(typo, meant):
    assert varnames.unknown([typo, meant, "ansible_host", "__cuda13_side"], KNOWN) == [
        {"name": typo, "suggestion": meant}
    ]


def test_the_message_names_each_variable_where_it_was_set_and_the_name_meant():
    found = varnames.unknown(["cuda13_drain_task", "cuda13_max_failed_host", "cuda13_zzz"], KNOWN)
    origins = {"cuda13_drain_task": ["-e"], "cuda13_max_failed_host": ["inv/group_vars/blackwell/fleet.yml"]}
    assert varnames.refusal("gpu-node-01", found, origins) == (
        "gpu-node-01: unknown variables with a prefix of cuda13-upgrade's roles; no role or playbook reads "
        "them, so their values would be ignored. Nothing on the host was changed.\n"
        "- cuda13_drain_task (set with -e): did you mean cuda13_drain_tasks?\n"
        "- cuda13_max_failed_host (set in inv/group_vars/blackwell/fleet.yml): did you mean "
        "cuda13_max_failed_hosts?\n"
        "- cuda13_zzz (set in the inventory or -e): no known name is close\n"
        "Rename each to the option meant (docs/options.md), or list your own variables with these "
        "prefixes in cuda13_extra_vars_allowed."
    )


def test_the_escape_hatch_takes_names_and_patterns():
    names = ["cuda13_site_rack", "cuda13_site_row", "rollback_pager"]
    assert varnames.unknown(names, KNOWN, ["cuda13_site_*", "rollback_pager"]) == []
    with pytest.raises(StepFailed, match="cuda13_site_row"):
        steps_options.check_names("h", names, KNOWN, ["cuda13_site_rack", "rollback_pager"])
    # Not a list: no name allowed (the option's own check names the wrong type).
    with pytest.raises(StepFailed):
        steps_options.check_names("h", ["cuda13_site_rack"], KNOWN, "cuda13_site_rack")


def test_origins_come_from_the_inventorys_files_and_the_extra_vars(tmp_path):
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "blackwell").mkdir(parents=True)
    (inventory / "host_vars").mkdir()
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    blackwell:\n      vars: {cuda13_in_hosts_file: 1}\n"
        "      hosts:\n        gpu-node-01: {cuda13_on_the_host: 1}\n"
    )
    (inventory / "group_vars" / "blackwell" / "gate.yml").write_text("verify_throughput_tolerence_pct: 5.0\n")
    (inventory / "group_vars" / "other.yml").write_text("cuda13_other_group: 1\n")
    (inventory / "host_vars" / "gpu-node-01.yml").write_text("cuda13_max_failed_host: 2\n")
    found = varnames.origins(
        "gpu-node-01", ["blackwell"], [str(inventory)], str(tmp_path / "pb"), {"cuda13_drain_task": ""}
    )
    assert found == {
        "cuda13_in_hosts_file": [str(inventory / "hosts.yml")],
        "cuda13_on_the_host": [str(inventory / "hosts.yml")],
        "verify_throughput_tolerence_pct": [str(inventory / "group_vars" / "blackwell" / "gate.yml")],
        "cuda13_max_failed_host": [str(inventory / "host_vars" / "gpu-node-01.yml")],
        "cuda13_drain_task": ["-e"],
    }
    assert varnames.origin_of("cuda13_nowhere", found) == "set in the inventory or -e"


def _used_names(*roots: Path) -> dict[str, str]:
    used: dict[str, str] = {}
    for root in roots:
        for path in root.rglob("*"):
            # argument_specs.yml: its options are known by construction, its prose is not code
            if (
                path.is_file()
                and path.suffix in (".yml", ".yaml", ".j2")
                and path.name != "argument_specs.yml"
            ):
                for line in path.read_text().splitlines():
                    if line.strip().startswith("#"):
                        continue
                    for name in _NAME.findall(line):
                        used.setdefault(name, str(path.relative_to(REPO)))
    return used


# Names with a prefix in playbooks/ and roles/ that are not variables: the action plugins'
# and host modules' names (library/), the filters (filter_plugins/), text in comments.
_NOT_VARIABLES = {p.stem for p in (REPO / "library").glob("cuda13_*.py")} | {
    "cuda13_failure_message",
    "cuda13_deprecated_alias",
}


def test_every_name_the_playbooks_and_roles_use_is_known():
    """The real playbooks' own variables pass the check: no name they read or set is refused."""
    used = _used_names(REPO / "playbooks", REPO / "roles")
    unknown = {
        name: where
        for name, where in used.items()
        if name not in KNOWN and name not in _NOT_VARIABLES and not name.startswith("cuda13_upgrade")
    }
    assert unknown == {}


def test_every_fact_the_action_plugins_return_is_known():
    facts = set()
    for path in (REPO / "action_plugins").glob("*.py"):
        text = path.read_text()
        for block in re.findall(r"ansible_facts\"\]? ?=? ?\{([^}]*)\}", text):
            facts |= set(re.findall(r"\"([a-z0-9_]+)\":", block))
        facts |= set(re.findall(r"facts\[\"([a-z0-9_]+)\"\]", text))
    facts = {f for f in facts if varnames.has_prefix(f)}
    assert facts, "found no facts: the pattern no longer matches the action plugins"
    assert facts - KNOWN == set()


def test_the_names_the_command_line_passes_are_known():
    cli = REPO / "src" / "cuda13_upgrade" / "cli"
    passed = set()
    for path in cli.glob("*.py"):
        passed |= set(
            re.findall(r"[\"'](" + "|".join(varnames.PREFIXES) + r")([a-z0-9_]+)=", path.read_text())
        )
    names = {a + b for a, b in passed}
    assert names - KNOWN == set()


def test_the_sandbox_inventory_sets_only_known_names():
    """The demo's inventory (inventory/sandbox) and molecule's (its group_vars) pass the check."""
    found = varnames.origins("sandbox-gpu-1", ["sandbox"], [str(REPO / "inventory" / "sandbox")], None, {})
    assert varnames.unknown(found, KNOWN) == []
