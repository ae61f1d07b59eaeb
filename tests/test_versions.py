"""Tests of cuda13_upgrade.versions: releases, the driver table, compute capabilities."""

from __future__ import annotations

import pytest

from cuda13_upgrade.errors import Cuda13Error, UnknownReleaseError
from cuda13_upgrade.versions import (
    BLACKWELL_COMPUTE_CAPABILITIES,
    DRIVER_TABLE,
    MIN_DRIVER_OPTION,
    MINOR_VERSION_COMPATIBILITY,
    CompatResult,
    arch_list_covers,
    driver_cuda_version_supports,
    driver_supports,
    known_releases,
    parse_compute_capability,
    parse_driver_version,
    parse_toolkit_release,
    parse_toolkit_version,
    release_name,
    torch_cuda_arch_list,
)

# --- toolkit releases ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("13.0", (13, 0)), ("13.0.2", (13, 0)), ("12.8", (12, 8)), (" 13.1 ", (13, 1))],
)
def test_parse_toolkit_release(text, expected):
    assert parse_toolkit_release(text) == expected


def test_parse_toolkit_version_keeps_the_update():
    assert parse_toolkit_version("13.0.2") == (13, 0, 2)
    assert parse_toolkit_version("13.0") == (13, 0, 0)


@pytest.mark.parametrize("text", ["13", "cu130", "13.x", "", "v13.0", "13.0.2.1", "13.0a"])
def test_parse_toolkit_release_rejects_and_names_the_value(text):
    with pytest.raises(ValueError) as info:
        parse_toolkit_release(text)
    assert f"{text!r}" in str(info.value)
    assert "Option: toolkit_release." in str(info.value)


def test_parse_toolkit_release_message_is_exact():
    with pytest.raises(Cuda13Error) as info:
        parse_toolkit_release("cu130", option="cuda13_toolkit_release")
    assert str(info.value) == (
        "CUDA toolkit release is not of the form MAJOR.MINOR or MAJOR.MINOR.UPDATE: 'cu130'. "
        "Option: cuda13_toolkit_release. Fix: give the release as '13.0' (GA) or '13.0.2' "
        "(13.0 Update 2); 'cu130' is a wheel label, not a release."
    )


def test_parse_toolkit_release_rejects_an_unquoted_yaml_number():
    with pytest.raises(ValueError) as info:
        parse_toolkit_release(13.0)  # type: ignore[arg-type]
    assert str(info.value) == (
        "CUDA toolkit release must be a string, got float: 13.0. Option: toolkit_release. "
        "Fix: write it as a quoted string such as '13.0' (an unquoted YAML 13.0 is read as a "
        "number)."
    )


def test_release_name_follows_the_release_notes():
    assert release_name((13, 0, 0)) == "CUDA 13.0 GA"
    assert release_name((13, 0, 2)) == "CUDA 13.0 Update 2"


# --- the driver table ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "driver"),
    [
        ((12, 8, 0), "570.26"),
        ((12, 8, 1), "570.124.06"),
        ((12, 9, 0), "575.51.03"),
        ((12, 9, 1), "575.57.08"),
        ((13, 0, 0), "580.65.06"),
        ((13, 0, 1), "580.82.07"),
        ((13, 0, 2), "580.95.05"),
        ((13, 1, 0), "590.44.01"),
        ((13, 1, 1), "590.48.01"),
    ],
)
def test_driver_table_matches_the_release_notes(release, driver):
    assert DRIVER_TABLE[release] == driver


def test_driver_table_never_decreases():
    ordered = [parse_driver_version(DRIVER_TABLE[k]) for k in sorted(DRIVER_TABLE)]
    assert ordered == sorted(ordered)


def test_minor_version_compatibility_minimums():
    assert MINOR_VERSION_COMPATIBILITY == {12: "525.60.13", 13: "580"}


def test_known_releases_are_strings_in_order():
    releases = known_releases()
    assert releases[0] == "12.0"
    assert "13.0.2" in releases
    assert "13.4" not in releases


# --- driver versions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("590.48.01", (590, 48, 1)),
        ("580.65.06", (580, 65, 6)),
        ("570.86.15", (570, 86, 15)),
        ("550.54.14", (550, 54, 14)),
        ("570.26", (570, 26, 0)),
        ("580.142", (580, 142, 0)),
    ],
)
def test_parse_driver_version(text, expected):
    assert parse_driver_version(text) == expected


