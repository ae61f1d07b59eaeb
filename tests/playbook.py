"""Run ``ansible-playbook`` on localhost (connection local) with this project's ansible.cfg.

The playbook tests (tests/test_*_playbook.py and others) run the real roles and task files
this way; the GPU is the one thing they replace (the nvidia-smi double of sandbox/host).
localhost comes from an inventory that sets what a fleet's inventory sets (:data:`FLEET_VALUES`,
:func:`local_inventory`): the preflight refuses hosts that receive none of the values a fleet
must set (action cuda13_inventory) and hosts without a drain hook (cuda13_allow_undrained).

The tests of the rollout's gates run the rollout itself with a stand-in for roles/upgrade_host:
:func:`fleet_inventory` (localhost and the group ``blackwell``) and :func:`rollout_book`
(playbooks/start.yml, the upgrade play's own batch gate over the stand-in's tasks, and the
plays after it), with :func:`stand_in_role`, :data:`RESULT_TASKS` and :data:`RECORD_BATCH`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
STACK_DIGEST = REPO / "src" / "cuda13_upgrade" / "hostscripts" / "stack_digest.py"
NVIDIA_SMI_DOUBLE = REPO / "sandbox" / "host" / "nvidia-smi"
NVIDIA_SMI_STATES = REPO / "sandbox" / "host" / "nvidia-smi-states"


#: What a fleet's inventory sets for its hosts, as the tests' hosts get it: values a fleet
#: must set (cuda13_upgrade.inventorycheck.MUST_SET) as inventory/blackwell sets them (equal to
#: the roles' defaults, so the value a test gives with ``-e``, a play's vars or a host's own
#: inventory variables is still the one used), and cuda13_allow_undrained: a test host serves
#: no traffic and has no router to drain it from (tests/test_safe_defaults_playbook.py and
#: tests/test_ondemand_playbook.py test the refusal without it).
FLEET_VALUES: dict[str, object] = {
    "cuda13_service_name": "sglang.service",
    "cuda13_server_url": "http://127.0.0.1:30000",
    "cuda_toolkit_apt_repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
    "cuda13_allow_undrained": True,
}

#: run_playbook's default inventory: localhost from :func:`local_inventory`, written once per process.
LOCAL = "<localhost with a fleet's values>"
_local_dir: Path | None = None


def fleet_group(hosts: dict[str, dict], **values: object) -> dict:
    """An inventory group (``{"hosts": hosts, "vars": ...}``) whose group variables are
    :data:`FLEET_VALUES` updated with ``values`` (a value None leaves the name out); a host's
    own variables in ``hosts`` and the inventory's ``group_vars`` files win over them, ``-e``
    over all."""
    given = {**FLEET_VALUES, **values}
    return {"hosts": hosts, "vars": {name: value for name, value in given.items() if value is not None}}


def local_inventory(directory: Path, hosts: dict[str, dict] | None = None, **values: object) -> Path:
    """Write ``directory/hosts.yml``: ``hosts`` (default: localhost) with connection local, in
    the group ``all`` with :func:`fleet_group`'s variables (``values`` added). ``directory``
    must hold no ``group_vars`` for another group. Returns the file."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts = {
        name: {"ansible_connection": "local", **found} for name, found in (hosts or {"localhost": {}}).items()
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": fleet_group(hosts, **values)}, sort_keys=False))
    return path


def _local() -> Path:
    """The default inventory of run_playbook, made on first use and removed at exit."""
    global _local_dir
    if _local_dir is None:
        _local_dir = Path(tempfile.mkdtemp(prefix="cuda13-test-inventory-"))
        atexit.register(shutil.rmtree, _local_dir, True)
    return local_inventory(_local_dir)


def extra_vars(**values: object) -> list[str]:
    """``-e name=value`` arguments, one pair per keyword, in the order given."""
    return [arg for name, value in values.items() for arg in ("-e", f"{name}={value}")]


