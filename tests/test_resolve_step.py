"""cuda13_upgrade.steps.resolve: the preflight's resolution of the whole target, once per distinct target.

FakeHost runs the real host modules (``cuda13_resolve``: pip's resolver in a throwaway venv;
``cuda13_venv_read``) against the sandbox mirror's indexes and its SGLang repository, or
answers ``cuda13_resolve`` with what pip really printed (``tests/fixtures/pip``, and the
mirror's report recorded once per module) where the test is about what the step makes of it.
"""

from __future__ import annotations

import multiprocessing
import re
import sys
import time
from pathlib import Path

import pytest
from fakehost import FakeHost

from cuda13_upgrade.hostscripts import pip_resolve
from cuda13_upgrade.steps import resolve
from cuda13_upgrade.steps.host import StepFailed

FIXTURES = Path(__file__).parent / "fixtures" / "pip"

PINS = [
    "torch==2.9.1+cu130",
    "sgl-kernel==0.3.21+cu130",
    "flashinfer-python==0.6.3",
    "flashinfer-cubin==0.6.3",
    "flashinfer-jit-cache==0.6.3+cu130",
]

# pip 26.3 on PyPI: the pins the defaults had beside SGLang v0.5.9 (tests/fixtures/README.md).
PYPI_REFUSAL = (
    "the target stack does not resolve: The user requested torch==2.10.0; sglang 0.5.9 depends on "
    "torch==2.9.1. Change cu130_wheels_requirements, sglang_build_version: pin the versions the SGLang "
    "release requires (its python/pyproject.toml at that ref), or choose the release that requires "
    "your pins."
)


def _options(mirror_url: str, tmp_path: Path, pins=PINS, kernel_index: str = "sgl-whl/cu130", **more):
    return {
        "cu130_wheels_python": sys.executable,
        "cu130_wheels_pip_tmpdir": str(tmp_path / "host" / "venv" / ".pip-tmp"),
        "cu130_wheels_index_url": f"{mirror_url}/whl/cu130",
        "cu130_wheels_extra_index_urls": [
            f"{mirror_url}/{kernel_index}",
            f"{mirror_url}/flashinfer-whl/cu130",
            f"{mirror_url}/pypi/simple",
        ],
        "cu130_wheels_find_links": "",
        "cu130_wheels_pip_extra_args": [],
        "cu130_wheels_pip_environment": {},
        "cu130_wheels_requirements": list(pins),
        "cu130_wheels_resolve_sglang": "",
        "sglang_build_method": "source",
        "sglang_build_repo": f"{mirror_url}/git/sglang.git",
        "sglang_build_version": "v0.5.9",
        **more,
    }


@pytest.fixture(scope="module")
def recorded(mirror_url, tmp_path_factory):
    """What the module cuda13_resolve returned for the coherent target against the mirror."""
    root = tmp_path_factory.mktemp("recorded")
    (root / "host").mkdir()
    options = _options(mirror_url, root)
    found = FakeHost().module(
        "cuda13_resolve",
        {
            "python": sys.executable,
            "pip_tmpdir": options["cu130_wheels_pip_tmpdir"],
            "index_url": options["cu130_wheels_index_url"],
            "extra_index_urls": options["cu130_wheels_extra_index_urls"],
            "requirements": PINS,
            "sglang": resolve.sglang_requirement(options),
        },
    )
    assert found["rc"] == 0, found["stderr"]
    return found


def _pypi_refusal(args):
    return {
        "changed": False,
        "rc": 1,
        "stdout": (FIXTURES / "sglang-0.5.9-torch-2.10.0.stdout").read_text(),
        "stderr": (FIXTURES / "sglang-0.5.9-torch-2.10.0.stderr").read_text(),
        "report": None,
        "directory": "/opt/.cuda13-resolve-x",
    }


def test_the_host_that_resolves_a_refused_target_says_why_in_pips_words(tmp_path):
    host = FakeHost("canary", handlers={"cuda13_resolve": _pypi_refusal})
    with pytest.raises(StepFailed) as failed:
        resolve.resolve(host, _options("https://pypi.org", tmp_path), run_dir=str(tmp_path / "run"))
    assert failed.value.msg == f"canary: {PYPI_REFUSAL} Nothing on the host was changed."


def test_the_other_hosts_of_a_refused_target_name_the_host_that_resolved_it(tmp_path):
    run = str(tmp_path / "run")
    options = _options("https://pypi.org", tmp_path)
    with pytest.raises(StepFailed):
        resolve.resolve(FakeHost("canary", handlers={"cuda13_resolve": _pypi_refusal}), options, run_dir=run)
    follower = FakeHost("follower", handlers={"cuda13_resolve": _pypi_refusal})
    with pytest.raises(StepFailed) as failed:
        resolve.resolve(follower, options, run_dir=run)
    assert failed.value.msg == (
        "follower: its target is the one canary resolves, and that target was refused (the reason is "
        "above, under canary). Nothing on the host was changed."
    )
    # The follower's pip never ran: one resolution per target.
    assert follower.called("cuda13_resolve") == []


