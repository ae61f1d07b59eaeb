"""The roles' entry points on their own read the preflight's record, through ``ansible-playbook``.

The preflight registers one record, ``nvidia_driver_check_preflight`` (its GPUs' compute
capabilities, the driver version, the resolved set: cuda13_upgrade.steps.preflight.check).
The variables it used to set one by one (``nvidia_driver_check_compute_capabilities``,
``nvidia_driver_check_gpus``) are gone, and a role run on its own that still read them gave
its step empty compute capabilities and no driver version. Here roles/cu130_wheels (main and
check) and roles/sglang_build run on localhost with the real actions' argument specs and
options, their ``run_step`` replaced by one that writes down what it was given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from playbook import REPO, run_playbook

from cuda13_upgrade import varnames

#: The real action, its run_step writing (args, the options it would read) to STEP_RECORD.
RECORDING_ACTION = """
import importlib.util, json, os
spec = importlib.util.spec_from_file_location("_real", {path!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)


class ActionModule(real.ActionModule):
    def run_step(self, host, args, task_vars):
        options = self.step_options(args["options"], task_vars)
        with open(os.environ["STEP_RECORD"], "a") as out:
            out.write(json.dumps({{
                "action": self._task.action,
                "args": {{k: v for k, v in args.items() if k != "options"}},
                "capabilities": options.get("cu130_wheels_compute_capabilities",
                                            options.get("sglang_build_compute_capabilities")),
            }}) + "\\n")
        return {{"changed": False}}
"""

PLAY = """
- name: The roles' entry points on their own
  hosts: all
  gather_facts: false
  tasks:
    - name: Install the wheels
      ansible.builtin.include_role:
        name: cu130_wheels
    - name: Check the stack
      ansible.builtin.include_role:
        name: cu130_wheels
        tasks_from: check
    - name: Build SGLang
      ansible.builtin.include_role:
        name: sglang_build
"""

PREFLIGHT = {
    "compute_capabilities": ["12.0"],
    "driver_version": "580.95.05",
    "gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0"}],
    "resolved": [{"name": "torch", "version": "2.9.1+cu130"}],
}


def _run(tmp_path: Path, *extra: str) -> list[dict]:
    actions = tmp_path / "action_plugins"
    actions.mkdir()
    for name in ("cuda13_wheels", "cuda13_sglang"):
        source = RECORDING_ACTION.format(path=str(REPO / "action_plugins" / f"{name}.py"))
        (actions / f"{name}.py").write_text(source)
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    record = tmp_path / "steps.jsonl"
    env = {"ANSIBLE_ACTION_PLUGINS": str(actions), "STEP_RECORD": str(record)}
    proc = run_playbook(play, *extra, roles=True, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_the_roles_give_their_steps_the_preflights_gpus_driver_and_resolved_set(tmp_path):
    extra = tmp_path / "preflight.json"
    extra.write_text(json.dumps({"nvidia_driver_check_preflight": PREFLIGHT}))
    steps = _run(tmp_path, "-e", f"@{extra}")
    resolved = PREFLIGHT["resolved"]
    assert steps == [
        {
            "action": "cuda13_wheels",
            "args": {
                "state": "present",
                "resolved": resolved,
                "find_links": "",
                "compute_capabilities": ["12.0"],
                "driver_version": "580.95.05",
                "gpus": PREFLIGHT["gpus"],
                "staged": False,
            },
            "capabilities": ["12.0"],
        },
        {
            "action": "cuda13_wheels",
            "args": {
                "state": "checked",
                "resolved": [],
                "find_links": "",
                "compute_capabilities": ["12.0"],
                "driver_version": "580.95.05",
                "gpus": PREFLIGHT["gpus"],
                "staged": False,
            },
            "capabilities": ["12.0"],
        },
        {
            "action": "cuda13_sglang",
            "args": {"resolved": resolved, "compute_capabilities": ["12.0"]},
            "capabilities": ["12.0"],
        },
    ]


def test_without_a_preflight_the_roles_give_empty_values_and_an_operators_resolved_set_wins(tmp_path):
    mine = [{"name": "torch", "version": "2.9.1+cu130", "sha256": "0" * 64}]
    extra = tmp_path / "mine.json"
    extra.write_text(json.dumps({"cu130_wheels_resolved_target": mine}))
    steps = _run(tmp_path, "-e", f"@{extra}")
    assert [
        (s["args"]["compute_capabilities"], s["args"].get("driver_version"), s["capabilities"]) for s in steps
    ] == [
        ([], "", []),
        ([], "", []),
        ([], None, []),
    ]
    assert [s["args"]["resolved"] for s in steps] == [mine, [], mine]


#: Project-prefixed variables the roles read that no role default, register, set_fact or
#: action's ansible_facts sets: each an operator's input with a default where it is read.
OPERATOR_INPUTS = {
    # roles/cu130_wheels, roles/sglang_build: a resolved set given to a role run on its own
    # (the upgrade passes the preflight's nvidia_driver_check_preflight.resolved instead).
    "cu130_wheels_resolved_target",
    # roles/upgrade_host/tasks/interrupted.yml: the command's -e (cuda13_upgrade.cli.commands).
    "cuda13_interrupted_steps",
    "cuda13_interrupted_by",
}
PREFIXES = varnames.PREFIXES


def _names_set() -> set[str]:
    names: set[str] = set()
    for defaults in (REPO / "roles").glob("*/defaults/main.yml"):
        names |= set(yaml.safe_load(defaults.read_text()) or {})
    for vars_file in (REPO / "roles").glob("*/vars/*.yml"):
        names |= set(yaml.safe_load(vars_file.read_text()) or {})
    for specs in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(specs.read_text())["argument_specs"] or {}).values():
            names |= set(entry.get("options") or {})
    for path in [*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]:
        text = path.read_text()
        names |= set(re.findall(r"^\s*register:\s*(\w+)", text, re.M))
        for block in re.findall(r"set_fact:\n((?:\s{6,}\w+:.*\n)+)", text):
            names |= set(re.findall(r"^\s+(\w+):", block, re.M))
    for path in [*(REPO / "action_plugins").glob("*.py"), *(REPO / "src" / "cuda13_upgrade").rglob("*.py")]:
        text = path.read_text()
        for block in re.findall(r'"ansible_facts":\s*\{([^}]*)\}', text):
            names |= set(re.findall(r'"(\w+)"\s*:', block))
        names |= {m[1] for m in re.findall(r'^([A-Z_]+_FACT)\s*=\s*"(\w+)"', text, re.M)}
    return names


@pytest.mark.parametrize("role", sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()))
def test_every_project_variable_a_roles_task_reads_is_set_somewhere(role):
    known = _names_set() | OPERATOR_INPUTS
    unset = {}
    for path in sorted((REPO / "roles" / role).rglob("*.yml")):
        for expression in re.findall(r"\{\{(.*?)\}\}", path.read_text(), re.S):
            expression = re.sub(r"(['\"]).*?\1", "", expression)
            # A name after "." is an attribute, after "|" a filter.
            for name in re.findall(r"(?<![\w.|])(?<!\|\s)([a-z]\w*)", expression):
                if name.startswith(PREFIXES) and name not in known:
                    unset.setdefault(name, path.relative_to(REPO).as_posix())
    assert unset == {}
