"""Whatever failed, each host serves on one complete stack."""

import json

import pytest
from probes import pip_freeze, stream_decode


def _serving(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    venv = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")[0].rsplit("/bin/", 1)[0]
    environ = host.file(f"/proc/{pid}/environ").content_string.split("\0")
    cuda_home = next((e.split("=", 1)[1] for e in environ if e.startswith("CUDA_HOME=")), None)
    return venv, cuda_home


def _labels(host, venv):
    dists = pip_freeze(host, venv)
    return {
        dists["torch"].split("+")[1],
        dists["sgl-kernel"].split("+")[1],
        dists["flashinfer-jit-cache"].split("+")[1],
    }


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("bad-wheel", "wheels"),
        ("bad-build", "sglang_build"),
        ("stack-faults", "wheels"),
        ("full-disk", "wheels"),
    ],
)
def test_failed_host_is_back_on_the_old_stack(hosts, name, step):
    host = hosts[name]
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "rolled_back"
    assert result["failed_step"] == step
    venv, cuda_home = _serving(host)
    assert venv == "/opt/ml-env"
    assert cuda_home == "/usr/local/cuda"
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.8"
    assert _labels(host, venv) == {"cu128"}
    assert not host.file("/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf").exists
    assert stream_decode(host, max_tokens=32, trials=1)["trials"][0]["tokens"] == 32


def test_bad_wheel_resolved_installed_and_refused_by_the_stack_check(hosts):
    # pip's resolver accepted the +cu130 kernel with a CUDA 12 object (its version is
    # SGLang's pin); the host got exactly the resolved set, and the check after the
    # install refused that object, although the label says cu130 (the same text:
    # tests/test_elf_objects.py::test_the_mirrors_mixed_kernel_installs_and_the_check_refuses_its_cuda_12_object).
    result = json.loads(hosts["bad-wheel"].file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert "sgl-kernel==0.3.21+cu130" in result["resolved_target"]
    assert (
        "sgl-kernel 0.3.21+cu130 ships shared objects built for another CUDA major than the target "
        "CUDA 13, whatever its version label says: sgl_kernel/spatial_ops.abi3.so needs "
        "libnvrtc.so.12, libcudart.so.12" in result["error"]
    )


def test_stack_faults_installed_and_refused_by_the_stack_check_before_the_switch(hosts):
    # pip installed both overlap stand-ins and the compat libcuda stand-in without a word;
    # the check after the install refused both faults (the same texts:
    # tests/test_stack_overlaps_compat.py).
    result = json.loads(hosts["stack-faults"].file("/var/lib/cuda13-upgrade/result.json").content_string)
    error = result["error"]
    assert (
        "sandbox_overlap_standin/shared.py is written by sandbox-overlap-standin-a 1.0 and "
        "sandbox-overlap-standin-b 1.0 with different contents: the one installed last won" in error
    )
    assert (
        "/sandbox_compat_libcuda_standin/lib/libcuda.so.1 (libcuda 580.65.06, in the new venv) would be "
        "loaded instead of the NVIDIA driver's libcuda (590.48.01): " in error
    )
    assert (
        "not NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition: CUDA fails with "
        "cudaErrorCompatNotSupportedOnDevice (804, " in error
    )
    assert (
        "the driver 590.48.01 is newer than this compat library (580.65.06): CUDA fails with "
        "cudaErrorSystemDriverMismatch (803, " in error
    )
    assert "Remedy: uninstall sandbox-compat-libcuda-standin from the new venv" in error
    # Refused before the host left service: never drained nor switched.
    assert not {"drain", "switch"} & {s["step"] for s in result["steps"]}


def test_full_disk_is_named_and_what_the_run_wrote_there_is_gone(hosts):
    host = hosts["full-disk"]
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    # The step's own text may be pip's "[Errno 28] No space left on device" or
    # only ensurepip's exit status; either way the full filesystem is named.
    assert "the step ran out of disk space" in result["error"]
    assert "/srv/cu130" in result["error"]
    assert "Removed /srv/cu130/ml-env-cu130" in result["error"]
    # The filler (the other process) is all that is left on that filesystem:
    # the partial venv and pip's temporary files are gone.
    assert host.check_output("ls -A /srv/cu130") == "filler"


def test_bad_build_is_refused_before_building_naming_the_skew_and_the_option(hosts):
    host = hosts["bad-build"]
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert "the toolkit's nvcc is CUDA 12.8 but torch was built for CUDA 13.0" in result["error"]
    assert "sglang_build_cuda_home=/usr/local/cuda-12.8" in result["error"]
    # Refused before the host left service: it was never drained nor switched.
    assert [s["step"] for s in result["steps"]][-2:] == ["rollback", "result"]
    assert not {"drain", "switch"} & {s["step"] for s in result["steps"]}


@pytest.mark.parametrize(("name", "stopped_run"), [("killed", None), ("paused", "molecule-midway")])
def test_stopped_host_ends_on_the_new_stack(hosts, name, stopped_run):
    # killed: ansible-playbook SIGKILLed after the switch (its host's last run
    # found it already kept); paused: unreachable after the switch, its host's
    # last run resolved that stopped run. Either way: kept, lock released.
    host = hosts[name]
    result = json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)
    assert result["status"] == "kept"
    if stopped_run:
        assert result["recovered"]["run_id"] == stopped_run
        assert result["recovered"]["step"] in ("switch", "verify")
        # The stopped run left the new stack's drop-ins with the old stack
        # serving (the host was cut off before or during the restart): the
        # re-run measured EAGLE-3 on the new stack, not on the old server
        # (default scenario: 54.1 tok/s on CUDA 12.8, 96.1 on CUDA 13).
        assert result["decisions"]["eagle3"]["change_pct"] > 50
    venv, cuda_home = _serving(host)
    assert venv == "/opt/ml-env-cu130"
    assert cuda_home == "/usr/local/cuda-13.0"
    assert _labels(host, venv) == {"cu130"}
    assert not host.file("/etc/systemd/system/sglang.service.d/60-cuda13-profile.conf").exists
    assert not host.file("/var/lib/cuda13-upgrade/run.lock").exists
    assert stream_decode(host, max_tokens=32, trials=1)["trials"][0]["tokens"] == 32
