"""filter_plugins/cuda13_diagnosis.py through FilterModule().filters()."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "cuda13_diagnosis", ROOT / "filter_plugins" / "cuda13_diagnosis.py"
)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
FILTERS = _module.FilterModule().filters()
FAILURES = ROOT / "tests" / "fixtures" / "failures"
SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"


def test_diagnose_lines_with_source_and_context():
    lines = (FAILURES / "sgl-kernel-torch-abi.txt").read_text().splitlines()
    result = FILTERS["cuda13_diagnose"](lines, "import", {"torch_version": "2.10.0+cu130"})
    assert result["kind"] == "kernel_torch_abi" and result["known"] and result["source"] == "import"
    assert "torch 2.10" in result["remedy"]


def test_diagnose_journal_with_the_units_user_as_serve_passes_it():
    # restarts.serve_outcome (roles/cuda13/tasks/serve.yml): the unit's User=
    lines = (FAILURES / "systemd-exec-venv-python-denied.txt").read_text().splitlines()
    result = FILTERS["cuda13_diagnose"](lines, "journal", {"service_user": "sglang"})
    assert result["kind"] == "service_exec_denied" and result["source"] == "journal"
    assert "sudo -u sglang test -x /opt/tinypilot/venv/bin/python" in result["remedy"]
    unnamed = FILTERS["cuda13_diagnose"](lines, "journal", {"service_user": ""})
    assert "sudo -u <User> test -x" in unnamed["remedy"]


def test_diagnose_refuses_other_types():
    with pytest.raises(
        AnsibleFilterError, match="cuda13_diagnose: input must be text or a list of lines, got 42"
    ):
        FILTERS["cuda13_diagnose"](42)


def test_proc_version_and_compute_apps_filters():
    proc = (SMI / "proc-driver-version-580.95.05.txt").read_text()
    assert FILTERS["cuda13_parse_proc_driver_version"](proc)["module_version"] == "580.95.05"
    assert FILTERS["cuda13_parse_compute_apps"]("", 0) == []
    with pytest.raises(AnsibleFilterError, match="driver_library_mismatch"):
        FILTERS["cuda13_parse_compute_apps"]((SMI / "failure-nvml-mismatch-550.txt").read_text(), 18)
