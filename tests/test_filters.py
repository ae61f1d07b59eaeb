"""filter_plugins/cuda13.py: the filters the playbooks use, called the way Ansible calls them,
and the messages a user sees from them in ``ansible-playbook``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "filter_plugins"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")

_spec = importlib.util.spec_from_file_location("cuda13_filters", PLUGINS / "cuda13.py")
assert _spec is not None and _spec.loader is not None
cuda13_filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda13_filters)

FILTERS = cuda13_filters.FilterModule().filters()

ROLLED_BACK = {
    "host": "gpu-node-02",
    "status": "rolled_back",
    "failed_step": "verify",
    "reason": "plain: median 80.1 tok/s on the new stack vs 88.5 tok/s (-9.5 %): slower",
    "diagnosis": None,
}


def _yaml_filters() -> set[str]:
    """The cuda13_* filters the YAML of the roles, playbooks, molecule scenarios, sandbox and
    inventories applies (``| cuda13_name``)."""
    used: set[str] = set()
    for top in ("roles", "playbooks", "molecule", "sandbox", "inventory"):
        for path in (ROOT / top).rglob("*.yml"):
            used.update(re.findall(r"\|\s*(cuda13_[a-z_]+)", path.read_text(encoding="utf-8")))
    return used


def test_the_plugin_has_the_filters_the_yaml_uses_and_no_other():
    assert sorted(FILTERS) == ["cuda13_deprecated_alias", "cuda13_failure_message"]
    assert _yaml_filters() == set(FILTERS)
    assert sorted(p.name for p in PLUGINS.glob("*.py")) == ["cuda13.py"]


@pytest.mark.skipif(not ANSIBLE_DOC.exists(), reason="ansible-doc is not installed")
def test_ansible_doc_reads_each_filters_documentation():
    # One YAML file per filter beside the plugin (ansible-core's and community.general's way
    # for a file of several filters).
    assert sorted(p.stem for p in PLUGINS.glob("*.yml")) == sorted(FILTERS)
    done = subprocess.run(
        [str(ANSIBLE_DOC), "-t", "filter", "--json", *sorted(FILTERS)],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = json.loads(done.stdout)
    assert sorted(docs) == sorted(FILTERS)
    for name, entry in docs.items():
        doc = entry["doc"]
        assert doc["name"] == name and doc["short_description"] and doc["description"]
        assert doc["options"]["_input"]["required"] is True
        assert f"| {name}" in entry["examples"]
        assert entry["return"]["_value"]["description"]
    assert docs["cuda13_deprecated_alias"]["doc"]["positional"] == "old, new"


# --- cuda13_failure_message ----------------------------------------------------------------


def test_failure_message_of_a_host_that_rolled_back():
    assert FILTERS["cuda13_failure_message"](ROLLED_BACK) == (
        "gpu-node-02: rolled back at step 'verify': "
        "plain: median 80.1 tok/s on the new stack vs 88.5 tok/s (-9.5 %): slower"
    )


def test_failure_message_refuses_what_is_not_a_record():
    with pytest.raises(AnsibleFilterError) as info:
        FILTERS["cuda13_failure_message"]("rolled_back")
    assert str(info.value) == (
        "cuda13_failure_message: input must be the host's result record (cuda13_result, a dict), "
        "got str: 'rolled_back'"
    )


# --- cuda13_deprecated_alias ---------------------------------------------------------------


def test_deprecated_alias_returns_the_value_as_it_is():
    record = {"cuda13_serial": 1}
    assert (
        FILTERS["cuda13_deprecated_alias"](record, "nvidia_driver_check_options", "cuda13_options") is record
    )


def test_deprecated_alias_refuses_a_name_that_is_not_one():
    with pytest.raises(AnsibleFilterError) as info:
        FILTERS["cuda13_deprecated_alias"]({}, "nvidia_driver_check_options", None)
    assert str(info.value) == "cuda13_deprecated_alias: new must be a variable name, got NoneType: None"
    with pytest.raises(AnsibleFilterError) as info:
        FILTERS["cuda13_deprecated_alias"]({}, "", "cuda13_options")
    assert str(info.value) == "cuda13_deprecated_alias: old must be a variable name, got str: ''"


# --- through ansible-playbook -------------------------------------------------------------

PLAYBOOK = """\
- name: The filters as the playbooks use them
  hosts: localhost
  gather_facts: false
  vars:
    cuda13_options: {cuda13_serial: 1}
    # roles/upgrade_host/vars/main.yml's former name of the options record
    nvidia_driver_check_options: >-
      {{ cuda13_options | cuda13_deprecated_alias('nvidia_driver_check_options', 'cuda13_options') }}
  tasks:
    - name: A hook reads the former name
      ansible.builtin.debug:
        msg: "serial {{ nvidia_driver_check_options.cuda13_serial }}"
    - name: Fail each host that rolled back or failed
      ansible.builtin.fail:
        msg: "{{ cuda13_result | cuda13_failure_message }}"
      vars:
        cuda13_result: %s
      ignore_errors: true
    - name: Not a result record
      ansible.builtin.fail:
        msg: "{{ 'rolled_back' | cuda13_failure_message }}"
"""


def _playbook(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(PLAYBOOK % json.dumps(ROLLED_BACK), encoding="utf-8")
    environ = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        **env,
    }
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        cwd=ROOT, env=environ, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
def test_the_messages_a_user_sees(tmp_path):
    done = _playbook(tmp_path)
    out = _one_line(done.stdout + done.stderr)
    assert done.returncode == 2, out
    # The former name still reads the record, with the deprecation warning naming the new one.
    assert "msg: serial 1" in out
    assert (
        "[DEPRECATION WARNING]: the variable nvidia_driver_check_options is the options record's "
        "former name. This feature will be removed in the future. Read cuda13_options instead; "
        "nvidia_driver_check_options goes in cuda13-upgrade 0.3.0."
    ) in out
    # The upgrade's last play: the host's message.
    assert (
        "[ERROR]: Task failed: Action failed: gpu-node-02: rolled back at step 'verify': "
        "plain: median 80.1 tok/s on the new stack vs 88.5 tok/s (-9.5 %): slower"
    ) in out
    # A value that is not a record: the filter, what it takes and the value.
    assert (
        "The filter plugin 'cuda13_failure_message' failed: cuda13_failure_message: input must be "
        "the host's result record (cuda13_result, a dict), got str: 'rolled_back'"
    ) in out


@pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")
def test_without_the_package_the_warning_says_how_to_install_it(tmp_path):
    # A cuda13_upgrade that cannot be imported shadows the installed one.
    shadow = tmp_path / "shadow" / "cuda13_upgrade"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'cuda13_upgrade'\")\n")
    done = _playbook(tmp_path, PYTHONPATH=str(shadow.parent))
    out = _one_line(done.stdout + done.stderr)
    assert done.returncode == 2, out
    assert (
        f"[WARNING]: Skipping plugin ({PLUGINS / 'cuda13.py'}), cannot load: cuda13.py needs the "
        f"cuda13_upgrade package, which the Python that runs Ansible ({sys.executable}) cannot "
        f"import (No module named 'cuda13_upgrade'): install it there, "
        f"{sys.executable} -m pip install -e {ROOT}"
    ) in out
    assert "No filter named 'cuda13_deprecated_alias'" in out
