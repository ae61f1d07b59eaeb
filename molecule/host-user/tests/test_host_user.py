"""A host whose unit runs as sglang, with a 8 MiB /tmp and its worker out of the router."""

import json

from probes import stream_decode


def _snapshot(host):
    return json.loads(host.file("/var/lib/cuda13-upgrade/snapshots/pre-upgrade.json").content_string)


def test_tmp_is_the_small_tmpfs_and_pip_wrote_elsewhere(host):
    assert host.check_output("findmnt -n -o FSTYPE,SIZE /tmp").split() == ["tmpfs", "8M"]
    # pip's TMPDIR was inside the new venv (cuda13_pip_tmpdir), empty after the install.
    tmpdir = host.file("/opt/ml-env-cu130/.pip-tmp")
    assert tmpdir.is_directory and tmpdir.mode == 0o700
    assert host.check_output("ls -A /opt/ml-env-cu130/.pip-tmp") == ""


def test_the_upgrade_was_kept(host):
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "kept", result.get("reason")


def test_the_snapshot_records_the_units_user_and_its_real_caches(host):
    service = _snapshot(host)["service"]
    assert (service["user"], service["group"], service["home"]) == ("sglang", "sglang", "/var/lib/sglang")
    assert service["cache_dirs"]["triton"] == "/var/lib/sglang/.triton/cache"
    assert service["cache_dirs"]["flashinfer"] == "/var/lib/sglang/.cache/flashinfer"
    # The old stack's server wrote its JIT products there, as sglang; the snapshot saw them.
    assert "/var/lib/sglang/.triton/cache" in _snapshot(host)["cache_dirs"]
    assert host.file("/var/lib/sglang/.triton/cache/sandbox-cu128-kernel.json").user == "sglang"


def test_the_new_stack_serves_as_sglang_and_writes_its_own_caches(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    assert host.check_output(f"ps -o user= -p {pid}") == "sglang"
    for name, product in (
        ("triton", "triton/sandbox-cu130-kernel.json"),
        ("flashinfer", "flashinfer/.cache/flashinfer/sandbox-cu130-kernel.json"),
    ):
        directory = host.file(f"/var/cache/cuda13-upgrade/cu130/{name}")
        assert directory.user == "sglang" and directory.group == "sglang", name
        assert host.file(f"/var/cache/cuda13-upgrade/cu130/{product}").user == "sglang", name
    for name in ("torch_extensions", "torchinductor"):
        assert host.file(f"/var/cache/cuda13-upgrade/cu130/{name}").user == "sglang", name
    # The old stack's caches were not written by the new one.
    assert not host.file("/var/lib/sglang/.triton/cache/sandbox-cu130-kernel.json").exists
    assert stream_decode(host, max_tokens=16, trials=1)["trials"]


def test_the_worker_absent_before_the_run_stays_absent(host):
    workers = json.loads(
        host.check_output(
            "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:30100/list_workers').read().decode())\""
        )
    )
    assert workers["urls"] == []
    events = host.file("/var/log/sglang-router-events.jsonl")
    assert not events.exists or events.content_string == ""  # nothing removed, nothing added
    assert not host.file("/var/lib/cuda13-upgrade/router-drain.json").exists
