"""cuda13_upgrade.options: each option checked and converted once."""

from pathlib import Path

import pytest
import yaml

from cuda13_upgrade import options

REPO = Path(__file__).resolve().parents[1]
ROLES = [
    "cuda13",
    "stack_snapshot",
    "cuda_toolkit",
    "cu130_wheels",
    "sglang_build",
    "stack_switch",
    "verify_throughput",
    "rollback",
    "artifact_cache",
    "nvidia_driver_check",
]


@pytest.fixture(scope="module")
def specs():
    merged = {}
    for role in ROLES:
        text = (REPO / "roles" / role / "meta" / "argument_specs.yml").read_text()
        merged.update(yaml.safe_load(text)["argument_specs"]["main"]["options"])
    return merged


def test_defaults_pass(specs):
    report = options.validate({}, specs)
    assert report["ok"], report["failures"]
    # literal defaults and aliases of them are there for the later steps
    assert report["values"]["verify_throughput_tolerance_pct"] == 3.0
    assert report["values"]["stack_switch_health_timeout"] == 900
    assert report["values"]["cu130_wheels_venv"] == "/opt/ml-env-cu130"


def test_key_value_strings_are_converted_to_the_spec_type(specs):
    given = {
        "nvidia_driver_check_required_disk_gib": "0.005",
        "verify_throughput_min_trials": "9",
        "cuda13_reverify": "yes",
        "nvidia_driver_check_require_jit": "false",
        "cuda13_health_timeout": "120",
    }
    report = options.validate(given, specs)
    assert report["ok"], report["failures"]
    values = report["values"]
    assert values["nvidia_driver_check_required_disk_gib"] == 0.005
    assert values["verify_throughput_min_trials"] == 9
    assert values["cuda13_reverify"] is True
    assert values["nvidia_driver_check_require_jit"] is False
    assert values["cuda13_health_timeout"] == 120
    # an alias takes the converted value
    assert values["rollback_health_timeout"] == 120


def test_templated_aliases_of_key_value_strings_are_converted_too(specs):
    """The action cuda13_options passes every other option's default as Ansible templates
    it: with -e cuda13_health_timeout=120, rollback_health_timeout ("{{ cuda13_health_timeout }}")
    templates to the string '120' (found by tests/test_bad_input_playbook.py: the range rule
    compared '120' with 1)."""
    given = {"cuda13_health_timeout": "120", "cuda13_wheels_extra_index_urls": "http://a/,http://b/"}
    defaults = {
        "rollback_health_timeout": "120",
        "stack_switch_health_timeout": "120",
        "verify_throughput_health_timeout": "120",
        "sglang_build_extra_index_urls": "http://a/,http://b/",
        "nvidia_driver_check_required_disk_gib": 27,
        "cuda13_baseline_max_age_hours": 24,
    }
    report = options.validate(given, specs, defaults)
    assert report["ok"], report["failures"]
    values = report["values"]
    assert values["rollback_health_timeout"] == 120 and isinstance(values["rollback_health_timeout"], int)
    assert values["stack_switch_health_timeout"] == 120
    assert values["verify_throughput_health_timeout"] == 120
    assert values["sglang_build_extra_index_urls"] == ["http://a/", "http://b/"]
    # a default that is no string stays as templated
    assert values["nvidia_driver_check_required_disk_gib"] == 27
    assert isinstance(values["cuda13_baseline_max_age_hours"], int)


def test_a_templated_default_of_the_wrong_type_is_refused_naming_it(specs):
    report = options.validate({"cuda13_health_timeout": "120"}, specs, {"rollback_health_timeout": "soon"})
    assert not report["ok"]
    (failure,) = report["failures"]
    assert failure["option"] == "rollback_health_timeout"
    assert "Option: rollback_health_timeout." in failure["message"]


