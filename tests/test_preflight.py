"""Tests of cuda13_upgrade.preflight.evaluate."""

from __future__ import annotations

import pytest

from cuda13_upgrade.errors import PreflightError
from cuda13_upgrade.preflight import DEFAULT_SETTINGS, GIB, OPTION_NAMES, evaluate

BLACKWELL = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def host(**changes):
    """Facts of the host the upgrade is made for: 8x RTX PRO 6000, driver 590.48.01."""
    facts = {
        "driver_version": "590.48.01",
        "cuda_driver_version": "13.1",
        "gpus": [{"index": i, "name": BLACKWELL, "compute_capability": "12.0"} for i in range(8)],
        "disk_free_bytes": 200 * GIB,
        "disk_path": "/opt",
        "python_version": "3.11.2",
    }
    facts.update(changes)
    return facts


def failures(report, check=None):
    return [f for f in report.failures if check is None or f["check"] == check]


def test_the_target_host_passes():
    report = evaluate(host())
    assert report.ok
    assert report.failures == []
    assert [p["check"] for p in report.passed] == [
        "driver",
        "driver_cuda_version",
        "gpu_count",
        "compute_capability",
        "gpu_models",
        "disk",
        "python",
    ]


def test_defaults():
    # None: the host platform's list (versions.default_allowed_compute_capabilities).
    assert DEFAULT_SETTINGS["allowed_compute_capabilities"] is None
    assert DEFAULT_SETTINGS["min_python_version"] == "3.10"
    assert OPTION_NAMES["allowed_compute_capabilities"] == (
        "nvidia_driver_check_allowed_compute_capabilities"
    )


def test_h200_is_refused_with_index_name_and_option():
    gpus = [{"index": i, "name": BLACKWELL, "compute_cap": "12.0"} for i in range(7)]
    gpus.append({"index": 7, "name": "NVIDIA H200", "compute_cap": "9.0"})
    report = evaluate(host(gpus=gpus), {"allow_mixed_gpu_models": True})
    assert not report.ok
    assert failures(report) == [
        {
            "check": "compute_capability",
            "value": "9.0",
            "option": "nvidia_driver_check_allowed_compute_capabilities",
            "message": (
                "GPU 7 (NVIDIA H200) has compute capability 9.0, which is not in the allowed list "
                "['10.0', '10.3', '12.0']: '9.0'. Option: "
                "nvidia_driver_check_allowed_compute_capabilities. Fix: add '9.0' to "
                "nvidia_driver_check_allowed_compute_capabilities if the CUDA 13 stack is meant to "
                "run on it, or leave this host out of the upgrade."
            ),
        }
    ]


def test_allowing_9_0_passes_the_h200():
    gpus = [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]
    settings = {"allowed_compute_capabilities": ["9.0", "12.0"]}
    assert evaluate(host(gpus=gpus, driver_version="580.95.05", cuda_driver_version="13.0"), settings).ok


def test_gpus_of_one_capability_are_reported_together():
    gpus = [{"index": i, "name": "NVIDIA H200", "compute_capability": "9.0"} for i in range(2)]
    (failure,) = failures(evaluate(host(gpus=gpus)))
    assert failure["message"].startswith("GPU 0 (NVIDIA H200), 1 (NVIDIA H200) has compute")


def test_zero_gpus_is_always_refused():
    for settings in (None, {"expected_gpu_count": None}):
        report = evaluate(host(gpus=[]), settings)
        assert failures(report, "gpu_count") == [
            {
                "check": "gpu_count",
                "value": 0,
                "option": "nvidia_driver_check_expected_gpu_count",
                "message": (
                    "no GPU found on the host: 0. Option: nvidia_driver_check_expected_gpu_count. "
                    "Fix: check that nvidia-smi lists the GPUs (driver loaded, open kernel module) "
                    "before upgrading; a host without GPUs is never upgraded."
                ),
            }
        ]


def test_expected_gpu_count():
    assert evaluate(host(), {"expected_gpu_count": 8}).ok
    report = evaluate(host(), {"expected_gpu_count": 4})
    (failure,) = failures(report)
    assert (failure["check"], failure["value"]) == ("gpu_count", 8)
    assert failure["message"].startswith("the host has 8 GPUs, 4 expected: 8.")


