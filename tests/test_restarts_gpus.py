"""restarts.serve_outcome: a server that generates must have the GPUs its command asks for, and the
cause of a failed start follows the stack that serves (tests/fixtures/failures/SOURCES.md)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from cuda13_upgrade import restarts

FAILURES = Path(__file__).resolve().parent / "fixtures" / "failures"
EXEC = "/opt/ml-env-cu130/bin/python -m sglang.launch_server --model-path /models/Kimi-K2.5-INT4 --tp 8"
RUNS = (
    b"/opt/ml-env-cu130/bin/python\0-m\0sglang.launch_server\0--model-path\0/models/Kimi-K2.5-INT4\0"
    b"--tp\0008\0"
)
SERVE = {
    "service": "sglang.service",
    "what": "profile plain, candidate phase",
    "exec_start": EXEC,
    "venv": "/opt/ml-env-cu130",
    "args": [],
    "check": True,
    "url": "http://127.0.0.1:30000",
    "timeout": 900,
    "leftover_timeout": 30,
}
NEW = {"stack": "new", "stack_cuda": "13.0", "target_cuda": "13.0", "venv": "/opt/ml-env-cu130"}
OLD = {"stack": "old", "stack_cuda": "12.8", "target_cuda": "13.0", "venv": "/opt/ml-env"}


def _cycle(server_info=None, startup_log=(), **fields) -> dict:
    cycle = {
        "restarted": True,
        "release": {"free": True, "waited_s": 0.5, "leftovers": [], "signalled": {}, "still_running": []},
        "start_error": None,
        "ready": {"generated": True, "endpoint": "/health_generate", "waited_s": 41.0, "last": "200"},
        "journal": [],
        "cmdline_b64": base64.b64encode(RUNS).decode(),
        **fields,
    }
    if server_info is not None:
        cycle.update(server_info=server_info, startup_log=list(startup_log))
    return cycle


def test_a_server_reporting_fewer_gpus_than_its_tp_fails_naming_both():
    out = restarts.serve_outcome(_cycle({"tp_size": 4, "device": "cuda", "version": "0.5.9"}), **SERVE)
    assert out["failed"] is True
    lines = out["msg"].splitlines()
    assert lines[0] == (
        "sglang.service (profile plain, candidate phase) generates, but not on the GPUs it was asked for:"
        " the command asks for --tp 8 (8 GPUs), /get_server_info reports tp_size=4. Nothing was measured"
        " on it."
    )
    assert lines[1] == (
        "Check the GPUs the service sees: nvidia-smi, and CUDA_VISIBLE_DEVICES in systemctl show -p"
        " Environment sglang.service."
    )
    assert out["effective"]["args"]["tp_size"] == 4


def test_the_profile_s_tp_is_the_one_asked_for_when_it_overrides_the_own_command():
    # --tp-size in the profile's arguments comes after the own command's --tp 8: argparse keeps it
    runs = RUNS + b"--tp-size\0002\0"
    cycle = _cycle({"tp_size": 2, "device": "cuda"}, cmdline_b64=base64.b64encode(runs).decode())
    assert restarts.serve_outcome(cycle, **{**SERVE, "args": ["--tp-size", "2"]})["failed"] is False
    assert restarts.asked_tp(EXEC, ["--tp-size", "2"]) == 2
    assert restarts.asked_tp(EXEC, ["--tensor-parallel-size=4"]) == 4
    assert restarts.asked_tp("/opt/ml-env/bin/python -m sglang.launch_server", []) is None


def test_a_server_on_the_cpu_fails_with_the_cause_its_start_up_log_gives():
    # sgl-project/sglang#11395's lines, then torch's warning (torch-cu130-driver-12080.txt)
    logged = [
        *(FAILURES / "sglang-cpu-fallback.txt").read_text().splitlines(),
        *(FAILURES / "torch-cu130-driver-12080.txt").read_text().splitlines(),
    ]
    out = restarts.serve_outcome(
        _cycle({"tp_size": 8, "device": "cpu"}, startup_log=logged), **SERVE, stack=NEW
    )
    lines = out["msg"].splitlines()
    assert out["failed"] is True
    assert "/get_server_info reports device='cpu', not 'cuda'" in lines[0]
    assert lines[1].startswith("Cause: the server found no usable GPU and fell back to the CPU: torch says")
    assert "Fix: upgrade the NVIDIA driver to >= 580.65.06, the minimum for CUDA 13.0" in lines[1]
    assert lines[2] == "Last lines of its start-up log:"


@pytest.mark.parametrize(
    "server_info",
    [
        {"version": "0.4.0"},  # an older server: neither field
        {"tp_size": 8, "device": "cuda"},
        {"tp_size": 16},  # more than asked
        {"tp_size": "8", "device": None},  # not numbers, not said
    ],
)
def test_only_positive_evidence_fails_a_start(server_info):
    assert restarts.serve_outcome(_cycle(server_info), **SERVE)["failed"] is False
    # the configuration not read (no wait, check mode): nothing to judge
    assert restarts.serve_outcome(_cycle(), **SERVE)["failed"] is False


def test_a_failed_start_on_the_old_stack_gets_the_old_stack_s_remedy():
    # After a rollback the old stack imports a CUDA 13 build (cuda13-extension-on-cuda12.txt).
    journal = (FAILURES / "cuda13-extension-on-cuda12.txt").read_text().splitlines()
    cycle = _cycle(start_error=None, ready={"generated": False, "last": "none"}, journal=journal)
    old = restarts.serve_outcome(cycle, **{**SERVE, "check": False}, stack=OLD)
    cause = old["msg"].splitlines()[1]
    assert (
        "Fix: install the CUDA 12.8 build (+cu128) of the extension .../deep_gemm/_C.so into the old venv"
        in cause
    )
    assert "new venv" not in cause
    # without the stack, as before: the target's words
    before = restarts.serve_outcome(cycle, **{**SERVE, "check": False})
    assert "into the new venv" in before["msg"].splitlines()[1]
