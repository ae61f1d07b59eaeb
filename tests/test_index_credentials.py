"""Index credentials: a netrc file is the route, and it works through every pip call's ``--isolated``;
``PIP_*`` variables, which ``--isolated`` ignores, are refused.

pip reads a netrc file for an index URL without credentials (pip's docs, "Authentication",
netrc support: pip/_internal/network/auth.py calls requests' ``get_netrc_auth``, which reads
``$NETRC`` or ``~/.netrc``); ``--isolated`` only makes pip ignore its own ``PIP_*`` variables
and configuration files (pip's ``--isolated`` help). These tests run the real pip of the
project's venv against an index on the loopback that wants basic authentication.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cuda13_upgrade import options as rules
from cuda13_upgrade.hostscripts import pip_resolve
from cuda13_upgrade.steps import wheels

USER, PASSWORD = "ci", "tok-5e1f9b3d"
WHEEL = "demo_pkg-1.0-py3-none-any.whl"


def _wheel() -> bytes:
    files = {
        "demo_pkg/__init__.py": b"",
        "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        "demo_pkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n"
        for name, data in files.items()
    )
    files["demo_pkg-1.0.dist-info/RECORD"] = (record + "demo_pkg-1.0.dist-info/RECORD,,\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


class _Index(BaseHTTPRequestHandler):
    """A PEP 503 index of one wheel that answers 401 without ``USER:PASSWORD``."""

    wheel = _wheel()
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        wanted = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        type(self).asked.append(self.headers.get("Authorization") or "")
        if self.headers.get("Authorization") != wanted:
            self._send(401, b"Unauthorized", [("WWW-Authenticate", 'Basic realm="index"')])
        elif self.path.rstrip("/") == "/simple/demo-pkg":
            sha = hashlib.sha256(self.wheel).hexdigest()
            page = f'<html><body><a href="/files/{WHEEL}#sha256={sha}">{WHEEL}</a></body></html>'
            self._send(200, page.encode(), [("Content-Type", "text/html")])
        elif self.path == f"/files/{WHEEL}":
            self._send(200, self.wheel, [("Content-Type", "application/octet-stream")])
        else:
            self._send(404, b"Not Found", [])

    def _send(self, status: int, body: bytes, headers: list) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        pass


@pytest.fixture(scope="module")
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def _netrc(directory: Path) -> Path:
    path = directory / ".netrc"
    path.write_text(f"machine 127.0.0.1\nlogin {USER}\npassword {PASSWORD}\n")
    path.chmod(0o600)
    return path


def _clean_env(home: Path) -> dict[str, str]:
    """The process environment without pip's own variables and with ``home`` as HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "NETRC"}
    return {**env, "HOME": str(home)}


