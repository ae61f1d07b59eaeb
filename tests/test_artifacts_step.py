"""cuda13_upgrade.steps.artifacts: the fleet's wheels fetched once per run on the control node, copied to each host.

``pip download`` runs for real against the sandbox mirror (the control node's part runs in
the action's process); the hosts are FakeHosts whose ``file`` and ``find`` are answered on
``tmp_path`` as Ansible's modules answer, and the copy is the Controller's callable (the
action plugin's is Ansible's own ``copy``; tests/test_artifact_cache.py runs it).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakehost import FakeHost

from cuda13_upgrade.steps import artifacts
from cuda13_upgrade.steps.host import StepFailed

# The hosts' platform as the role's defaults give it (glibc 2.28, x86_64).
PLATFORMS = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "roles" / "artifact_cache" / "defaults" / "main.yml").read_text()
)["artifact_cache_platforms"]


def _options(tmp_path: Path, mirror_url: str = "http://127.0.0.1:9", **more) -> dict:
    return {
        "artifact_cache_python": sys.executable,
        "artifact_cache_dir": str(tmp_path / "reports" / "artifact-cache" / "cu130"),
        "artifact_cache_index_url": f"{mirror_url}/whl/cu130",
        "artifact_cache_extra_index_urls": [f"{mirror_url}/sgl-whl/cu130", f"{mirror_url}/pypi/simple"],
        "artifact_cache_platforms": PLATFORMS,
        "artifact_cache_python_version": "3.11",
        "artifact_cache_implementation": "cp",
        "artifact_cache_abi": "cp311",
        "artifact_cache_pip_extra_args": [],
        "artifact_cache_pip_environment": {},
        "artifact_cache_requirements": ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"],
        "artifact_cache_host_dir": str(tmp_path / "{host}" / "wheels"),
        **more,
    }


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes(), usedforsecurity=False).hexdigest()


def _host(name: str, tmp_path: Path, *, check_mode: bool = False) -> FakeHost:
    def file(args):
        path = Path(args["path"])
        if path.is_dir():
            return {"changed": False}
        if not check_mode:
            path.mkdir(parents=True)
        return {"changed": True}

    def find(args):
        [directory] = args["paths"]
        found = sorted(Path(directory).glob("*.whl")) if Path(directory).is_dir() else []
        return {"changed": False, "files": [{"path": str(p), "checksum": _sha1(p)} for p in found]}

    return FakeHost(
        name, check_mode=check_mode, handlers={"ansible.builtin.file": file, "ansible.builtin.find": find}
    )


def _for(options: dict, host: str) -> dict:
    return {**options, "artifact_cache_host_dir": options["artifact_cache_host_dir"].format(host=host)}


class Copies:
    """The Controller's copy: the file to the host's path, 0644, changed when it was not the same."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, src: str, dest: str, mode: str) -> dict:
        self.sent.append(Path(dest).name)
        same = Path(dest).is_file() and Path(dest).read_bytes() == Path(src).read_bytes()
        shutil.copyfile(src, dest)
        Path(dest).chmod(int(mode, 8))
        return {"changed": not same, "dest": dest}


def _pip_download(log: Path):
    def run(argv, env):
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(list(argv)) + "\n")
        return subprocess.run(list(argv), env=dict(env), capture_output=True, text=True, check=False)

    return run


@pytest.mark.parametrize(
    ("change", "got"),
    [
        (
            {"artifact_cache_requirements": "torch==2.9.1+cu130"},
            ('"torch==2.9.1+cu130"', json.dumps(PLATFORMS)),
        ),
        (
            {"artifact_cache_platforms": []},
            (json.dumps(["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"]), "[]"),
        ),
    ],
)
def test_requirements_and_platforms_must_be_non_empty_lists(tmp_path, change, got):
    controller = artifacts.Controller(copy=Copies(), run_id="r1")
    with pytest.raises(StepFailed) as failed:
        artifacts.fetch_and_copy(
            _host("a", tmp_path), _for(_options(tmp_path, **change), "a"), controller=controller
        )
    assert failed.value.msg == (
        f"artifact_cache_requirements must be a non-empty list of requirements (got {got[0]}) and "
        f"artifact_cache_platforms a non-empty list of platform tags (got {got[1]})."
    )


def test_pip_download_is_fetch_ymls_command_for_the_hosts_platform(tmp_path):
    options = _options(tmp_path, artifact_cache_pip_extra_args=["--pre"])
    assert artifacts.download_argv(options) == [
        sys.executable,
        *("-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir", "--progress-bar=off"),
        *("--dest", options["artifact_cache_dir"]),
        *("--index-url", "http://127.0.0.1:9/whl/cu130"),
        "--extra-index-url=http://127.0.0.1:9/sgl-whl/cu130",
        "--extra-index-url=http://127.0.0.1:9/pypi/simple",
        *(f"--platform={tag}" for tag in PLATFORMS),
        "--python-version=3.11",
        "--implementation=cp",
        "--abi=cp311",
        "--only-binary=:all:",
        "--pre",
        "torch==2.9.1+cu130",
        "sgl-kernel==0.3.21+cu130",
    ]
    assert artifacts.fetch_key(options) != artifacts.fetch_key(
        {**options, "artifact_cache_platforms": PLATFORMS[:1]}
    )


def _worker(name, options, tmp_path, log, barrier, queue):
    barrier.wait()
    copies = Copies()
    controller = artifacts.Controller(copy=copies, run_id="run-1", run=_pip_download(log))
    try:
        record = artifacts.fetch_and_copy(_host(name, tmp_path), _for(options, name), controller=controller)
        queue.put((name, record))
    except StepFailed as exc:
        queue.put((name, exc.msg))


