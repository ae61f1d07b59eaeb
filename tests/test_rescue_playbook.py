"""A rollback that itself fails is reported with what it left, not as "One or more items failed".

Runs the action cuda13_rollback (the upgrade's rescue, ``cuda13_upgrade.steps.rollback.after_failure``)
on localhost after a failed step, with no snapshot to roll back from (the rollback's first read
fails): the host's failure message names the first failure, the part of the rollback that failed,
the service's state, its drop-ins and where /usr/local/cuda points.
"""

from playbook import extra_vars, run_playbook

PLAY = """
- name: A step fails after the host changed
  hosts: all
  gather_facts: false
  tasks:
    - name: Check every option's value
      cuda13_options: {}
    - name: Upgrade
      block:
        - name: From here on the host changes
          ansible.builtin.set_fact:
            cuda13_host_run:
              run_id: r1
              host: localhost
              started_at: "2026-12-03T09:00:00+00:00"
              target: {}
              state_dir: "{{ cuda13_options.cuda13_state_dir }}"
              serving: /opt/ml-env
              drained: false
              changed: true
              steps:
                - {step: snapshot, started_at: "2026-12-03T09:00:00+00:00"}
                - {step: wheels, started_at: "2026-12-03T09:05:00+00:00"}
              failure: null
        - name: The wheels step fails
          ansible.builtin.fail:
            msg: the wheels step failed
      rescue:
        - name: Roll the host back
          cuda13_rollback:
            options: "{{ cuda13_options }}"
            run_id: r1
            failed: "{{ ansible_failed_result }}"
            failed_task: "{{ ansible_failed_task.name | default('') }}"
            failed_action: "{{ ansible_failed_task.action | default('') }}"
          register: __rollback
        - name: Keep the record
          ansible.builtin.copy:
            dest: "{{ out }}"
            content: "{{ __rollback | to_json }}"
            mode: "0644"
"""


def test_failed_rollback_reports_what_it_left(tmp_path):
    import json

    playbook = tmp_path / "rescue.yml"
    playbook.write_text(PLAY)
    proc = run_playbook(
        playbook,
        *extra_vars(
            cuda13_state_dir=f"{tmp_path}/state",
            cuda13_reports_dir=f"{tmp_path}/reports",
            cuda13_service_name="nosuch-cuda13-test.service",
            out=tmp_path / "rollback.json",
        ),
    )
    out = proc.stdout + proc.stderr
    # The rescue leaves the host running (the upgrade's last play fails it): it says how it ends.
    assert proc.returncode == 0, out
    final = out[out.rindex("localhost: failed at step") :]
    assert "failed at step 'wheels': the wheels step failed" in final
    assert "Then the rollback itself failed at 'Read the pre-upgrade snapshot'" in final
    assert "Left on the host: service nosuch-cuda13-test.service" in final
    assert "/usr/local/cuda ->" in final
    assert "playbooks/rollback.yml --limit localhost" in final
    assert "One or more items failed" not in final
    record = json.loads((tmp_path / "rollback.json").read_text())
    assert record["status"] == "failed" and record["failed_step"] == "wheels"
    assert record["error"] == final.splitlines()[0].split(": ", 2)[2]
    # The rollback began its own step in the run record, and the failure is kept there.
    run = record["ansible_facts"]["cuda13_host_run"]
    assert [s["step"] for s in run["steps"]] == ["snapshot", "wheels", "rollback"]
    assert run["failure"]["failed_step"] == "wheels"
