"""The sandbox host is a CUDA 12.8-era Blackwell inference host."""

from statistics import median

from probes import pip_freeze, stream_decode


def test_cuda_alternatives_chain_points_at_12_8(host):
    # One hop at a time (testinfra's linked_to resolves the whole chain).
    def hop(path):
        return host.check_output(f"readlink {path}")

    assert host.file("/usr/local/cuda").is_symlink
    assert hop("/usr/local/cuda") == "/etc/alternatives/cuda"
    assert hop("/etc/alternatives/cuda") == "/usr/local/cuda-12.8"
    assert hop("/usr/local/cuda-12") == "/etc/alternatives/cuda-12"
    assert hop("/etc/alternatives/cuda-12") == "/usr/local/cuda-12.8"
    display = host.check_output("update-alternatives --query cuda")
    assert "Status: auto" in display


def test_nvcc_reports_12_8(host):
    out = host.check_output("/usr/local/cuda/bin/nvcc --version")
    assert "Cuda compilation tools, release 12.8, V12.8.93" in out
    assert "Build cuda_12.8.r12.8/compiler.35583870_0" in out


def test_toolkit_package_pinned_version(host):
    pkg = host.package("cuda-toolkit-12-8")
    assert pkg.is_installed
    assert pkg.version == "12.8.1-1"
    assert not host.package("cuda-toolkit-13-0").is_installed


def test_apt_source_is_signed(host):
    source = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").content_string
    assert "signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg" in source
    assert "trusted=yes" not in source


def test_venv_holds_cu128_stack(host):
    dists = pip_freeze(host, "/opt/ml-env")
    assert dists["torch"] == "2.9.1+cu128"
    assert dists["sgl-kernel"] == "0.3.21+cu128"
    assert dists["flashinfer-python"] == "0.6.1"
    assert dists["flashinfer-cubin"] == "0.6.1"
    assert dists["flashinfer-jit-cache"] == "0.6.1+cu128"
    assert "/opt/sglang/python" in dists["-e"] or "sglang" in dists["-e"]


def test_torch_reports_cuda_12_8(host):
    out = host.check_output("/opt/ml-env/bin/python -c 'import torch; print(torch.version.cuda)'")
    assert out.strip() == "12.8"


def test_sglang_source_checkout_at_release_tag(host):
    described = host.check_output("git -C /opt/sglang describe --tags --exact-match")
    assert described.strip() == "v0.5.8"


def test_nvidia_smi_double_reports_blackwell(host):
    out = host.check_output("nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader")
    rows = [line.split(", ") for line in out.splitlines()]
    assert len(rows) == 8
    assert {tuple(r) for r in rows} == {("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "590.48.01")}


def test_service_runs_from_the_cu128_venv(host):
    service = host.service("sglang.service")
    assert service.is_running
    assert service.is_enabled
    pid = host.check_output("systemctl show -p MainPID --value sglang.service").strip()
    exe = host.check_output(f"readlink /proc/{pid}/exe")
    cmdline = host.file(f"/proc/{pid}/cmdline").content_string
    assert "/opt/ml-env/bin/python" in cmdline.replace("\0", " ")
    assert exe.startswith("/usr/bin/python3")


def test_streamed_completion_decodes_at_the_12_8_rate(host):
    result = stream_decode(host, max_tokens=128, trials=3)
    rates = [t["output_tok_s"] for t in result["trials"]]
    assert all(t["tokens"] == 128 for t in result["trials"])
    # The field report's CUDA 12.8 plain decode figure, with the simulator's ~1% noise.
    assert abs(median(rates) - 89.5) / 89.5 < 0.05, rates