def test_driver_too_old():
    report = evaluate(host(driver_version="570.86.15", cuda_driver_version="12.8"))
    driver = failures(report, "driver")
    assert driver == [
        {
            "check": "driver",
            "value": "570.86.15",
            "option": "cuda13_toolkit_release",
            "message": (
                "the NVIDIA driver is too old for CUDA 13.0 (needs >= 580.65.06, rule "
                "toolkit-driver): '570.86.15'. Option: cuda13_toolkit_release. Fix: upgrade the "
                "driver to 580.65.06 or newer (this package never changes the driver), or set "
                "cuda13_toolkit_release to a release the driver supports."
            ),
        }
    ]
    assert failures(report, "driver_cuda_version")[0]["value"] == "12.8"


def test_update_release_needs_its_own_driver():
    report = evaluate(
        host(driver_version="580.82.07", cuda_driver_version="13.0"), {"toolkit_release": "13.0.2"}
    )
    assert failures(report, "driver")[0]["message"].startswith(
        "the NVIDIA driver is too old for CUDA 13.0.2 (needs >= 580.95.05"
    )


def test_unknown_release_names_the_override():
    report = evaluate(host(), {"toolkit_release": "13.4"})
    (failure,) = failures(report, "driver")
    assert failure["option"] == "cuda13_toolkit_release"
    assert failure["value"] == "13.4"
    assert "set nvidia_driver_check_min_driver_version to it" in failure["message"]


def test_override_makes_an_unknown_release_pass():
    report = evaluate(host(), {"toolkit_release": "13.4", "min_driver_version": "590.44.01"})
    assert report.ok
    assert [p["check"] for p in report.passed][:2] == ["driver", "gpu_count"]


def test_override_that_fails_names_itself():
    report = evaluate(host(), {"min_driver_version": "595.45.04"})
    (failure,) = failures(report)
    assert failure["option"] == "nvidia_driver_check_min_driver_version"
    assert "needs >= 595.45.04, rule override" in failure["message"]


def test_malformed_driver_fact():
    report = evaluate(host(driver_version="N/A"))
    (failure,) = failures(report, "driver")
    assert (failure["value"], failure["option"]) == ("N/A", None)
    assert failure["message"].startswith("driver version is not of the form BRANCH.MINOR[.PATCH]: 'N/A'.")


def test_missing_driver_fact():
    facts = host()
    del facts["driver_version"]
    (failure,) = failures(evaluate(facts), "driver")
    assert failure["message"] == (
        "the driver version fact is missing: None. Fix: gather 'nvidia-smi "
        "--query-gpu=driver_version --format=csv,noheader' first."
    )


def test_disk_too_small():
    report = evaluate(host(disk_free_bytes=12 * GIB), {"required_disk_gib": 40})
    assert failures(report) == [
        {
            "check": "disk",
            "value": 12 * GIB,
            "option": "preflight_required_disk_gib",
            "message": (
                "/opt has 12.0 GiB free (12884901888 bytes), less than the 40 GiB required: "
                "12884901888. Option: preflight_required_disk_gib. Fix: free space on /opt, or "
                "lower preflight_required_disk_gib if the new stack needs less."
            ),
        }
    ]


def test_disk_check_can_be_skipped_and_needs_its_fact():
    facts = host()
    del facts["disk_free_bytes"]
    assert evaluate(facts, {"required_disk_gib": None}).ok
    (failure,) = failures(evaluate(facts), "disk")
    assert failure["option"] is None
    assert failure["message"].startswith("free disk space of /opt is missing or not a byte count")


def test_python_too_old():
    report = evaluate(host(python_version="3.9.18"))
    (failure,) = failures(report)
    assert failure["message"] == (
        "host Python 3.9.18 is older than the required 3.10: '3.9.18'. Option: "
        "preflight_min_python_version. Fix: install Python 3.10 or newer for the new virtual "
        "environment, or lower preflight_min_python_version."
    )
    assert evaluate(host(python_version="3.10.0")).ok


def test_every_failure_is_reported_at_once():
    report = evaluate(
        host(driver_version="570.86.15", cuda_driver_version=None, gpus=[], python_version="3.8.10",
             disk_free_bytes=0)
    )  # fmt: skip
    assert [f["check"] for f in report.failures] == ["driver", "gpu_count", "disk", "python"]
    assert report.to_dict()["ok"] is False
    assert report.to_dict()["failures"] == report.failures


def test_option_names_can_be_renamed():
    report = evaluate(host(python_version="3.9.1"), {"option_names": {"min_python_version": "my_python"}})
    assert failures(report)[0]["option"] == "my_python"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"expected_gpus": 8}, "unknown preflight settings: ['expected_gpus']. Option: settings."),
        ("8 GPUs", "preflight settings must be a mapping: '8 GPUs'. Option: settings."),
        ({"option_names": ["x"]}, "option_names must map setting keys to variable names: ['x']. Option: option_names."),
    ],
)  # fmt: skip
def test_settings_of_the_wrong_shape_raise(settings, message):
    # The values themselves are checked once, by cuda13_upgrade.options.validate
    # (tests/test_options.py, "the preflight's options").
    with pytest.raises(PreflightError) as info:
        evaluate(host(), settings)
    assert str(info.value).startswith(message)


