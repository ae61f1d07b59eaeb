"""hostscripts/gpu_release.py: the GPUs' compute processes after a stop, read from nvidia-smi."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "src" / "cuda13_upgrade" / "hostscripts" / "gpu_release.py"


def _fake_nvidia_smi(tmp_path: Path, stdout: str, rc: int = 0) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdout.write({stdout!r})\nsys.exit({rc})\n", encoding="utf-8"
    )
    path.chmod(0o755)
    return path


def _run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_processes_of_other_units_are_named_and_left_alone(tmp_path):
    # A process on the GPUs outside the unit's control group (here: this test's
    # sleeper) is listed with its memory summed over GPUs, and never signalled.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        smi = _fake_nvidia_smi(tmp_path, f"{sleeper.pid}, 81234\n{sleeper.pid}, 81234\n")
        rc, result = _run("--unit", "sglang-test-none.service", "--nvidia-smi", str(smi), "--timeout", "0")
        assert rc == 0
        assert result["free"] is True
        assert result["leftovers"] == [] and result["signalled"] == {}
        assert [(p["pid"], p["gpu_memory_mib"]) for p in result["others"]] == [(sleeper.pid, 162468)]
        assert "time.sleep(60)" in result["others"][0]["command"]
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_failing_nvidia_smi_is_reported_not_taken_for_free_gpus(tmp_path):
    smi = _fake_nvidia_smi(
        tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9
    )
    rc, result = _run("--unit", "sglang-test-none.service", "--nvidia-smi", str(smi))
    assert rc == 0
    assert result["nvidia_smi_error"].startswith("NVIDIA-SMI has failed")
