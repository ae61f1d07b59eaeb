"""benchmarks/real_stack.py's pure part: what it installs and how it checks a rebuild."""

import importlib.util
import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("real_stack", REPO / "benchmarks" / "real_stack.py")
real_stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_stack)


def test_it_installs_the_compiler_pins_the_real_stack_scenario_uses():
    converge = yaml.safe_load((REPO / "molecule" / "real-stack" / "converge.yml").read_text())
    text = json.dumps(converge)
    pins = real_stack.parse_compiler_pins((REPO / "scripts" / "real-stack-cache.sh").read_text())
    assert pins and all(pin in text for pin in pins)
    assert real_stack.stack_requirements() == real_stack.REQUIREMENTS + pins


def test_it_freezes_as_the_snapshot_does(tmp_path):
    # The snapshot's host module (hostscripts/snapshot.py, module cuda13_snapshot_read) runs the
    # serving venv's pip freeze first: a venv whose python records its arguments shows how.
    from cuda13_upgrade.hostscripts import snapshot

    argv_file = tmp_path / "argv.json"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\n")
    python.chmod(0o755)
    snapshot.collect(
        str(tmp_path / "pre-upgrade.json"), str(tmp_path / "venv"), str(tmp_path), "x.service", []
    )
    assert (
        argv_file.read_text().splitlines()
        == real_stack.SNAPSHOT_FREEZE
        == [
            "-m",
            "pip",
            "freeze",
            "--all",
            "--isolated",
        ]
    )
    # The rollback checks the restored venv against the snapshot with the same freeze.
    from fakehost import FakeHost

    from cuda13_upgrade.steps import rollback

    ran = []

    def command(args):
        ran.append(args["argv"])
        unit = "[Service]\nExecStart=/opt/ml-env/bin/python -m sglang.launch_server\n"
        return {"rc": 0, "stdout": unit if args["argv"][0] == "systemctl" else ""}

    manifest = {
        "venv": {"path": "/opt/ml-env", "pip_freeze": []},
        "cuda": {"resolved": ""},
        "service": {"exec_start": "/opt/ml-env/bin/python -m sglang.launch_server"},
    }
    rollback._check_restored(
        FakeHost(handlers={"ansible.builtin.command": command}),
        {"rollback_service_name": "sglang.service", "rollback_snapshot_file": "s"},
        manifest,
        [],
    )
    assert ran[0] == ["/opt/ml-env/bin/python", *real_stack.SNAPSHOT_FREEZE]


def test_a_rebuild_without_setuptools_differs_from_the_snapshot():
    # The recorded real stack (tests/fixtures/probes/real-stack.json): its
    # setuptools is what torch 2.14.1 requires (>=77.0.3) and pip freeze drops.
    dists = json.loads((REPO / "tests" / "fixtures" / "probes" / "real-stack.json").read_text())["dists"]
    snapshot = "".join(f"{name}=={version}\n" for name, version in dists.items())
    rebuilt = "".join(f"{name}=={version}\n" for name, version in dists.items() if name != "setuptools")
    assert "setuptools" in dists
    assert real_stack.rebuild_differences(snapshot, rebuilt) == [f"missing setuptools=={dists['setuptools']}"]
    assert real_stack.rebuild_differences(snapshot, snapshot) == []


def test_a_missing_pin_line_is_an_error():
    import pytest

    with pytest.raises(SystemExit):
        real_stack.parse_compiler_pins("#!/bin/sh\n")
