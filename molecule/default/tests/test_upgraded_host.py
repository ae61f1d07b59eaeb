"""After the upgrade: CUDA 13 serves, CUDA 12.8 and the old venv are intact."""

import json
import os
import subprocess
from pathlib import Path
from statistics import median

from probes import pip_freeze, stream_decode


def _snapshot(host):
    return json.loads(host.file("/var/lib/cuda13-upgrade/snapshots/pre-upgrade.json").content_string)


def test_the_upgrade_went_on_with_the_staged_stack(host):
    staged = json.loads(host.file("/var/lib/cuda13-upgrade/staged.json").content_string)
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "kept"
    assert result["staged_in"] == staged["run_id"] == "molecule-default-stage"
    # What the preflight resolved is what was staged and what serves now.
    assert "torch==2.9.1+cu130" in result["resolved_target"]
    assert result["resolved_target"] == staged["resolved_target"]
    freeze = host.check_output("/opt/ml-env-cu130/bin/python -m pip --isolated freeze --all").splitlines()
    assert freeze == staged["freeze"]


def test_usr_local_cuda_resolves_to_13_0(host):
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-13.0"
    assert "release 13.0, V13.0.88" in host.check_output("/usr/local/cuda/bin/nvcc --version")


def test_cuda_12_8_is_still_installed(host):
    assert host.package("cuda-toolkit-12-8").is_installed
    assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"
    assert "release 12.8, V12.8.93" in host.check_output("/usr/local/cuda-12.8/bin/nvcc --version")
    assert host.check_output("readlink /usr/local/cuda-12") == "/etc/alternatives/cuda-12"
    assert host.check_output("readlink -f /usr/local/cuda-12") == "/usr/local/cuda-12.8"


def test_new_venv_holds_the_matching_cu130_wheels(host):
    dists = pip_freeze(host, "/opt/ml-env-cu130")
    assert dists["torch"] == "2.9.1+cu130"
    assert dists["sgl-kernel"] == "0.3.21+cu130"
    assert dists["flashinfer-jit-cache"] == "0.6.3+cu130"
    assert dists["flashinfer-python"] == dists["flashinfer-cubin"] == "0.6.3"
    cuda = host.check_output("/opt/ml-env-cu130/bin/python -c 'import torch; print(torch.version.cuda)'")
    assert cuda == "13.0"


def test_sglang_is_built_from_its_own_tree_against_13_0(host):
    assert host.check_output("git -C /opt/sglang-cu130 describe --tags --exact-match") == "v0.5.9"
    info = json.loads(host.file("/opt/sglang-cu130/python/sglang/_build_info.json").content_string)
    assert info["cuda_version"] == "13.0"
    assert info["torch_cuda_arch_list"] == "12.0"
    assert host.check_output("git -C /opt/sglang describe --tags --exact-match") == "v0.5.8"


def test_old_venv_is_exactly_the_snapshot(host):
    snapshot = _snapshot(host)
    now = sorted(host.check_output("/opt/ml-env/bin/python -m pip freeze --all --isolated").splitlines())
    assert now == snapshot["venv"]["pip_freeze"]
    assert pip_freeze(host, "/opt/ml-env")["torch"] == "2.9.1+cu128"


def test_service_runs_from_the_new_venv_with_its_own_caches(host):
    assert host.service("sglang.service").is_running
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    cmdline = host.file(f"/proc/{pid}/cmdline").content_string.replace("\0", " ")
    assert cmdline.startswith("/opt/ml-env-cu130/bin/python -m sglang.launch_server")
    environ = host.file(f"/proc/{pid}/environ").content_string.split("\0")
    assert "CUDA_HOME=/usr/local/cuda-13.0" in environ
    assert "TRITON_CACHE_DIR=/var/cache/cuda13-upgrade/cu130/triton" in environ
    assert not host.file("/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf").exists


def test_service_answers_at_the_cuda13_rate(host):
    result = stream_decode(host, max_tokens=64, trials=3)
    rate = median(t["output_tok_s"] for t in result["trials"])
    assert abs(rate - 92.6) / 92.6 < 0.05, rate


def test_result_records_the_kept_upgrade(host):
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "kept"
    assert set(result["decisions"]) == {"plain", "eagle3"}
    assert all(d["verdict"] == "keep" for d in result["decisions"].values())
    eagle = result["throughput"]
    assert eagle["baseline"]["eagle3"]["summary"]["median"] < eagle["baseline"]["plain"]["summary"]["median"]
    assert (
        eagle["candidate"]["eagle3"]["summary"]["median"] > eagle["candidate"]["plain"]["summary"]["median"]
    )
    # The default scenario's EAGLE-3 accept length (2.687) on both stacks: 32 probe tokens take
    # 12 verify steps, so the report shows 2.67 -> 2.67 tokens per verify step.
    accept = result["accept_length"]["eagle3"]
    assert accept["passed"] is True
    assert round(accept["old"], 2) == round(accept["new"], 2) == 2.67
    assert not host.file("/var/lib/cuda13-upgrade/run.lock").exists


def test_worker_was_drained_and_put_back_in_the_router(host):
    workers = json.loads(
        host.check_output(
            "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30100/list_workers').read().decode())\""
        )
    )
    assert workers["urls"] == ["http://127.0.0.1:30000"]
    events = [
        json.loads(line)["event"]
        for line in host.file("/var/log/sglang-router-events.jsonl").content_string.splitlines()
    ]
    assert events == ["remove", "add"]


def test_the_plan_of_the_kept_host_says_already_kept():
    """cuda13-upgrade plan after the rollout: the host is already kept for this
    target, nothing is planned for it (read-only: no batch, no restart)."""
    project = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    inventory = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
    reports = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
    argv = [str(project / ".venv/bin/cuda13-upgrade"), "plan", "--json", "-i", str(inventory)]
    argv += ["--run-id", "molecule-default-plan-kept", "--reports-dir", str(reports)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = json.loads(done.stdout)["hosts"]
    assert record["path"] == "already kept", record
    assert record["batch"] is None
    assert json.loads(done.stdout)["summary"]["changes"] == 0
