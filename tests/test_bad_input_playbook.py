"""A table of wrong values: each stops the run in the preflight, names the option and
changes nothing; the string forms of numbers and booleans (``-e key=value``) pass.

Runs playbooks/preflight.yml on localhost (no host needed for these rules); the rules
against a host (unit, old venv, apt repository, indexes) are the molecule scenario
bad-input's.
"""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from playbook import FLEET_VALUES, extra_vars, run_playbook

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "sandbox" / "host" / "nvidia-smi"


def _digest(root: Path) -> str:
    """Names, modes and contents of everything under root."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(f"{path.relative_to(root)} {path.stat().st_mode:o}\n".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _preflight(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    host = tmp_path / "host"
    (host / "opt").mkdir(parents=True, exist_ok=True)
    return run_playbook(
        REPO / "playbooks" / "preflight.yml",
        *extra_vars(
            # localhost has no package index: the resolution is tests/test_resolve_step.py's
            cuda13_preflight_resolve="false",
            cuda13_target_hosts="all",
            nvidia_driver_check_host_checks="false",
            nvidia_driver_check_nvidia_smi=DOUBLE,
            cuda13_state_dir=f"{host}/state",
            cuda13_cache_root=f"{host}/cache",
            nvidia_driver_check_disk_path=f"{host}/opt",
            nvidia_driver_check_space_stack="sandbox",
        ),
        *extra,
        timeout=120,
    )


# (option, value as -e key=value gives it, text the refusal must hold besides the option)
WRONG = [
    # the values
    ("cuda13_toolkit_release", "13", "MAJOR.MINOR"),
    ("cuda13_toolkit_release", "13.x", "MAJOR.MINOR"),
    ("cuda13_toolkit_release", "13.9", "ships"),
    ("cuda13_toolkit_release", "abc", "MAJOR.MINOR"),
    ("cuda13_toolkit_release", "13.1", "13.0.2-1"),  # disagrees with the pinned package version
    ("verify_throughput_tolerance_pct", "-5", ">= 0"),
    ("verify_throughput_tolerance_pct", "abc", "float"),
    ("cuda13_new_venv", "/opt/ml-env", "serving venv"),
    ("cuda13_profiles", "notalist", "list of dict"),
    # the same kinds, every other option
    ("cuda13_toolkit_package_version", "13.0.2", "MAJOR.MINOR.UPDATE-BUILD"),
    ("cuda13_toolkit_package_version", "13.1.0-1", "same MAJOR.MINOR"),
    ("cuda_toolkit_release", "13.1", "cuda13_toolkit_release"),
    ("cuda13_new_venv", "/opt/ml-env/cu130", "serving venv"),
    ("cuda13_new_venv", "relative/venv", "absolute path"),
    ("cuda13_new_sglang_src", "/opt/sglang", "serving SGLang tree"),
    ("cuda13_new_sglang_src", "/opt/sglang/build", "serving SGLang tree"),
    ("cuda13_old_venv", "/opt/ml-env-cu130/..", "serving venv"),
    ("cu130_wheels_venv", "/opt/ml-env", "serving venv"),
    ("sglang_build_src", "/opt/sglang", "serving SGLang tree"),
    ("cuda13_service_name", "sglang", "unit name"),
    ("cuda13_service_name", "", "unit name"),
    ("cuda13_health_timeout", "0", ">= 1"),
    ("cuda13_health_timeout", "soon", "int"),
    ("stack_switch_health_timeout", "-1", ">= 1"),
    ("rollback_health_timeout", "0", ">= 1"),
    ("verify_throughput_health_timeout", "0", ">= 1"),
    ("cuda13_baseline_max_age_hours", "-1", ">= 0"),
    ("cuda13_drain_wait_seconds", "-3", ">= 0"),
    ("cuda13_reverify", "perhaps", "bool"),
    ("cuda13_rollback_verify", "2", "bool"),
    ("cuda13_artifact_cache", "maybe", "bool"),
    ("rollback_remove_new_stack", "sure", "bool"),
    ("nvidia_driver_check_require_jit", "jit", "bool"),
    ("verify_throughput_min_trials", "2", ">= 3"),
    ("verify_throughput_max_trials", "5", "verify_throughput_min_trials"),
    ("verify_throughput_output_len", "0", ">= 1"),
    ("verify_throughput_prompt_len", "-1", ">= 1"),
    ("verify_throughput_bench_prompts", "0", ">= 1"),
    ("verify_throughput_warmup", "-1", ">= 0"),
    ("verify_throughput_tolerance_pct", "100", "< 100"),
    ("verify_throughput_z", "0", "> 0"),
    ("verify_throughput_method", "carrier-pigeon", "builtin"),
    ("cuda13_max_fail_percentage", "150", "<= 100"),
    ("cuda13_serial", "0", "batch size"),
    ("nvidia_driver_check_required_disk_gib", "-1", ">= 0"),
    ("nvidia_driver_check_required_disk_gib", "lots", "float"),
    ("nvidia_driver_check_expected_gpu_count", "0", ">= 1"),
    ("nvidia_driver_check_min_driver_version", "new", "driver version"),
    ("nvidia_driver_check_min_python_version", "three", "version"),
    ("cu130_wheels_expected_cuda_major", "12", "13"),
    ("cuda13_wheels_index_url", "download.pytorch.org/whl/cu130", "URL"),
    ("cuda13_server_url", "127.0.0.1:30000", "URL"),
    ("cuda_toolkit_apt_repo_url", "nvidia", "URL"),
    ("cuda13_switch_dropin", "../evil.conf", ".conf"),
    ("cuda13_profile_dropin", "50-cuda13-upgrade.conf", "different"),
    ("artifact_cache_python_version", "311", "3.MINOR"),
    ("cu130_wheels_requirements", '["torch==="]', "requirement"),
    (
        "cuda13_profiles",
        '[{"name": "plain", "server_args": []}, {"name": "plain", "server_args": []}]',
        "more than once",
    ),
    (
        "cuda13_profiles",
        '[{"name": "eagle3", "server_args": "--speculative-algorithm EAGLE3"}]',
        "list of strings",
    ),
    ("cuda13_profiles", '[{"name": "eagle3", "server_args": [3]}]', "list of strings"),
    ("cuda13_profiles", "[]", "non-empty"),
    ("verify_throughput_require_speculative_gain", '[{"speculative": "eagle3", "plain": "plain"}]', "eagle3"),
]


def _value(text: str):
    """What the value is in the inventory: JSON lists as lists, the rest as the string -e gives."""
    return json.loads(text) if text.startswith("[") else text


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """One preflight over one local host per row (each with its own directories), so the
    whole table costs one ansible-playbook run; each host is refused or passes on its own."""
    root = tmp_path_factory.mktemp("table")
    hosts = {}
    for i, (option, value, _expected) in enumerate(WRONG):
        host = root / f"row-{i}"
        (host / "opt").mkdir(parents=True)
        hosts[f"row-{i}"] = {
            "cuda13_state_dir": f"{host}/state",
            "cuda13_cache_root": f"{host}/cache",
            "nvidia_driver_check_disk_path": f"{host}/opt",
            option: _value(value),
        }
    inventory = root / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": hosts,
                    "vars": {
                        # what a fleet's inventory sets; each row's own value wins over it
                        **FLEET_VALUES,
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "nvidia_driver_check_host_checks": False,
                        "nvidia_driver_check_nvidia_smi": str(DOUBLE),
                    },
                }
            }
        )
    )
    before = {name: _digest(root / name) for name in hosts}
    proc = run_playbook(
        REPO / "playbooks" / "preflight.yml",
        # localhost has no package index: the resolution is tests/test_resolve_step.py's
        *extra_vars(cuda13_preflight_resolve="false", cuda13_target_hosts="all"),
        "--forks",
        "8",
        inventory=inventory,
        interpreter=False,
        timeout=600,
    )
    after = {name: _digest(root / name) for name in hosts}
    return proc, before, after


def _preflight_told(out: str, host: str) -> bool:
    """Whether the host reached the preflight's checks of its GPUs: the action cuda13_preflight
    prints ``<host>: not a WSL host; driver ... supports CUDA ...`` (the checks that passed)
    once nvidia-smi answered (the old task 'Query the GPUs with nvidia-smi')."""
    return re.search(rf"(?m)^{re.escape(host)}: ", out) is not None


def _host_output(out: str, host: str) -> str:
    """The lines Ansible printed for one host (its task results and its fatal message)."""
    blocks = re.split(r"\n(?=fatal: |ok: |skipping: |changed: |TASK |PLAY )", out)
    return "\n".join(b for b in blocks if re.match(rf"(fatal|ok|skipping|changed): \[{host}\]", b))


@pytest.mark.parametrize(
    ("row", "option", "value", "expected"),
    [(i, *row) for i, row in enumerate(WRONG)],
    ids=[f"{o}={v}" for o, v, _ in WRONG],
)
def test_wrong_value_stops_in_the_preflight_naming_the_option(table_run, row, option, value, expected):
    proc, before, after = table_run
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    mine = _host_output(out, f"row-{row}")
    assert f"fatal: [row-{row}]" in mine, mine or out[-3000:]
    if "argument_errors:" in mine:
        # A type error of an option of the preflight's own roles (cuda13, nvidia_driver_check):
        # their argument validation (the spec is the rule) refuses it as they start, naming it.
        assert (
            option.startswith(("cuda13_", "nvidia_driver_check_"))
            and f"'{option}'" in mine.split("argument_spec_data:")[0]
        )
    else:
        assert "invalid option values; nothing on the host was changed" in mine
        assert f"Option: {option}." in mine and expected in mine, mine[:3000]
    # Stopped by the option check: the host never reached the query of its GPUs.
    assert not _preflight_told(out, f"row-{row}")
    assert after[f"row-{row}"] == before[f"row-{row}"]


def test_every_row_is_refused_and_the_run_stops(table_run):
    proc, _before, _after = table_run
    out = proc.stdout + proc.stderr
    assert f"The preflight refused {len(WRONG)} of {len(WRONG)} hosts" in out or proc.returncode != 0
    assert not any(_preflight_told(out, f"row-{i}") for i in range(len(WRONG)))
    assert "supports CUDA" not in out


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("verify_throughput_tolerance_pct", "-5", ">= 0"),
        ("cuda13_toolkit_release", "13", "MAJOR.MINOR"),
        ("verify_throughput_output_len", "lots", "int"),
    ],
)
def test_wrong_value_given_with_e_key_value(tmp_path, option, value, expected):
    before = _digest(tmp_path)
    proc = _preflight(tmp_path, "-e", f"{option}={value}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    refusal = out[out.index("invalid option values; nothing on the host was changed") :]
    assert f"Option: {option}." in refusal and expected in refusal
    assert not _preflight_told(out, "localhost")
    assert _digest(tmp_path) != "" and before != ""


def test_numbers_and_booleans_as_key_value_strings_pass_and_are_used_as_numbers(tmp_path):
    """issue: -e nvidia_driver_check_required_disk_gib=0.005 was refused as 'not a number'."""
    proc = _preflight(
        tmp_path,
        "-e",
        "nvidia_driver_check_required_disk_gib=0.005",
        "-e",
        "nvidia_driver_check_require_jit=false",
        "-e",
        "nvidia_driver_check_expected_gpu_count=8",
        "-e",
        "verify_throughput_tolerance_pct=2.5",
        "-e",
        "verify_throughput_min_trials=5",
        "-e",
        "cuda13_reverify=yes",
        "-e",
        "cuda13_health_timeout=120",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "1 of 1 hosts passed the preflight" in out
    assert _preflight_told(out, "localhost")
    # The disk check read 0.005 GiB as a number.
    assert "free (>= 0.005 GiB)" in out and "not a number" not in out


@pytest.fixture
def local_repository(tmp_path):
    """An apt flat repository and a PEP 503 index served on 127.0.0.1 (a thread)."""
    import functools
    import http.server
    import threading

    root = tmp_path / "www"
    (root / "cuda").mkdir(parents=True)
    # The stanza fields of NVIDIA's flat repository's Packages index (Package, Version).
    (root / "cuda" / "Packages").write_text(
        "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\nArchitecture: amd64\n\n"
        "Package: cuda-toolkit-13-1\nVersion: 13.1.0-1\nArchitecture: amd64\n"
    )
    (root / "whl" / "cu130").mkdir(parents=True)
    (root / "whl" / "cu130" / "index.html").write_text("<html><body></body></html>\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_options_against_the_host_name_each_option(tmp_path, local_repository):
    """The read-only checks against the host on localhost: a repository without the pinned
    version, an index that does not answer, an old venv without Python, a unit that is not
    there (this machine runs no systemd, or no such unit)."""
    url = local_repository
    proc = _preflight(
        tmp_path,
        "-e",
        "nvidia_driver_check_host_checks=true",
        "-e",
        "cuda13_service_name=nosuch-cuda13-test.service",
        "-e",
        f"cuda13_old_venv={tmp_path}/nosuch-venv",
        "-e",
        f"cuda13_new_venv={tmp_path}/new-venv",
        "-e",
        f"cuda13_new_sglang_src={tmp_path}/new-src",
        "-e",
        f"cuda_toolkit_apt_repo_url={url}/cuda/",
        "-e",
        "cuda13_toolkit_package_version=13.0.1-1",
        "-e",
        f"cuda13_wheels_index_url={url}/whl/cu130/",
        "-e",
        f'{{"cuda13_wheels_extra_index_urls": ["{url}/whl/nosuch/"]}}',
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    refusal = out[out.index("option values that do not fit the host; nothing on the host was changed") :]
    assert "Option: cuda13_service_name." in refusal
    assert "Option: cuda13_old_venv." in refusal and "has no bin/python" in refusal
    assert "Option: cuda13_toolkit_package_version." in refusal
    assert "for cuda-toolkit-13-0 (it offers: 13.0.2-1)" in refusal
    assert "Option: cuda13_wheels_extra_index_urls." in refusal and "/whl/nosuch/" in refusal
    # the index that answers is not named
    assert f"'{url}/whl/cu130/'" not in refusal
    assert not _preflight_told(out, "localhost")
    assert not (tmp_path / "new-venv").exists()


def test_options_against_the_host_pass_when_they_fit(tmp_path, local_repository):
    url = local_repository
    proc = _preflight(
        tmp_path,
        "-e",
        "nvidia_driver_check_host_checks=true",
        "-e",
        f"cuda13_old_venv={Path(sys.executable).parents[1]}",
        "-e",
        f"cuda13_new_venv={tmp_path}/new-venv",
        "-e",
        f"cuda_toolkit_apt_repo_url={url}/cuda/",
        "-e",
        f"cuda13_wheels_index_url={url}/whl/cu130/",
        "-e",
        '{"cuda13_wheels_extra_index_urls": []}',
    )
    out = proc.stdout + proc.stderr
    refusal = (
        out[out.index("option values that do not fit the host") :] if "do not fit the host" in out else ""
    )
    # Only the unit can be missing here (no systemd unit sglang.service on a build machine).
    assert "Option: cuda13_old_venv." not in refusal
    assert "Option: cuda13_toolkit_package_version." not in refusal
    assert "Option: cuda_toolkit_apt_repo_url." not in refusal
    assert "Option: cuda13_wheels_index_url." not in refusal
