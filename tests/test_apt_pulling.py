"""A toolkit metapackage that pulls the driver, in the sandbox's apt repository.

NVIDIA's repository chains ``cuda-13-0`` -> ``cuda-runtime-13-0`` -> ``cuda-drivers`` ->
``nvidia-driver``, so ``apt-get install cuda-13-0`` upgrades the installed driver
(``sandbox/mirror/records/apt/nvidia-cuda-metapackages.md``: what of that chain is a real
record and what is not). The sandbox's repository carries the chain; these tests build it,
read its ``Packages`` index, and let apt itself simulate both packages on the dpkg state of
the molecule ``host-apt`` scenario's host (``cuda-toolkit-12-8`` and the driver's packages at
the older version ``molecule/host-apt/prepare.yml`` installs): the toolkit step's plan
(``cuda13_upgrade.steps.toolkit.plan``, action ``cuda13_toolkit`` ``state: planned``) refuses
``cuda-13-0``, naming the driver's packages, and accepts ``cuda-toolkit-13-0``.

The simulations are recorded in ``tests/fixtures/apt/`` (real ``apt-get -s`` outputs against
this repository): the step judges them as the answers of its module ``cuda13_apt_simulate``.
The tests that need apt run that module itself (its scratch apt state, the sources of a
directory under ``tmp_path``), on the host-apt host's dpkg status given through ``APT_CONFIG``,
and compare what apt prints now with the records; one runs the action itself through
``ansible-playbook`` for the operator's message.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from playbook import run_playbook

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox" / "mirror"))

from fakehost import FakeHost  # noqa: E402
from sandbox_mirror import apt, catalog  # noqa: E402
from sandbox_mirror.gpg import Gpg  # noqa: E402

from cuda13_upgrade import aptplan  # noqa: E402
from cuda13_upgrade.hostscripts import aptstate  # noqa: E402
from cuda13_upgrade.steps import toolkit  # noqa: E402
from cuda13_upgrade.steps.host import StepFailed  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "apt"
PULLING = "cuda-13-0=13.0.2-1"
TOOLKIT = "cuda-toolkit-13-0=13.0.2-1"
DRIVER = ("libcuda1", "libnvidia-ml1", "nvidia-alternative", "nvidia-driver")
CHAIN = catalog.DRIVER_CHAINS[0]


def _options(
    package: str,
    repo_url: str = "http://127.0.0.1:8080/cuda/repos/debian12/x86_64/",
    keyring: str = "/usr/share/keyrings/cuda-sandbox-keyring.gpg",
) -> dict:
    """The toolkit step's options on the host-apt host (the sandbox inventory's apt values)."""
    return {
        "cuda_toolkit_release": "13.0",
        "cuda_toolkit_package": package,
        "cuda_toolkit_package_version": "13.0.2-1",
        "cuda_toolkit_apt_repo_url": repo_url,
        "cuda_toolkit_apt_keyring": keyring,
        "cuda_toolkit_install_keyring_package": False,
        "cuda_toolkit_keyring_package_url": f"{repo_url}cuda-keyring_1.1-1_all.deb",
        "cuda_toolkit_apt_source_file": "cuda-debian12-x86_64",
    }


def _not_installed(args: dict) -> dict:
    """cuda13_apt_read on the host-apt host: the toolkit package is not installed there."""
    return {**aptstate.read({**args, "package": None}), "installed": None}


def _plan(package: str, apt_dir: Path, simulate=None, **options) -> dict:
    """The toolkit step's plan of ``package=13.0.2-1``; a refusal's record, with its message."""
    handlers = {"cuda13_apt_read": _not_installed}
    if simulate is not None:
        handlers["cuda13_apt_simulate"] = simulate
    host = FakeHost(name="cuda13-molecule-apt-pull", handlers=handlers)
    try:
        return toolkit.plan(host, _options(package, **options), apt_dir=str(apt_dir))
    except StepFailed as exc:
        return {**exc.record, "msg": exc.msg}


def _recorded(name: str):
    """cuda13_apt_simulate answered with the recorded simulation ``name``."""

    def simulate(args: dict) -> dict:
        return {
            "changed": False,
            "update_rc": 0,
            "update_stderr": "",
            "rc": 0,
            "stdout": (FIXTURES / name).read_text(),
            "stderr": "",
        }

    return simulate


def _installed_driver_version() -> str:
    """The driver version the host-apt scenario installs before the run."""
    prepare = yaml.safe_load((REPO / "molecule" / "host-apt" / "prepare.yml").read_text())
    for play in prepare:
        if "__driver_installed" in (play.get("vars") or {}):
            return play["vars"]["__driver_installed"]
    raise AssertionError("molecule/host-apt/prepare.yml sets no __driver_installed")


def _stanzas(text: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"^([\w-]+): (.*)$", s, re.MULTILINE)) for s in text.strip().split("\n\n")]


def _dpkg_gt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False).returncode == 0


def _actions(actions: list[dict]) -> list[tuple[str, str, str | None, str | None]]:
    return sorted((a["package"], a["action"], a["old_version"], a["version"]) for a in actions)


@pytest.fixture(scope="module")
def apt_repo(tmp_path_factory) -> Path:
    """The sandbox's apt repository alone, signed with a throw-away key."""
    if not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg")):
        pytest.skip("building the apt repository needs dpkg-deb, dpkg-scanpackages (dpkg-dev) and gpg")
    root = tmp_path_factory.mktemp("apt-repo")
    gpg = Gpg(root / "gnupg")
    try:
        fingerprint = gpg.ensure_key()
        apt.build_apt_repo(root / "repo", catalog.CUDA_RELEASES, gpg, fingerprint)
    finally:
        gpg.stop_agent()
    return root / "repo"


