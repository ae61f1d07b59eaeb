"""The re-run of a kept host: cuda13_upgrade.rerun and hostscripts/stack_digest.py."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cuda13_upgrade import rerun

ROOT = Path(__file__).resolve().parents[1]
DIGEST = ROOT / "src" / "cuda13_upgrade" / "hostscripts" / "stack_digest.py"
NVIDIA_SMI = ROOT / "sandbox" / "host" / "nvidia-smi"
NVIDIA_SMI_STATES = ROOT / "sandbox" / "host" / "nvidia-smi-states"

TARGET = {
    "toolkit_release": "13.0",
    "toolkit_package_version": "13.0.2-1",
    "requirements": ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"],
    "sglang_version": "v0.5.9",
    "profiles": [{"name": "plain", "args": []}],
}
PARTS = {
    "freeze": "a" * 64,
    "dropins": "b" * 64,
    "alternatives": "c" * 64,
    "toolkit": "d" * 64,
    "driver": "f" * 64,
}
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
        "measure": False,
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
    # Measured again, unless only the record falls short (no digest recorded at all).
    measure = reason != "its result records no stack digest"
    assert verdict == {"already_kept": False, "differs": [], "reason": reason, "measure": measure}


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


def _serving_host(tmp_path: Path) -> Path:
    """A venv (this Python), one drop-in and the toolkit's package, as the fake tools report them."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    dropin = tmp_path / "50-cuda13-upgrade.conf"
    dropin.write_text("[Service]\n")
    _fake_tools(tmp_path / "bin", dropin, "cuda-toolkit-13-0=13.0.2-1 ii \\n")
    return venv


