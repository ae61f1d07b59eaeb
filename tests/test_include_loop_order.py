"""A looped include runs each host's items in that host's order.

Ansible runs a looped ``include_tasks`` once per distinct item, for all the hosts that
have that item, in the order the items first appear across hosts (ansible/ansible#36978,
#80229). When the items differ per host, a host's items can run out of its order: the
verify role's steps (a host's own ``new_stack_args``) made one host measure its second
profile before its first, on a server started for the other profile, and a collapsed
EAGLE-3 accept length passed unseen (molecule gate, cuda13-gate-3).

The behavioural test takes the real looped task of ``roles/verify_throughput/tasks/main.yml``
and runs it on two local hosts whose plans differ, with a ``profile.yml`` that records the
order. The static test holds every looped include of the project to host-invariant items.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MEASURE_TASK = "Measure each profile in the planned order"

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
# The plans of molecule gate's hosts: one host's first profile has new-stack arguments.
PLANS = {
    "with-new-stack-args": [
        {"profile": "eagle3", "args": [*EAGLE3, "--enable-torch-symm-mem"], "restart": False},
        {"profile": "plain", "args": [], "restart": True},
    ],
    "without": [
        {"profile": "eagle3", "args": EAGLE3, "restart": False},
        {"profile": "plain", "args": [], "restart": True},
    ],
}

RECORDER = [
    {
        "name": "Record the step",
        "ansible.builtin.lineinfile": {
            "path": "{{ record_dir }}/{{ inventory_hostname }}.txt",
            "line": "{{ __verify_throughput_step.profile }} {{ __verify_throughput_profile.name }}",
            "create": True,
            "mode": "0644",
            "insertafter": "EOF",
        },
    }
]


def _measure_task() -> dict:
    tasks = yaml.safe_load((REPO / "roles/verify_throughput/tasks/main.yml").read_text())
    (task,) = [t for t in tasks if t.get("name") == MEASURE_TASK]
    return task


def _run(tmp_path: Path, task: dict, extra: dict | None = None) -> dict[str, list[str]]:
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    (tasks_dir / "measure.yml").write_text(yaml.safe_dump([task], sort_keys=False))
    (tasks_dir / "profile.yml").write_text(yaml.safe_dump(RECORDER, sort_keys=False))
    record = tmp_path / "record"
    record.mkdir()
    hosts = {
        name: {
            "__verify_throughput_plan": {"steps": steps},
            # The new stack's phase: the include's condition reads its soaks (none failed).
            "verify_throughput_phase": "candidate",
            "verify_throughput_profiles": [
                {"name": "plain", "server_args": []},
                {"name": "eagle3", "server_args": EAGLE3},
            ],
        }
        for name, steps in PLANS.items()
    }
    for name, values in (extra or {}).items():
        hosts[name].update(values)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {"ansible_connection": "local"}}}))
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": {"record_dir": str(record)},
                    "tasks": [{"ansible.builtin.include_tasks": str(tasks_dir / "measure.yml")}],
                }
            ]
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {
        name: (record / f"{name}.txt").read_text().split("\n")[:-1]
        if (record / f"{name}.txt").exists()
        else []
        for name in PLANS
    }


def test_each_host_measures_its_profiles_in_its_planned_order(tmp_path):
    recorded = _run(tmp_path, _measure_task())
    for name, steps in PLANS.items():
        # Each line: the step's profile and the profile the tasks are given for it.
        assert recorded[name] == [f"{s['profile']} {s['profile']}" for s in steps], name


def test_a_host_whose_soak_failed_measures_no_further_profile(tmp_path):
    # Its server crashed or stopped answering: the other host goes on in its own order.
    failed = {"requests": 64, "served": 3, "deadline_s": 30, "failures": [{"request": 4, "outcome": "stall"}]}
    results = {"verify_throughput_results": {"candidate": {"eagle3": {"soak": failed}}}}
    recorded = _run(tmp_path, _measure_task(), {"without": results})
    assert recorded["without"] == []
    assert recorded["with-new-stack-args"] == ["eagle3 eagle3", "plain plain"]


def test_the_hosts_reproduce_the_fault_with_a_loop_over_the_steps(tmp_path):
    # The same task looping over the steps themselves: a host runs plain before eagle3.
    task = copy.deepcopy(_measure_task())
    task["loop"] = "{{ __verify_throughput_plan.steps }}"
    task["loop_control"] = {"loop_var": "__verify_throughput_step"}
    del task["vars"]["__verify_throughput_step"]
    recorded = _run(tmp_path, task)
    orders = sorted([line.split()[0] for line in lines] for lines in recorded.values())
    assert orders == [["eagle3", "plain"], ["plain", "eagle3"]], json.dumps(recorded)


# Looped includes whose items may run in any order on a host, with why.
ORDER_FREE = {
    # Each alternatives group is restored on its own; no group depends on another.
    ("roles/rollback/tasks/main.yml", "alternatives.yml"),
}


def _looped_includes(node, found):
    if isinstance(node, list):
        for item in node:
            _looped_includes(item, found)
    elif isinstance(node, dict):
        keys = [k for k in node if k.split(".")[-1] in ("include_tasks", "include_role")]
        loops = [k for k in node if k == "loop" or k.startswith("with_")]
        if keys and loops:
            target = node[keys[0]]
            target = target.get("file") or target.get("name") if isinstance(target, dict) else target
            found.append((str(target), str(node[loops[0]])))
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                _looped_includes(node[key], found)


def test_every_looped_include_loops_over_items_the_same_on_every_host():
    offenders = []
    for path in sorted([*REPO.glob("roles/**/*.yml"), *REPO.glob("playbooks/**/*.yml")]):
        found: list[tuple[str, str]] = []
        _looped_includes(yaml.safe_load(path.read_text()), found)
        rel = str(path.relative_to(REPO))
        for target, loop in found:
            if (rel, target) in ORDER_FREE:
                continue
            if not loop.replace(" ", "").startswith("{{range("):
                offenders.append(f"{rel}: include of {target} loops over {loop}")
    assert offenders == [], (
        "a looped include must loop over step numbers (range(...)), the same items on every "
        "host, or be listed in ORDER_FREE with why its order does not matter: " + "; ".join(offenders)
    )
