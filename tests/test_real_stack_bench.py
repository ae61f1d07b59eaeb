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


def test_it_freezes_as_the_snapshot_does():
    collect = (REPO / "roles" / "stack_snapshot" / "tasks" / "collect.yml").read_text()
    assert "pip, freeze, --all, --isolated]" in collect
    assert real_stack.SNAPSHOT_FREEZE == ["-m", "pip", "freeze", "--all", "--isolated"]


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
