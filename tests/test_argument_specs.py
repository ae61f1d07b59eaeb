"""Each role's meta/argument_specs.yml against its defaults/main.yml, and what a user sees.

The static tests keep the two files equal (names, defaults), every option documented and
typed, and the variable names prefixed. The playbook-level tests run ``ansible-playbook`` on
tiny playbooks: bad input must fail at the role's argument validation, before any task of the
role runs, with the option's name in the message; and every role's defaults, and the sample
inventory's values, must pass that validation once templated (ansible-core validates the
resolved values, so a Jinja default must resolve to the declared type).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The product's roles, and the sandbox's (the simulated host), which keep the same rules.
ROLES_DIRS = (ROOT / "roles", ROOT / "sandbox" / "roles")
ROLE_DIR = {p.name: p for d in ROLES_DIRS for p in d.iterdir() if (p / "defaults" / "main.yml").is_file()}
ROLES = sorted(ROLE_DIR)

# The shared role's variables are the package's own namespace (cuda13_*), read by every
# other role; all other roles prefix theirs with the role's name.
PREFIX = {"cuda13": "cuda13_"}

# Types of ansible-core's argument spec (module_utils/common/parameters.py DEFAULT_TYPE_VALIDATORS).
TYPES = {"str", "list", "dict", "bool", "int", "float", "path", "raw", "jsonarg", "json", "bytes", "bits"}

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _defaults(role: str) -> dict[str, Any]:
    return _load(ROLE_DIR[role] / "defaults" / "main.yml") or {}


def _spec(role: str) -> dict[str, Any]:
    return _load(ROLE_DIR[role] / "meta" / "argument_specs.yml")["argument_specs"]["main"]


def _options(role: str) -> dict[str, Any]:
    return _spec(role).get("options") or {}


def _dependencies(role: str) -> list[str]:
    meta = ROLE_DIR[role] / "meta" / "main.yml"
    if not meta.is_file():
        return []
    deps = (_load(meta) or {}).get("dependencies") or []
    return [d["role"] if isinstance(d, dict) else d for d in deps]


def _literal(value: Any) -> str:
    """A comparison key that tells 1 from True and 24 from "24" (== does not)."""
    return json.dumps(value, sort_keys=True)


def _walk(options: dict[str, Any], prefix: str = ""):
    """(dotted name, option) of every option and sub-option."""
    for name, option in options.items():
        yield prefix + name, option
        yield from _walk(option.get("options") or {}, f"{prefix}{name}.")


def test_every_role_is_checked():
    assert ROLES == sorted(p.name for d in ROLES_DIRS for p in d.iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES)
def test_the_options_are_the_defaults_variables(role):
    defaults, options = set(_defaults(role)), set(_options(role))
    assert options == defaults, (
        f"{role}: in defaults/main.yml but not meta/argument_specs.yml: "
        f"{sorted(defaults - options)}; in meta/argument_specs.yml but not defaults/main.yml: "
        f"{sorted(options - defaults)}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_each_default_equals_the_defaults_value(role):
    defaults = _defaults(role)
    wrong = {
        name: {"argument_specs": option.get("default", "<missing>"), "defaults": defaults[name]}
        for name, option in _options(role).items()
        if name in defaults
        and ("default" not in option or _literal(option["default"]) != _literal(defaults[name]))
    }
    assert not wrong, f"{role}: defaults differ: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_each_option_is_described_and_typed(role):
    spec = _spec(role)
    assert isinstance(spec.get("short_description"), str) and spec["short_description"].strip()
    problems = []
    for name, option in _walk(_options(role)):
        description = option.get("description")
        lines = [description] if isinstance(description, str) else description or []
        if not lines or not all(isinstance(line, str) and line.strip() for line in lines):
            problems.append(f"{name}: no description")
        if option.get("type") not in TYPES:
            problems.append(f"{name}: type {option.get('type')!r} is not one of {sorted(TYPES)}")
        if option.get("type") == "list" and option.get("elements") not in TYPES:
            problems.append(f"{name}: a list without elements")
        if "choices" in option and "default" in option and option["default"] not in option["choices"]:
            problems.append(f"{name}: default {option['default']!r} not in {option['choices']}")
    assert not problems, f"{role}: " + "; ".join(problems)


# A former name kept for one release, in the vars of the role whose tasks (the operator's hooks
# among them) may still read it: {role: {old name: its value, the new name through the filter
# cuda13_deprecated_alias, which warns}}. nvidia_driver_check_options, the options record's
# name before cuda13_options, sits in upgrade_host, where the hooks run (nvidia_driver_check
# runs in the preflight's play, whose role vars the upgrade's play does not see).
DEPRECATED_ALIASES = {
    "upgrade_host": {
        "nvidia_driver_check_options": (
            "{{ cuda13_options | cuda13_deprecated_alias('nvidia_driver_check_options', 'cuda13_options') }}"
        ),
    },
}


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_start_with_the_role_name(role):
    prefix = PREFIX.get(role, f"{role}_")
    names = set(_defaults(role)) | set(_options(role))
    vars_file = ROLE_DIR[role] / "vars" / "main.yml"
    role_vars = (_load(vars_file) or {}) if vars_file.is_file() else {}
    aliases = DEPRECATED_ALIASES.get(role, {})
    names |= {name for name in role_vars if name not in aliases}
    wrong = sorted(n for n in names if not (n.startswith(prefix) or n.startswith("__")))
    assert not wrong, f"{role}: not prefixed with {prefix!r} (public) or '__' (internal): {wrong}"
    # a deprecated alias is exactly that: a role var whose value is its new name, with the warning
    assert {name: role_vars.get(name) for name in aliases} == aliases
    assert not set(aliases) & (set(_defaults(role)) | set(_options(role)))


@pytest.mark.parametrize("role", [r for r in ROLES if "cuda13" in _dependencies(r)])
def test_dependent_roles_leave_the_shared_options_to_cuda13(role):
    shared = sorted(n for n in _options(role) if n.startswith(PREFIX["cuda13"]))
    assert not shared, f"{role} repeats options of cuda13: {shared}"


@pytest.mark.parametrize(
    ("option", "directory"),
    [
        ("sandbox_host_nvidia_smi_state", "sandbox/host/nvidia-smi-states"),
        ("sandbox_host_scenario", "sandbox/mirror/scenarios"),
    ],
)
def test_file_backed_choices_are_the_files_there_are(option, directory):
    files = sorted(p.stem for p in (ROOT / directory).glob("*.json"))
    assert sorted(_options("sandbox_host")[option]["choices"]) == files


# --- through ansible-playbook -------------------------------------------------------------

_TASK = re.compile(r"^TASK \[(?P<role>[^:\]]+) : (?P<name>[^\]]*)\]", re.MULTILINE)
_VALIDATION = "Validating arguments against arg spec"


def _run(tmp_path: Path, play: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False), encoding="utf-8")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_ROLES_PATH=":".join(str(d) for d in ROLES_DIRS),
        ANSIBLE_FILTER_PLUGINS=str(ROOT / "filter_plugins"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
        ANSIBLE_RETRY_FILES_ENABLED="False",
        CUDA13_REPORTS_DIR=str(tmp_path / "reports"),
        CUDA13_RUN_ID="argspec-test",
    )
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", *args, str(playbook)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def _play(role: str, tmp_path: Path, **role_vars: Any) -> dict[str, Any]:
    # Host paths point into tmp_path: should validation ever let the input through, the role's
    # first tasks (run in check mode) touch nothing outside it.
    return {
        "name": "Argument validation",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            "cuda13_old_venv": str(tmp_path / "old-venv"),
            "cuda13_new_venv": str(tmp_path / "new-venv"),
            "cuda13_state_dir": str(tmp_path / "state"),
        },
        "roles": [{"role": role, "vars": role_vars}],
    }


BAD_INPUT = [
    pytest.param(
        "verify_throughput",
        {"verify_throughput_method": "carrier-pigeon"},
        ["verify_throughput_method", "carrier-pigeon", "builtin, bench_serving"],
        id="method-not-a-choice",
    ),
    pytest.param(
        "cu130_wheels",
        {"cu130_wheels_requirements": {"torch": "2.10.0+cu130"}},
        ["cu130_wheels_requirements", "is of type dict", "list"],
        id="requirements-a-mapping",
    ),
    pytest.param(
        "cu130_wheels",
        {"cu130_wheels_requirements": "torch"},
        ["cu130_wheels_requirements"],
        id="requirements-a-string",
        marks=pytest.mark.xfail(
            strict=True,
            reason=(
                "ansible-core's list type splits a string on commas (check_type_list), so "
                "role argument validation accepts 'torch' as ['torch']; only a task in the "
                "role could refuse it, and that runs after the validation"
            ),
        ),
    ),
]


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
@pytest.mark.parametrize(("role", "role_vars", "expected"), BAD_INPUT)
def test_bad_input_fails_before_the_role_runs(tmp_path, role, role_vars, expected):
    result = _run(tmp_path, _play(role, tmp_path, **role_vars), "--check")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    ran = [m["name"] for m in _TASK.finditer(output) if m["role"] == role]
    assert ran and all(name.startswith(_VALIDATION) for name in ran), (
        f"tasks of {role} ran before the failure: {ran}\n{output}"
    )
    assert "Validation of arguments failed" in output, output
    missing = [text for text in expected if text not in output]
    assert not missing, f"the output does not name {missing}:\n{output}"


def _vars_files(*paths: str) -> list[str]:
    return [arg for path in paths for arg in ("-e", f"@{ROOT / path}")]


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
@pytest.mark.parametrize(
    "extra_vars",
    [
        pytest.param([], id="defaults"),
        pytest.param(
            _vars_files(
                "inventory/blackwell/group_vars/blackwell/cuda.yml",
                "inventory/blackwell/group_vars/blackwell/serving.yml",
                "inventory/blackwell/group_vars/blackwell/stack.yml",
            ),
            id="blackwell-inventory",
        ),
        pytest.param(_vars_files("inventory/sandbox/group_vars/all/upgrade.yml"), id="sandbox-inventory"),
    ],
)
def test_every_role_validates_its_resolved_defaults(tmp_path, extra_vars):
    # upgrade_host imports the other roles under conditions on facts its own tasks set
    # (their validation tasks inherit them); it has no options of its own, and every
    # role it imports is validated here.
    roles = [role for role in ROLES if role != "upgrade_host"]
    play = {
        "name": "Argument validation only",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": roles,
    }
    # The validation task is tagged 'always': an unknown tag runs it and nothing else.
    result = _run(tmp_path, play, "--tags", "argument-validation-only", *extra_vars)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    validated = {m["role"] for m in _TASK.finditer(output) if m["name"].startswith(_VALIDATION)}
    assert validated == set(roles), output
    assert not [m.group(0) for m in _TASK.finditer(output) if not m["name"].startswith(_VALIDATION)]