def _digest(tmp_path: Path, venv: Path, *options: str, state: str = "default.json") -> dict:
    """The host script run for real; nvidia-smi is the sandbox's double in ``state``."""
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "NVIDIA_SMI_DOUBLE_STATE": str(NVIDIA_SMI_STATES / state),
    }
    out = subprocess.run(
        [sys.executable, str(DIGEST), "--nvidia-smi", str(NVIDIA_SMI), *options, str(venv), "sglang.service"],
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


def test_a_new_driver_or_another_gpu_is_another_stack(tmp_path):
    """The driver part: nvidia-smi's driver version and GPUs (the sandbox's double, in the
    state of a host on driver 570.86.15 against the default's 590.48.01)."""
    venv = _serving_host(tmp_path)
    now = _digest(tmp_path, venv)
    older_driver = _digest(tmp_path, venv, state="driver-too-old.json")
    assert [p for p in rerun.PARTS if now["parts"][p] != older_driver["parts"][p]] == ["driver"]
    no_driver = _digest(tmp_path, venv, state="no-driver.json")
    assert "driver" in no_driver["errors"]
    verdict = rerun.kept_rerun({**KEPT, "stack_digest": now}, TARGET, older_driver)
    assert verdict["already_kept"] is False and verdict["differs"] == ["driver"]


def test_a_digest_recorded_without_the_driver_part_sends_the_host_through_once_unmeasured():
    """A result written before the digest had its driver part: through the roles once, not
    measured (its recorded parts are unchanged), so that its result records the whole digest;
    a fleet of kept hosts is not taken out of service because the tool was updated."""
    recorded = {k: v for k, v in PARTS.items() if k != "driver"}
    verdict = rerun.kept_rerun({**KEPT, "stack_digest": {"parts": recorded}}, TARGET, {"parts": PARTS})
    assert verdict == {
        "already_kept": False,
        "differs": ["driver"],
        "reason": "the stack digest run 20261201T101500Z recorded has no driver part "
        "(an earlier version of cuda13-upgrade wrote it); the parts it has are unchanged",
        "measure": False,
    }
    # A recorded part that differs too: measured again, naming that part.
    changed = rerun.kept_rerun(
        {**KEPT, "stack_digest": {"parts": recorded}}, TARGET, {"parts": {**PARTS, "freeze": "0" * 64}}
    )
    assert (changed["differs"], changed["measure"]) == (["freeze"], True)


def _specs() -> dict:
    import yaml

    merged = {}
    for path in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        entry = yaml.safe_load(path.read_text())["argument_specs"].get("main", {})
        merged.update(entry.get("options") or {})
    return merged


def test_the_target_comes_from_the_validated_options():
    """Given values as -e key=value strings and a profile without new_stack_args: the target
    holds them converted, and equals a target recorded from the inventory's own values."""
    from cuda13_upgrade import options

    given = {
        "cu130_wheels_requirements": "torch==2.9.1+cu130,sgl-kernel==0.3.21+cu130",
        "cuda13_profiles": [{"name": "plain", "server_args": []}],
    }
    checked = options.validate(given, _specs())
    assert checked["ok"], checked["failures"]
    target = rerun.target(checked["values"])
    assert target == {
        "toolkit_release": "13.0",
        "toolkit_package_version": "13.0.2-1",
        "requirements": ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"],
        "sglang_version": "v0.5.9",
        "sglang_method": "source",
        "profiles": [{"name": "plain", "server_args": [], "new_stack_args": [], "soak_concurrency": None}],
    }
    recorded = {**TARGET, "profiles": [{"name": "plain", "server_args": []}]}
    recorded["requirements"] = ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"]
    assert rerun.same_target(recorded, target)
    assert not rerun.same_target(
        recorded, {**target, "profiles": [{"name": "plain", "server_args": [], "new_stack_args": ["--x"]}]}
    )
    with pytest.raises(KeyError, match="the validated options lack cuda13_profiles"):
        rerun.target({k: v for k, v in checked["values"].items() if k != "cuda13_profiles"})


STEP_DONE = {"run_id": "20261201T101500Z", "step": "result", "started_at": "2026-12-01T10:40:00+00:00"}


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (None, "its state could not be read"),
        (
            {
                "result": KEPT,
                "step": STEP_DONE,
                "lock": {"run_id": "20261202T080000Z"},
                "digest": {"parts": PARTS},
            },
            "the lock of run 20261202T080000Z is on the host",
        ),
        (
            # mkdir took the lock, owner.json not yet written
            {"result": KEPT, "step": STEP_DONE, "lock": {}, "digest": {"parts": PARTS}},
            "the lock of run ? is on the host",
        ),
        (
            # a later run lost its host after the switch: the full run resolves it
            {
                "result": KEPT,
                "step": {
                    "run_id": "20261202T080000Z",
                    "step": "switch",
                    "started_at": "2026-12-02T08:10:00+00:00",
                },
                "lock": None,
                "digest": {"parts": PARTS},
            },
            "run 20261202T080000Z stopped at step switch",
        ),
        (
            {
                "result": KEPT,
                "step": STEP_DONE,
                "lock": None,
                "digest": {"parts": {**PARTS, "freeze": "0" * 64}},
            },
            "its stack differs from the one run 20261201T101500Z kept: freeze",
        ),
        (
            {"result": {**KEPT, "status": "rolled_back"}, "step": STEP_DONE, "lock": None, "digest": None},
            "its last result is rolled_back, not kept",
        ),
        ({"result": None, "step": None, "lock": None, "digest": None}, "its last result is none, not kept"),
        (
            # step.json torn (a full disk): whether a run stopped part way is unknown
            {
                "result": KEPT,
                "step": None,
                "lock": None,
                "digest": {"parts": PARTS},
                "errors": {
                    "step": "/var/lib/cuda13-upgrade/step.json: Expecting value: line 1 column 1 (char 0)"
                },
            },
            "its step.json cannot be read (/var/lib/cuda13-upgrade/step.json: Expecting value: line 1 column 1 (char 0))",
        ),
    ],
)
def test_before_the_preflight_only_an_unchanged_unlocked_kept_host_is_already_kept(state, reason):
    verdict = rerun.early_verdict(state, TARGET, "20261202T090000Z")
    assert verdict["already_kept"] is False
    assert verdict["reason"] == reason


def test_an_unchanged_kept_host_is_already_kept_before_the_preflight():
    state = {"result": KEPT, "step": STEP_DONE, "lock": None, "digest": {"parts": dict(PARTS)}}
    verdict = rerun.early_verdict(state, TARGET, "20261202T090000Z")
    assert verdict == {"already_kept": True, "differs": [], "reason": "", "measure": False, "previous": KEPT}
    again = rerun.early_verdict(state, TARGET, "20261202T090000Z", reverify=True)
    assert again["already_kept"] is False
    assert again["reason"] == "cuda13_reverify=true measures the host again"