def host_status(packages_index: str, installed: list[tuple[str, str]]) -> str:
    """A dpkg status file with ``installed`` (name, version), their stanzas from the index."""
    out = []
    for stanza in packages_index.strip().split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", stanza, re.MULTILINE))
        if (fields["Package"], fields["Version"]) not in installed:
            continue
        lines = [
            line
            for line in stanza.splitlines()
            if not re.match(r"^(Filename|Size|MD5sum|SHA1|SHA256|SHA512):", line)
        ]
        lines.insert(1, "Status: install ok installed")
        out.append("\n".join(lines))
    assert len(out) == len(installed), "a package the host has is missing from the index"
    return "\n\n".join(out) + "\n"


def apt_config(state: Path, status: str) -> Path:
    """An ``APT_CONFIG`` file that makes ``status`` the dpkg status apt reads: nothing of this
    machine's apt configuration, preferences or dpkg state is read (the step's module points
    apt's sources, lists and archives at its own scratch state)."""
    for d in ("etc/preferences.d", "etc/apt.conf.d", "cache", "log"):
        (state / d).mkdir(parents=True, exist_ok=True)
    (state / "status").write_text(status)
    config = {
        "Dir::Etc::Parts": state / "etc/apt.conf.d",
        "Dir::Etc::Preferences": state / "etc/preferences",
        "Dir::Etc::PreferencesParts": state / "etc/preferences.d",
        "Dir::State::status": state / "status",
        "Dir::State::extended_states": state / "extended_states",
        "Dir::Cache": state / "cache",
        "Dir::Log": state / "log",
        "APT::Architecture": "amd64",
        "Debug::NoLocking": "true",
    }
    conf = state / "apt.conf"
    conf.write_text(
        "".join(f'{k} "{v}";\n' for k, v in config.items()) + 'APT::Architectures { "amd64"; };\n'
    )
    return conf


def apt_plan(repo: Path, tmp_path: Path, status: str, package: str, monkeypatch, *, reuse: bool) -> dict:
    """The toolkit step's plan of ``package=13.0.2-1`` with apt's own simulation (the real module
    cuda13_apt_simulate) on the dpkg state ``status``, the sandbox's repository the only source:
    the host's entry (``reuse``), or added by the module (no entry on the host)."""
    monkeypatch.setenv("APT_CONFIG", str(apt_config(tmp_path / "dpkg", status)))
    monkeypatch.setenv("LC_ALL", "C")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(aptstate.tempfile, "tempdir", str(scratch))
    apt_dir = tmp_path / "etc-apt"
    (apt_dir / "sources.list.d").mkdir(parents=True)
    keyring = repo / catalog.APT_KEYRING_NAME
    if reuse:
        (apt_dir / "sources.list").write_text(f"deb [signed-by={keyring}] file:{repo}/ /\n")

    def simulate(args: dict) -> dict:
        # The real module; apt's update and simulation both succeed.
        result = aptstate.apt_simulate_module(args, False)
        assert result.get("update_rc") == 0, result
        assert result.get("rc") == 0, result
        return result

    plan = _plan(package, apt_dir, simulate, repo_url=f"file:{repo}/", keyring=str(keyring))
    assert list(scratch.iterdir()) == [], "the module left its scratch apt state"
    return plan


