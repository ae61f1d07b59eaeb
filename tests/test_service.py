"""The serving unit's user, group and environment, and the caches they imply."""

import pytest

from cuda13_upgrade.errors import ParseError
from cuda13_upgrade.service import cache_dirs, parse_environ, parse_passwd, parse_show, service_identity

# systemctl show -p User -p Group -p Environment -p MainPID prints the
# properties in this form (src/shared/bus-print-properties.c: the list
# space-separated, an entry with a space as "[unprintable]").
SHOW_SGLANG = (
    "MainPID=4242\n"
    "User=sglang\n"
    "Group=sglang\n"
    "Environment=XDG_CACHE_HOME=/srv/sglang/cache HF_HOME=/models/hf [unprintable]\n"
)
SHOW_ROOT = "MainPID=0\nUser=\nGroup=\nEnvironment=\n"
PASSWD_SGLANG = "sglang:x:998:996:SGLang server:/var/lib/sglang:/usr/sbin/nologin\n"


def test_parse_show_reads_user_group_environment_and_main_pid():
    unit = parse_show(SHOW_SGLANG)
    assert unit == {
        "user": "sglang",
        "group": "sglang",
        "environment": {"XDG_CACHE_HOME": "/srv/sglang/cache", "HF_HOME": "/models/hf"},
        "unprintable": 1,
        "main_pid": 4242,
    }
    with pytest.raises(ParseError, match="not Key=value"):
        parse_show("User sglang\n")


def test_a_unit_without_user_runs_as_root_with_roots_caches():
    identity = service_identity(SHOW_ROOT, "root:x:0:0:root:/root:/bin/bash\n")
    assert identity["user"] == "root" and identity["group"] == "0" and identity["home"] == "/root"
    # The locations the snapshot assumed before it read the unit.
    assert identity["cache_dirs"] == {
        "triton": "/root/.triton/cache",
        "flashinfer": "/root/.cache/flashinfer",
        "torch_extensions": "/root/.cache/torch_extensions",
        "torchinductor": "/tmp/torchinductor_root",
    }


def test_a_service_user_has_its_caches_under_its_home_and_variables():
    identity = service_identity(SHOW_SGLANG, PASSWD_SGLANG)
    assert (identity["user"], identity["group"], identity["uid"], identity["gid"]) == (
        "sglang",
        "sglang",
        998,
        996,
    )
    assert identity["home"] == "/var/lib/sglang" and identity["source"] == "unit"
    assert identity["cache_dirs"] == {
        "triton": "/var/lib/sglang/.triton/cache",
        "flashinfer": "/var/lib/sglang/.cache/flashinfer",
        "torch_extensions": "/srv/sglang/cache/torch_extensions",  # XDG_CACHE_HOME
        "torchinductor": "/tmp/torchinductor_sglang",
    }


def test_the_running_process_environment_wins_over_the_unit_text():
    environ = "PATH=/usr/bin\0HOME=/home/svc\0USER=sglang\0TRITON_CACHE_DIR=/fast/triton\0FLASHINFER_WORKSPACE_BASE=/fast\0"
    identity = service_identity(SHOW_SGLANG, PASSWD_SGLANG, environ)
    assert identity["source"] == "process" and identity["home"] == "/home/svc"
    assert identity["cache_dirs"]["triton"] == "/fast/triton"
    assert identity["cache_dirs"]["flashinfer"] == "/fast/.cache/flashinfer"
    assert identity["cache_dirs"]["torch_extensions"] == "/home/svc/.cache/torch_extensions"
    assert "PATH" not in identity["environment"]
    assert parse_environ("A=1\0B=x=y\0\0") == {"A": "1", "B": "x=y"}


def test_an_unknown_user_is_refused_naming_it():
    with pytest.raises(ParseError, match="'sglang'.*Option: cuda13_service_name"):
        service_identity(SHOW_SGLANG, "")
    with pytest.raises(ParseError, match="getent passwd"):
        parse_passwd("sglang:x:notanumber:1::/x:/bin/sh")


def test_cache_dirs_follow_tmpdir_for_inductor():
    assert cache_dirs({"user": "u", "environment": {"HOME": "/h", "TMPDIR": "/scratch"}})[
        "torchinductor"
    ] == ("/scratch/torchinductor_u")


def test_the_identity_of_a_unit_and_the_message_of_a_user_passwd_lacks():
    assert service_identity(SHOW_SGLANG, PASSWD_SGLANG)["user"] == "sglang"
    with pytest.raises(ParseError, match="the service's User="):
        service_identity(SHOW_SGLANG, "")
