"""Tests of cuda13_upgrade.nvcc against real `nvcc --version` outputs (tests/fixtures/nvcc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.nvcc import parse_nvcc_version

FIXTURES = Path(__file__).parent / "fixtures" / "nvcc"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "nvcc-12.8.txt",
            {
                "release": "12.8",
                "version": "12.8.93",
                "built_on": "Fri_Feb_21_20:23:50_PST_2025",
                "build": "cuda_12.8.r12.8/compiler.35583870_0",
            },
        ),
        (
            "nvcc-13.0.txt",
            {
                "release": "13.0",
                "version": "13.0.88",
                "built_on": "Wed_Aug_20_01:58:59_PM_PDT_2025",
                "build": "cuda_13.0.r13.0/compiler.36424714_0",
            },
        ),
        (
            "nvcc-13.1.txt",
            {
                "release": "13.1",
                "version": "13.1.80",
                "built_on": "Fri_Nov__7_07:23:37_PM_PST_2025",
                "build": "cuda_13.1.r13.1/compiler.36836380_0",
            },
        ),
        (
            "nvcc-13.2.txt",
            {
                "release": "13.2",
                "version": "13.2.78",
                "built_on": "Thu_Mar_19_11:12:51_PM_PDT_2026",
                "build": "cuda_13.2.r13.2/compiler.37668154_0",
            },
        ),
    ],
)
def test_parse_real_outputs(name, expected):
    assert parse_nvcc_version((FIXTURES / name).read_text(encoding="utf-8")) == expected


def test_the_release_line_alone_is_enough():
    assert parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88\n") == {
        "release": "13.0",
        "version": "13.0.88",
        "built_on": None,
        "build": None,
    }


def test_command_not_found_is_quoted():
    with pytest.raises(ParseError) as info:
        parse_nvcc_version("bash: line 1: nvcc: command not found\n")
    assert str(info.value) == (
        "no 'Cuda compilation tools, release X.Y, VX.Y.Z' line in nvcc --version output: "
        "'bash: line 1: nvcc: command not found\\n'. Fix: run the toolkit's own nvcc "
        "(e.g. /usr/local/cuda-13.0/bin/nvcc --version); 'command not found' means the toolkit "
        "is not installed or not on PATH."
    )


def test_long_odd_output_quotes_its_first_line():
    text = "nvcc fatal   : Unknown option '--versoin'\nsecond line\n"
    with pytest.raises(ParseError, match='nvcc --version output: "nvcc fatal   : Unknown option'):
        parse_nvcc_version(text)


def test_empty_output():
    with pytest.raises(ParseError, match="nvcc --version output: ''"):
        parse_nvcc_version("")


def test_release_and_version_must_agree():
    with pytest.raises(ParseError, match="release and version disagree"):
        parse_nvcc_version("Cuda compilation tools, release 13.0, V12.8.93\n")


def test_non_text_is_refused():
    with pytest.raises(ParseError, match="must be text: None"):
        parse_nvcc_version(None)  # type: ignore[arg-type]