def test_driver_versions_compare_as_numbers_not_strings():
    assert parse_driver_version("570.124.06") > parse_driver_version("570.26")
    assert "570.124.06" < "570.26"  # what a string comparison would conclude
    assert parse_driver_version("580.9.99") < parse_driver_version("580.65.06")


@pytest.mark.parametrize("text", ["", "N/A", "590", "abc", "590.48.01.1", "[N/A]"])
def test_parse_driver_version_rejects_malformed(text):
    with pytest.raises(ValueError) as info:
        parse_driver_version(text)
    assert str(info.value).startswith(
        f"driver version is not of the form BRANCH.MINOR[.PATCH]: {text!r}. Option: driver_version."
    )


# --- driver_supports -------------------------------------------------------------------


def test_590_driver_supports_cuda_13_0():
    result = driver_supports("590.48.01", "13.0")
    assert isinstance(result, CompatResult)
    assert (result.ok, result.required, result.rule) == (True, "580.65.06", "toolkit-driver")
    assert "Table 3" in result.message


@pytest.mark.parametrize(
    ("driver", "release", "ok", "required"),
    [
        ("580.65.06", "13.0", True, "580.65.06"),  # exactly the minimum
        ("580.65.05", "13.0", False, "580.65.06"),
        ("580.9.99", "13.0", False, "580.65.06"),  # "580.9" > "580.6" as strings
        ("580.82.07", "13.0.2", False, "580.95.05"),
        ("580.95.05", "13.0.2", True, "580.95.05"),
        ("580.95.05", "13.1", False, "590.44.01"),
        ("590.48.01", "13.1.1", True, "590.48.01"),
        ("570.26", "12.8", True, "570.26"),
        ("570.86.15", "12.8.1", False, "570.124.06"),
        ("550.54.14", "12.8", False, "570.26"),
    ],
)
def test_driver_supports_release_minimums(driver, release, ok, required):
    result = driver_supports(driver, release)
    assert (result.ok, result.required, result.rule) == (ok, required, "toolkit-driver")


def test_too_old_driver_message_names_values_and_remedy():
    result = driver_supports("570.86.15", "13.0")
    assert not result.ok
    assert result.message.startswith("driver 570.86.15 is older than 580.65.06, the minimum for CUDA 13.0 GA")
    assert "upgrade the driver to 580.65.06 or newer" in result.message
    assert "minor version compatibility does not cover" in result.message


def test_minor_version_compatibility_only_without_jit():
    jit = driver_supports("580.65.06", "13.1")
    no_jit = driver_supports("580.65.06", "13.1", jit=False)
    assert (jit.ok, jit.rule, jit.required) == (False, "toolkit-driver", "590.44.01")
    assert (no_jit.ok, no_jit.rule, no_jit.required) == (True, "minor-version-compatibility", "580")
    assert "PTX JIT compilation is not covered" in no_jit.message


def test_minor_version_compatibility_still_needs_the_branch():
    result = driver_supports("570.86.15", "13.0", jit=False)
    assert (result.ok, result.rule, result.required) == (
        False,
        "minor-version-compatibility",
        "580",
    )
    cuda12 = driver_supports("550.54.14", "12.8", jit=False)
    assert (cuda12.ok, cuda12.required) == (True, "525.60.13")


def test_unknown_release_names_the_override():
    with pytest.raises(UnknownReleaseError) as info:
        driver_supports("590.48.01", "13.4")
    message = str(info.value)
    assert message.startswith("CUDA 13.4 GA is not in the driver table (it knows 12.0 to 13.3.1): '13.4'.")
    assert "Option: toolkit_release." in message
    assert f"set {MIN_DRIVER_OPTION} to it" in message


def test_unknown_release_with_an_override():
    result = driver_supports("590.48.01", "13.4", min_driver_version="590.44.01")
    assert (result.ok, result.required, result.rule) == (True, "590.44.01", "override")
    too_old = driver_supports("580.95.05", "13.4", min_driver_version="590.44.01")
    assert not too_old.ok
    assert too_old.message == (
        "driver 580.95.05 is older than 590.44.01, the minimum set by "
        "nvidia_driver_check_min_driver_version for CUDA 13.4 GA; upgrade the driver or lower "
        "nvidia_driver_check_min_driver_version"
    )


