"""A toolkit metapackage that pulls the driver, in the sandbox's apt repository.

NVIDIA's repository chains ``cuda-13-0`` -> ``cuda-runtime-13-0`` -> ``cuda-drivers`` ->
``nvidia-driver``, so ``apt-get install cuda-13-0`` upgrades the installed driver
(``sandbox/mirror/records/apt/nvidia-cuda-metapackages.md``: what of that chain is a real
record and what is not). The sandbox's repository carries the chain; these tests build it,
read its ``Packages`` index, and let apt itself simulate both packages on the dpkg state of
the molecule ``host-apt`` scenario's host (``cuda-toolkit-12-8`` and the driver's packages at
the older version ``molecule/host-apt/prepare.yml`` installs): the transaction filter the
toolkit step uses (``cuda13_apt_transaction``) refuses ``cuda-13-0``, naming the driver's
packages, and accepts ``cuda-toolkit-13-0``.

The simulations are recorded in ``tests/fixtures/apt/`` (real ``apt-get -s`` outputs against
this repository); the tests that need apt compare what apt prints now with them.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox" / "mirror"))

from sandbox_mirror import apt, catalog  # noqa: E402
from sandbox_mirror.gpg import Gpg  # noqa: E402

from cuda13_upgrade import aptplan  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "apt"
PULLING = "cuda-13-0=13.0.2-1"
TOOLKIT = "cuda-toolkit-13-0=13.0.2-1"
DRIVER = ("libcuda1", "libnvidia-ml1", "nvidia-alternative", "nvidia-driver")
CHAIN = catalog.DRIVER_CHAINS[0]


def _filter():
    """The cuda13_apt_transaction filter, as Ansible loads it from filter_plugins/."""
    spec = importlib.util.spec_from_file_location("cuda13_apt", REPO / "filter_plugins" / "cuda13_apt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()["cuda13_apt_transaction"]


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


def _actions(text: str) -> list[tuple[str, str, str | None, str | None]]:
    return sorted(
        (a["package"], a["action"], a["old_version"], a["version"]) for a in aptplan.parse_simulation(text)
    )


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


def simulate(repo: Path, state: Path, status: str, request: str) -> str:
    """``apt-get -s install --no-install-recommends <request>`` in a scratch apt state whose only
    source is ``repo`` (signed-by its keyring) and whose dpkg status is ``status``; nothing of
    this machine's apt configuration, sources or dpkg state is read."""
    for d in ("etc/sources.list.d", "etc/preferences.d", "etc/apt.conf.d", "lists/partial", "cache", "log"):
        (state / d).mkdir(parents=True, exist_ok=True)
    (state / "status").write_text(status)
    (state / "etc" / "sources.list").write_text(
        f"deb [signed-by={repo / catalog.APT_KEYRING_NAME}] file:{repo}/ /\n"
    )
    user = pwd.getpwuid(os.geteuid()).pw_name  # apt drops to this user for its methods
    config = {
        "Dir::Etc::SourceList": state / "etc/sources.list",
        "Dir::Etc::SourceParts": state / "etc/sources.list.d",
        "Dir::Etc::Parts": state / "etc/apt.conf.d",
        "Dir::Etc::Preferences": state / "etc/preferences",
        "Dir::Etc::PreferencesParts": state / "etc/preferences.d",
        "Dir::State::Lists": state / "lists",
        "Dir::State::status": state / "status",
        "Dir::State::extended_states": state / "extended_states",
        "Dir::Cache": state / "cache",
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "Dir::Log": state / "log",
        "APT::Architecture": "amd64",
        "Debug::NoLocking": "true",
        "APT::Sandbox::User": user,
    }
    conf = state / "apt.conf"
    conf.write_text(
        "".join(f'{k} "{v}";\n' for k, v in config.items()) + 'APT::Architectures { "amd64"; };\n'
    )
    env = {**os.environ, "APT_CONFIG": str(conf), "LANG": "C", "LC_ALL": "C"}
    update = subprocess.run(["apt-get", "-q", "update"], env=env, capture_output=True, text=True)
    assert update.returncode == 0, update.stdout + update.stderr
    sim = subprocess.run(
        ["apt-get", "-s", "install", "--no-install-recommends", request],
        env=env,
        capture_output=True,
        text=True,
    )
    assert sim.returncode == 0, sim.stdout + sim.stderr
    return sim.stdout


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


# -- the recorded simulations, judged by the filter ------------------------------------------


def test_cuda_13_0_is_refused_naming_the_driver_packages():
    text = (FIXTURES / "apt-get-s-install-cuda-13-0-sandbox.txt").read_text()
    verdict = _filter()(text, [PULLING])
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


def test_cuda_toolkit_13_0_is_accepted_and_pinned_exactly():
    text = (FIXTURES / "apt-get-s-install-cuda-toolkit-13-0-sandbox.txt").read_text()
    verdict = _filter()(text, [TOOLKIT])
    assert verdict["ok"], verdict["reason"]
    assert verdict["refused"] == []
    assert "cuda-toolkit-13-0=13.0.2-1" in verdict["install"]
    assert not any(p.split("=")[0] in DRIVER + ("cuda-drivers",) for p in verdict["install"])


# -- apt itself, on the repository built now ------------------------------------------------

needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (Debian/Ubuntu)")


@needs_apt
@pytest.mark.parametrize(
    ("request_", "fixture"),
    [
        (PULLING, "apt-get-s-install-cuda-13-0-sandbox.txt"),
        (TOOLKIT, "apt-get-s-install-cuda-toolkit-13-0-sandbox.txt"),
    ],
    ids=["cuda-13-0", "cuda-toolkit-13-0"],
)
def test_apt_simulates_what_the_fixture_records(apt_repo, tmp_path, request_, fixture):
    text = simulate(apt_repo, tmp_path, host_apt_status(apt_repo), request_)
    assert _actions(text) == _actions((FIXTURES / fixture).read_text()), text


@needs_apt
def test_apt_s_own_simulation_of_cuda_13_0_is_refused_and_the_toolkit_s_accepted(apt_repo, tmp_path):
    status = host_apt_status(apt_repo)
    pulling = _filter()(simulate(apt_repo, tmp_path / "pull", status, PULLING), [PULLING])
    assert not pulling["ok"]
    assert {r["package"] for r in pulling["refused"]} == set(DRIVER) | {"cuda-drivers"}
    toolkit = _filter()(simulate(apt_repo, tmp_path / "toolkit", status, TOOLKIT), [TOOLKIT])
    assert toolkit["ok"], toolkit["reason"]
