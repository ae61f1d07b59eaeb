"""cuda13_upgrade.steps.sglang: SGLang into the new venv, from its ref or its release wheel, and the checks.

FakeHost runs ``cuda13_record`` for real on ``tmp_path`` (the step's record, the constraints,
the requirement file); the venv is a small model answering ``cuda13_venv_read`` as the real
tools answer (pip show's recorded texts of tests/test_sglang_build.py, nvcc's of
tests/fixtures/nvcc) and changed by the ``pip`` calls the step makes; ``git`` and ``file`` are
answered by the test. The real builds are tests/test_sglang_playbook.py's.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from fakehost import FakeHost
from test_sglang_build import SHOW_EDITABLE, SHOW_WHEEL

from cuda13_upgrade.steps import sglang
from cuda13_upgrade.steps.host import StepFailed

NVCC = Path(__file__).parent / "fixtures" / "nvcc"
STACK = [
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
    "flashinfer-python==0.6.3",
    "pip==26.3",
    "setuptools==65.5.0",
    "sgl-kernel==0.3.21+cu130",
    "torch==2.9.1+cu130",
]


class Venv:
    """The new venv as its tools see it; ``pip`` calls change it."""

    def __init__(
        self, tmp_path: Path, *, show: str = "", nvcc: str = "nvcc-13.0.txt", torch_cuda: str = "13.0"
    ):
        self.venv, self.src = tmp_path / "opt" / "ml-env-cu130", tmp_path / "opt" / "sglang-cu130"
        self.venv.mkdir(parents=True)
        self.site = f"{self.venv}/lib/python3.11/site-packages"
        self.frozen = list(STACK)
        self.show = self._paths(show)
        self.nvcc = (NVCC / nvcc).read_text() if nvcc else None
        self.torch_cuda = torch_cuda
        self.imported = None
        self.replace: dict[str, str] = {}
        self.pips: list[dict] = []

    def _paths(self, text: str) -> str:
        return text.replace("/opt/ml-env-cu130", str(self.venv)).replace("/opt/sglang-cu130", str(self.src))

    def read(self, args: dict) -> dict:
        out = {"changed": False, "python_version": None, "freeze": None, "show": None, "nvcc": None}
        out["realpath"] = {p: os.path.realpath(p) for p in args.get("realpath") or []}
        if args.get("freeze"):
            out["freeze"] = {"rc": 0, "lines": sorted(self.frozen), "stderr": ""}
        if args.get("show"):
            out["show"] = {"rc": 0 if self.show else 1, "stdout": self.show, "stderr": ""}
        if args.get("nvcc"):
            missing = f"[Errno 2] No such file or directory: '{args['nvcc']}/bin/nvcc'"
            out["nvcc"] = (
                {"rc": 0, "stdout": self.nvcc, "stderr": "", "msg": ""}
                if self.nvcc
                else {"rc": 127, "stdout": "", "stderr": missing, "msg": missing}
            )
        if args.get("torch_cuda"):
            out["torch_cuda"] = {"rc": 0, "stdout": self.torch_cuda, "stderr": ""}
        if args.get("sglang_import"):
            ok = self.imported is not None
            out["sglang_import"] = {"rc": 0 if ok else 1, "record": self.imported, "stderr": "" if ok else
                                    "ModuleNotFoundError: No module named 'sglang'"}  # fmt: skip
        return out

    def pip(self, args: dict) -> dict:
        self.pips.append(args)
        if args.get("state") == "absent":
            self.show, self.imported = "", None
        elif args.get("editable"):
            self.show = self._paths(SHOW_EDITABLE)
            self.imported = {
                "version": "0.5.9",
                "file": f"{self.src}/python/sglang/__init__.py",
                "dist": "0.5.9",
            }
        elif "sglang" in str(args.get("name")) or args.get("requirements"):
            self.show = self._paths(SHOW_WHEEL)
            self.frozen.append("sglang==0.5.9")
            self.imported = {"version": "0.5.9", "file": f"{self.site}/sglang/__init__.py", "dist": "0.5.9"}
        else:
            return {"changed": True}
        # What SGLang's install replaces (its own dependencies from PyPI, were they not constrained).
        for old, new in self.replace.items():
            self.frozen = [new if line == old else line for line in self.frozen]
        return {"changed": True}


def _host(venv: Venv, *, check_mode: bool = False, checkout_changed: bool = True) -> FakeHost:
    return FakeHost(
        check_mode=check_mode,
        handlers={
            "cuda13_venv_read": venv.read,
            "ansible.builtin.pip": venv.pip,
            "ansible.builtin.git": lambda args: {"changed": checkout_changed, "after": "3f1c2e9a"},
            "ansible.builtin.file": lambda args: {"changed": False},
        },
    )


def _options(venv: Venv, tmp_path: Path, **more) -> dict:
    return {
        "sglang_build_method": "source",
        "sglang_build_repo": "http://127.0.0.1:8080/git/sglang.git",
        "sglang_build_version": "v0.5.9",
        "sglang_build_src": str(venv.src),
        "sglang_build_venv": str(venv.venv),
        "sglang_build_cuda_home": "/usr/local/cuda-13.0",
        "sglang_build_compute_capabilities": [],
        "sglang_build_index_url": "http://127.0.0.1:8080/whl/cu130",
        "sglang_build_extra_index_urls": ["http://127.0.0.1:8080/pypi/simple"],
        "sglang_build_build_requirements": ["wheel"],
        "sglang_build_pip_tmpdir": f"{venv.venv}/.pip-tmp",
        "sglang_build_pip_extra_args": ["--no-build-isolation"],
        "sglang_build_environment": {},
        "sglang_build_record": str(tmp_path / "state" / "sglang-build.json"),
        "cuda13_old_sglang_src": str(tmp_path / "opt" / "sglang"),
        "cuda13_toolkit_release": "13.0",
        **more,
    }


def test_the_serving_tree_is_refused(tmp_path):
    venv = Venv(tmp_path)
    (tmp_path / "opt" / "sglang").mkdir()
    venv.src.symlink_to(tmp_path / "opt" / "sglang")
    options = _options(venv, tmp_path)
    with pytest.raises(StepFailed) as failed:
        sglang.build(_host(venv), options)
    assert failed.value.msg == (
        f"sglang_build_src={venv.src} is the serving stack's tree (cuda13_old_sglang_src={tmp_path}/opt/sglang): "
        "editable installs share their tree, so the new stack needs its own clone."
    )
    assert not (tmp_path / "state").exists()


def test_a_source_build_against_the_new_toolkit_for_the_gpus(tmp_path):
    venv = Venv(tmp_path)
    options = _options(
        venv, tmp_path, sglang_build_environment={"MAX_JOBS": "8", "PATH": "/opt/bin:/usr/bin"}
    )
    host = _host(venv)
    record = sglang.build(host, options, compute_capabilities=["12.0", "9.0", "12.0"])
    # The record for the rollback, written first.
    written = json.loads(Path(options["sglang_build_record"]).read_text())
    assert written == record["record"]
    assert written["paths"] == [str(venv.venv), str(venv.src)] and written["method"] == "source"
    assert host.calls[0][0] == "cuda13_venv_read"  # the realpath check
    assert [c[0] for c in host.calls[1:3]] == ["cuda13_record", "cuda13_record"]
    [git] = host.called("ansible.builtin.git")
    assert git == {
        "repo": options["sglang_build_repo"],
        "dest": str(venv.src),
        "version": "v0.5.9",
        "force": False,
    }
    requirements, build = venv.pips
    assert requirements["name"] == ["wheel"]
    assert shlex.split(requirements["extra_args"]) == [
        "--isolated",
        "--index-url",
        "http://127.0.0.1:8080/whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/pypi/simple",
    ]
    constraints = f"{venv.venv}/sglang-build-constraints.txt"
    assert build == {
        "name": f"{venv.src}/python",
        "editable": True,
        "virtualenv": str(venv.venv),
        "extra_args": shlex.join(
            [*shlex.split(requirements["extra_args"]), "--constraint", constraints, "--no-build-isolation"]
        ),
    }
    # Every installed distribution is held at its version but pip, setuptools and wheel.
    assert (
        Path(constraints).read_text()
        == "\n".join(line for line in STACK if not line.startswith(("pip==", "setuptools=="))) + "\n"
    )
    assert record | {"record": None} == {
        "method": "source",
        "version": "v0.5.9",
        "src": str(venv.src),
        "venv": str(venv.venv),
        "requirement": "sglang @ git+http://127.0.0.1:8080/git/sglang.git@v0.5.9#subdirectory=python",
        "built": True,
        "needed": True,
        "plan": None,
        "wheel_from": None,
        "record": None,
        "imported": {"version": "0.5.9", "file": f"{venv.src}/python/sglang/__init__.py", "dist": "0.5.9"},
        "freeze_difference": {"removed": [], "added": []},
        "changed": True,
    }


def test_the_builds_environment_is_the_toolkits_and_the_operators_over_it(tmp_path):
    venv = Venv(tmp_path)
    environments = []

    class Recording(FakeHost):
        def module(self, name, args=None, **kwargs):
            if name == "ansible.builtin.pip":
                environments.append(kwargs.get("environment"))
            return super().module(name, args, **kwargs)

    host = Recording(handlers=_host(venv).handlers)
    options = _options(
        venv, tmp_path, sglang_build_environment={"MAX_JOBS": "8", "PATH": "/opt/bin:/usr/bin"}
    )
    sglang.build(host, options, compute_capabilities=["12.0", "9.0", "12.0"])
    tmpdir = f"{venv.venv}/.pip-tmp"
    # The build requirements' pip gets the operator's environment too (a NETRC for an index
    # that wants credentials reaches every pip call of the step).
    assert environments == [
        {"TMPDIR": tmpdir, "MAX_JOBS": "8", "PATH": "/opt/bin:/usr/bin"},
        {
            "CUDA_HOME": "/usr/local/cuda-13.0",
            "TMPDIR": tmpdir,
            "PATH": "/opt/bin:/usr/bin",
            "TORCH_CUDA_ARCH_LIST": "9.0;12.0",
            "MAX_JOBS": "8",
        },
    ]
    # The option wins over the GPUs', and the PATH is the toolkit's first without an override.
    environments.clear()
    venv.show = ""
    sglang.build(
        host,
        _options(venv, tmp_path, sglang_build_compute_capabilities=["10.0"]),
        compute_capabilities=["12.0"],
    )
    assert environments[1]["TORCH_CUDA_ARCH_LIST"] == "10.0"
    assert (
        environments[1]["PATH"]
        == "/usr/local/cuda-13.0/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    )


def test_the_tree_already_built_into_the_venv_is_not_built_again(tmp_path):
    venv = Venv(tmp_path, show=SHOW_EDITABLE)
    venv.imported = {
        "version": "0.5.10.dev0",
        "file": f"{venv.src}/python/sglang/__init__.py",
        "dist": "0.5.10.dev0",
    }
    host = _host(venv, checkout_changed=False)
    record = sglang.build(host, _options(venv, tmp_path))
    assert venv.pips == [] and record["built"] is False and record["needed"] is False
    assert record["freeze_difference"] is None
    # A changed checkout builds again.
    record = sglang.build(_host(venv, checkout_changed=True), _options(venv, tmp_path))
    assert record["built"] is True


def test_a_toolkit_without_nvcc_is_refused_naming_the_option(tmp_path):
    venv = Venv(tmp_path, nvcc="")
    with pytest.raises(StepFailed) as failed:
        sglang.build(_host(venv), _options(venv, tmp_path))
    assert failed.value.msg == (
        "/usr/local/cuda-13.0/bin/nvcc does not run ([Errno 2] No such file or directory: "
        "'/usr/local/cuda-13.0/bin/nvcc'). Option: sglang_build_cuda_home=/usr/local/cuda-13.0. Install the CUDA "
        "13.0 toolkit (the cuda_toolkit role) or point sglang_build_cuda_home at one."
    )
    assert venv.pips == []
    assert failed.value.record["changed"] is True  # the record and the checkout


def test_a_toolkit_of_another_release_than_torchs_is_refused_and_nothing_built(tmp_path):
    venv = Venv(tmp_path, nvcc="nvcc-12.8.txt")
    with pytest.raises(StepFailed) as failed:
        sglang.build(_host(venv), _options(venv, tmp_path, sglang_build_cuda_home="/usr/local/cuda-12.8"))
    assert failed.value.msg == (
        "the toolkit's nvcc is CUDA 12.8 but torch was built for CUDA 13.0: point CUDA_HOME at a 13.0 toolkit. "
        "Option: sglang_build_cuda_home=/usr/local/cuda-12.8; nothing was built."
    )
    assert venv.pips == []


def test_a_build_that_replaced_a_wheel_of_the_stack_is_refused(tmp_path):
    venv = Venv(tmp_path)
    venv.replace = {"torch==2.9.1+cu130": "torch==2.10.0"}
    with pytest.raises(StepFailed) as failed:
        sglang.build(_host(venv), _options(venv, tmp_path))
    assert (
        failed.value.msg == f"Building SGLang replaced torch==2.9.1+cu130 with torch==2.10.0 in {venv.venv}."
    )
    assert failed.value.record["freeze_difference"] == {
        "removed": ["torch==2.9.1+cu130"],
        "added": ["torch==2.10.0"],
    }


def test_the_release_wheel_as_the_preflight_resolved_it_over_an_earlier_source_build(tmp_path):
    venv = Venv(tmp_path, show=SHOW_EDITABLE)
    options = _options(venv, tmp_path, sglang_build_method="wheel", sglang_build_pip_extra_args=[])
    resolved = [
        {
            "name": "torch",
            "version": "2.9.1+cu130",
            "url": "http://127.0.0.1:8080/whl/cu130/torch.whl",
            "sha256": "a" * 64,
        },
        {
            "name": "sglang",
            "version": "0.5.9",
            "url": "http://127.0.0.1:8080/pypi/packages/sglang-0.5.9-py3-none-any.whl",
            "sha256": "b" * 64,
        },
    ]
    host = _host(venv)
    record = sglang.build(host, options, resolved=resolved)
    remove, install = venv.pips
    # An editable tree of an earlier source build would satisfy sglang==0.5.9 for pip, and stay.
    assert remove == {
        "name": "sglang",
        "state": "absent",
        "virtualenv": str(venv.venv),
        "extra_args": "--isolated",
    }
    assert host.told == [
        f"removed the sglang {venv.venv} held, because sglang 0.5.9 is installed editable from {venv.src}/python"
    ]
    assert (
        Path(f"{venv.venv}/sglang-build-requirement.txt").read_text()
        == f"sglang==0.5.9 --hash=sha256:{'b' * 64}\n"
    )
    assert install["requirements"] == f"{venv.venv}/sglang-build-requirement.txt"
    assert shlex.split(install["extra_args"]) == [
        "--isolated",
        "--no-deps",
        "--index-url",
        "http://127.0.0.1:8080/whl/cu130",
        "--extra-index-url=http://127.0.0.1:8080/pypi/simple",
        "--require-hashes",
    ]
    # The wheel clones nothing; the constraints hold the stack, sglang aside.
    assert host.called("ansible.builtin.git") == []
    assert Path(f"{venv.venv}/sglang-build-constraints.txt").read_text().splitlines() == [
        line for line in STACK if not line.startswith(("pip==", "setuptools=="))
    ]
    assert record["plan"] == {
        "needed": True,
        "remove_first": True,
        "reason": f"sglang 0.5.9 is installed editable from {venv.src}/python",
    }
    assert record["src"] is None and record["record"]["paths"] == [str(venv.venv)]
    assert record["wheel_from"] == "resolved"
    assert record["freeze_difference"] == {"removed": [], "added": ["sglang==0.5.9"]}
    # The record keeps the tree an earlier source build recorded, for the rollback.
    Path(options["sglang_build_record"]).write_text(json.dumps({"paths": [str(venv.venv), str(venv.src)]}))
    again = sglang.build(_host(venv), options, resolved=resolved)
    assert again["record"]["paths"] == [str(venv.venv), str(venv.src)] and again["built"] is False


def test_the_release_wheel_from_the_indexes_without_a_resolution(tmp_path):
    venv = Venv(tmp_path)
    options = _options(venv, tmp_path, sglang_build_method="wheel")
    record = sglang.build(_host(venv), options)
    assert record["wheel_from"] == "indexes"
    [install] = venv.pips
    assert install["name"] == "sglang==0.5.9"
    assert shlex.split(install["extra_args"])[-3:] == [
        "--constraint",
        f"{venv.venv}/sglang-build-constraints.txt",
        "--no-build-isolation",
    ]


def test_a_wheel_that_imports_another_version_is_refused(tmp_path):
    venv = Venv(tmp_path, show=SHOW_WHEEL.replace("0.5.9", "0.5.8"))
    venv.imported = {"version": "0.5.8", "file": f"{venv.site}/sglang/__init__.py", "dist": "0.5.8"}
    options = _options(venv, tmp_path, sglang_build_method="wheel")

    def stale(args):
        venv.pips.append(args)
        return {"changed": True}  # pip said it installed, but the old one is what imports

    host = _host(venv)
    host.handlers["ansible.builtin.pip"] = stale
    with pytest.raises(StepFailed) as failed:
        sglang.build(host, options)
    assert failed.value.msg == (
        f"sglang.__version__ in {venv.venv} is '0.5.8', not '0.5.9' (sglang_build_version=v0.5.9); "
        f"its distribution in {venv.venv} is '0.5.8', not '0.5.9' (sglang_build_version=v0.5.9)."
    )


def test_a_wheel_method_with_a_commit_is_refused():
    options = {"sglang_build_method": "wheel", "sglang_build_version": "3f1c2e9a", "sglang_build_src": "/s",
               "sglang_build_venv": "/v", "sglang_build_repo": "https://x/sglang.git"}  # fmt: skip
    with pytest.raises(StepFailed, match="names no release"):
        sglang.build(FakeHost(), options)


@pytest.mark.parametrize("method", ["source", "wheel"])
def test_check_mode_says_what_would_happen_and_writes_nothing(tmp_path, method):
    venv = Venv(tmp_path)
    host = _host(venv, check_mode=True)
    record = sglang.build(host, _options(venv, tmp_path, sglang_build_method=method))
    assert record["changed"] is True and record["built"] is False
    assert venv.pips == [] and not (tmp_path / "state").exists()
    assert host.told == [
        f"Would build SGLang v0.5.9 from {venv.src} into {venv.venv} against /usr/local/cuda-13.0."
        if method == "source"
        else f"Would install sglang==0.5.9 (no sglang in the venv) into {venv.venv} from http://127.0.0.1:8080/whl/cu130."
    ]


# -- what a rollback that removes the new stack takes from the step's record -----------------


def test_removing_the_new_stack_removes_what_the_sglang_step_recorded(tmp_path):
    # The rollback step's removal (cuda13_upgrade.steps.rollback, rollback_remove_new_stack),
    # reading the record this step writes (sglang_build_record).
    from cuda13_upgrade.steps import rollback

    for path in ("new-venv", "sglang-cu130", "old-venv", "old-sglang", "state"):
        (tmp_path / path).mkdir()
    record = tmp_path / "state" / "sglang-build.json"
    options = {
        "rollback_sglang_build_record": str(record),
        "rollback_new_venv": str(tmp_path / "new-venv"),
        "rollback_new_sglang_src": str(tmp_path / "sglang-cu130"),
        "cuda13_old_venv": str(tmp_path / "old-venv"),
        "cuda13_old_sglang_src": str(tmp_path / "old-sglang"),
    }
    manifest = {"venv": {"path": str(tmp_path / "old-venv")}}
    # The wheel: the venv only; a tree there is not this stack's record.
    record.write_text(json.dumps({"method": "wheel", "paths": [str(tmp_path / "new-venv")]}))
    rollback._remove_new_stack(FakeHost(), options, manifest)
    assert not (tmp_path / "new-venv").exists() and (tmp_path / "sglang-cu130").exists()
    assert not record.exists()
    # No record (the run failed before the SGLang step): the options' venv and tree.
    (tmp_path / "new-venv").mkdir()
    rollback._remove_new_stack(FakeHost(), options, manifest)
    assert not (tmp_path / "new-venv").exists() and not (tmp_path / "sglang-cu130").exists()
    # Never the serving stack, whatever a record names.
    record.write_text(json.dumps({"paths": [str(tmp_path / "old-venv"), str(tmp_path / "old-sglang")]}))
    rollback._remove_new_stack(FakeHost(), options, manifest)
    assert (tmp_path / "old-venv").exists() and (tmp_path / "old-sglang").exists()