def test_unknown_minor_release_without_jit_uses_minor_version_compatibility():
    result = driver_supports("590.48.01", "13.4", jit=False)
    assert (result.ok, result.rule) == (True, "minor-version-compatibility")


def test_unknown_major_release_is_refused_even_without_jit():
    with pytest.raises(UnknownReleaseError, match="CUDA 14.x has no minor version compatibility"):
        driver_supports("590.48.01", "14.0", jit=False)


@pytest.mark.parametrize("driver", ["", "N/A", "590", "abc"])
def test_driver_supports_rejects_malformed_drivers(driver):
    with pytest.raises(ValueError, match=f"driver version is not of the form .*: {driver!r}"):
        driver_supports(driver, "13.0")


def test_malformed_override_names_its_option():
    with pytest.raises(ValueError, match=f"Option: {MIN_DRIVER_OPTION}."):
        driver_supports("590.48.01", "13.0", min_driver_version="latest")


def test_compat_result_to_dict():
    assert driver_supports("590.48.01", "13.0").to_dict() == {
        "ok": True,
        "required": "580.65.06",
        "rule": "toolkit-driver",
        "message": driver_supports("590.48.01", "13.0").message,
        "driver_version": "590.48.01",
        "toolkit_release": "13.0",
    }


# --- nvidia-smi's "CUDA Version" -------------------------------------------------------


def test_driver_cuda_version_covers_older_releases():
    result = driver_cuda_version_supports("13.1", "13.0")
    assert (result.ok, result.rule, result.required) == (True, "driver-cuda-version", "13.0")


def test_driver_cuda_version_newer_minor_only_without_jit():
    assert not driver_cuda_version_supports("13.0", "13.1").ok
    relaxed = driver_cuda_version_supports("13.0", "13.1", jit=False)
    assert (relaxed.ok, relaxed.rule) == (True, "minor-version-compatibility")


def test_driver_cuda_version_other_major_is_refused():
    result = driver_cuda_version_supports("12.8", "13.0", jit=False)
    assert not result.ok
    assert result.message == (
        "the driver supports up to CUDA 12.8, older than 13.0; upgrade the driver or target an older release"
    )


def test_driver_cuda_version_na_is_an_error():
    with pytest.raises(ValueError, match="'N/A'. Option: driver CUDA Version."):
        driver_cuda_version_supports("N/A", "13.0")


# --- compute capabilities --------------------------------------------------------------


def test_blackwell_compute_capabilities():
    assert BLACKWELL_COMPUTE_CAPABILITIES == ("10.0", "10.3", "11.0", "12.0", "12.1")


def test_parse_compute_capability():
    assert parse_compute_capability("12.0") == (12, 0)
    assert parse_compute_capability("9.0") == (9, 0)


@pytest.mark.parametrize("value", ["12", "sm_120", "12.0a", "", "twelve"])
def test_parse_compute_capability_rejects(value):
    with pytest.raises(ValueError, match=f"not of the form MAJOR.MINOR: {value!r}"):
        parse_compute_capability(value)


@pytest.mark.parametrize(
    ("arch_list", "capabilities", "missing"),
    [
        (["sm_90", "sm_100", "sm_120"], ["12.0"] * 8, []),
        (["sm_80", "sm_90"], ["12.0", "9.0"], ["12.0"]),
        (["sm_100"], ["10.3"], []),  # SASS runs on later minors of the same major
        (["sm_100a"], ["10.3"], ["10.3"]),  # "a" targets run on exactly that capability
        (["sm_120f"], ["12.1"], []),  # "f" targets run on the family
        (["sm_120"], ["12.1", "12.0"], []),
        (["sm_90"], ["12.0"], ["12.0"]),  # SASS never crosses a major version
        (["compute_90"], ["12.0"], ["12.0"]),  # PTX is not counted by default
        (["9.0", "12.0"], ["12.0", "9.0"], []),
        (["sm_90", "sm_120"], ["9.0", "10.0", "12.0", "12.1"], ["10.0"]),
    ],
)
def test_arch_list_covers(arch_list, capabilities, missing):
    assert arch_list_covers(arch_list, capabilities) == missing


