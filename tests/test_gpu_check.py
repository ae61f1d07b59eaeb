"""scripts/gpu-check.sh and cuda13_upgrade.gpucheck, run for real on a machine without a GPU.

The GPU is the one thing replaced: the nvidia-smi double of sandbox/host (outputs copied from
real ones) answers on PATH, /proc/driver/nvidia/version is a real capture from
tests/fixtures/nvidia-smi, and the torch probed is a stand-in distribution built from the
record of the real PyPI torch 2.14.1+cu130 (tests/fixtures/probes/real-stack-pinned.json): its
version, CUDA, arch list, and its eight shared objects as ELF files that need the CUDA libraries
the real ones need, beside those libraries. The preflight runs ansible-playbook on localhost,
connection local, offline (about 5 s).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from elf_standin import write_elf

from cuda13_upgrade import gpucheck

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu-check.sh"
DOUBLE = REPO / "sandbox" / "host" / "nvidia-smi"
STATES = REPO / "sandbox" / "host" / "nvidia-smi-states"
PROC_580 = REPO / "tests" / "fixtures" / "nvidia-smi" / "proc-driver-version-580.95.05.txt"
REAL_STACK = REPO / "tests" / "fixtures" / "probes" / "real-stack-pinned.json"
NVIDIA_SMI_PARTS = [f"nvidia-smi/{q.name}" for q in gpucheck.QUERIES]


def _dist_info(site: Path, name: str, version: str, files: list[str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [*files, f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("".join(f"{f.split(',')[0]},,\n" for f in record))


@pytest.fixture(scope="module")
def torch_site(tmp_path_factory) -> Path:
    """A site directory holding the stand-in torch and the CUDA libraries its objects need."""
    record = json.loads(REAL_STACK.read_text())
    site = tmp_path_factory.mktemp("torch-site")
    torch = record["torch"]
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = {torch['version']!r}\n"
        "class _Version:\n"
        f"    cuda = {torch['cuda']!r}\n"
        "version = _Version()\n"
        "class _Cuda:\n"
        "    @staticmethod\n"
        "    def is_available():\n"
        "        return False\n"
        "    @staticmethod\n"
        "    def device_count():\n"
        "        return 0\n"
        "    @staticmethod\n"
        "    def get_arch_list():\n"
        f"        return {torch['arch_list']!r}\n"
        "cuda = _Cuda()\n"
    )
    objects = record["objects"]["torch"]
    for path, entry in objects.items():
        write_elf(site / path, entry["needed"])
    _dist_info(site, "torch", record["dists"]["torch"], ["torch/__init__.py", *objects])
    libraries = sorted(
        {
            record["libraries"][lib]["venv"][0]
            for e in objects.values()
            for lib in e["needed"]
            if record["libraries"][lib]["venv"]
        }
    )
    for path in libraries:
        write_elf(site / path, [])
    _dist_info(site, "nvidia-cuda-runtime", record["dists"]["nvidia-cuda-runtime"], libraries)
    return site


@pytest.fixture(scope="module")
def double_bin(tmp_path_factory) -> Path:
    """A directory whose nvidia-smi is the double."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "nvidia-smi").symlink_to(DOUBLE)
    return bin_dir