def test_the_issue_tolerance_is_refused_with_the_value_as_given(specs):
    report = options.validate({"verify_throughput_tolerance_pct": "-5"}, specs)
    assert not report["ok"]
    (failure,) = report["failures"]
    assert failure["option"] == "verify_throughput_tolerance_pct"
    assert failure["message"] == (
        "verify_throughput_tolerance_pct is out of range: '-5'. "
        "Option: verify_throughput_tolerance_pct. Fix: give a number >= 0 and < 100."
    )


@pytest.mark.parametrize("release", ["13", "13.x", "13.9", "abc", "12.8", "13.0.2"])
def test_a_release_must_be_major_minor_of_a_shipped_cuda_13(specs, release):
    report = options.validate({"cuda13_toolkit_release": release}, specs)
    assert [f["option"] for f in report["failures"]] == ["cuda13_toolkit_release"]


def test_release_and_package_version_must_agree(specs):
    report = options.validate({"cuda13_toolkit_release": "13.1"}, specs)
    (failure,) = report["failures"]
    assert failure["option"] == "cuda13_toolkit_release"
    assert "cuda13_toolkit_package_version '13.0.2-1' is a 13.0 version" in failure["message"]
    both = options.validate(
        {"cuda13_toolkit_release": "13.1", "cuda13_toolkit_package_version": "13.1.0-1"}, specs
    )
    assert both["ok"], both["failures"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("cuda13_new_venv", "/opt/ml-env"),
        ("cuda13_new_venv", "/opt/ml-env/new"),
        ("cuda13_new_venv", "/opt"),  # the old venv inside the new one
        ("cuda13_new_sglang_src", "/opt/sglang/"),
    ],
)
def test_new_stack_is_neither_the_serving_one_nor_inside_it(specs, option, value):
    report = options.validate({option: value}, specs)
    assert option in [f["option"] for f in report["failures"]]


def test_the_sglang_wheel_needs_a_release_to_install(specs):
    assert options.validate({"sglang_build_method": "wheel"}, specs)["ok"]
    assert options.validate({"sglang_build_method": "wheel", "sglang_build_version": "0.5.9"}, specs)["ok"]
    # A commit builds from source only.
    commit = "3f1c2e9a5b7d4c6e8f0a1b2c3d4e5f6a7b8c9d0e"
    assert options.validate({"sglang_build_version": commit}, specs)["ok"]
    (failure,) = options.validate({"sglang_build_method": "wheel", "sglang_build_version": commit}, specs)[
        "failures"
    ]
    assert failure["option"] == "sglang_build_version"
    assert (
        "names no release (vX.Y.Z), so sglang_build_method 'wheel' has no wheel to install"
        in failure["message"]
    )
    (failure,) = options.validate({"sglang_build_method": "binary"}, specs)["failures"]
    assert failure["option"] == "sglang_build_method"
    assert "source, wheel" in failure["message"]


def test_profiles_unique_names_and_string_arguments(specs):
    dup = options.validate(
        {"cuda13_profiles": [{"name": "a", "server_args": []}, {"name": "a", "server_args": []}]}, specs
    )
    assert "more than once" in dup["failures"][0]["message"]
    bad_args = options.validate({"cuda13_profiles": [{"name": "a", "server_args": [1]}]}, specs)
    assert "not a list of strings" in bad_args["failures"][0]["message"]
    one_string = options.validate({"cuda13_profiles": [{"name": "a", "server_args": "--x 1"}]}, specs)
    assert "not a list of strings" in one_string["failures"][0]["message"]


def test_packages_versions_reads_the_stanzas():
    text = (
        "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\nArchitecture: amd64\n\n"
        "Package: cuda-toolkit-13-1\nVersion: 13.1.0-1\n\n"
        "Package: cuda-toolkit-13-0\nVersion: 13.0.1-1\n"
    )
    assert options.packages_versions(text, "cuda-toolkit-13-0") == ["13.0.2-1", "13.0.1-1"]
    assert options.packages_versions(text, "cuda-toolkit-13-9") == []


