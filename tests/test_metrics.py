"""Tests of cuda13_upgrade.metrics: the Prometheus textfile-collector files,
parsed back with prometheus_client's own text parser, names checked against
Prometheus' naming rules, values equal to the results they come from."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_report import HOSTS, RUN_ID, kept, rolled_back_regressed, run_dir  # noqa: F401

from cuda13_upgrade import metrics
from cuda13_upgrade.summary import fleet_summary

# Prometheus' data model: metric and label names.
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        assert METRIC_NAME.match(family.name) and family.name.startswith("cuda13_upgrade_"), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            assert all(LABEL_NAME.match(k) and not k.startswith("__") for k in sample.labels), sample
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_fleet_file_parses_and_equals_the_report(run_dir):  # noqa: F811
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "command": "rollout",
                "hosts": HOSTS,
                "started_at": "2025-01-01T12:00:00+00:00",
                "finished_at": "2025-01-01T13:00:30+00:00",
                "batches": {"gpu-node-01": 1, "gpu-node-02": 2, "gpu-node-03": 2, "gpu-node-04": 2},
            }
        )
    )
    summary = fleet_summary(run_dir, HOSTS)
    path = run_dir / "cuda13_upgrade.prom"
    assert summary["files"]["metrics"] == str(path)
    samples = _samples(path.read_text())
    assert samples[("cuda13_upgrade_run_info", (("command", "rollout"), ("run_id", RUN_ID)))] == 1
    hosts = {labels[0][1]: v for (name, labels), v in samples.items() if name == "cuda13_upgrade_hosts"}
    assert hosts == {"kept": 1, "rolled_back": 2, "failed": 1, "unreachable": 0, "not_reached": 1}
    batch = {
        dict(labels)["batch"] + "/" + dict(labels)["state"]: v
        for (name, labels), v in samples.items()
        if name == "cuda13_upgrade_batch_hosts"
    }
    assert batch == {"1/kept": 1, "2/rolled_back": 2, "2/failed": 1}
    assert samples[("cuda13_upgrade_rollout_duration_seconds", ())] == 3630.0
    assert samples[("cuda13_upgrade_rollout_finished_timestamp_seconds", ())] == 1735736430.0
    rows = {row["host"]: row for row in summary["rows"]}
    assert (
        samples[("cuda13_upgrade_host_duration_seconds", (("host", "gpu-node-01"),))]
        == rows["gpu-node-01"]["duration_s"]
    )
    assert samples[("cuda13_upgrade_host_out_of_service_seconds", (("host", "gpu-node-02"),))] == 1830.0
    steps = {
        dict(labels)["step"]: v
        for (name, labels), v in samples.items()
        if name == "cuda13_upgrade_host_step_duration_seconds" and dict(labels)["host"] == "gpu-node-01"
    }
    assert steps == rows["gpu-node-01"]["steps"]


def test_fleet_file_also_in_the_textfile_collector_directory(run_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("CUDA13_METRICS_TEXTFILE_DIR", str(tmp_path / "textfile"))
    fleet_summary(run_dir, HOSTS)
    copy = tmp_path / "textfile" / "cuda13_upgrade.prom"
    assert copy.read_text() == (run_dir / "cuda13_upgrade.prom").read_text()
    assert not [p for p in copy.parent.iterdir() if p.name != copy.name]  # no temporary file left
    # Without run.json the rollout's span is the hosts' first start to last finish.
    samples = _samples(copy.read_text())
    assert samples[("cuda13_upgrade_rollout_duration_seconds", ())] == 3330.0  # 12:00:05 .. 12:55:35


def test_host_file_parses_and_equals_the_result():
    result = rolled_back_regressed("gpu-node-02")
    result["throughput"]["candidate"]["eagle3"]["trials"][0]["accept_length"] = 2.9
    result["throughput"]["candidate"]["eagle3"]["trials"][1]["accept_length"] = 3.1
    samples = _samples(metrics.host_metrics(result))
    state = {labels[0][1]: v for (name, labels), v in samples.items() if name == "cuda13_upgrade_state"}
    assert state == {"kept": 0, "rolled_back": 1, "failed": 0, "unreachable": 0}
    info = [dict(labels) for (name, labels), _ in samples.items() if name == "cuda13_upgrade_stack_info"]
    assert info == [{"venv": "/opt/ml-env", "torch": "2.10.0+cu128", "torch_cuda": "12.8"}]
    tok_s = {
        (dict(labels)["profile"], dict(labels)["stack"]): v
        for (name, labels), v in samples.items()
        if name == "cuda13_upgrade_throughput_tokens_per_second"
    }
    # old: the rollback's re-measurement (the last on the old stack); new: the candidate's.
    assert tok_s == {
        ("plain", "old"): 89.3,
        ("eagle3", "old"): 54.0,
        ("plain", "new"): 80.2,
        ("eagle3", "new"): 50.0,
    }
    accept = {
        (dict(labels)["profile"], dict(labels)["stack"]): v
        for (name, labels), v in samples.items()
        if name == "cuda13_upgrade_accept_length"
    }
    assert accept == {("eagle3", "new"): pytest.approx(3.0)}
    assert samples[("cuda13_upgrade_out_of_service_seconds", ())] == 1830.0
    assert samples[("cuda13_upgrade_last_run_timestamp_seconds", ())] == 1735736135.0
    assert samples[("cuda13_upgrade_run_info", (("run_id", RUN_ID),))] == 1


def test_host_file_of_a_kept_host_without_steps():
    result = kept("gpu-node-01")
    result.pop("out_of_service_s")
    samples = _samples(metrics.host_metrics(result))
    assert samples[("cuda13_upgrade_state", (("state", "kept"),))] == 1
    assert ("cuda13_upgrade_out_of_service_seconds", ()) not in samples
    assert not [k for k in samples if k[0] == "cuda13_upgrade_accept_length"]


def test_write_textfile_replaces_atomically(tmp_path):
    path = metrics.write_textfile(tmp_path, "a 1\n")
    assert metrics.write_textfile(tmp_path, "a 2\n") == path
    assert path.read_text() == "a 2\n" and [p.name for p in tmp_path.iterdir()] == ["cuda13_upgrade.prom"]


def test_host_file_written_by_ansible_through_the_filter(tmp_path):
    """The action cuda13_result (its metrics file), through roles/upgrade_host/tasks/main.yml's own
    task "Record the host's result", run by ansible-playbook on localhost with the steps' records
    of a host whose new stack was slower and that was rolled back."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml
    from test_report import ARGS, EAGLE_BEFORE, KEPT_STEPS, PLAIN_BEFORE, _phase

    root = Path(__file__).resolve().parents[1]
    candidate = {"plain": [80.1, 80.2, 80.4], "eagle3": [50.0, 50.1, 49.8]}
    again = {"plain": [89.2, 89.3, 89.5], "eagle3": [54.0, 54.0, 54.2]}
    # The old stack's venv, whose torch the result probes: this Python.
    venv = tmp_path / "ml-env"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    steps = [*KEPT_STEPS[:8], ("rollback", "12:45:00"), ("undrain", "12:55:00")]
    values = {
        "cuda13_run_id": RUN_ID,
        # The host's run record as the steps left it.
        "cuda13_host_run": {
            "run_id": RUN_ID,
            "host": "localhost",
            "started_at": "2025-01-01T12:00:05+00:00",
            "target": {},
            "state_dir": str(tmp_path / "state"),
            "serving": str(venv),
            "measure": True,
            "changed": True,
            "drained": False,
            "steps": [{"step": n, "started_at": f"2025-01-01T{t}.000000+00:00"} for n, t in steps],
            "failure": None,
        },
        "cuda13_old_venv": str(venv),
        "cuda13_state_dir": str(tmp_path / "state"),
        "cuda13_reports_dir": str(tmp_path / "reports"),
        "cuda13_metrics_textfile_dir": str(tmp_path / "textfile"),
        # The steps' records, as the play registers them.
        "__cuda13_baseline": {
            "measured": {"results": _phase({"plain": PLAIN_BEFORE, "eagle3": EAGLE_BEFORE}, ARGS)}
        },
        "__cuda13_verify": {
            "measured": {"results": _phase(candidate, ARGS)},
            "verdict": {"decisions": {}},
            "regressed": True,
            "reason": "plain: slower",
        },
        "__cuda13_rollback": {
            "status": "rolled_back",
            "failed_step": "verify",
            "failed_task": "Roll back a new stack that failed the gate or degraded in service",
            "error": "The new stack fails the gate: plain: slower",
            "measured": {"results": _phase(again, ARGS)},
            "seconds": 41.27,
        },
        "ansible_python_interpreter": sys.executable,
    }
    (tmp_path / "vars.json").write_text(json.dumps(values))
    main = yaml.safe_load((root / "roles" / "upgrade_host" / "tasks" / "main.yml").read_text())
    (task,) = [t for t in main[1]["always"] if t["name"] == "Record the host's result"]
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"name": "Check every option's value", "cuda13_options": {}},
                {
                    "ansible.builtin.file": {
                        "path": str(tmp_path / "textfile"),
                        "state": "directory",
                        "mode": "0755",
                    }
                },
                task,
                {
                    "ansible.builtin.copy": {
                        "dest": str(tmp_path / "result.json"),
                        "content": "{{ cuda13_result | to_json }}",
                        "mode": "0644",
                    }
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"@{tmp_path / 'vars.json'}",
            "play.yml",
        ],
        cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    text = (tmp_path / "textfile" / "cuda13_upgrade.prom").read_text()
    assert text == metrics.host_metrics(result)
    samples = _samples(text)
    assert samples[("cuda13_upgrade_state", (("state", "rolled_back"),))] == 1
    assert samples[("cuda13_upgrade_run_info", (("run_id", RUN_ID),))] == 1
    tok_s = {
        (dict(labels)["profile"], dict(labels)["stack"]): v
        for (name, labels), v in samples.items()
        if name == "cuda13_upgrade_throughput_tokens_per_second"
    }
    # old: the rollback's re-measurement (the last on the old stack); new: the candidate's.
    assert tok_s == {
        ("plain", "old"): 89.3,
        ("eagle3", "old"): 54.0,
        ("plain", "new"): 80.2,
        ("eagle3", "new"): 50.0,
    }
    # The action began the result step in the host's run record; the steps' times are the result's.
    assert [s["step"] for s in result["steps"]][-3:] == ["rollback", "undrain", "result"]
    assert samples[("cuda13_upgrade_out_of_service_seconds", ())] == result["out_of_service_s"]
