"""A host whose run was refused keeps its CUDA 12.8 stack, untouched, and serves from the old venv."""


def test_no_toolkit_13_and_cuda_still_12_8(host):
    assert not host.package("cuda-toolkit-13-0").is_installed
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.8"


def test_no_new_stack_no_state(host):
    assert not host.file("/opt/ml-env-cu130").exists
    assert not host.file("/opt/sglang-cu130").exists
    assert not host.file("/var/lib/cuda13-upgrade").exists
    assert not host.file("/etc/systemd/system/sglang.service.d").exists


def test_service_still_serves_from_the_old_venv(host):
    assert host.service("sglang.service").is_running
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    assert host.file(f"/proc/{pid}/cmdline").content_string.startswith("/opt/ml-env/bin/python")
