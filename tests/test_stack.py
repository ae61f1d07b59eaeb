"""Parsing the running stack and rewriting the service command."""

from pathlib import Path

import pytest

from cuda13_upgrade import stack

TOOLS = Path(__file__).parent / "fixtures" / "tools"


def test_parse_alternatives_query_manual_group():
    parsed = stack.parse_alternatives_query((TOOLS / "update-alternatives-cuda.txt").read_text())
    assert parsed == {
        "name": "cuda",
        "link": "/usr/local/cuda",
        "status": "manual",
        "value": "/usr/local/cuda-12.8",
        "best": "/usr/local/cuda-13.0",
        "alternatives": {"/usr/local/cuda-12.8": 128, "/usr/local/cuda-13.0": 130},
    }


def test_parse_alternatives_query_refuses_the_error_text():
    with pytest.raises(ValueError, match="not an update-alternatives --query answer"):
        stack.parse_alternatives_query("update-alternatives: error: no alternatives for cuda\n")


def test_service_exec_start_joins_continuations():
    text = (TOOLS / "systemctl-cat-sglang.txt").read_text()
    assert stack.service_exec_start(text) == (
        "/opt/ml-env/bin/python -m sglang.launch_server "
        "--model-path /models/Kimi-K2.5-INT4 --tp 8 --host 127.0.0.1 --port 30000"
    )


def test_service_exec_start_honours_a_dropin_reset():
    text = (TOOLS / "systemctl-cat-sglang.txt").read_text() + (
        "\n# /etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf\n"
        "[Service]\nExecStart=\nExecStart=/opt/ml-env-cu130/bin/python -m sglang.launch_server --tp 8\n"
    )
    assert stack.service_exec_start(text) == "/opt/ml-env-cu130/bin/python -m sglang.launch_server --tp 8"


def test_service_exec_start_without_one():
    with pytest.raises(ValueError, match="no ExecStart="):
        stack.service_exec_start("[Service]\nType=simple\n")


def test_rewrite_exec_start_moves_every_path_of_the_old_venv():
    line = "-/opt/ml-env/bin/python -m sglang.launch_server --model-path '/models/Kimi K2.5' --chat-template /opt/ml-env/share/t.jinja"
    assert stack.rewrite_exec_start(line, "/opt/ml-env/", "/opt/ml-env-cu130") == (
        "-/opt/ml-env-cu130/bin/python -m sglang.launch_server --model-path '/models/Kimi K2.5' "
        "--chat-template /opt/ml-env-cu130/share/t.jinja"
    )


def test_rewrite_exec_start_does_not_match_a_sibling_prefix():
    with pytest.raises(ValueError, match="cuda13_old_venv='/opt/ml-env'"):
        stack.rewrite_exec_start(
            "/opt/ml-env-old/bin/python -m sglang.launch_server", "/opt/ml-env", "/opt/x"
        )


def test_build_manifest_from_raw_outputs():
    raw = {
        "host": "gpu-node-01",
        "taken_at": "2026-11-30T01:00:00+00:00",
        "run_id": "20261130T010000Z",
        "venv": "/opt/ml-env",
        "pip_freeze": "torch==2.10.0+cu128\n# comment\nsgl-kernel==0.3.21+cu128\n",
        "alternatives": {
            "cuda": (TOOLS / "update-alternatives-cuda.txt").read_text(),
            "cuda-13": "",
        },
        "cuda_resolved": "/usr/local/cuda-12.8",
        "nvcc": {"release": "12.8", "version": "12.8.93"},
        "packages": {"cuda-toolkit-12-8": "12.8.1-1"},
        "sglang": {"src": "/opt/sglang", "commit": "abc", "dirty": False, "describe": "v0.5.8"},
        "service": {
            "name": "sglang.service",
            "unit_text": (TOOLS / "systemctl-cat-sglang.txt").read_text(),
        },
        "cache_dirs": ["/root/.triton/cache"],
    }
    manifest = stack.build_manifest(raw)
    assert manifest["schema"] == stack.SNAPSHOT_SCHEMA
    assert manifest["venv"]["pip_freeze"] == ["sgl-kernel==0.3.21+cu128", "torch==2.10.0+cu128"]
    assert manifest["cuda"]["alternatives"]["cuda"]["value"] == "/usr/local/cuda-12.8"
    assert manifest["cuda"]["alternatives"]["cuda-13"] is None
    assert manifest["service"]["exec_start"].startswith("/opt/ml-env/bin/python -m sglang.launch_server")
    with pytest.raises(ValueError, match="snapshot is missing pip_freeze"):
        stack.build_manifest({k: v for k, v in raw.items() if k != "pip_freeze"})


def test_freeze_difference():
    assert stack.freeze_difference(["a==1", "torch==2.10.0+cu130"], ["a==1", "torch==2.9.1"]) == {
        "removed": ["torch==2.10.0+cu130"],
        "added": ["torch==2.9.1"],
    }


def test_parse_dpkg_query_keeps_installed_only():
    text = "cuda-toolkit-12-8 12.8.1-1 ii \ncuda-toolkit-13-0 13.0.2-1 rc \ncuda-nvcc-12-8 12.8.93-1 ii \n"
    assert stack.parse_dpkg_query(text) == {
        "cuda-toolkit-12-8": "12.8.1-1",
        "cuda-nvcc-12-8": "12.8.93-1",
    }


def test_parse_alternatives_selections_reads_a_real_host():
    # `update-alternatives --get-selections` of a Debian 12 machine (no CUDA).
    selections = stack.parse_alternatives_selections(
        (TOOLS / "update-alternatives-get-selections.txt").read_text()
    )
    assert selections["awk"] == {"status": "auto", "value": "/usr/bin/mawk"}
    assert all(v["status"] in ("auto", "manual") for v in selections.values())
    assert (
        stack.cuda_alternatives_groups(
            (TOOLS / "update-alternatives-get-selections.txt").read_text(), ["cuda"]
        )
        == []
    )


def test_cuda_alternatives_groups_takes_every_cuda_release_group():
    text = (TOOLS / "update-alternatives-get-selections.txt").read_text() + (
        "cuda                           auto     /usr/local/cuda-12.8\n"
        "cuda-12                        manual   /usr/local/cuda-12.8\n"
        "cuda-12.8                      auto     /usr/local/cuda-12.8\n"
        "cuda-gdb                       auto     /usr/local/cuda-12.8/bin/cuda-gdb\n"
    )
    assert stack.cuda_alternatives_groups(text, ["cuda-13", "awk"]) == ["awk", "cuda", "cuda-12", "cuda-12.8"]


def test_parse_alternatives_selections_refuses_another_text():
    with pytest.raises(ValueError, match="not an update-alternatives --get-selections line"):
        stack.parse_alternatives_selections("update-alternatives: error: unknown argument '--get'\n")