def test_host_failures_name_the_option(specs):
    values = options.validate({}, specs)["values"]
    facts = {
        "unit_load_state": "not-found",
        "old_python_exists": False,
        "apt_packages": "Package: cuda-toolkit-13-0\nVersion: 13.0.1-1\n",
        "indexes": {"https://download.pytorch.org/whl/cu130": "404 Not Found"},
    }
    names = [f["option"] for f in options.host_failures(facts, values)]
    assert names == [
        "cuda13_service_name",
        "cuda13_old_venv",
        "cuda13_toolkit_package_version",
        "cuda13_wheels_index_url",
    ]
    fine = {
        "unit_load_state": "loaded",
        "unit_exec_start": "{ path=/opt/ml-env/bin/python ; argv[]=/opt/ml-env/bin/python -m sglang.launch_server }",
        "old_python_exists": True,
        "apt_packages": "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n",
        "indexes": {"https://download.pytorch.org/whl/cu130": "200 OK"},
    }
    assert options.host_failures(fine, values) == []


def test_the_toolkit_package_is_a_debian_name_and_the_preflight_looks_that_one_up(specs):
    bad = options.validate({"cuda_toolkit_package": "CUDA-13"}, specs)
    assert [f["option"] for f in bad["failures"]] == ["cuda_toolkit_package"]
    assert "is not a Debian package name" in bad["failures"][0]["message"]
    values = options.validate({"cuda_toolkit_package": "cuda-13-0"}, specs)["values"]
    fine = {
        "unit_load_state": "loaded",
        "unit_exec_start": "{ path=/opt/ml-env/bin/python ; argv[]=/opt/ml-env/bin/python -m sglang.launch_server }",
        "old_python_exists": True,
        "indexes": {},
    }
    offered = "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n\nPackage: cuda-13-0\nVersion: 13.0.2-1\n"
    assert options.host_failures({**fine, "apt_packages": offered}, values) == []
    # the preflight asks for the package the toolkit step installs, not cuda-toolkit-X-Y
    only_toolkit = "Package: cuda-toolkit-13-0\nVersion: 13.0.2-1\n"
    missing = options.host_failures({**fine, "apt_packages": only_toolkit}, values)
    assert [f["option"] for f in missing] == ["cuda_toolkit_package"]
    assert "cuda-13-0" in missing[0]["message"]
    older = "Package: cuda-13-0\nVersion: 13.0.1-1\n"
    wrong = options.host_failures({**fine, "apt_packages": older}, values)
    assert [f["option"] for f in wrong] == ["cuda13_toolkit_package_version"]
    assert "for cuda-13-0 (it offers: 13.0.1-1)" in wrong[0]["message"]


def test_host_failures_read_systemctl_show_text(specs):
    """The form systemctl show prints: ExecStart's value holds '=' and ';' itself."""
    values = options.validate({}, specs)["values"]
    show = (
        "LoadState=loaded\n"
        "ExecStart={ path=/opt/ml-env/bin/python ; argv[]=/opt/ml-env/bin/python -m sglang.launch_server "
        "--model-path /models/x ; ignore_errors=no ; start_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
    )
    base = {"old_python_exists": True}
    assert options.host_failures({**base, "unit_show": show, "unit_rc": 0}, values) == []
    switched = show.replace("/opt/ml-env/", "/opt/ml-env-cu130/")
    assert (
        options.host_failures({**base, "unit_show": switched, "new_venv": "/opt/ml-env-cu130"}, values) == []
    )
    missing = options.host_failures({**base, "unit_show": "LoadState=not-found\nExecStart=\n"}, values)
    assert [f["option"] for f in missing] == ["cuda13_service_name"]


def test_new_stack_only_arguments_are_a_list_of_strings(specs):
    seed = [
        {"name": "eagle3", "server_args": ["--speculative-algorithm", "EAGLE3"], "new_stack_args": ["--x"]}
    ]
    assert options.validate({"cuda13_profiles": seed}, specs)["ok"]
    bad = options.validate(
        {"cuda13_profiles": [{"name": "a", "server_args": [], "new_stack_args": "--x"}]}, specs
    )
    assert "new_stack_args '--x' is not a list of strings" in bad["failures"][0]["message"]


