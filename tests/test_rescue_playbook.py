"""A rollback that itself fails is reported with what it left, not as "One or more items failed".

Runs roles/upgrade_host/tasks/rescue.yml on localhost after a failed step, with no snapshot
to roll back from (the rollback's first read fails): the host's failure message names
the first failure, the rollback task that failed, the service's state, its drop-ins and
where /usr/local/cuda points.
"""

from playbook import extra_vars, run_playbook


def test_failed_rollback_reports_what_it_left(tmp_path):
    playbook = tmp_path / "rescue.yml"
    playbook.write_text(
        """
- name: A step fails after the host changed
  hosts: all
  gather_facts: false
  tasks:
    - name: Shared settings
      ansible.builtin.import_role:
        name: cuda13
    - name: The validated options, as the preflight leaves them
      ansible.builtin.set_fact:
        nvidia_driver_check_options:
          cuda13_rollback_verify: true
          verify_throughput_tolerance_pct: 3.0
    - name: Upgrade
      block:
        - name: From here on the host changes
          ansible.builtin.set_fact:
            __cuda13_changed: true
            __cuda13_step: wheels
        - name: The wheels step fails
          ansible.builtin.fail:
            msg: the wheels step failed
      rescue:
        - name: Roll the host back
          ansible.builtin.import_role:
            name: upgrade_host
            tasks_from: rescue
"""
    )
    proc = run_playbook(
        playbook,
        *extra_vars(cuda13_state_dir=f"{tmp_path}/state", cuda13_service_name="nosuch-cuda13-test.service"),
        roles=True,
    )
    out = proc.stdout + proc.stderr
    # The rescue leaves the host running (the upgrade's last play fails it): it says how it ends.
    assert proc.returncode == 0, out
    final = out[out.rindex("Say how the host ends") :]
    assert "failed at step 'wheels': the wheels step failed" in final
    assert "Then the rollback itself failed at 'Read the pre-upgrade snapshot'" in final
    assert "Left on the host: service nosuch-cuda13-test.service" in final
    assert "/usr/local/cuda ->" in final
    assert "playbooks/rollback.yml --limit localhost" in final
    assert "One or more items failed" not in final