def _state_dir(tmp_path: Path, result: dict | str | None) -> Path:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if result is not None:
        (state / "result.json").write_text(result if isinstance(result, str) else json.dumps(result))
    (state / "step.json").write_text(json.dumps(STEP_DONE))
    return state


def test_the_script_reads_the_state_and_digests_only_a_kept_host(tmp_path):
    """stack_digest.py --state, run for real: what the early verdict reads in one script."""
    venv = _serving_host(tmp_path)
    plain = _digest(tmp_path, venv)

    state = _state_dir(tmp_path, {**KEPT, "stack_digest": plain})
    kept = _digest(tmp_path, venv, "--state", str(state))
    assert kept["state"] == {
        "result": {**KEPT, "stack_digest": plain},
        "step": STEP_DONE,
        "lock": None,
        "staged": None,
        "errors": {},
    }
    assert kept["parts"] == plain["parts"]
    # staged.json, read for cuda13-upgrade plan's staged path
    (state / "staged.json").write_text('{"run_id": "stage-1"}')
    assert _digest(tmp_path, venv, "--state", str(state))["state"]["staged"] == {"run_id": "stage-1"}
    (state / "staged.json").unlink()

    (state / "run.lock").mkdir()
    assert _digest(tmp_path, venv, "--state", str(state))["state"]["lock"] == {}
    (state / "run.lock" / "owner.json").write_text('{"run_id": "20261202T080000Z"}')
    assert _digest(tmp_path, venv, "--state", str(state))["state"]["lock"] == {"run_id": "20261202T080000Z"}

    rolled_back = _digest(
        tmp_path, venv, "--state", str(_state_dir(tmp_path, {**KEPT, "status": "rolled_back"}))
    )
    assert rolled_back["digest"] is None and rolled_back["parts"] is None

    torn = _digest(tmp_path, venv, "--state", str(_state_dir(tmp_path, '{"status": "kep')))
    assert torn["state"]["result"] is None
    assert torn["state"]["errors"]["result"].startswith(f"{tmp_path / 'state' / 'result.json'}: ")

    empty = tmp_path / "never-upgraded"
    assert _digest(tmp_path, venv, "--state", str(empty))["state"] == {
        "result": None,
        "step": None,
        "lock": None,
        "staged": None,
        "errors": {},
    }


def test_the_verdict_of_the_state_the_script_read():
    # What stack_digest.py --state prints, as the step host_state hands it on (the digest inside).
    state = {"result": KEPT, "step": STEP_DONE, "lock": None, "errors": {}}
    found = {**state, "digest": {"digest": "e" * 64, "parts": PARTS}}
    assert rerun.host_verdict(found, TARGET, "20261202T090000Z", reverify=False)["already_kept"] is True
    not_kept = {**state, "result": None, "digest": None}
    assert rerun.host_verdict(not_kept, TARGET, "20261202T090000Z")["reason"] == (
        "its last result is none, not kept"
    )
    assert rerun.host_verdict(None, TARGET, "20261202T090000Z")["reason"] == "its state could not be read"
    # Under the lock, the lock on the host is this run's own.
    locked = {**found, "lock": {"run_id": "20261202T090000Z"}}
    verdict = rerun.host_verdict(locked, TARGET, "20261202T090000Z", reverify=False, locked=True)
    assert verdict["already_kept"] is True
    assert verdict["stopped"] is None
    with pytest.raises(ValueError, match="the host's state directory could not be read"):
        rerun.host_verdict(None, TARGET, "r", reverify=False, locked=True)
    with pytest.raises(KeyError):
        rerun.target({})


LOCKED_RUN = "20261202T090000Z"
# Under the lock, this run's own lock is on the host.
OWN_LOCK = {"run_id": LOCKED_RUN}


