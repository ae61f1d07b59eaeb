"""The preflight's last check (action cuda13_preflight, step 6 of cuda13_upgrade.steps.preflight):
after pip's resolution, the driver the preflight read is checked against every CUDA component
of the resolved target.

playbooks/preflight.yml on localhost (``-c local``): the options are validated (cuda13_options),
the nvidia-smi double answers for the GPUs and their driver, and pip's resolver (module
cuda13_resolve, this Python) resolves the target from a find-links directory of stand-in wheels
that carry the real PyPI stack's names and versions (tests/fixtures/probes/real-stack.json),
metadata only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

from playbook import NVIDIA_SMI_DOUBLE, NVIDIA_SMI_STATES, run_playbook

REPO = Path(__file__).resolve().parents[1]


def _dists(**changes: str) -> dict[str, str]:
    """The real PyPI stack's distributions (tests/fixtures/probes/real-stack.json), changed."""
    dists = json.loads((REPO / "tests" / "fixtures" / "probes" / "real-stack.json").read_text())["dists"]
    dists.update(changes)
    return dists


def _wheel(directory: Path, name: str, version: str) -> None:
    """A wheel of ``name`` ``version`` with metadata only (no files, no requirements)."""
    stem = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{stem}.dist-info/RECORD,,")
    files[f"{stem}.dist-info/RECORD"] = "\n".join(record) + "\n"
    with zipfile.ZipFile(directory / f"{stem}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def _run(tmp_path: Path, state: str, dists: dict[str, str], *args: str, **more: object):
    """The preflight with the double in ``state``, the target pinned to ``dists`` (and SGLang)."""
    links = tmp_path / "wheels"
    links.mkdir()
    for name, version in dists.items():
        _wheel(links, name, version)
    (tmp_path / "opt").mkdir()
    extra = {
        "cuda13_target_hosts": "all",
        "ansible_python_interpreter": sys.executable,
        "cuda13_toolkit_package_version": "13.0.2-1",
        "cuda13_preflight_resolve": True,
        # localhost has no drain hook: allowed explicitly
        "cuda13_allow_undrained": True,
        "cuda13_reports_dir": str(tmp_path / "reports"),
        "cuda13_state_dir": str(tmp_path / "state"),
        "cuda13_cache_root": str(tmp_path / "cache"),
        "cuda13_new_venv": str(tmp_path / "venv"),
        "nvidia_driver_check_nvidia_smi": str(NVIDIA_SMI_DOUBLE),
        "nvidia_driver_check_disk_path": str(tmp_path / "opt"),
        "nvidia_driver_check_required_disk_gib": 0.001,
        "nvidia_driver_check_space_stack": "sandbox",
        # localhost serves no stack: the checks against the serving host are molecule bad-input's
        "nvidia_driver_check_host_checks": False,
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_find_links": str(links),
        "cu130_wheels_requirements": [f"{n}=={v}" for n, v in sorted(dists.items()) if n != "sglang"],
        "sglang_build_method": "wheel",
        "sglang_build_version": f"v{dists['sglang']}",
        **more,
    }
    return run_playbook(
        REPO / "playbooks" / "preflight.yml",
        "-e",
        json.dumps(extra),
        *args,
        interpreter=False,
        env={
            "NVIDIA_SMI_DOUBLE_STATE": str(NVIDIA_SMI_STATES / f"{state}.json"),
            "CUDA13_RUN_ID": "stackdriver",
        },
        timeout=300,
    )


def test_a_580_driver_is_refused_under_cuda_python_13_1(tmp_path):
    # The H200's state: driver 580.95.05 (its compute capability 9.0 allowed for the test).
    dists = _dists(**{"cuda-bindings": "13.1.0", "cuda-python": "13.1.0"})
    proc = _run(tmp_path, "h200", dists, nvidia_driver_check_allowed_compute_capabilities=["9.0", "12.0"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "cuda-bindings==13.1.0" in out  # the resolved target, as the resolution tells it
    assert "localhost fails the preflight for its resolved target; nothing was changed:" in out
    assert "cuda-bindings 13.1.0 (CUDA 13.1) needs >= 590.44.01 (CUDA Toolkit Release Notes, Table 3" in out
    assert "Option: cu130_wheels_requirements." in out
    assert re.search(r"^localhost +: ok=\d+ +changed=0 .* failed=1 ", out, re.M), out[-800:]
    # the failed result names the resolved set's size, not each of its wheels
    assert f"resolved_count: {len(dists)}" in out and "url: file://" not in out
    assert not (tmp_path / "venv").exists()


def test_the_real_stack_passes_on_590_naming_its_floor(tmp_path):
    proc = _run(tmp_path, "default", _dists())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    out = " ".join(out.split())  # the callback folds long lines
    assert "driver 590.48.01 >= 580.95.05, set by cuda-toolkit 13.0.2 (CUDA 13.0 Update 2)" in out
    assert "1 of 1 hosts passed the preflight." in out
    assert not (tmp_path / "venv").exists()