def run_playbook(
    playbook: Path | str,
    *args: str,
    inventory: Path | str = LOCAL,
    interpreter: bool = True,
    roles: bool = False,
    filters: bool = False,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess:
    """Run ``playbook`` on localhost and return the finished process (text stdout and stderr).

    ``args`` follow the inventory options (``-e`` values, ``--check``, ...). ``inventory``: by
    default localhost with what a fleet's inventory sets (:func:`local_inventory`); an inventory
    file instead (its hosts say how to reach them), or ``"localhost,"``, the bare host list with
    no values (connection local). ``interpreter``
    passes this Python as ``ansible_python_interpreter``; ``roles`` and ``filters`` point
    ``ANSIBLE_ROLES_PATH`` and ``ANSIBLE_FILTER_PLUGINS`` at the repository's own; ``env``
    adds or replaces environment variables. Colour is off, so the output can be matched.
    Raises subprocess.TimeoutExpired after ``timeout`` seconds.
    """
    environ = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    if roles:
        environ["ANSIBLE_ROLES_PATH"] = str(REPO / "roles")
    if filters:
        environ["ANSIBLE_FILTER_PLUGINS"] = str(REPO / "filter_plugins")
    environ.setdefault("ANSIBLE_ACTION_PLUGINS", str(REPO / "action_plugins"))
    environ.setdefault("ANSIBLE_LIBRARY", str(REPO / "library"))
    environ.setdefault("ANSIBLE_MODULE_UTILS", str(REPO / "module_utils"))
    environ.update(env or {})
    if str(inventory) == LOCAL:
        inventory = _local()
    argv = [str(ANSIBLE_PLAYBOOK), str(playbook), "-i", str(inventory)]
    if str(inventory) == "localhost,":
        argv += ["-c", "local"]
    if interpreter:
        argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    argv += args
    return subprocess.run(argv, env=environ, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def mirror_preflight_vars(
    mirror_url: str, requirements: list[str], *, kernel_index: str = "sgl-whl/cu130"
) -> dict[str, object]:
    """Extra vars that run the preflight (and the roles after it) on localhost against the mirror.

    The nvidia-smi double answers for the GPUs; the checks against a serving host are off
    (localhost serves no stack: those are the molecule bad-input scenario's); this Python
    runs the roles and the resolver; the wheels come from the sandbox mirror at
    ``mirror_url`` (``kernel_index`` is the kernel's index under it) and SGLang v0.5.9 from
    its git repository there. ``requirements`` are the cu130 wheels' pins.
    """
    return {
        "cuda13_target_hosts": "all",
        "nvidia_driver_check_nvidia_smi": str(REPO / "sandbox" / "host" / "nvidia-smi"),
        "nvidia_driver_check_required_disk_gib": 0.001,
        "nvidia_driver_check_host_checks": False,
        "ansible_python_interpreter": sys.executable,
        "cu130_wheels_python": sys.executable,
        "cuda13_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cuda13_wheels_extra_index_urls": [
            f"{mirror_url}/{kernel_index}",
            f"{mirror_url}/flashinfer-whl/cu130",
            f"{mirror_url}/pypi/simple",
        ],
        "cu130_wheels_requirements": requirements,
        "sglang_build_repo": f"{mirror_url}/git/sglang.git",
        "sglang_build_version": "v0.5.9",
    }


def kept_host_state(
    tmp_path: Path, target: dict, unit: str, *, host: str = "localhost", gpus: str | None = None
) -> Path:
    """A host whose run 20261201T101500Z kept ``target``: ``tmp_path/venv`` (this Python) and
    ``tmp_path/state`` with its ``result.json`` (the digest of that venv and ``unit``, read by
    the real host script; nvidia-smi is the sandbox's double, in the state file ``gpus`` of
    sandbox/host/nvidia-smi-states, or as the environment gives it) and ``step.json`` (the run
    passed its result step). Returns the state directory."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    env = {**os.environ, "NVIDIA_SMI_DOUBLE_STATE": str(NVIDIA_SMI_STATES / gpus)} if gpus else None
    digest = json.loads(
        subprocess.run(
            [sys.executable, str(STACK_DIGEST), "--nvidia-smi", str(NVIDIA_SMI_DOUBLE), str(venv), unit],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    state = tmp_path / "state"
    state.mkdir()
    result = {
        "host": host,
        "run_id": "20261201T101500Z",
        "status": "kept",
        "measured": True,
        "verified_in_run": "20261201T101500Z",
        "target": target,
        "stack_before": {"venv": "/opt/ml-env", "torch": "2.10.0+cu128"},
        "stack_after": {"venv": "/opt/ml-env-cu130", "torch": "2.9.1+cu130", "torch_cuda": "13.0"},
        "stack_digest": digest,
        "finished_at": "2026-12-01T10:58:00+00:00",
    }
    (state / "result.json").write_text(json.dumps(result))
    (state / "step.json").write_text(json.dumps({"run_id": "20261201T101500Z", "step": "result"}))
    return state


#: The upgrade play of playbooks/upgrade.yml: the batches of hosts that upgrade.
UPGRADE_PLAY = "Upgrade, verify, keep or roll back"
#: playbooks/upgrade.yml's play after the report, which fails each host that did not keep.
LAST_PLAY = "Fail the hosts that did not keep the upgrade"

#: A task that prints each batch of the play it runs in once, as ``BATCH ["host", ...]`` (:func:`batches`).
RECORD_BATCH: dict = {
    "name": "Record the batch",
    "ansible.builtin.debug": {"msg": "BATCH {{ ansible_play_batch | to_json }}"},
    "run_once": True,
}

#: The run's reports directory as the batch gate of playbooks/upgrade.yml finds it.
REPORTS_DIR = (
    "{{ lookup('ansible.builtin.env', 'CUDA13_REPORTS_DIR')"
    " | default(playbook_dir | dirname ~ '/reports', true) }}"
)
_RESULT_DIR = REPORTS_DIR + "/{{ cuda13_run_id }}/{{ inventory_hostname }}"

#: Tasks that write each host's ``cuda13_result`` (a mapping) where the role's cuda13_result step
#: writes it, ``<reports>/<run id>/<host>/result.json`` on the control node (mode 0600 in a 0700
#: directory), with the host, the run id and the time it finished (``finished_at``, UTC) added.
RESULT_TASKS: list[dict] = [
    {
        "name": "The host's result directory",
        "ansible.builtin.file": {"path": _RESULT_DIR, "state": "directory", "mode": "0700"},
        "delegate_to": "localhost",
    },
    {
        "name": "The host's result",
        "ansible.builtin.copy": {
            "dest": _RESULT_DIR + "/result.json",
            "mode": "0600",
            "content": (
                "{{ cuda13_result | combine({'host': inventory_hostname, 'run_id': cuda13_run_id,"
                " 'finished_at': now(utc=true).isoformat()}) | to_json }}"
            ),
        },
        "delegate_to": "localhost",
    },
]


def upgrade_plays() -> list[dict]:
    """The plays of playbooks/upgrade.yml, as YAML reads them."""
    return yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text())


def upgrade_play() -> dict:
    """playbooks/upgrade.yml's :data:`UPGRADE_PLAY`. Raises StopIteration when there is none."""
    return next(p for p in upgrade_plays() if p.get("name") == UPGRADE_PLAY)


def batches(out: str) -> list[list[str]]:
    """The batches :data:`RECORD_BATCH` printed in ansible-playbook's output ``out``, in order."""
    return [json.loads(m) for m in re.findall(r"BATCH (\[.*?\])", out)]


def stand_in_role(**recorded: str) -> dict:
    """A stand-in for roles/upgrade_host's block, ending each host as the role does by the host's
    variable ``stand_in``: ``kept`` (or none) keeps (``cuda13_result`` ``{"status": "kept"}``);
    another value fails inside the block, and the rescue records ``cuda13_result``
    ``{"status": stand_in, **recorded}`` (Jinja values) and leaves the host running, as the
    role's rescue does; ``no_result`` instead fails the host in Ansible with no result (a host
    that failed before its result was written)."""
    return {
        "name": "Stand in for the role",
        "block": [
            {
                "name": "Fail as the role does",
                "ansible.builtin.fail": {"msg": "stand-in failure"},
                "when": "stand_in | default('kept') != 'kept'",
            },
            {"name": "Keep the host", "ansible.builtin.set_fact": {"cuda13_result": {"status": "kept"}}},
        ],
        "rescue": [
            {
                "name": "Record the result",
                "ansible.builtin.set_fact": {"cuda13_result": {"status": "{{ stand_in }}", **recorded}},
                "when": "stand_in != 'no_result'",
            },
            # The role's rescue records the result and leaves the host running (the upgrade's
            # last play fails it); a host that failed without a result is failed in Ansible.
            {
                "name": "Fail a host without a result",
                "ansible.builtin.fail": {"msg": "stand-in {{ stand_in }}"},
                "when": "stand_in == 'no_result'",
            },
        ],
    }


def fleet_inventory(
    directory: Path, hosts: dict[str, dict], group_vars: dict | None = None, **values: object
) -> Path:
    """Write ``directory/hosts.yml``: localhost, and the group ``blackwell`` of ``hosts`` (each
    with connection local unless its own variables say otherwise) with :func:`fleet_group`'s
    variables (``values`` added); ``group_vars``, when given, in ``group_vars/blackwell.yml``.
    Returns ``directory``."""
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    members = {name: {"ansible_connection": "local", **own} for name, own in hosts.items()}
    inventory = {
        "all": {
            "hosts": {"localhost": {"ansible_connection": "local"}},
            "children": {"blackwell": fleet_group(members, **values)},
        }
    }
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory))
    if group_vars:
        (directory / "group_vars" / "blackwell.yml").write_text(yaml.safe_dump(group_vars))
    return directory