def test_one_fetch_per_run_and_target_for_the_hosts_of_two_workers(tmp_path, mirror_url):
    options = _options(tmp_path, mirror_url)
    log = tmp_path / "downloads.jsonl"
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_worker, args=(n, options, tmp_path, log, barrier, queue)) for n in ("a", "b")
    ]
    for worker in workers:
        worker.start()
    found = dict(queue.get(timeout=300) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    # pip download ran once, for both hosts.
    assert len(log.read_text().splitlines()) == 1
    cache = Path(options["artifact_cache_dir"])
    wheels = sorted(p.name for p in cache.glob("*.whl"))
    assert any(name.startswith("torch-2.9.1+cu130-") for name in wheels), json.dumps(found)
    assert any(name.startswith("nvidia_") for name in wheels)  # torch's closure, which the pins do not name
    leader = found["a"]["fetched_by"]
    assert found["b"]["fetched_by"] == leader
    for host in ("a", "b"):
        record = found[host]
        assert record["files"] == record["fetched_files"] == wheels
        assert record["fetched_bytes"] == sum((cache / name).stat().st_size for name in wheels)
        assert record["find_links"] == str(tmp_path / host / "wheels")
        assert record["copied"] == wheels and record["changed"] is True
        assert sorted(p.name for p in (tmp_path / host / "wheels").iterdir()) == wheels

    # The next run finds everything there: it fetches nothing and sends nothing.
    copies = Copies()
    controller = artifacts.Controller(copy=copies, run_id="run-2", run=_pip_download(log))
    again = artifacts.fetch_and_copy(_host("a", tmp_path), _for(options, "a"), controller=controller)
    assert len(log.read_text().splitlines()) == 2
    assert (again["fetched_files"], again["fetched_bytes"], again["files"]) == ([], 0, wheels)
    assert again["copied"] == [] and again["changed"] is False and copies.sent == []

    # Only what a host lacks, or holds with another checksum, is sent.
    host_dir = tmp_path / "b" / "wheels"
    (host_dir / wheels[0]).unlink()
    (host_dir / wheels[1]).write_bytes(b"a half-written wheel")
    controller = artifacts.Controller(copy=copies, run_id="run-2", run=_pip_download(log))
    third = artifacts.fetch_and_copy(_host("b", tmp_path), _for(options, "b"), controller=controller)
    assert len(log.read_text().splitlines()) == 2  # the same run: its fetch is taken
    assert third["copied"] == sorted(wheels[:2]) and third["changed"] is True
    assert _sha1(host_dir / wheels[1]) == _sha1(cache / wheels[1])


def test_a_failed_fetch_is_the_fetching_hosts_and_named_by_the_others(tmp_path):
    def refused(argv, env):
        return subprocess.CompletedProcess(
            argv, 1, "Looking in indexes: http://127.0.0.1:9/whl/cu130\n",
            "ERROR: Could not find a version that satisfies the requirement torch==2.9.1+cu130 (from versions: none)\n"
            "ERROR: No matching distribution found for torch==2.9.1+cu130\n",
        )  # fmt: skip

    options = _options(tmp_path)
    controller = artifacts.Controller(copy=Copies(), run_id="r1", run=refused)
    with pytest.raises(StepFailed) as failed:
        artifacts.fetch_and_copy(_host("a", tmp_path), _for(options, "a"), controller=controller)
    assert failed.value.msg == (
        f"pip download of the new stack's wheels into {options['artifact_cache_dir']} failed (rc 1): "
        "Looking in indexes: http://127.0.0.1:9/whl/cu130 ERROR: Could not find a version that satisfies the "
        "requirement torch==2.9.1+cu130 (from versions: none) ERROR: No matching distribution found for "
        "torch==2.9.1+cu130"
    )
    with pytest.raises(StepFailed) as follower:
        artifacts.fetch_and_copy(_host("b", tmp_path), _for(options, "b"), controller=controller)
    assert follower.value.msg == (
        "b: the wheels of its target were fetched on the control node for a, and that fetch failed "
        "(the reason is above, under a). Nothing on the host was changed."
    )
    assert not (tmp_path / "b").exists()
    # pip's output is not shown when the operator gave pip an environment (credentials).
    secret = {"artifact_cache_pip_environment": {"PIP_INDEX_URL": "https://user:secret@pypi.example/simple"}}
    controller = artifacts.Controller(copy=Copies(), run_id="r2", run=refused)
    with pytest.raises(StepFailed) as hidden:
        artifacts.fetch_and_copy(
            _host("a", tmp_path), _for(_options(tmp_path, **secret), "a"), controller=controller
        )
    assert hidden.value.msg.endswith(
        "failed (rc 1): its output is hidden: artifact_cache_pip_environment is set"
    )


def test_check_mode_fetches_nothing_and_reports_what_it_would_send(tmp_path):
    options = _options(tmp_path)
    cache = Path(options["artifact_cache_dir"])
    cache.mkdir(parents=True)
    (cache / "wheel-0.45.1-py3-none-any.whl").write_bytes(b"the cache's copy")

    def never(argv, env):
        raise AssertionError("pip download ran in check mode")

    copies = Copies()
    controller = artifacts.Controller(copy=lambda src, dest, mode: copies.sent.append(dest) or {"changed": True},
                                      run_id="r1", run=never)  # fmt: skip
    host = _host("a", tmp_path, check_mode=True)
    record = artifacts.fetch_and_copy(host, _for(options, "a"), controller=controller)
    assert record["files"] == ["wheel-0.45.1-py3-none-any.whl"] and record["fetched_files"] == []
    assert record["changed"] is True and record["copied"] == ["wheel-0.45.1-py3-none-any.whl"]
    assert not (tmp_path / "a").exists()