def test_an_unresolvable_target_is_refused_before_any_change(tmp_path, mirror_url):
    # The pins the defaults had: flashinfer 0.6.1 beside SGLang v0.5.9 (which pins 0.6.3).
    pins = [
        "torch==2.9.1+cu130",
        "sgl-kernel==0.3.21+cu130",
        "flashinfer-python==0.6.1",
        "flashinfer-cubin==0.6.1",
    ]
    (tmp_path / "host").mkdir()
    with pytest.raises(StepFailed) as failed:
        resolve.resolve(
            FakeHost("localhost"), _options(mirror_url, tmp_path, pins), run_dir=str(tmp_path / "run")
        )
    out = failed.value.msg
    # pip names one of the two conflicting flashinfer pins, which one depends on
    # the order it visits them in (PIP_CONFIG_FILE=os.devnull, tests/conftest.py).
    conflict = re.search(
        r"^localhost: the target stack does not resolve: The user requested flashinfer-(python|cubin)==0\.6\.1",
        out,
    )
    assert conflict, out
    assert re.search(rf"sglang 0\.5\.9 depends on flashinfer[-_]{conflict.group(1)}==0\.6\.3", out), out
    assert "Change cu130_wheels_requirements, sglang_build_version" in out
    assert out.endswith("Nothing on the host was changed.")
    assert not (tmp_path / "host" / "venv").exists()
    assert [p.name for p in (tmp_path / "host").iterdir()] == []


def test_a_pin_no_index_has_is_refused_on_every_host_of_its_target(tmp_path, mirror_url):
    # The torch pin molecule midway's bad-wheel host had.
    options = _options(mirror_url, tmp_path, ["torch==2.99.0+cu130", "sgl-kernel==0.3.21+cu130"])
    (tmp_path / "host").mkdir()
    run = str(tmp_path / "run")
    with pytest.raises(StepFailed) as canary:
        resolve.resolve(FakeHost("canary"), options, run_dir=run)
    assert canary.value.msg.startswith("canary: no index has torch==2.99.0+cu130 (versions there: ")
    with pytest.raises(StepFailed) as follower:
        resolve.resolve(FakeHost("follower"), options, run_dir=run)
    assert follower.value.msg.startswith(
        "follower: its target is the one canary resolves, and that target was refused"
    )
    assert not (tmp_path / "host" / "venv").exists()


def test_a_coherent_target_resolves_in_a_throwaway_directory_that_goes(tmp_path, mirror_url):
    # Before the upgrade pip's temporary directory (inside the new venv) does not exist: its
    # nearest existing parent holds the resolver's throwaway venv and downloads, not /tmp.
    (tmp_path / "host").mkdir()
    host = FakeHost("localhost")
    record = resolve.resolve(host, _options(mirror_url, tmp_path), run_dir=str(tmp_path / "run"))
    pins = {f"{d['name']}=={d['version']}" for d in record["resolved"]}
    assert {"torch==2.9.1+cu130", "nvidia-cudnn-cu13==9.13.0.50", "sglang==0.5.9", "triton==3.5.1"} <= pins
    assert record["resolved_by"] == "localhost"
    assert record["requirement"] == f"sglang @ git+{mirror_url}/git/sglang.git@v0.5.9#subdirectory=python"
    torch = next(d for d in record["resolved"] if d["name"] == "torch")
    assert len(torch["sha256"]) == 64
    assert host.told == [
        "resolved the target: " + ", ".join(f"{d['name']}=={d['version']}" for d in record["resolved"])
    ]
    [(_, args, _)] = [c for c in host.calls if c[0] == "cuda13_resolve"]
    assert args["pip_tmpdir"] == str(tmp_path / "host" / "venv" / ".pip-tmp")
    assert [p.name for p in (tmp_path / "host").iterdir()] == []
    assert not (tmp_path / "host" / "venv").exists()


def test_the_module_makes_its_directory_beside_pips_tmpdir_and_removes_it(tmp_path):
    # A Python that cannot make a venv: the module says so, and leaves nothing.
    (tmp_path / "opt").mkdir()
    found = pip_resolve.resolve(
        {
            "python": "/bin/false",
            "pip_tmpdir": str(tmp_path / "opt" / "ml-env-cu130" / ".pip-tmp"),
            "requirements": ["torch"],
        }
    )
    assert found["failed"] and found["msg"].startswith("/bin/false -m venv ")
    directory = Path(found["directory"])
    assert directory.parent == tmp_path / "opt" and directory.name.startswith(".cuda13-resolve-")
    assert not directory.exists()


