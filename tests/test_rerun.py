"""The re-run of a kept host: cuda13_upgrade.rerun and hostscripts/stack_digest.py."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from cuda13_upgrade import rerun

ROOT = Path(__file__).resolve().parents[1]
DIGEST = ROOT / "src" / "cuda13_upgrade" / "hostscripts" / "stack_digest.py"

TARGET = {
    "toolkit_release": "13.0",
    "toolkit_package_version": "13.0.2-1",
    "requirements": ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"],
    "sglang_version": "v0.5.9",
    "profiles": [{"name": "plain", "args": []}],
}
PARTS = {"freeze": "a" * 64, "dropins": "b" * 64, "alternatives": "c" * 64, "toolkit": "d" * 64}
KEPT = {
    "run_id": "20261201T101500Z",
    "status": "kept",
    "target": TARGET,
    "stack_digest": {"digest": "e" * 64, "parts": PARTS},
}


def test_a_kept_host_with_the_same_target_and_stack_is_already_kept():
    assert rerun.kept_rerun(KEPT, TARGET, {"digest": "e" * 64, "parts": dict(PARTS)}) == {
        "already_kept": True,
        "differs": [],
        "reason": "",
    }


def test_each_part_that_differs_is_named():
    now = {"parts": {**PARTS, "dropins": "0" * 64, "toolkit": "1" * 64}}
    verdict = rerun.kept_rerun(KEPT, TARGET, now)
    assert verdict["already_kept"] is False
    assert verdict["differs"] == ["dropins", "toolkit"]
    assert verdict["reason"] == "its stack differs from the one run 20261201T101500Z kept: dropins, toolkit"


@pytest.mark.parametrize(
    ("previous", "target", "digest", "reverify", "reason"),
    [
        (KEPT, TARGET, {"parts": PARTS}, True, "cuda13_reverify=true measures the host again"),
        (
            {**KEPT, "status": "rolled_back"},
            TARGET,
            {"parts": PARTS},
            False,
            "its last result is rolled_back, not kept",
        ),
        ({}, TARGET, None, False, "its last result is none, not kept"),
        (
            KEPT,
            {**TARGET, "sglang_version": "v0.5.8"},
            {"parts": PARTS},
            False,
            "it was kept for another target (run 20261201T101500Z)",
        ),
        (
            # The same release from its wheel instead of the tree built from its tag.
            KEPT,
            {**TARGET, "sglang_method": "wheel"},
            {"parts": PARTS},
            False,
            "it was kept for another target (run 20261201T101500Z)",
        ),
        (
            {k: v for k, v in KEPT.items() if k != "stack_digest"},
            TARGET,
            {"parts": PARTS},
            False,
            "its result records no stack digest",
        ),
        (KEPT, TARGET, None, False, "the stack digest could not be read"),
    ],
)
def test_every_other_host_goes_through_the_full_run_and_says_why(previous, target, digest, reverify, reason):
    verdict = rerun.kept_rerun(previous, target, digest, reverify=reverify)
    assert verdict == {"already_kept": False, "differs": [], "reason": reason}


def test_a_change_of_sglang_method_is_another_target():
    source = {**TARGET, "sglang_method": "source"}
    wheel = {**TARGET, "sglang_method": "wheel"}
    assert rerun.same_target(source, source) and rerun.same_target(wheel, wheel)
    assert not rerun.same_target(source, wheel) and not rerun.same_target(wheel, source)
    # A target recorded before the method was part of it: SGLang was built from source.
    assert rerun.same_target(TARGET, source)
    assert not rerun.same_target(TARGET, wheel)
    assert not rerun.same_target(None, source) and not rerun.same_target({}, source)
    kept_before = {**KEPT, "target": TARGET}
    now = {"parts": dict(PARTS)}
    assert rerun.kept_rerun(kept_before, source, now)["already_kept"] is True
    assert rerun.kept_rerun(kept_before, wheel, now)["already_kept"] is False


def test_the_filter_checks_its_input():
    spec = importlib.util.spec_from_file_location("cuda13_rerun", ROOT / "filter_plugins" / "cuda13_rerun.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kept_rerun = module.FilterModule().filters()["cuda13_kept_rerun"]
    assert kept_rerun(KEPT, TARGET, {"parts": PARTS}, False)["already_kept"] is True
    with pytest.raises(AnsibleFilterError, match="expects the host's result.json as a dict, got 'x'"):
        kept_rerun("x", TARGET)
    with pytest.raises(AnsibleFilterError, match="expects the run's target as a dict, got None"):
        kept_rerun(KEPT, None)
    same_target = module.FilterModule().filters()["cuda13_same_target"]
    assert same_target(TARGET, {**TARGET, "sglang_method": "source"}) is True
    assert same_target(None, TARGET) is False
    with pytest.raises(AnsibleFilterError, match="cuda13_same_target expects the run's target as a dict"):
        same_target(TARGET, "x")


def _fake_tools(bin_dir: Path, dropin: Path, toolkit: str) -> None:
    """systemctl, update-alternatives and dpkg-query that print what the real
    tools print for a host with one drop-in, one CUDA group and the toolkit."""
    bin_dir.mkdir(exist_ok=True)
    tools = {
        "systemctl": f'echo "{dropin}"',
        "update-alternatives": (
            'if [ "$1" = --get-selections ]; then echo "cuda                           manual   /usr/local/cuda-12.8";'
            ' echo "editor                         auto     /usr/bin/vim.basic";'
            ' else printf "Name: cuda\\nLink: /usr/local/cuda\\nStatus: manual\\nBest: /usr/local/cuda-13.0\\n'
            'Value: /usr/local/cuda-12.8\\n"; fi'
        ),
        "dpkg-query": f'printf "{toolkit}"',
    }
    for name, body in tools.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)


def _digest(tmp_path: Path, venv: Path) -> dict:
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(DIGEST), str(venv), "sglang.service"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_the_digest_changes_with_the_part_that_changed(tmp_path):
    """The host script's parts: a changed drop-in changes "dropins" alone, a
    changed toolkit package "toolkit" alone; the same host digests the same."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    dropin = tmp_path / "50-cuda13-upgrade.conf"
    dropin.write_text(
        "[Service]\nExecStart=\nExecStart=/opt/ml-env-cu130/bin/python -m sglang.launch_server\n"
    )
    toolkit = "cuda-toolkit-13-0=13.0.2-1 ii \\n"
    _fake_tools(tmp_path / "bin", dropin, toolkit)
    first = _digest(tmp_path, venv)
    assert first == _digest(tmp_path, venv)
    assert set(first["parts"]) == set(rerun.PARTS)
    assert first["errors"] == {}
    dropin.write_text("[Service]\nExecStart=\nExecStart=/opt/ml-env/bin/python -m sglang.launch_server\n")
    second = _digest(tmp_path, venv)
    assert [p for p in rerun.PARTS if first["parts"][p] != second["parts"][p]] == ["dropins"]
    _fake_tools(tmp_path / "bin", dropin, "cuda-toolkit-13-0=13.0.3-1 ii \\n")
    third = _digest(tmp_path, venv)
    assert [p for p in rerun.PARTS if second["parts"][p] != third["parts"][p]] == ["toolkit"]
    assert rerun.kept_rerun({**KEPT, "stack_digest": first}, TARGET, third)["differs"] == [
        "dropins",
        "toolkit",
    ]


def test_a_part_that_cannot_be_read_differs_and_says_why(tmp_path):
    venv = tmp_path / "no-venv"
    (tmp_path / "bin").mkdir()
    result = _digest(tmp_path, venv)
    assert "freeze" in result["errors"]
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    readable = _digest(tmp_path, venv)
    assert "freeze" not in readable["errors"]
    assert readable["parts"]["freeze"] != result["parts"]["freeze"]
