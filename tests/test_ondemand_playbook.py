"""playbooks/rollback.yml and playbooks/verify.yml on a host without a drain hook or a snapshot.

Run on localhost (connection local) with the host's state directory in a temporary
directory: nothing is restarted, since each case stops before the service is touched.
"""

import json

from playbook import LOCAL, REPO, extra_vars, local_inventory, run_playbook


def _run(tmp_path, name, snapshot=True, inventory=LOCAL, **values):
    state = tmp_path / "state"
    (state / "snapshots").mkdir(parents=True, exist_ok=True)
    if snapshot:
        (state / "snapshots" / "pre-upgrade.json").write_text("{}")
    proc = run_playbook(
        REPO / "playbooks" / f"{name}.yml",
        *extra_vars(
            cuda13_target_hosts="localhost",
            cuda13_state_dir=state,
            cuda13_reports_dir=tmp_path / "reports",
            **values,
        ),
        inventory=inventory,
        env={"CUDA13_RUN_ID": "r1"},
    )
    return proc, proc.stdout + proc.stderr, state


def _files(state):
    return sorted(str(p.relative_to(state)) for p in state.rglob("*"))


def test_rollback_without_a_snapshot_changes_nothing_and_says_so(tmp_path):
    proc, out, state = _run(tmp_path, "rollback", snapshot=False)
    assert proc.returncode == 0, out
    assert _files(state) == ["snapshots"]  # no lock, no result, nothing written on the host
    result = json.loads((tmp_path / "reports" / "r1" / "localhost" / "result.json").read_text())
    assert result["status"] == "nothing_to_roll_back"
    assert result["reason"] == (
        f"nothing to roll back to: localhost has no pre-upgrade snapshot at {state}/snapshots/pre-upgrade.json "
        "(rollback_snapshot_file); nothing on the host was changed"
    )
    assert "Traceback" not in out


def test_rollback_and_verify_refuse_without_a_drain_hook(tmp_path):
    undrained = local_inventory(tmp_path / "inventory", cuda13_allow_undrained=None)
    for name, does in (
        ("rollback", "rollback restarts sglang.service on the old stack"),
        ("verify", "verify restarts sglang.service into each profile and sends it the benchmark's load"),
    ):
        # A fleet's inventory that does not allow an undrained host, and names no drain hook.
        proc, out, state = _run(tmp_path, name, inventory=undrained)
        assert proc.returncode != 0
        text = " ".join(out.replace("''", "'").split())
        assert f"localhost: {does}, and no drain hook takes the host out of service first" in text
        assert "cuda13_drain_tasks is empty. Nothing was changed." in text
        assert "-e cuda13_allow_undrained=true" in text
        assert _files(state) == ["snapshots", "snapshots/pre-upgrade.json"]  # refused before the lock


def _hooks(tmp_path):
    log = tmp_path / "hooks.log"
    for name in ("drain", "undrain"):
        (tmp_path / f"{name}.yml").write_text(
            f"- name: {name}\n  ansible.builtin.shell: echo {name} >> {log}\n  changed_when: true\n"
        )
    return log


def test_rollback_drains_and_undrains_with_the_rollouts_hooks_even_when_it_fails(tmp_path):
    log = _hooks(tmp_path)
    proc, out, state = _run(
        tmp_path,
        "rollback",
        cuda13_drain_tasks=tmp_path / "drain.yml",
        cuda13_undrain_tasks=tmp_path / "undrain.yml",
    )
    # The snapshot "{}" has no stack to restore: the rollback fails after the drain.
    assert proc.returncode != 0
    assert log.read_text().split() == ["drain", "undrain"], out
    assert not (state / "run.lock").exists()  # the lock was released


def test_allow_undrained_goes_on_without_a_hook(tmp_path):
    proc, out, state = _run(tmp_path, "rollback", cuda13_allow_undrained="true")
    assert proc.returncode != 0  # the snapshot "{}" has nothing to restore
    assert "no drain hook takes the host out of service" not in out
    assert "Read the pre-upgrade snapshot" in out or "Load the snapshot" in out
    # The snapshot "{}" is refused as it is loaded, before anything on the host changes.
    text = " ".join(out.replace("''", "'").split())
    assert (
        f"Load the snapshot: {state}/snapshots/pre-upgrade.json on localhost is not a pre-upgrade snapshot"
        " of cuda13-upgrade: it lacks service.exec_start, venv.path, venv.pip_freeze, cuda.resolved."
        " Nothing on the host was changed."
    ) in text
    assert not (state / "run.lock").exists()  # the lock was released