def host_apt_status(repo: Path) -> str:
    """The host-apt scenario's host: cuda-toolkit-12-8 (sandbox_host) and the driver's packages
    at the version molecule/host-apt/prepare.yml installs."""
    index = (repo / "Packages").read_text()
    release = next(r for r in catalog.CUDA_RELEASES if r.dotted == "12.8")
    toolkit = [(p.name, p.version) for p in apt.release_packages(release)]
    driver = [(name, _installed_driver_version()) for name in DRIVER]
    return host_status(index, toolkit + driver)


# -- the repository's metadata -------------------------------------------------------------


def test_the_repository_chains_cuda_13_0_down_to_the_driver(apt_repo):
    index = _stanzas((apt_repo / "Packages").read_text())
    by = {(s["Package"], s["Version"]): s for s in index}
    upstream = CHAIN.driver_upstream
    assert (
        by[("cuda-13-0", "13.0.2-1")]["Depends"]
        == "cuda-runtime-13-0 (>= 13.0.2), cuda-toolkit-13-0 (>= 13.0.2)"
    )
    assert by[("cuda-runtime-13-0", "13.0.2-1")]["Depends"] == f"cuda-drivers (>= {upstream})"
    assert by[("cuda-drivers", CHAIN.driver)]["Depends"] == f"nvidia-driver (>= {upstream})"
    assert CHAIN.driver == "580.95.05-1"
    # the driver's packages at that version, bound to each other as Debian's are
    for name in ("nvidia-driver", "libcuda1", "libnvidia-ml1"):
        assert by[(name, CHAIN.driver)]["Depends"] == f"nvidia-alternative (= {CHAIN.driver})"
    assert ("nvidia-alternative", CHAIN.driver) in by
    # the toolkit metapackage itself pulls none of it
    assert "cuda-runtime" not in by[("cuda-toolkit-13-0", "13.0.2-1")]["Depends"]


def test_the_chain_s_driver_is_an_upgrade_of_the_host_apt_host_s(apt_repo):
    installed = _installed_driver_version()
    assert installed == "535.216.03-2~bpo12+1"
    assert _dpkg_gt(CHAIN.driver, installed)
    # and the newest driver the repository offers, so apt picks it for nvidia-driver (>= 580.95.05)
    versions = [
        s["Version"] for s in _stanzas((apt_repo / "Packages").read_text()) if s["Package"] == "nvidia-driver"
    ]
    assert all(v == CHAIN.driver or _dpkg_gt(CHAIN.driver, v) for v in versions)


# -- the recorded simulations, judged by the toolkit step ---------------------------------------


def test_cuda_13_0_is_refused_naming_the_driver_packages(tmp_path):
    plan = _plan("cuda-13-0", tmp_path, _recorded("apt-get-s-install-cuda-13-0-sandbox.txt"))
    verdict = plan["transaction"]
    assert not verdict["ok"]
    refused = {r["package"]: (r["action"], r["kind"]) for r in verdict["refused"]}
    assert refused == {
        "nvidia-driver": ("upgrade", "driver"),
        "nvidia-alternative": ("upgrade", "driver"),
        "libnvidia-ml1": ("upgrade", "driver"),
        "libcuda1": ("upgrade", "driver"),
        "cuda-drivers": ("install", "driver"),
    }
    assert "upgrade nvidia-driver 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)" in verdict["reason"]
    assert "install cuda-drivers 580.95.05-1 (driver)" in verdict["reason"]
    assert verdict["reason"].startswith("installing cuda-13-0=13.0.2-1 would also ")
    # the CUDA metapackages themselves are the toolkit's own family
    assert {"cuda-13-0", "cuda-runtime-13-0"}.isdisjoint(refused)
    # what the operator reads (molecule host-apt's verifier matches it)
    assert plan["msg"] == (
        f"cuda13-molecule-apt-pull: {verdict['reason']} Nothing on the host was changed (apt's transaction"
        " was simulated: apt-get -s install --no-install-recommends cuda-13-0=13.0.2-1)."
    )
    assert "cuda_toolkit_package" in plan["msg"]


