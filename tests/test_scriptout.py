"""What a host script printed, read from a task's result over SSH with and without a pty."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade import scriptout
from cuda13_upgrade.stack import stack_verdict

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "tests" / "fixtures" / "probes"

# The registered result of stack_probe.py over SSH with ssh -tt (Ansible's default):
# flashinfer's warning and the JSON share stdout; stderr is empty.
SSH_TTY = {
    "rc": 0,
    "stdout": (PROBES / "flashinfer-cubin-0.6.13.ssh-tty.stdout").read_bytes().decode("utf-8"),
    "stderr": "",
}
WARNING = (
    "Ignoring incompatible flashinfer-cubin package (cubins will be downloaded on demand to "
    "/root/.cache/flashinfer/cubins): flashinfer-cubin version (0.6.13) does not match flashinfer "
    "version (0.7.2)."
)


def test_the_pty_merged_the_warning_into_stdout():
    # The fixture is what made `stdout | from_json` fail on the real stack.
    assert SSH_TTY["stdout"].startswith(WARNING)
    with pytest.raises(json.JSONDecodeError):
        json.loads(SSH_TTY["stdout"])


def test_the_result_is_read_from_a_pty_merged_stdout():
    document = scriptout.result_document(SSH_TTY["stdout"])
    assert document["prefix"] == "/opt/variant-flashinfer-cubin-0.6.13"
    assert document["dists"]["flashinfer-cubin"] == "0.6.13"
    verdict = stack_verdict(document, 13, driver_library_optional=True, compute_capabilities=["12.0"])
    assert not verdict["consistent"]
    assert any("flashinfer-cubin 0.6.13" in problem for problem in verdict["problems"])


def test_the_same_result_from_separate_streams():
    # A local or podman connection keeps stderr apart, with \n line ends.
    merged = SSH_TTY["stdout"].replace("\r\n", "\n")
    warning, result = merged.rstrip("\n").rsplit("\n", 1)
    separate = {"rc": 0, "stdout": result + "\n", "stderr": warning + "\n"}
    assert scriptout.result_document(separate["stdout"]) == scriptout.result_document(SSH_TTY["stdout"])
    assert scriptout.script_said(separate) == scriptout.script_said(SSH_TTY)


def test_what_the_script_said_is_its_other_lines():
    said = scriptout.script_said(SSH_TTY)
    assert said.startswith(WARNING)
    assert "\r" not in said and "{" not in said.splitlines()[0][:1]
    assert len(said.splitlines()) == 1


def test_the_last_json_line_wins_and_later_text_is_ignored():
    stdout = '{"first": 1}\r\nnoise { not json\r\n{"second": 2}\r\nException ignored in atexit\r\n'
    assert scriptout.result_document(stdout) == {"second": 2}


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        'Traceback (most recent call last):\r\n  File "x"\r\nImportError: libcuda.so.1\r\n',
        "[1, 2]\n",  # JSON, but not an object
        '{"cut": \n',
    ],
)
def test_no_result_is_an_error_naming_the_output(stdout):
    with pytest.raises(scriptout.NoResultError, match="printed no JSON result"):
        scriptout.result_document(stdout)
    if stdout.strip():
        with pytest.raises(
            scriptout.NoResultError, match=stdout.strip().splitlines()[-1][:20].replace("[", r"\[")
        ):
            scriptout.result_document(stdout)


def test_a_script_that_did_not_start_says_its_msg():
    result = {"rc": 127, "stdout": "", "stderr": "", "msg": "non-zero return code"}
    assert scriptout.script_said(result) == "non-zero return code"


def test_a_json_line_alone_is_the_result():
    assert scriptout.result_document('{"a": 1}\n') == {"a": 1}


def _script_tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _script_tasks(item)
    elif isinstance(node, dict):
        if "ansible.builtin.script" in node or "script" in node:
            yield node
        for value in node.values():
            yield from _script_tasks(value)


def test_no_task_reads_a_script_stdout_or_stderr_directly():
    # A pty may put stderr in stdout on any SSH host. Every host script now runs as a module
    # (library/cuda13_*.py over src/cuda13_upgrade/hostscripts/*.py), whose result is the JSON
    # AnsibleModule prints, which Ansible reads itself: no task, in a task file or in a step's
    # Python (host.module("ansible.builtin.script", ...)), runs a script and reads its output.
    offenders = []
    for path in [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/**/*.yml")]:
        for task in _script_tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(ROOT)}: {task.get('name') or task}")
    sources = [*ROOT.glob("src/cuda13_upgrade/steps/*.py"), *ROOT.glob("action_plugins/*.py")]
    for path in sources:
        if re.search(r"[\"']ansible\.builtin\.(script|raw)[\"']", path.read_text(encoding="utf-8")):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
    # The walk sees the steps it polices.
    assert len(sources) > 20


def test_a_module_keeps_what_the_stacks_imports_print_out_of_its_result(tmp_path):
    # flashinfer's warning, printed on stdout as it is imported (the fixture above): the module
    # cuda13_stack_probe sends it to stderr, so that stdout carries the module's JSON alone.
    import os
    import subprocess
    import sys

    (tmp_path / "noisy_flashinfer.py").write_text(f"print({WARNING!r})\n")
    code = (
        "import json, sys\n"
        "from cuda13_upgrade.hostscripts import stack_probe\n"
        "result = stack_probe.probe_module({'modules': ['noisy_flashinfer']}, False)\n"
        "sys.stdout.write(json.dumps(result['probe']['imports']) + '\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"noisy_flashinfer": None}
    assert WARNING in done.stderr