def test_arch_list_covers_ptx_when_allowed():
    assert arch_list_covers(["compute_90"], ["12.0"], allow_ptx=True) == []
    assert arch_list_covers(["9.0+PTX"], ["12.0"], allow_ptx=True) == []
    assert arch_list_covers(["9.0+PTX"], ["12.0"]) == ["12.0"]
    assert arch_list_covers(["compute_120"], ["9.0"], allow_ptx=True) == ["9.0"]


def test_arch_list_covers_rejects_unknown_entries():
    with pytest.raises(ValueError, match="not sm_XY, compute_XY or X.Y.*'gfx942'"):
        arch_list_covers(["gfx942"], ["12.0"])


def test_torch_cuda_arch_list():
    assert torch_cuda_arch_list(["12.0"] * 8) == "12.0"
    assert torch_cuda_arch_list(["12.0", "9.0", "12.0"]) == "9.0;12.0"
    assert torch_cuda_arch_list(["12.1", "10.3", "10.0", "12.0"]) == "10.0;10.3;12.0;12.1"


def test_torch_cuda_arch_list_rejects_bad_input():
    with pytest.raises(ValueError) as info:
        torch_cuda_arch_list([])
    assert str(info.value) == (
        "no compute capability given: []. Option: capabilities. "
        "Fix: pass the compute_cap of each GPU, e.g. ['12.0']."
    )
    with pytest.raises(ValueError, match="not one string: '12.0'"):
        torch_cuda_arch_list("12.0")
    with pytest.raises(ValueError, match="'sm_120'"):
        torch_cuda_arch_list(["sm_120"])


# --- NVIDIA's newest releases and numbering ------------------------------------


def test_newest_updates_are_known():
    from cuda13_upgrade.versions import driver_supports

    # 13.0 Update 3 (cuda-toolkit-13-0 13.0.3-1) and 13.1 Update 2 used to raise "unknown release".
    assert driver_supports("580.126.20", "13.0.3").ok
    assert not driver_supports("580.95.05", "13.0.3").ok
    assert driver_supports("590.48.01", "13.1.2").ok
    assert not driver_supports("590.44.01", "13.1.2").ok


@pytest.mark.parametrize(
    ("package", "version", "name"),
    [
        ("13.0.3-1", (13, 0, 3), "CUDA 13.0 Update 3"),
        ("13.1.2-1", (13, 1, 2), "CUDA 13.1 Update 2"),
        ("13.4.1-1", (13, 4, 0), "CUDA 13.4 GA"),
        ("13.4.2-1", (13, 4, 1), "CUDA 13.4 Update 1"),
        ("1:13.0.2-1", (13, 0, 2), "CUDA 13.0 Update 2"),
    ],
)
def test_package_version_to_release_follows_nvidias_numbering(package, version, name):
    from cuda13_upgrade.versions import release_name, release_string, toolkit_version_from_package

    assert toolkit_version_from_package(package) == version
    assert release_name(version) == name
    assert release_string(version) == package.split(":")[-1].rsplit("-", 1)[0]


def test_build_numbered_release_without_build_is_refused():
    from cuda13_upgrade.versions import parse_toolkit_version

    with pytest.raises(Cuda13Error, match=r"count from 13\.4\.1 \(GA\)"):
        parse_toolkit_version("13.4.0")
    assert parse_toolkit_version("13.4") == (13, 4, 0)


def test_13_4_has_no_table_row_and_asks_for_the_minimum():
    from cuda13_upgrade.errors import UnknownReleaseError
    from cuda13_upgrade.versions import driver_supports

    with pytest.raises(UnknownReleaseError, match="CUDA 13.4 GA is not in the driver table"):
        driver_supports("610.43.02", "13.4.1")
    assert driver_supports("610.43.02", "13.4.1", min_driver_version="610.43.02").ok


def test_cuda13_floor_and_platform_lists():
    from cuda13_upgrade.versions import default_allowed_compute_capabilities, min_compute_capability

    assert min_compute_capability("13.0.2") == "7.5"
    assert min_compute_capability("12.8") == "5.0"
    assert default_allowed_compute_capabilities("x86_64") == ["10.0", "10.3", "12.0"]
    assert default_allowed_compute_capabilities("aarch64") == ["10.0", "10.3", "11.0", "12.0", "12.1"]
    assert default_allowed_compute_capabilities("arm64") == default_allowed_compute_capabilities("aarch64")
    assert default_allowed_compute_capabilities(None) == ["10.0", "10.3", "12.0"]