@pytest.mark.parametrize(
    ("kernel_index", "kernel"),
    [
        # The CUDA 12.8 build: SGLang 0.5.9 requires sgl-kernel==0.3.21, which the +cu128
        # build satisfies; the stack check after the install refuses its label.
        ("sgl-whl/cu128", "sgl-kernel==0.3.21+cu128"),
        # Molecule midway's bad-wheel host: the +cu130 build with a CUDA 12 object; the
        # check refuses that object, label-blind.
        ("sgl-whl/cu130-mixed", "sgl-kernel==0.3.21+cu130"),
    ],
)
def test_a_kernel_that_only_the_check_after_install_refuses_resolves(
    tmp_path, mirror_url, kernel_index, kernel
):
    pins = [*PINS[:1], kernel, *PINS[2:]]
    (tmp_path / "host").mkdir()
    record = resolve.resolve(
        FakeHost("localhost"),
        _options(mirror_url, tmp_path, pins, kernel_index),
        run_dir=str(tmp_path / "run"),
    )
    assert kernel in {f"{d['name']}=={d['version']}" for d in record["resolved"]}


def test_the_sglang_requirement_is_the_release_of_the_method(tmp_path):
    options = _options("http://127.0.0.1:8080", tmp_path, sglang_build_method="wheel")
    assert resolve.sglang_requirement(options) == "sglang==0.5.9"
    assert (
        resolve.sglang_requirement({**options, "cu130_wheels_resolve_sglang": "sglang==0.5.8"})
        == "sglang==0.5.8"
    )
    with pytest.raises(StepFailed, match="names no release"):
        resolve.sglang_requirement({**options, "sglang_build_version": "3f1c2e9a"})


def test_the_key_is_what_the_resolution_reads(tmp_path):
    options = _options("http://127.0.0.1:8080", tmp_path)
    key = resolve.resolution_key(options, "sglang==0.5.9", "3.11.2")
    assert key == resolve.resolution_key(dict(options), "sglang==0.5.9", "3.11.2")
    assert len(key) == 40
    for changed in (
        {"cu130_wheels_requirements": PINS[:-1]},
        {"cu130_wheels_index_url": "http://127.0.0.1:8080/whl/nightly/cu130"},
        {"cu130_wheels_extra_index_urls": []},
        {"cu130_wheels_find_links": "/var/lib/cuda13-upgrade/wheels/cu130"},
        {"cu130_wheels_pip_extra_args": ["--pre"]},
    ):
        assert resolve.resolution_key({**options, **changed}, "sglang==0.5.9", "3.11.2") != key
    assert resolve.resolution_key(options, "sglang==0.5.8", "3.11.2") != key
    assert resolve.resolution_key(options, "sglang==0.5.9", "3.12.1") != key


def test_another_python_is_another_target(tmp_path, recorded):
    calls = []

    def resolver(args):
        calls.append(args)
        return recorded

    run = str(tmp_path / "run")
    options = _options("http://127.0.0.1:8080", tmp_path)
    records = []
    for name, version in (("canary", "3.11.2"), ("node-2", "3.11.2"), ("odd", "3.12.1")):
        reader = {"cuda13_venv_read": lambda args, v=version: {"python_version": v}}
        records.append(
            resolve.resolve(
                FakeHost(name, handlers={**reader, "cuda13_resolve": resolver}), options, run_dir=run
            )
        )
    assert [r["resolved_by"] for r in records] == ["canary", "canary", "odd"]
    assert len(calls) == 2
    assert records[0]["resolved"] == records[1]["resolved"] == records[2]["resolved"]


def test_check_mode_resolves_too(tmp_path, recorded):
    host = FakeHost("canary", check_mode=True, handlers={"cuda13_resolve": lambda args: recorded})
    record = resolve.resolve(host, _options("http://127.0.0.1:8080", tmp_path), run_dir=str(tmp_path / "run"))
    assert record["resolved"] and host.called("cuda13_resolve")


def _worker(name, options, run, recorded, calls, barrier, queue):
    """One host's task in its own process, as Ansible forks a worker per host."""

    def resolver(args):
        with open(calls, "a", encoding="utf-8") as handle:
            handle.write(f"{name}\n")
        time.sleep(1)  # the other worker waits on the key's lock meanwhile
        return recorded

    barrier.wait()
    try:
        record = resolve.resolve(FakeHost(name, handlers={"cuda13_resolve": resolver}), options, run_dir=run)
        queue.put((name, record))
    except StepFailed as exc:
        queue.put((name, exc.msg))


def test_one_resolution_per_target_across_two_worker_processes(tmp_path, recorded):
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(2), context.Queue()
    calls = tmp_path / "calls"
    options = _options("http://127.0.0.1:8080", tmp_path)
    workers = [
        context.Process(
            target=_worker, args=(name, options, str(tmp_path / "run"), recorded, calls, barrier, queue)
        )
        for name in ("canary", "follower")
    ]
    for worker in workers:
        worker.start()
    found = dict(queue.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    [leader] = calls.read_text().split()
    assert {found["canary"]["resolved_by"], found["follower"]["resolved_by"]} == {leader}
    assert found["canary"]["resolved"] == found["follower"]["resolved"]
    assert found["canary"]["key"] == found["follower"]["key"]
    assert {d["name"] for d in found["canary"]["resolved"]} >= {
        "torch",
        "sgl-kernel",
        "sglang",
        "nvidia-cudnn-cu13",
    }
