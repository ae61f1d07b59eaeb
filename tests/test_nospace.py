"""cuda13_upgrade.nospace: a step that failed for want of disk space says so."""

import pytest

from cuda13_upgrade import nospace

# `python3 -m venv` on an 8 MiB tmpfs (Python 3.11): ensurepip's own output is
# captured by venv, only this line reaches the caller.
ENSUREPIP = (
    "Error: Command '['/srv/small/ml-env-cu130/bin/python3', '-m', 'ensurepip', '--upgrade', "
    "'--default-pip']' returned non-zero exit status 1."
)
# pip's message for ENOSPC (pypa/pip#5816, vllm-project/vllm#7025).
PIP = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
DF = "      Avail\n          0\n66717507584\n66717507584\n"
PATHS = ["/srv/small", "/opt", "/var/cache/apt/archives"]


def test_parse_df_avail():
    assert nospace.parse_df_avail(DF, PATHS) == {
        "/srv/small": 0,
        "/opt": 66717507584,
        "/var/cache/apt/archives": 66717507584,
    }
    with pytest.raises(ValueError, match="df printed 3 values for 2 paths"):
        nospace.parse_df_avail(DF, PATHS[:2])
    with pytest.raises(ValueError, match="not df --output=avail output"):
        nospace.parse_df_avail("df: /nowhere: No such file or directory\n", PATHS)


def test_the_text_of_a_full_disk_is_recognised():
    found = nospace.diagnose_no_space(PIP, {"/opt": 10 << 30})
    assert found["cause"] == "the step ran out of disk space: the step reported 'No space left on device'"
    assert "cuda13_new_venv" in found["remedy"] and "then run again" in found["remedy"]
    assert found["full_paths"] == []
    assert nospace.diagnose_no_space("fatal: write error: Disk quota exceeded")["cause"].endswith(
        "'Disk quota exceeded'"
    )


def test_a_full_filesystem_explains_a_failure_that_lost_the_text():
    found = nospace.diagnose_no_space(ENSUREPIP, nospace.parse_df_avail(DF, PATHS))
    assert (
        found["cause"]
        == "the step ran out of disk space: the filesystem it writes is full (full: /srv/small)"
    )
    assert found["full_paths"] == ["/srv/small"]


def test_other_failures_are_not_about_space():
    assert nospace.diagnose_no_space(ENSUREPIP, {"/srv/small": 5 << 20, "/opt": None}) is None
    assert nospace.diagnose_no_space("No matching distribution found for torch==2.99.0+cu130") is None