def rollout_book(
    directory: Path,
    tasks: list[dict],
    *,
    start: dict[str, bool] | None = None,
    not_started: Path | None = None,
    report: bool = False,
    last_play: bool = False,
) -> Path:
    """Write ``directory/playbooks/book.yml``, the rollout of playbooks/upgrade.yml on the group
    ``blackwell`` with ``tasks`` in place of roles/upgrade_host, and return its path.

    Its plays: playbooks/start.yml with the switches ``start`` (default: the batch plan alone,
    ``start_batch_plan``); :data:`UPGRADE_PLAY` with the upgrade play's own ``serial``,
    ``max_fail_percentage``, ``vars`` and ``pre_tasks`` (the batch gate), running ``tasks``; then,
    each when asked: a play on localhost that writes ``cuda13_not_started`` (``{}`` when none) as
    JSON to the file ``not_started``, playbooks/report.yml (``report``), and :data:`LAST_PLAY`,
    the last play of playbooks/upgrade.yml (``last_play``; AssertionError when it is not the
    last). start.yml and report.yml are links to the repository's, so that
    ``playbook_dir | dirname`` is ``directory``.
    """
    upgrade = upgrade_play()
    playbooks = directory / "playbooks"
    playbooks.mkdir(parents=True, exist_ok=True)
    for name in ("start.yml", "report.yml") if report else ("start.yml",):
        (playbooks / name).symlink_to(REPO / "playbooks" / name)
    plays: list[dict] = [
        {
            "name": "Start the run",
            "ansible.builtin.import_playbook": "start.yml",
            "vars": start if start is not None else {"start_batch_plan": True},
        },
        {
            "name": UPGRADE_PLAY,
            "hosts": "blackwell",
            "gather_facts": False,
            **{key: upgrade[key] for key in ("serial", "max_fail_percentage", "vars", "pre_tasks")},
            "tasks": tasks,
        },
    ]
    if not_started is not None:
        keep = {
            "content": "{{ cuda13_not_started | default({}) | to_json }}",
            "dest": str(not_started),
            "mode": "0644",
        }
        plays.append(
            {
                "name": "After the rollout",
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [{"name": "Keep what was not started", "ansible.builtin.copy": keep}],
            }
        )
    if report:
        plays.append({"name": "Report", "ansible.builtin.import_playbook": "report.yml"})
    if last_play:
        last = upgrade_plays()[-1]
        assert last["name"] == LAST_PLAY, last["name"]
        plays.append({**last, "hosts": "blackwell"})
    book = playbooks / "book.yml"
    book.write_text(yaml.safe_dump(plays, sort_keys=False))
    return book