def test_the_example_inventory_passes_the_option_check(specs):
    """Every value inventory/blackwell sets (the molecule gate scenario found its EAGLE-3
    profile with new_stack_args refused)."""
    given = {}
    for path in sorted((REPO / "inventory" / "blackwell" / "group_vars").glob("*/*.yml")):
        given.update(yaml.safe_load(path.read_text()) or {})
    given = {k: v for k, v in given.items() if k in specs and "{{" not in str(v)}
    report = options.validate(given, specs)
    assert report["ok"], report["failures"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (
            "cuda13_max_parallel",
            "0",
            "cuda13_max_parallel is not a batch size: '0'. Option: cuda13_max_parallel.",
        ),
        ("cuda13_max_parallel", [2], "cuda13_max_parallel is not a batch size: [2]."),
        (
            "cuda13_window",
            {"start": 1320, "end": "06:00", "timezone": "UTC"},
            "cuda13_window is not a maintenance window (start is not a time (YAML read an unquoted 22:00 as "
            "the number 1320)): {'start': 1320, 'end': '06:00', 'timezone': 'UTC'}. Option: cuda13_window.",
        ),
        ("cuda13_window", "22:00-06:00", "cuda13_window is not a maintenance window (is not a mapping)"),
        ("cuda13_until", "6am", "cuda13_until is not a time: '6am'. Option: cuda13_until."),
        ("cuda13_until", 360, "cuda13_until is not a time: 360."),
        (
            "cuda13_max_failed_hosts",
            "-1",
            "cuda13_max_failed_hosts is not a failure budget: '-1'. Option: cuda13_max_failed_hosts.",
        ),
        ("cuda13_max_failed_hosts", "12.5%", "cuda13_max_failed_hosts is not a failure budget: '12.5%'."),
        (
            "cuda13_breaker_rollbacks",
            "-1",
            "cuda13_breaker_rollbacks is not a count of rollbacks: '-1'. Option: cuda13_breaker_rollbacks.",
        ),
        (
            "cuda13_breaker_days",
            "0",
            "cuda13_breaker_days is not a number of days: '0'. Option: cuda13_breaker_days.",
        ),
        (
            "cuda13_breaker_ack",
            "a/b",
            "cuda13_breaker_ack is not a run id: 'a/b'. Option: cuda13_breaker_ack.",
        ),
    ],
)
def test_rollout_shape_options_are_refused_by_name(option, value, message):
    result = options.validate({option: value}, {})
    assert not result["ok"]
    assert [f["message"] for f in result["failures"]][0].startswith(message)


def test_rollout_shape_options_pass():
    given = {
        "cuda13_max_parallel": "25%",
        "cuda13_window": {
            "start": "22:00",
            "end": "06:00",
            "timezone": "Europe/Berlin",
            "days": ["fri", "sat"],
        },
        "cuda13_until": "2026-12-01T06:00+01:00",
        "cuda13_max_failed_hosts": "10%",
        "cuda13_breaker_rollbacks": "0",
        "cuda13_breaker_days": 14,
        "cuda13_breaker_ack": "20261202T020000Z",
    }
    assert options.validate(given, {})["ok"]
    assert options.validate({"cuda13_window": {}, "cuda13_until": "06:00"}, {})["ok"]