def test_facts_must_be_a_mapping():
    with pytest.raises(PreflightError, match="preflight facts must be a mapping: 'facts'"):
        evaluate("facts")  # type: ignore[arg-type]


# --- fleet host checks: WSL, mixed models, busy GPUs, the CUDA 13 floor --------

MAXQ = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"


def test_wsl_split_version_is_refused_unless_allowed():
    # tests/fixtures/nvidia-smi/table-wsl-570.124.06-572.70-excerpt.txt: Linux
    # user-space 570.124.06 on the Windows driver 572.70.
    facts = host(nvidia_smi_version="570.124.06", driver_version="572.70", cuda_driver_version=None)
    report = evaluate(facts, {"min_driver_version": "570.124.06"})
    [failure] = failures(report, "wsl")
    assert failure["option"] == "nvidia_driver_check_allow_wsl"
    assert "nvidia-smi 570.124.06 reports the driver as 572.70" in failure["message"]
    assert "Windows NVIDIA driver" in failure["message"]
    assert evaluate(facts, {"min_driver_version": "570.124.06", "allow_wsl": True}).ok


def test_wsl_kernel_is_refused():
    report = evaluate(host(kernel_release="5.15.153.1-microsoft-standard-WSL2"))
    assert "the kernel is 5.15.153.1-microsoft-standard-WSL2" in failures(report, "wsl")[0]["message"]
    assert evaluate(host(kernel_release="6.1.0-28-amd64", nvidia_smi_version="590.48.01")).ok


def test_mixed_models_are_flagged_naming_the_gpus():
    gpus = [{"index": i, "name": BLACKWELL, "compute_capability": "12.0"} for i in range(4)]
    gpus += [{"index": i, "name": MAXQ, "compute_capability": "12.0"} for i in range(4, 8)]
    report = evaluate(host(gpus=gpus))
    [failure] = failures(report)
    assert failure["check"] == "gpu_models"
    assert failure["option"] == "nvidia_driver_check_allow_mixed_gpu_models"
    assert f"GPU 4, 5, 6, 7: {MAXQ}; GPU 0, 1, 2, 3: {BLACKWELL}" in failure["message"]
    assert evaluate(host(gpus=gpus), {"allow_mixed_gpu_models": True}).ok


def test_gpus_used_by_other_processes_are_reported():
    gpus = [
        {
            "index": i,
            "name": BLACKWELL,
            "compute_capability": "12.0",
            "uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000",
        }
        for i in range(2)
    ]
    apps = [
        {
            "gpu_uuid": gpus[0]["uuid"],
            "pid": 100,
            "process_name": "/opt/ml-env/bin/python",
            "used_memory": 90000,
        },
        {"gpu_uuid": gpus[1]["uuid"], "pid": 698976, "process_name": "python3", "used_memory": 1714},
    ]
    report = evaluate(host(gpus=gpus, compute_apps=apps, service_pids=[100]))
    [failure] = failures(report)
    assert failure["check"] == "gpu_processes"
    assert failure["value"] == [698976]
    assert f"GPU 1 ({BLACKWELL}): pid 698976 python3 (1714 MiB)" in failure["message"]
    assert evaluate(host(gpus=gpus, compute_apps=apps, service_pids=[100]), {"allow_busy_gpus": True}).ok
    assert evaluate(host(gpus=gpus, compute_apps=apps[:1], service_pids=[100])).ok
    assert evaluate(host(gpus=gpus, compute_apps=[])).ok