def _download(index: str, env: dict[str, str], dest: Path) -> subprocess.CompletedProcess:
    """pip download as the wheels step runs pip: ``--isolated`` and its ``source_args``."""
    sources = wheels.source_args({"cu130_wheels_index_url": index})
    argv = [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--dest", str(dest)]
    argv += ["--disable-pip-version-check", "--retries", "0", "--timeout", "5", *sources, "demo-pkg==1.0"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)


def test_without_credentials_the_index_refuses_pip(index, tmp_path):
    done = _download(index, _clean_env(tmp_path), tmp_path / "out")
    assert done.returncode != 0
    assert not (tmp_path / "out" / WHEEL).exists()


def test_a_netrc_in_the_home_of_the_user_pip_runs_as_works_with_isolated(index, tmp_path):
    _netrc(tmp_path)
    done = _download(index, _clean_env(tmp_path), tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / WHEEL).is_file()
    assert PASSWORD not in done.stdout + done.stderr


def test_a_netrc_named_by_NETRC_works_with_isolated(index, tmp_path):
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    env = {**_clean_env(tmp_path / "empty-home"), "NETRC": str(_netrc(elsewhere))}
    done = _download(index, env, tmp_path / "out")
    assert done.returncode == 0, done.stderr


def test_PIP_INDEX_URL_with_credentials_is_ignored_by_isolated(index, tmp_path):
    """The route the docs gave before: a PIP_INDEX_URL with userinfo in the pip environment."""
    with_userinfo = index.replace("http://", f"http://{USER}:{PASSWORD}@")
    env = {**_clean_env(tmp_path), "PIP_INDEX_URL": with_userinfo}
    done = _download(index, env, tmp_path / "out")
    assert done.returncode != 0


def test_the_preflight_resolution_reads_the_netrc(index, tmp_path, monkeypatch):
    """The host script of the preflight's resolution (``pip --isolated install --dry-run --report``
    in a throwaway venv), with the environment the host's pip has (HOME)."""
    for name in [k for k in os.environ if k.startswith("PIP_")] + ["NETRC"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    params = {
        "python": sys.executable,
        "pip_tmpdir": str(tmp_path / "pip-tmp"),
        "index_url": index,
        "extra_index_urls": [],
        "find_links": "",
        "pip_extra_args": [],
        "requirements": ["demo-pkg==1.0"],
        "sglang": "",
        "environment": {},
    }
    refused = pip_resolve.resolve(params)
    assert refused["rc"] != 0
    _netrc(tmp_path)
    found = pip_resolve.resolve(params)
    assert found["rc"] == 0, found["stderr"]
    assert [i["metadata"]["name"] for i in found["report"]["install"]] == ["demo-pkg"]
    assert PASSWORD not in repr(found)


@pytest.mark.parametrize("option", ["cu130_wheels_pip_environment", "sglang_build_environment"])
def test_pip_variables_that_isolated_ignores_are_refused(option):
    failures = rules.pip_environment_failures(
        {option: {"PIP_INDEX_URL": f"https://{USER}:{PASSWORD}@pypi.example/simple", "NETRC": "/etc/n"}}
    )
    assert [f["option"] for f in failures] == [option]
    message = failures[0]["message"]
    assert message == (
        f"{option} sets PIP_INDEX_URL, which pip ignores: every pip call of the upgrade runs with "
        "--isolated, which makes pip read none of its PIP_* variables (the index options are given "
        "on its command line). Option: " + option + ". Fix: remove PIP_INDEX_URL; for an index that "
        "wants credentials put them in a netrc file on the host (docs/credentials.md)."
    )
    assert PASSWORD not in repr(failures)


def test_the_artifact_cache_s_index_url_variable_is_refused_and_others_kept():
    failures = rules.pip_environment_failures(
        {"artifact_cache_pip_environment": {"PIP_INDEX_URL": "x", "PIP_CERT": "/etc/ca.pem", "NETRC": "/n"}}
    )
    assert len(failures) == 1
    assert failures[0]["message"].startswith(
        "artifact_cache_pip_environment sets PIP_INDEX_URL, which pip ignores: pip download's "
        "--index-url (artifact_cache_index_url) wins over it."
    )
    assert rules.pip_environment_failures({"cu130_wheels_pip_environment": {"NETRC": "/etc/n"}}) == []


def test_the_option_check_refuses_them_before_any_host_is_touched():
    """Through :func:`cuda13_upgrade.options.validate`, as the action cuda13_options runs it."""
    from cuda13_upgrade import options_doc

    specs = options_doc.load_specs(Path(__file__).resolve().parents[1])
    given = {"cu130_wheels_pip_environment": {"PIP_EXTRA_INDEX_URL": f"https://{USER}:{PASSWORD}@x/simple"}}
    checked = rules.validate(given, specs)
    assert checked["ok"] is False
    assert [f["option"] for f in checked["failures"]] == ["cu130_wheels_pip_environment"]
    assert checked["failures"][0]["message"].startswith(
        "cu130_wheels_pip_environment sets PIP_EXTRA_INDEX_URL, which pip ignores"
    )
    assert PASSWORD not in repr(checked["failures"])
    assert rules.validate({"cu130_wheels_pip_environment": {"NETRC": "/etc/cuda13/netrc"}}, specs)["ok"]


def test_the_artifact_cache_s_pip_download_on_the_control_node_reads_its_netrc(index, tmp_path, monkeypatch):
    from cuda13_upgrade.steps import artifacts

    for name in [k for k in os.environ if k.startswith("PIP_")] + ["NETRC"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    options = {
        "artifact_cache_python": sys.executable,
        "artifact_cache_dir": str(tmp_path / "cache"),
        "artifact_cache_index_url": index,
        "artifact_cache_extra_index_urls": [],
        "artifact_cache_platforms": ["manylinux_2_28_x86_64"],
        "artifact_cache_python_version": "3.11",
        "artifact_cache_implementation": "cp",
        "artifact_cache_abi": "cp311",
        "artifact_cache_pip_extra_args": [],
        "artifact_cache_requirements": ["demo-pkg==1.0"],
    }
    controller = artifacts.Controller(copy=lambda *a: {}, run_id="r1")
    with pytest.raises(artifacts.StepFailed):
        artifacts.fetch(options, controller, check_mode=False)
    _netrc(tmp_path)
    fetched = artifacts.fetch(options, controller, check_mode=False)
    assert fetched["fetched_files"] == [WHEEL]