# --- the preflight's options: checked here once, the preflight checks the host ----------


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"nvidia_driver_check_toolkit_release": 13.0}, "nvidia_driver_check_toolkit_release is a float, not a quoted string: 13.0. Option: nvidia_driver_check_toolkit_release."),
        ({"nvidia_driver_check_toolkit_release": "13"}, "nvidia_driver_check_toolkit_release is not a CUDA toolkit release: '13'. Option: nvidia_driver_check_toolkit_release."),
        ({"nvidia_driver_check_allowed_compute_capabilities": ["sm_120"]}, "nvidia_driver_check_allowed_compute_capabilities holds 'sm_120', which is not a compute capability: ['sm_120']. Option: nvidia_driver_check_allowed_compute_capabilities."),
        ({"nvidia_driver_check_allowed_compute_capabilities": {"cc": "12.0"}}, "nvidia_driver_check_allowed_compute_capabilities is not valid ("),
        ({"nvidia_driver_check_expected_gpu_count": 0}, "nvidia_driver_check_expected_gpu_count is out of range: 0. Option: nvidia_driver_check_expected_gpu_count."),
        ({"nvidia_driver_check_expected_gpu_count": True}, "nvidia_driver_check_expected_gpu_count is not a number: True. Option: nvidia_driver_check_expected_gpu_count."),
        ({"nvidia_driver_check_expected_gpu_count": "eight"}, "nvidia_driver_check_expected_gpu_count is not valid ("),
        ({"nvidia_driver_check_required_disk_gib": -1}, "nvidia_driver_check_required_disk_gib is out of range: -1. Option: nvidia_driver_check_required_disk_gib."),
        ({"nvidia_driver_check_min_python_version": 3.1}, "nvidia_driver_check_min_python_version is a float, not a quoted string: 3.1. Option: nvidia_driver_check_min_python_version."),
        ({"nvidia_driver_check_min_python_version": "three"}, "nvidia_driver_check_min_python_version is not a version: 'three'. Option: nvidia_driver_check_min_python_version."),
        ({"nvidia_driver_check_min_driver_version": "N/A"}, "nvidia_driver_check_min_driver_version is not an NVIDIA driver version: 'N/A'. Option: nvidia_driver_check_min_driver_version."),
        ({"nvidia_driver_check_require_jit": "maybe"}, "nvidia_driver_check_require_jit is not valid ("),
        ({"nvidia_driver_check_allow_wsl": "maybe"}, "nvidia_driver_check_allow_wsl is not valid ("),
        ({"nvidia_driver_check_allow_busy_gpus": "maybe"}, "nvidia_driver_check_allow_busy_gpus is not valid ("),
        ({"nvidia_driver_check_allow_mixed_gpu_models": [True]}, "nvidia_driver_check_allow_mixed_gpu_models is not valid ("),
    ],
)  # fmt: skip
def test_bad_preflight_options_are_refused_with_value_and_option(specs, given, message):
    report = options.validate(given, specs)
    (failure,) = report["failures"]
    assert failure["option"] == next(iter(given))
    assert failure["message"].startswith(message)


def test_no_allowed_list_lifts_the_release_compute_capability_floor(specs):
    report = options.validate({"nvidia_driver_check_allowed_compute_capabilities": ["7.0", "12.0"]}, specs)
    (failure,) = report["failures"]
    assert failure["message"] == (
        "nvidia_driver_check_allowed_compute_capabilities holds ['7.0'], below 7.5, the oldest compute "
        "capability CUDA 13.0 supports (CUDA 13 removed Maxwell, Pascal and Volta): ['7.0', '12.0']. "
        "Option: nvidia_driver_check_allowed_compute_capabilities. Fix: give a list without ['7.0']; "
        "hosts with such GPUs stay on CUDA 12."
    )
    # The floor is that of the release the driver check targets; CUDA 12 keeps Volta.
    given = {
        "nvidia_driver_check_toolkit_release": "12.8",
        "nvidia_driver_check_allowed_compute_capabilities": ["7.0"],
    }
    assert options.validate(given, specs)["ok"]


def test_preflight_options_in_ansible_forms_are_converted(specs):
    # -e key=value gives strings: Ansible's booleans and a comma-separated list are accepted.
    given = {
        "nvidia_driver_check_allow_wsl": "yes",
        "nvidia_driver_check_allowed_compute_capabilities": "12.0,10.0",
        "nvidia_driver_check_expected_gpu_count": "8",
        "nvidia_driver_check_toolkit_release": "13.0.2",
    }
    report = options.validate(given, specs)
    assert report["ok"], report["failures"]
    assert report["values"]["nvidia_driver_check_allow_wsl"] is True
    assert report["values"]["nvidia_driver_check_allowed_compute_capabilities"] == ["12.0", "10.0"]
    assert report["values"]["nvidia_driver_check_expected_gpu_count"] == 8