def test_under_the_lock_an_unchanged_kept_host_is_already_kept():
    state = {"result": KEPT, "step": STEP_DONE, "lock": OWN_LOCK, "digest": {"parts": dict(PARTS)}}
    verdict = rerun.host_verdict(state, TARGET, LOCKED_RUN, locked=True)
    assert verdict == {
        "already_kept": True,
        "differs": [],
        "reason": "",
        "measure": False,
        "previous": KEPT,
        "stopped": None,
        "notice": "",
    }


def test_under_the_lock_a_stopped_run_is_resolved_without_comparing_digests():
    step = {"run_id": "20261202T080000Z", "step": "switch", "started_at": "2026-12-02T08:10:00+00:00"}
    state = {"result": KEPT, "step": step, "lock": OWN_LOCK, "digest": {"parts": dict(PARTS)}}
    verdict = rerun.host_verdict(state, TARGET, LOCKED_RUN, locked=True, host="gpu-node-01")
    assert verdict["stopped"]["run_id"] == "20261202T080000Z"
    assert verdict["stopped"]["step"] == "switch"
    assert verdict["already_kept"] is False
    assert verdict["measure"] is True
    assert verdict["reason"] == "the stack digest could not be read"
    # What the operator reads: the stopped run this one resolves, and why the kept host runs in full.
    first, second = verdict["notice"].splitlines()
    assert first.startswith(
        "gpu-node-01: run 20261202T080000Z stopped at step switch (begun 2026-12-02T08:10:00+00:00,"
    )
    assert first.endswith("this run verifies the stack the service points at or rolls the host back.")
    assert (
        second == "gpu-node-01: not already kept: the stack digest could not be read; the full run follows."
    )


def test_under_the_lock_a_changed_stack_is_measured_again():
    state = {
        "result": KEPT,
        "step": STEP_DONE,
        "lock": OWN_LOCK,
        "digest": {"parts": {**PARTS, "driver": "0" * 64}},
    }
    verdict = rerun.host_verdict(state, TARGET, LOCKED_RUN, locked=True, host="gpu-node-01")
    assert verdict["differs"] == ["driver"]
    assert verdict["measure"] is True
    assert verdict["notice"].startswith("gpu-node-01: not already kept: ")
    assert "\n" not in verdict["notice"]
    assert rerun.host_verdict(
        {"result": None, "step": None, "lock": OWN_LOCK, "digest": None}, TARGET, LOCKED_RUN, locked=True
    ) == {
        "already_kept": False,
        "differs": [],
        "reason": "its last result is none, not kept",
        "measure": True,
        "previous": {},
        "stopped": None,
        "notice": "",
    }


def test_under_the_lock_an_unreadable_state_fails_the_host():
    with pytest.raises(ValueError, match="could not be read"):
        rerun.host_verdict(None, TARGET, LOCKED_RUN, locked=True)
    torn = {
        "result": None,
        "step": None,
        "lock": OWN_LOCK,
        "errors": {"result": "result.json: Expecting value"},
    }
    with pytest.raises(ValueError, match=r"its result.json cannot be read \(result.json: Expecting value\)"):
        rerun.host_verdict(torn, TARGET, LOCKED_RUN, locked=True)


def test_before_the_lock_the_host_verdict_is_the_early_one():
    state = {"result": KEPT, "step": STEP_DONE, "lock": {"run_id": "x"}, "digest": {"parts": dict(PARTS)}}
    verdict = rerun.host_verdict(state, TARGET, LOCKED_RUN)
    assert verdict == {**rerun.early_verdict(state, TARGET, LOCKED_RUN), "stopped": None, "notice": ""}
    assert verdict["reason"] == "the lock of run x is on the host"


def test_a_target_recorded_before_profiles_had_a_soak_concurrency_is_the_same_target():
    """Hosts kept before the soak's per-profile concurrency existed stay already kept:
    the key's absence means its default (None: the soak's own concurrency)."""
    recorded = {**TARGET, "profiles": [{"name": "plain", "server_args": [], "new_stack_args": []}]}
    now = {
        **TARGET,
        "profiles": [{"name": "plain", "server_args": [], "new_stack_args": [], "soak_concurrency": None}],
    }
    assert rerun.same_target(recorded, now)
    changed = {**TARGET, "profiles": [{"name": "plain", "server_args": [], "soak_concurrency": 4}]}
    assert not rerun.same_target(recorded, changed)