def _env(path: str, state: Path | None, torch_site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "NVIDIA_SMI_DOUBLE"))}
    env.update(PATH=path, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{torch_site}", **extra)
    if state is not None:
        env["NVIDIA_SMI_DOUBLE_STATE"] = str(state)
    return env


def _check(out: Path, env: dict[str, str], *args: str, python: str = sys.executable, script: bool = False):
    argv = [str(SCRIPT)] if script else [python, "-m", "cuda13_upgrade.gpucheck"]
    argv += [str(out), "--torch-python", python, "--proc-driver-version", str(PROC_580), *args]
    if script:
        env = {**env, "PYTHON": python}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    parts = {p["name"]: p for p in summary["parts"]} if summary else {}
    return done, summary, parts


def _path(double_bin: Path) -> str:
    return f"{double_bin}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"


def test_h200_every_part_passes_through_the_script(tmp_path, double_bin, torch_site):
    out = tmp_path / "out"
    done, summary, parts = _check(out, _env(_path(double_bin), STATES / "h200.json", torch_site), script=True)

    assert done.returncode == 0, done.stdout + done.stderr
    assert summary["status"] == "passed"
    assert list(parts) == [
        *NVIDIA_SMI_PARTS,
        "module-flavour",
        "stack-probe",
        "stack-verdict",
        "elf-check",
        "preflight",
    ]
    assert {p["status"] for p in parts.values()} == {"passed"}
    assert (
        parts["nvidia-smi/gpus"]["message"]
        == "1 GPUs: NVIDIA H200 (compute capability 9.0); driver 580.95.05"
    )
    gpus = json.loads((out / "nvidia-smi" / "gpus.json").read_text())
    assert gpus["parsed"]["inventory"]["compute_capabilities"] == ["9.0"]
    assert gpus["argv"][1:] == list(gpucheck.QUERIES[0].args)
    assert (out / "nvidia-smi" / "gpus.txt").read_text() == (
        "0, NVIDIA H200, GPU-5e1f0c1a-0000-4000-8000-000000000000, 580.95.05, 9.0, 143771, 00000000:29:00.0\n"
    )
    table = json.loads((out / "nvidia-smi" / "table.json").read_text())["parsed"]
    assert table["header"] == {
        "nvidia_smi_version": "580.95.05",
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
    }
    assert json.loads((out / "nvidia-smi" / "topology.json").read_text())["parsed"]["devices"] == ["GPU0"]
    assert parts["module-flavour"]["message"] == (
        "the open kernel module 580.95.05 (x86_64) is loaded, the driver nvidia-smi reports"
    )
    assert "torch 2.14.1+cu130 (CUDA 13.0" in parts["stack-probe"]["message"]
    assert parts["stack-verdict"]["message"].startswith(
        "consistent; torch 2.14.1+cu130, CUDA 13.0, no kernel"
    )
    assert "arch list covers 9.0" in parts["stack-verdict"]["message"]
    elf = json.loads((out / "stack" / "elf-check.json").read_text())
    assert elf["objects"] == {"torch": 8}
    assert elf["torch_cuda_majors"] == [13]
    if shutil.which("readelf"):
        assert elf["readelf"]["ran"] and not elf["readelf"]["mismatches"]
        assert elf["readelf"]["objects_read"] == 8  # torch's; the runtime's libraries need no CUDA library
    # the preflight: localhost, connection local, check mode, offline, 9.0 allowed explicitly
    assert (
        "localhost passed the preflight in check mode (compute capabilities allowed: 9.0, 10.0"
        in (parts["preflight"]["message"])
    )
    assert "one GPU model: NVIDIA H200" in parts["preflight"]["message"]
    variables = json.loads((out / "preflight" / "vars.json").read_text())
    assert variables["nvidia_driver_check_host_checks"] is False
    assert variables["cuda13_preflight_resolve"] is False
    assert variables["cuda13_allow_undrained"] is True
    assert "9.0" in variables["nvidia_driver_check_allowed_compute_capabilities"]
    inventory = yaml.safe_load((out / "preflight" / "inventory.yml").read_text())
    assert inventory == {
        "all": {
            "hosts": {
                "localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
            }
        }
    }
    assert json.loads((out / "preflight" / "result.json").read_text())["passed"][:2] == [
        "not a WSL host",
        "driver 580.95.05 supports CUDA 13.0 Update 2 (needs >= 580.95.05; CUDA Toolkit Release Notes,"
        " 'CUDA Driver', Table 3 'CUDA Toolkit and Corresponding Driver Versions' (Linux x86_64))",
    ]
    log = (out / "preflight" / "ansible.log").read_text()
    # offline: neither the checks against a serving host (apt repository, indexes, apt's
    # transaction) nor pip's resolution ran, and the preflight says so
    assert "changed=0" in log
    assert "localhost: not checked: the options against the host, NVIDIA's repository" in log
    assert "localhost: not checked: the target's resolution and its driver floor" in log
    assert "resolved the target" not in log
    assert not (out / "preflight" / "new-venv").exists()
    md = (out / "summary.md").read_text()
    assert md.startswith("# GPU check: passed\n")
    assert "| preflight | passed |" in md


def test_processes_on_the_gpu_parse_and_the_preflight_refuses_them(tmp_path, double_bin, torch_site):
    state = json.loads((STATES / "h200.json").read_text())
    state["processes"] = [
        {"gpu": 0, "pid": 4242, "type": "C", "name": "/opt/ml-env/bin/python3", "used_memory_mib": 81234}
    ]
    (tmp_path / "state.json").write_text(json.dumps(state))
    out = tmp_path / "out"
    done, summary, parts = _check(out, _env(_path(double_bin), tmp_path / "state.json", torch_site))

    assert done.returncode == 1
    assert summary["failed"] == ["preflight"]
    assert json.loads((out / "nvidia-smi" / "compute-apps.json").read_text())["parsed"] == [
        {
            "gpu_uuid": "GPU-5e1f0c1a-0000-4000-8000-000000000000",
            "pid": 4242,
            "process_name": "/opt/ml-env/bin/python3",
            "used_memory": 81234,
        }
    ]
    assert parts["nvidia-smi/gpu-processes"]["message"] == "1 processes hold 81234 MiB"
    assert (
        json.loads((out / "nvidia-smi" / "table.json").read_text())["parsed"]["table"]["processes"][0]["pid"]
        == 4242
    )
    assert "ansible-playbook exited 2: localhost fails the preflight" in parts["preflight"]["message"]
    assert "4242" in parts["preflight"]["message"]
    assert json.loads((out / "preflight" / "result.json").read_text())["errors"]


def test_without_nvidia_smi_its_parts_fail_and_the_others_run(tmp_path, torch_site):
    out = tmp_path / "out"
    done, summary, parts = _check(
        out, _env(f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin", None, torch_site)
    )
    if shutil.which("nvidia-smi", path=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"):
        pytest.skip("this machine has an nvidia-smi")

    assert done.returncode == 1
    first = parts["nvidia-smi/gpus"]
    assert first["status"] == "failed"
    assert first["message"].startswith("nvidia-smi was not found (PATH=")
    assert "install the NVIDIA driver's utilities" in first["message"]
    assert {parts[n]["status"] for n in NVIDIA_SMI_PARTS[1:]} == {"skipped"}
    assert parts["nvidia-smi/table"]["message"] == "nvidia-smi was not found in an earlier query"
    assert parts["module-flavour"]["message"].endswith("(nvidia-smi gave no driver version to compare)")
    for name in ("module-flavour", "stack-probe", "stack-verdict", "elf-check"):
        assert parts[name]["status"] == "passed", parts[name]
    # the preflight ran, and refused the host as the package does without nvidia-smi
    assert parts["preflight"]["status"] == "failed"
    assert "nvidia-smi failed" in parts["preflight"]["message"]
    assert "Nothing on the host was changed" in parts["preflight"]["message"]


def test_a_hung_nvidia_smi_is_reported_as_a_timeout(tmp_path, double_bin, torch_site):
    out = tmp_path / "out"
    done, summary, parts = _check(
        out, _env(_path(double_bin), STATES / "hang.json", torch_site), "--nvidia-smi-timeout", "2"
    )

    assert done.returncode == 1
    first = parts["nvidia-smi/gpus"]
    assert first["status"] == "failed"
    assert "did not answer within 2 s (--nvidia-smi-timeout)" in first["message"]
    assert "a hung nvidia-smi means the driver cannot reach a GPU" in first["message"]
    assert first["duration_s"] < 10
    record = json.loads((out / "nvidia-smi" / "gpus.json").read_text())
    assert record["timed_out"] is True and record["rc"] in (124, 137)
    assert {parts[n]["message"] for n in NVIDIA_SMI_PARTS[1:]} == {
        "nvidia-smi did not answer within 2 s in an earlier query"
    }
    assert "did not answer within 2 s" in parts["preflight"]["message"]
    assert summary["duration_s"] < 60


def test_without_ansible_and_packaging_those_parts_are_skipped(tmp_path, double_bin, torch_site):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = str(venv / "bin" / "python")
    path = f"{double_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
    if shutil.which("ansible-playbook", path=path):
        pytest.skip("ansible-playbook is on this machine's PATH")
    out = tmp_path / "out"
    done, summary, parts = _check(out, _env(path, STATES / "h200.json", torch_site), python=python)

    assert done.returncode == 0, done.stdout + done.stderr
    assert parts["preflight"]["status"] == "skipped"
    assert parts["preflight"]["message"].startswith("ansible-playbook not found: not beside ")
    for name in ("stack-verdict", "elf-check"):
        assert parts[name]["status"] == "skipped"
        assert parts[name]["message"].startswith(
            f"the Python package 'packaging' is not importable by {python}"
        )
    for name in (*NVIDIA_SMI_PARTS, "module-flavour", "stack-probe"):
        assert parts[name]["status"] == "passed", parts[name]
    assert summary["packaging"].startswith("the Python package 'packaging' is not importable")


def test_pip_s_vendored_packaging_stands_in(tmp_path):
    import packaging

    pip = tmp_path / "fake" / "pip"
    (pip / "_vendor").mkdir(parents=True)
    (pip / "__init__.py").write_text("")
    (pip / "_vendor" / "packaging").symlink_to(Path(packaging.__file__).parent)
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "from cuda13_upgrade.gpucheck import ensure_packaging\n"
        "print(ensure_packaging())\n"
        "from cuda13_upgrade.stack import stack_verdict\n"
    )
    # -S: no site-packages, so no installed packaging; the module itself imports the standard library only
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(REPO / "src"), str(tmp_path / "fake")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "pip's vendored copy" in done.stdout
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(REPO / "src")], capture_output=True, text=True, check=False
    )
    assert "(None, \"the Python package 'packaging' is not importable" in done.stdout
    assert "nor does pip vendor one" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "the following arguments are required: OUTDIR"),
        (["{tmp}/file/out"], "OUTDIR {tmp}/file/out: cannot be created"),
        (["{tmp}/full"], "OUTDIR {tmp}/full: not empty; give a new or empty directory for the results"),
    ],
)
def test_bad_usage_exits_2_naming_outdir(tmp_path, args, message):
    (tmp_path / "file").write_text("")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.json").write_text("{}")
    argv = [a.format(tmp=tmp_path) for a in args]
    done = subprocess.run(
        [str(SCRIPT), *argv],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: scripts/gpu-check.sh [-h]")
    assert message.format(tmp=tmp_path) in done.stderr


def _task_queries() -> set[tuple[str, ...]]:
    """The arguments of each nvidia-smi command in the roles' and playbooks' tasks."""
    found = set()
    for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml")]:
        if path.name.startswith("sandbox"):
            continue  # the sandbox's own tooling, not the package's

        def walk(node):
            if isinstance(node, dict):
                argv = (
                    (node.get("ansible.builtin.command") or {}).get("argv")
                    if isinstance(node.get("ansible.builtin.command"), dict)
                    else None
                )
                if argv:
                    smi = [i for i, a in enumerate(argv) if "nvidia_driver_check_nvidia_smi }}" in str(a)]
                    if smi:
                        found.add(tuple(str(a) for a in argv[smi[0] + 1 :]))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(yaml.safe_load(path.read_text()))
    return found


def _hostscript_queries() -> set[tuple[str, ...]]:
    """The arguments of each ``[nvidia_smi, ...]`` command line in the host scripts."""
    found = set()
    for path in (REPO / "src" / "cuda13_upgrade" / "hostscripts").glob("*.py"):
        tree = ast.parse(path.read_text())
        namespace: dict = {}
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Tuple)
            ):
                try:
                    namespace[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.List)
                and node.elts
                and isinstance(node.elts[0], ast.Name)
                and node.elts[0].id == "nvidia_smi"
            ):
                args: list[str] = []
                for elt in node.elts[1:]:
                    args += (
                        namespace[elt.value.id] if isinstance(elt, ast.Starred) else [ast.literal_eval(elt)]
                    )
                found.add(tuple(args))
    return found