@pytest.mark.parametrize("target", ["R580", "580", "580.95.05", "r590", 580, ""])
def test_a_driver_target_at_or_above_the_floor_passes(specs, target):
    report = options.validate({"cuda13_driver_target": target}, specs)
    assert report["ok"], report["failures"]


@pytest.mark.parametrize(
    "target, words",
    [
        ("58O.95", "is not an NVIDIA driver version or branch"),
        ("latest", "is not an NVIDIA driver version or branch"),
        (True, "is not an NVIDIA driver version or branch"),
        ("R575", "cuda13_driver_target is below 580.65.06, the driver floor of CUDA 13.0: 'R575'."),
        ("575.64.05", "cuda13_driver_target is below 580.65.06"),
    ],
)
def test_a_driver_target_that_is_malformed_or_below_the_floor_is_refused(specs, target, words):
    report = options.validate({"cuda13_driver_target": target}, specs)
    [failure] = report["failures"]
    assert failure["option"] == "cuda13_driver_target"
    assert words in failure["message"], failure["message"]
    assert "Option: cuda13_driver_target" in failure["message"]


@pytest.mark.parametrize("given", [{}, {"cuda13_driver_target": ""}, {"cuda13_driver_target": "  "}])
def test_the_driver_window_alone_without_a_target_is_refused_naming_the_option(specs, given):
    # -e cuda13_driver_only=true, as cuda13-upgrade driver passes it: a string from the command line.
    [failure] = options.validate({"cuda13_driver_only": "true", **given}, specs)["failures"]
    assert failure["option"] == "cuda13_driver_target"
    assert failure["message"].startswith("cuda13_driver_target is empty, and cuda13_driver_only")
    assert "Fix: give the driver to move to, e.g. -e cuda13_driver_target=580.95.05" in failure["message"]
    report = options.validate({"cuda13_driver_only": "true", "cuda13_driver_target": "R580"}, specs)
    assert report["ok"] and report["values"]["cuda13_driver_only"] is True


def test_an_unquoted_driver_version_is_refused_with_the_advice_to_quote_it(specs):
    # YAML reads cuda13_driver_target: 580.95 as the number 580.95.
    [failure] = options.validate({"cuda13_driver_target": 580.95}, specs)["failures"]
    assert failure["message"].startswith("cuda13_driver_target is a YAML number: 580.95.")
    assert "the version quoted (YAML reads 580.10 as 580.1)" in failure["message"]


def test_a_target_below_a_later_releases_floor_is_refused_with_that_floors_branch(specs):
    given = {"cuda13_driver_target": "R580", "nvidia_driver_check_toolkit_release": "13.1"}
    [failure] = options.validate(given, specs)["failures"]
    assert "is below 590.44.01, the driver floor of CUDA 13.1" in failure["message"]
    assert "e.g. 'R590' or '590.44.01'" in failure["message"]


def test_driver_gpu_clients_may_name_a_containers_scope(specs):
    given = {"cuda13_driver_gpu_clients": ["nvidia-dcgm.service", "docker-4f2a.scope"]}
    assert options.validate(given, specs)["ok"]


def test_driver_gpu_clients_are_unit_names(specs):
    report = options.validate({"cuda13_driver_gpu_clients": ["nvidia-dcgm.service", "dcgm exporter"]}, specs)
    [failure] = report["failures"]
    assert failure["option"] == "cuda13_driver_gpu_clients"
    assert "'dcgm exporter'" in failure["message"]


def test_driver_packages_are_apt_requests(specs):
    given = {"cuda13_driver_packages": ["nvidia-driver-580-open", "libcuda1:amd64=580.95.05-1"]}
    assert options.validate(given, specs)["ok"]
    [failure] = options.validate({"cuda13_driver_packages": ["nvidia driver"]}, specs)["failures"]
    assert failure["option"] == "cuda13_driver_packages" and "'nvidia driver'" in failure["message"]
