"""An option no longer read is told, not silently kept: ``nvidia_driver_check_validate_roles``.

The action cuda13_options checks every role's options (cuda13_upgrade.steps.options.ROLES) and
every step reads them from its record, so a list of roles to validate cannot leave one out;
the option was documented but not read. A value the inventory or ``-e`` still sets is named in
a warning, and every role's options are in the record all the same.
"""

from __future__ import annotations

import json

from playbook import run_playbook

from cuda13_upgrade.steps import options

PLAY = """
- name: Check the options
  hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {}
      register: __checked
    - name: Keep the record
      ansible.builtin.copy:
        content: "{{ {'warnings': __checked.warnings | default([]), 'names': cuda13_options | list} | to_json }}"
        dest: "{{ out }}"
        mode: "0600"
"""

WARNING = (
    "nvidia_driver_check_validate_roles is no longer read: the options of every role (cuda13, "
    "stack_snapshot, cuda_toolkit, cu130_wheels, sglang_build, stack_switch, verify_throughput, "
    "rollback, artifact_cache, nvidia_driver_check) are checked at the start of the preflight, "
    "before any change, and every step reads them. Remove it from the inventory or -e."
)


def test_retired_names_one_warning_each_and_none_for_other_names():
    assert options.retired(["nvidia_driver_check_validate_roles", "cuda13_serial"]) == [WARNING]
    assert options.retired(["cuda13_serial"]) == []


def test_the_option_is_in_no_role_any_more():
    assert "nvidia_driver_check_validate_roles" not in options.option_names(
        options.read_specs(options.Path(__file__).resolve().parents[1] / "roles")
    )


def test_a_value_still_set_is_warned_about_and_every_roles_options_are_checked(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "record.json"
    proc = run_playbook(
        play, "-e", f"out={out}", "-e", '{"nvidia_driver_check_validate_roles": ["cuda13"]}', roles=True
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    record = json.loads(out.read_text())
    assert record["warnings"] == [WARNING]
    assert "[WARNING]: nvidia_driver_check_validate_roles is no longer read" in proc.stdout + proc.stderr
    assert {
        "verify_throughput_tolerance_pct",
        "artifact_cache_dir",
        "nvidia_driver_check_host_checks",
    } <= set(record["names"])


def test_without_it_no_warning(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "record.json"
    proc = run_playbook(play, "-e", f"out={out}", roles=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert json.loads(out.read_text())["warnings"] == []