def test_cuda_toolkit_13_0_is_accepted_and_pinned_exactly(tmp_path):
    plan = _plan("cuda-toolkit-13-0", tmp_path, _recorded("apt-get-s-install-cuda-toolkit-13-0-sandbox.txt"))
    verdict = plan["transaction"]
    assert "msg" not in plan
    assert verdict["ok"], verdict["reason"]
    assert verdict["refused"] == []
    assert "cuda-toolkit-13-0=13.0.2-1" in verdict["install"]
    assert not any(p.split("=")[0] in DRIVER + ("cuda-drivers",) for p in verdict["install"])
    assert plan["to_install"] is True and plan["source"]["action"] == "add"


# -- apt itself, on the repository built now ------------------------------------------------

needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (Debian/Ubuntu)")


@needs_apt
@pytest.mark.parametrize(
    ("package", "fixture", "reuse"),
    [
        ("cuda-13-0", "apt-get-s-install-cuda-13-0-sandbox.txt", False),
        ("cuda-toolkit-13-0", "apt-get-s-install-cuda-toolkit-13-0-sandbox.txt", True),
    ],
    ids=["cuda-13-0", "cuda-toolkit-13-0"],
)
def test_apt_simulates_what_the_fixture_records(apt_repo, tmp_path, monkeypatch, package, fixture, reuse):
    plan = apt_plan(apt_repo, tmp_path, host_apt_status(apt_repo), package, monkeypatch, reuse=reuse)
    assert plan["source"]["action"] == ("reuse" if reuse else "add")
    recorded = aptplan.parse_simulation((FIXTURES / fixture).read_text())
    assert _actions(plan["transaction"]["actions"]) == _actions(recorded), plan


@needs_apt
def test_apt_s_own_simulation_of_cuda_13_0_is_refused_and_the_toolkit_s_accepted(
    apt_repo, tmp_path, monkeypatch
):
    status = host_apt_status(apt_repo)
    pulling = apt_plan(apt_repo, tmp_path / "pull", status, "cuda-13-0", monkeypatch, reuse=False)
    assert not pulling["transaction"]["ok"]
    assert {r["package"] for r in pulling["transaction"]["refused"]} == set(DRIVER) | {"cuda-drivers"}
    assert "Nothing on the host was changed" in pulling["msg"]
    toolkit_plan = apt_plan(
        apt_repo, tmp_path / "toolkit", status, "cuda-toolkit-13-0", monkeypatch, reuse=True
    )
    assert toolkit_plan["transaction"]["ok"], toolkit_plan["transaction"]["reason"]


PLANNED = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Plan the toolkit step
      cuda13_toolkit:
        state: planned
        apt_dir: "{apt_dir}"
        options:
          cuda_toolkit_release: "13.0"
          cuda_toolkit_package: cuda-13-0
          cuda_toolkit_package_version: "13.0.2-1"
          cuda_toolkit_apt_repo_url: "file:{repo}/"
          cuda_toolkit_apt_keyring: "{keyring}"
          cuda_toolkit_install_keyring_package: false
          cuda_toolkit_keyring_package_url: "file:{repo}/cuda-keyring_1.1-1_all.deb"
          cuda_toolkit_apt_source_file: cuda-debian12-x86_64
"""


@needs_apt
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_the_action_refuses_cuda_13_0_through_ansible_playbook(apt_repo, tmp_path, check):
    """The action and its modules as Ansible runs them (cuda13_apt_simulate in its AnsiballZ
    wrapper), apt reading the host-apt host's dpkg status: the operator's message."""
    conf = apt_config(tmp_path / "dpkg", host_apt_status(apt_repo))
    apt_dir = tmp_path / "etc-apt"
    (apt_dir / "sources.list.d").mkdir(parents=True)
    play = tmp_path / "planned.yml"
    play.write_text(
        PLANNED.format(apt_dir=apt_dir, repo=apt_repo, keyring=apt_repo / catalog.APT_KEYRING_NAME)
    )
    proc = run_playbook(
        play, *(["--check"] if check else []), env={"APT_CONFIG": str(conf), "LC_ALL": "C.UTF-8"}
    )
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out
    assert "localhost: installing cuda-13-0=13.0.2-1 would also " in out
    assert "install cuda-drivers 580.95.05-1 (driver)" in out
    assert "upgrade nvidia-driver 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)" in out
    assert (
        "Nothing on the host was changed (apt's transaction was simulated:"
        " apt-get -s install --no-install-recommends cuda-13-0=13.0.2-1)." in out
    )