def test_no_allowed_list_lifts_the_cuda13_floor():
    # An allowed list below the floor is refused by cuda13_upgrade.options.validate;
    # a GPU below it is refused here, whatever the list says.
    v100 = [{"index": 0, "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}]
    [failure] = failures(evaluate(host(gpus=v100)), "compute_capability")
    assert "below 7.5, the oldest CUDA 13.0 supports" in failure["message"]
    assert failure["option"] is None
    # CUDA 12 keeps Volta.
    assert evaluate(
        host(gpus=v100, cuda_driver_version=None),
        {"toolkit_release": "12.8", "allowed_compute_capabilities": ["7.0"]},
    ).ok


def test_default_allowed_list_follows_the_platform():
    gb10 = [{"index": 0, "name": "NVIDIA GB10", "compute_capability": "12.1"}]
    assert failures(evaluate(host(gpus=gb10, architecture="x86_64")), "compute_capability")
    assert evaluate(host(gpus=gb10, architecture="aarch64")).ok


# --- nvidia-smi runs after the GPU query --------------------------------------------------


def test_a_hung_table_or_process_query_refuses_the_host_naming_the_option():
    runs = {
        "table": {"rc": 124, "stdout": "", "stderr": ""},
        "compute_apps": {"failed": True, "msg": "Timed out after 100 seconds.", "timedout": {"period": 100}},
    }
    report = evaluate(host(nvidia_smi_runs=runs), {"nvidia_smi_timeout": 60})
    table, apps = failures(report, "nvidia_smi")
    assert table["option"] == apps["option"] == "nvidia_driver_check_nvidia_smi_timeout"
    assert table["message"].startswith(
        "nvidia-smi (the table, for its CUDA Version) did not answer within 60 s "
        "(nvidia_driver_check_nvidia_smi_timeout); the exit status: 124."
    )
    assert "dmesg" in table["message"] and "Xid" in table["message"]
    assert apps["value"] == "ended by the task's timeout"
    assert apps["message"].startswith("nvidia-smi (--query-compute-apps, the processes on the GPUs) did not")


def test_runs_that_answered_or_failed_otherwise_are_not_hangs():
    runs = {
        "table": {"rc": 0, "stdout": "", "stderr": ""},
        # A non-zero exit status is the table's parser's and the busy check's concern, as before.
        "compute_apps": {"rc": 2, "stdout": "Invalid combination of input arguments.", "stderr": ""},
    }
    assert failures(evaluate(host(nvidia_smi_runs=runs)), "nvidia_smi") == []
    # The setting's default and the option it names (roles/nvidia_driver_check).
    assert DEFAULT_SETTINGS["nvidia_smi_timeout"] == 60
    assert OPTION_NAMES["nvidia_smi_timeout"] == "nvidia_driver_check_nvidia_smi_timeout"


# --- the host's side: module cuda13_host_facts -------------------------------------------


def test_a_failed_gpu_query_is_the_only_nvidia_smi_run(tmp_path):
    """The preflight refuses the host on the query of the GPUs alone: a hung nvidia-smi is
    waited for once, not three times (the old tasks stopped after the query)."""
    import sys

    from cuda13_upgrade.hostscripts import preflight_facts

    runs = tmp_path / "runs.log"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$*" >> {runs}\necho "NVIDIA-SMI has failed" >&2\nexit 9\n')
    smi.chmod(0o755)
    found = preflight_facts.facts(
        {
            "nvidia_smi": str(smi),
            "nvidia_smi_timeout": 5,
            "unit": "nosuch-cuda13-test.service",
            "disk_path": str(tmp_path),
            "space_places": {},
            "python": sys.executable,
            "host_checks": False,
            "old_venv": str(tmp_path / "venv"),
        }
    )
    assert found["query"]["rc"] == 9 and "NVIDIA-SMI has failed" in found["query"]["stderr"]
    assert runs.read_text().splitlines() == [" ".join(preflight_facts.GPU_QUERY)]
    skipped = {"skipped": True, "msg": "not run: the query of the GPUs failed"}
    assert found["table"] == found["compute_apps"] == skipped
    assert found["python"]["rc"] == 0  # the rest is read as before


def test_one_gpu_of_another_platform_with_the_facts_as_the_step_gives_them():
    facts = {
        "driver_version": "590.48.01",
        "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0"}],
        "disk_free_bytes": 100 * GIB,
        "python_version": "3.11.2",
    }
    report = evaluate(facts).to_dict()
    assert report["ok"] is False
    assert [x["check"] for x in report["failures"]] == ["compute_capability"]
    assert evaluate(facts, {"allowed_compute_capabilities": ["9.0"]}).ok is True
    b200 = {**facts, "gpus": [{"index": 0, "name": "NVIDIA B200", "compute_cap": "10.0"}]}
    assert evaluate(b200).ok is True


def test_an_unknown_setting_is_named_with_the_ones_there_are():
    with pytest.raises(PreflightError) as info:
        evaluate({}, {"expected_gpus": 8})
    assert str(info.value) == (
        "unknown preflight settings: ['expected_gpus']. Option: settings. "
        "Fix: use only ['allow_busy_gpus', 'allow_mixed_gpu_models', 'allow_wsl', "
        "'allowed_compute_capabilities', 'expected_gpu_count', 'jit', 'min_driver_version', "
        "'min_python_version', 'nvidia_smi_timeout', 'required_disk_gib', 'toolkit_release'] "
        "and option_names."
    )
