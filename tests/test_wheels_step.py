"""cuda13_upgrade.steps.wheels: the cu130 wheels in a new venv beside the serving one, and its stack's check.

FakeHost runs the package's own host modules (``cuda13_record``, ``cuda13_venv_read``) on
``tmp_path``; Ansible's ``file`` is answered by making the directory with its mode, ``pip`` by
recording what it was asked (the real installs are tests/test_wheels_playbook.py's), and the
stack probe by the probes of the real PyPI stack (tests/fixtures/probes).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest
from fakehost import FakeHost

from cuda13_upgrade import diagnosis, stack
from cuda13_upgrade.steps import resolve, wheels
from cuda13_upgrade.steps.host import StepFailed

PROBES = Path(__file__).parent / "fixtures" / "probes"
PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]


def _probe(name: str) -> dict:
    return json.loads((PROBES / f"{name}.json").read_text())


class Host(FakeHost):
    """FakeHost that keeps each module's environment, makes directories and records pip."""

    def __init__(self, *args, probe: str = "real-stack-pinned", pip_result=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.environments: list[tuple[str, dict | None]] = []
        self.handlers.setdefault("ansible.builtin.file", self._file)
        self.handlers.setdefault("ansible.builtin.pip", lambda args: dict(pip_result or {"changed": True}))
        self.handlers.setdefault(
            "cuda13_stack_probe", lambda args: {"changed": False, "probe": _probe(probe)}
        )

    def module(self, name, args=None, *, python=None, check_mode=None, environment=None, allow_failure=False):
        self.environments.append((name, dict(environment) if environment is not None else None))
        return super().module(
            name,
            args,
            python=python,
            check_mode=check_mode,
            environment=environment,
            allow_failure=allow_failure,
        )

    def _file(self, args):
        path, mode = Path(args["path"]), int(args["mode"], 8)
        if path.is_dir() and stat.S_IMODE(path.stat().st_mode) == mode:
            return {"changed": False}
        if not self.check_mode:
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(mode)
        return {"changed": True}


def _options(tmp_path: Path, **more) -> dict:
    venv = tmp_path / "opt" / "ml-env-cu130"
    return {
        "cu130_wheels_venv": str(venv),
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_index_url": "http://127.0.0.1:8080/whl/cu130",
        "cu130_wheels_extra_index_urls": [
            "http://127.0.0.1:8080/sgl-whl/cu130",
            "http://127.0.0.1:8080/pypi/simple",
        ],
        "cu130_wheels_pip_extra_args": [],
        "cu130_wheels_pip_tmpdir": f"{venv}/.pip-tmp",
        "cu130_wheels_pip_environment": {},
        "cu130_wheels_find_links": "",
        "cu130_wheels_requirements": list(PINS),
        "cu130_wheels_lock_file": "",
        "cu130_wheels_expected_cuda_major": 13,
        "cu130_wheels_compute_capabilities": [],
        "cu130_wheels_driver_library_optional": True,
        "cuda13_old_venv": str(tmp_path / "opt" / "ml-env"),
        **more,
    }


@pytest.fixture(scope="module")
def resolved_target(mirror_url, tmp_path_factory):
    """The preflight's resolution of the pins with SGLang v0.5.9 against the sandbox mirror."""
    root = tmp_path_factory.mktemp("resolution")
    options = {
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_pip_tmpdir": str(root / ".pip-tmp"),
        "cu130_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cu130_wheels_extra_index_urls": [
            f"{mirror_url}/sgl-whl/cu130",
            f"{mirror_url}/flashinfer-whl/cu130",
            f"{mirror_url}/pypi/simple",
        ],
        "cu130_wheels_requirements": PINS,
        "sglang_build_method": "source",
        "sglang_build_repo": f"{mirror_url}/git/sglang.git",
        "sglang_build_version": "v0.5.9",
    }
    return resolve.resolve(FakeHost("canary"), options, run_dir=str(root / "run"))["resolved"]


def _pip(host: Host) -> tuple[dict, list[str], dict]:
    [args] = host.called("ansible.builtin.pip")
    [env] = [env for name, env in host.environments if name == "ansible.builtin.pip"]
    return args, shlex.split(args["extra_args"]), env


@pytest.mark.parametrize("pins", ["torch==2.9.1+cu130", [], None])
def test_pins_that_are_not_a_list_are_refused_with_the_example(tmp_path, pins):
    with pytest.raises(StepFailed) as failed:
        wheels.install(Host(), _options(tmp_path, cu130_wheels_requirements=pins))
    assert failed.value.msg == (
        "cu130_wheels_requirements must be a non-empty list of pinned requirements "
        f'(e.g. ["torch==2.9.1+cu130", ...]), got {json.dumps(pins)}.'
    )


def test_the_serving_venv_is_refused_by_its_real_path(tmp_path):
    (tmp_path / "opt" / "ml-env").mkdir(parents=True)
    (tmp_path / "opt" / "ml-env-cu130").symlink_to(tmp_path / "opt" / "ml-env")
    options = _options(tmp_path)
    host = Host()
    with pytest.raises(StepFailed) as failed:
        wheels.install(host, options)
    assert failed.value.msg == (
        f"cu130_wheels_venv={options['cu130_wheels_venv']} is the serving venv "
        f"(cuda13_old_venv={options['cuda13_old_venv']}); the new stack needs its own venv."
    )
    assert host.called("ansible.builtin.pip") == []


def test_the_resolved_set_is_installed_exactly_with_its_hashes(tmp_path, resolved_target):
    options = _options(tmp_path, cu130_wheels_pip_extra_args=["--pre"])
    host = Host(check_mode=False)
    record = wheels.install(host, options, resolved=resolved_target, compute_capabilities=["12.0"])
    venv = Path(options["cu130_wheels_venv"])
    # The venv is 0755 (the service's user executes its python), pip's tmpdir inside it 0700.
    assert stat.S_IMODE(venv.stat().st_mode) == 0o755
    assert stat.S_IMODE((venv / ".pip-tmp").stat().st_mode) == 0o700
    requirements = Path(f"{venv}.resolved.txt").read_text()
    assert requirements == resolve.rules.resolved_requirements(resolved_target, ["sglang"])
    assert "torch==2.9.1+cu130 --hash=sha256:" in requirements and "sglang==" not in requirements
    args, extra, env = _pip(host)
    assert args["requirements"] == f"{venv}.resolved.txt" and "name" not in args
    assert args["virtualenv"] == str(venv) and args["virtualenv_command"] == f"{sys.executable} -m venv"
    assert extra == [
        "--isolated",
        "--no-deps",
        "--index-url",
        "http://127.0.0.1:8080/whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/sgl-whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/pypi/simple",
        "--require-hashes",
        "--pre",
    ]
    assert env == {"TMPDIR": f"{venv}/.pip-tmp"}
    assert record["installed"] == "resolved" and record["resolved_target"] == resolved_target
    assert record["changed"] is True
    assert record["verdict"]["consistent"] is True
    assert record["stack"] == _probe("real-stack-pinned")
    assert host.told == [f"{venv}: {record['verdict']['summary']}"]


def test_a_set_without_every_hash_is_installed_without_require_hashes(tmp_path, resolved_target):
    partial = [dict(d, sha256=None) if d["name"] == "triton" else d for d in resolved_target]
    host = Host()
    wheels.install(host, _options(tmp_path), resolved=partial)
    _, extra, _ = _pip(host)
    assert "--no-deps" in extra and "--require-hashes" not in extra


def test_the_pins_go_to_pip_as_written_from_the_artifact_cache_alone(tmp_path):
    host = Host()
    environment = {"PIP_INDEX_URL": "https://user:secret@pypi.example/simple"}
    options = _options(tmp_path, cu130_wheels_pip_environment=environment, cu130_wheels_find_links="/unused")
    record = wheels.install(host, options, find_links="/var/lib/cuda13 upgrade/wheels/cu130")
    args, extra, env = _pip(host)
    assert args["name"] == PINS
    assert extra == ["--isolated", "--no-index", "--find-links", "/var/lib/cuda13 upgrade/wheels/cu130"]
    assert env == {**environment, "TMPDIR": options["cu130_wheels_pip_tmpdir"]}
    assert record["installed"] == "requirements" and record["resolved_target"] == []


def test_the_lock_file_from_the_control_node_is_installed_with_hashes(tmp_path, resolved_target):
    lock = tmp_path / "control" / "requirements.lock"
    lock.parent.mkdir()
    lock.write_text("torch==2.9.1+cu130 --hash=sha256:" + "a" * 64 + "\n")
    options = _options(tmp_path, cu130_wheels_lock_file=str(lock))
    host = Host()
    # The lock file wins over the preflight's resolution.
    record = wheels.install(host, options, resolved=resolved_target)
    venv = options["cu130_wheels_venv"]
    assert Path(f"{venv}.requirements.lock").read_text() == lock.read_text()
    assert stat.S_IMODE(os.stat(f"{venv}.requirements.lock").st_mode) == 0o644
    args, extra, _ = _pip(host)
    assert args["requirements"] == f"{venv}.requirements.lock"
    assert extra[:2] == ["--isolated", "--require-hashes"]
    assert record["installed"] == "lock_file"


def test_pips_output_is_hidden_when_the_operator_gives_it_an_environment(tmp_path):
    failed = {"failed": True, "msg": "stdout: Looking in indexes: https://user:secret@pypi.example/simple"}
    host = Host(pip_result=failed)
    options = _options(
        tmp_path, cu130_wheels_pip_environment={"PIP_INDEX_URL": "https://user:secret@pypi.example"}
    )
    with pytest.raises(StepFailed) as hidden:
        wheels.install(host, options)
    assert hidden.value.msg == wheels.HIDDEN
    assert "secret" not in json.dumps(hidden.value.record)
    with pytest.raises(StepFailed) as shown:
        wheels.install(Host(pip_result=failed), _options(tmp_path))
    assert shown.value.msg == failed["msg"]


def test_check_mode_reports_the_install_and_probes_nothing(tmp_path, resolved_target):
    host = Host(check_mode=True)
    record = wheels.install(host, _options(tmp_path), resolved=resolved_target)
    assert record["changed"] is True and record["verdict"] is None and record["stack"] is None
    assert host.called("cuda13_stack_probe") == []
    assert not (tmp_path / "opt").exists()


def test_an_inconsistent_stack_is_refused_with_its_problems_and_the_diagnosis(tmp_path):
    options = _options(tmp_path, cu130_wheels_compute_capabilities=["12.0"])
    host = Host(probe="sglang-kernel-0.4.0-pinned")
    with pytest.raises(StepFailed) as failed:
        wheels.install(host, options, compute_capabilities=["9.0"], driver_version="590.48.01")
    verdict = stack.stack_verdict(
        _probe("sglang-kernel-0.4.0-pinned"), 13, driver_library_optional=True, compute_capabilities=["12.0"]
    )
    found = diagnosis.diagnose(
        verdict["problems"], source="import", context={"torch_version": verdict["torch"], "target_cuda": "13"}
    )
    venv = options["cu130_wheels_venv"]
    assert failed.value.msg == (
        f"The new stack in {venv} is inconsistent: {'; '.join(verdict['problems'])} "
        f"Cause: {found.cause}. Fix: {found.remedy}."
    )
    assert "sglang-kernel 0.4.0 is built for CUDA 12" in failed.value.msg
    assert failed.value.record["verdict"] == verdict
    assert failed.value.record["changed"] is True and failed.value.record["installed"] == "requirements"
    # The probe ran with the venv's own Python.
    [(_, _, python)] = [c for c in host.calls if c[0] == "cuda13_stack_probe"]
    assert python == f"{venv}/bin/python"


def test_the_check_alone_takes_the_gpus_capabilities_unless_the_option_names_some(tmp_path):
    options = _options(tmp_path)
    record = wheels.check(Host(), options, compute_capabilities=["12.0"])
    assert record["verdict"]["arch_list_covers"] == ["12.0"]
    assert record["changed"] is False
    # A venv holding torch 2.10.0 (a CUDA 12 build): refused, the driver named where torch
    # cannot reach the GPUs.
    with pytest.raises(StepFailed, match="is inconsistent: torch 2.10.0 is installed but does not import"):
        wheels.check(
            Host(probe="torch-2.10.0-pinned"), {**options, "cu130_wheels_driver_library_optional": "false"}
        )


def test_the_sources_of_pip():
    options = _options(Path("/x"))
    assert wheels.source_args(options) == [
        "--index-url",
        "http://127.0.0.1:8080/whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/sgl-whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/pypi/simple",
    ]
    assert wheels.source_args({**options, "cu130_wheels_find_links": "/w"}) == [
        "--no-index",
        "--find-links",
        "/w",
    ]