def test_every_nvidia_smi_command_of_the_package_is_checked():
    tasks, scripts = _task_queries(), _hostscript_queries()
    checked = {q.args for q in gpucheck.QUERIES}
    # No task runs nvidia-smi: the host modules do (the preflight's three in
    # hostscripts/preflight_facts.py, the stack digest's, the service cycle's).
    assert tasks == set() and len(scripts) == 5
    assert scripts <= checked
    assert len(checked - scripts) == 3  # -L, --version, topo -m: parsed, not run by the package


@pytest.mark.parametrize(
    ("capabilities", "architecture", "allowed"),
    [
        (["9.0"], "x86_64", ["9.0", "10.0", "10.3", "12.0"]),
        (["12.0"], "x86_64", None),
        (["8.0", "12.1"], "aarch64", ["8.0", "10.0", "10.3", "11.0", "12.0", "12.1"]),
        ([], "x86_64", None),
    ],
)
def test_preflight_vars_allow_the_local_gpus_and_stay_offline(tmp_path, capabilities, architecture, allowed):
    values = gpucheck.preflight_vars(
        tmp_path,
        python="/usr/bin/python3",
        nvidia_smi="/usr/bin/nvidia-smi",
        nvidia_smi_timeout_s=2.5,
        capabilities=capabilities,
        architecture=architecture,
    )
    assert values.get("nvidia_driver_check_allowed_compute_capabilities") == allowed
    assert values["nvidia_driver_check_host_checks"] is False
    assert values["cuda13_preflight_resolve"] is False
    # not a fleet host: the rollout's refusal of a host without a drain hook does not apply
    assert values["cuda13_allow_undrained"] is True
    assert values["nvidia_driver_check_nvidia_smi_timeout"] == 3
    assert values["cuda13_new_venv"] == str(tmp_path / "preflight" / "new-venv")


def test_preflight_command_is_check_mode_local_and_one_inventory(tmp_path):
    argv = gpucheck.preflight_command(
        ["ansible-playbook"], REPO, tmp_path / "inventory.yml", tmp_path / "vars.json"
    )
    assert argv == [
        "ansible-playbook",
        str(REPO / "playbooks" / "preflight.yml"),
        "--check",
        "-c",
        "local",
        "-i",
        str(tmp_path / "inventory.yml"),
        "-e",
        f"@{tmp_path / 'vars.json'}",
    ]
