"""The toolkit step (cuda13_upgrade.steps.toolkit): plan, install and revert on a FakeHost.

The host's apt is a small model (:class:`FakeApt`): dpkg's selections and the installed
packages, the alternatives groups, the apt source files (real files under ``tmp_path``, read by
the real ``cuda13_apt_read``), and apt's simulation, answered with the real ``apt-get -s``
outputs of ``tests/fixtures/apt/`` (the molecule ``host-apt`` host: ``cuda-toolkit-12-8`` and
the driver's packages at 535.216.03-2~bpo12+1). Ansible's own modules (dpkg_selections,
command, apt, apt_repository, file) change the model as they would change the host, and not in
check mode. The record is written by the real ``cuda13_record``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from fakehost import FakeHost

from cuda13_upgrade import aptplan
from cuda13_upgrade.hostscripts import aptstate
from cuda13_upgrade.steps import toolkit
from cuda13_upgrade.steps.host import StepFailed

FIXTURES = Path(__file__).parent / "fixtures"
# inventory/sandbox/group_vars/all/upgrade.yml and roles/cuda_toolkit/defaults/main.yml
REPO_URL = "http://127.0.0.1:8080/cuda/repos/debian12/x86_64/"
DRIVER_VERSION = "535.216.03-2~bpo12+1"  # molecule/host-apt/prepare.yml
DRIVER = ["libcuda1", "libnvidia-ml1", "nvidia-alternative", "nvidia-driver"]
TOOLKIT_SIM = "apt-get-s-install-cuda-toolkit-13-0-sandbox.txt"
PULLING_SIM = "apt-get-s-install-cuda-13-0-sandbox.txt"
SIMULATED_MSG = "Nothing on the host was changed (apt's transaction was simulated: apt-get -s install --no-install-recommends"


def fixture(name: str) -> str:
    return (FIXTURES / "apt" / name).read_text(encoding="utf-8")


def options(tmp_path: Path, **changes) -> dict:
    """The options record as cuda13_options holds it (the sandbox inventory's apt values)."""
    record = str(tmp_path / "state" / "apt.json")
    values = {
        "cuda_toolkit_release": "13.0",
        "cuda_toolkit_package_version": "13.0.2-1",
        "cuda_toolkit_package": "cuda-toolkit-13-0",
        "cuda_toolkit_apt_repo_url": REPO_URL,
        "cuda_toolkit_apt_keyring": str(tmp_path / "keyrings" / "cuda-sandbox-keyring.gpg"),
        "cuda_toolkit_install_keyring_package": False,
        "cuda_toolkit_keyring_package_url": f"{REPO_URL}cuda-keyring_1.1-1_all.deb",
        "cuda_toolkit_apt_source_file": "cuda-debian12-x86_64",
        "cuda_toolkit_pin_alternatives": True,
        "cuda_toolkit_hold_driver": True,
        "cuda_toolkit_apt_record": record,
        "rollback_apt_record": record,
        "cuda13_state_dir": str(tmp_path / "state"),
    }
    values.update(changes)
    return values


def _query_text(name: str, group: dict) -> str:
    best = max(group["alternatives"], key=lambda path: group["alternatives"][path])
    head = f"Name: {name}\nLink: {group['link']}\nStatus: {group['status']}\nBest: {best}\nValue: {group['value']}\n"
    return head + "".join(f"\nAlternative: {p}\nPriority: {n}\n" for p, n in group["alternatives"].items())


class FakeApt:
    """apt, dpkg and update-alternatives of one host (see the module docstring)."""

    def __init__(self, tmp_path: Path, *, simulation: str = TOOLKIT_SIM, nvcc: str = "nvcc-13.0.txt") -> None:
        self.tmp_path = tmp_path
        self.apt_dir = tmp_path / "etc" / "apt"
        (self.apt_dir / "sources.list.d").mkdir(parents=True)
        (self.apt_dir / "sources.list.d" / "debian.sources").write_text(fixture("debian.sources"))
        self.keyring = tmp_path / "keyrings" / "cuda-sandbox-keyring.gpg"
        #: The role's own source file (under the model's /etc/apt).
        self.own = str(self.apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list")
        self.installed: dict[str, str] = {"cuda-toolkit-12-8": "12.8.1-1 ii"}
        # name -> [version, selection ("i" install, "h" hold)]
        self.packages = {name: [DRIVER_VERSION, "i"] for name in DRIVER}
        self.packages.update({"cuda-toolkit-12-8": ["12.8.1-1", "i"], "jq": ["1.6-2.1+deb12u1", "i"]})
        self.groups = {
            group: {
                "link": f"/usr/local/{group}",
                "status": "auto",
                "value": "/usr/local/cuda-12.8",
                "alternatives": {"/usr/local/cuda-12.8": 128},
            }
            for group in ("cuda", "cuda-12")
        }
        self.groups["editor"] = {
            "link": "/usr/bin/editor",
            "status": "auto",
            "value": "/bin/nano",
            "alternatives": {"/bin/nano": 40},
        }
        self.simulation = fixture(simulation)
        self.update_stderr = ""
        self.nvcc = (FIXTURES / "nvcc" / nvcc).read_text()
        #: What the toolkit's installation does to the alternatives besides registering 13.0.
        self.postinst = None
        self.host: FakeHost | None = None

    # -- what the host modules read -----------------------------------------------------------

    def _listing(self) -> str:
        return "".join(
            f"{name}\t{version}\t{sel}i \n" for name, (version, sel) in sorted(self.packages.items())
        )

    def _selections(self) -> str:
        return "".join(
            f"{name:<30} {g['status']:<8} {g['value']}\n" for name, g in sorted(self.groups.items())
        )

    def read(self, args: dict) -> dict:
        checked = ArgumentSpecValidator(aptstate.APT_READ_SPEC).validate(args)
        assert not checked.error_messages, checked.error_messages
        params = checked.validated_parameters
        # The real module's reads of files (sources, records, paths); dpkg and alternatives modelled.
        result = aptstate.read(
            {**params, "package": None, "packages": False, "selections": False, "query": []}
        )
        if params["package"]:
            result["installed"] = self.installed.get(params["package"])
        if params["packages"]:
            result["packages"] = self._listing()
        if params["selections"]:
            result["selections"] = self._selections()
        result["queries"] = {group: _query_text(group, self.groups[group]) for group in params["query"]}
        return result

    def simulate(self, args: dict) -> dict:
        checked = ArgumentSpecValidator(aptstate.APT_SIMULATE_SPEC).validate(args)
        assert not checked.error_messages, checked.error_messages
        return {
            "changed": False,
            "sources": aptstate.source_files(str(self.apt_dir)),
            "signed_by": args["keyring"] if args["add_repository"] else None,
            "keyring_unpacked": False,
            "update_rc": 0,
            "update_stderr": self.update_stderr,
            "rc": 0,
            "stdout": self.simulation,
            "stderr": "",
        }

    # -- Ansible's own modules ----------------------------------------------------------------

    @property
    def check(self) -> bool:
        return bool(self.host and self.host.check_mode)

    def local(self, path: str) -> Path:
        """A host path under /etc/apt, as this model keeps it."""
        return (
            self.apt_dir / Path(path).relative_to("/etc/apt") if path.startswith("/etc/apt/") else Path(path)
        )

    def dpkg_selections(self, args: dict) -> dict:
        want = {"hold": "h", "install": "i"}[args["selection"]]
        entry = self.packages.setdefault(args["name"], ["", "i"])
        changed = entry[1] != want
        if changed and not self.check:
            entry[1] = want
        return {"changed": changed}

    def command(self, args: dict) -> dict:
        argv = args["argv"]
        if argv[0].endswith("/bin/nvcc"):
            return {"changed": True, "rc": 0, "stdout": self.nvcc, "stderr": ""}
        assert argv[:2] == ["update-alternatives", "--set"], argv
        if self.check:
            return {"changed": False, "skipped": True, "msg": "Command would have run if not in check mode"}
        group = self.groups[argv[2]]
        group.update(status="manual", value=argv[3])
        return {"changed": True, "rc": 0}

    def apt(self, args: dict) -> dict:
        if "deb" in args:
            if not self.check:
                self.keyring.parent.mkdir(parents=True, exist_ok=True)
                self.keyring.write_bytes(b"keyring")
            return {"changed": True}
        if "name" not in args:
            return {"changed": False, "cache_updated": True}
        if self.check:
            return {"changed": True}
        for request in args["name"]:
            package, version = request.split("=", 1)
            self.installed[package] = f"{version} ii"
            self.packages[package] = [version, "i"]
        # cuda-toolkit-13-0's scripts: update-alternatives --install of 13.0 at priority 130.
        for name in ("cuda", "cuda-12"):
            group = self.groups[name]
            group["alternatives"]["/usr/local/cuda-13.0"] = 130
            if group["status"] == "auto":
                group["value"] = "/usr/local/cuda-13.0"
        if self.postinst:
            self.postinst(self)
        return {"changed": True}

    def apt_repository(self, args: dict) -> dict:
        path = self.apt_dir / "sources.list.d" / f"{args['filename']}.list"
        text = args["repo"] + "\n"
        changed = not path.exists() or path.read_text() != text
        if changed and not self.check:
            path.write_text(text)
        return {"changed": changed}

    def file(self, args: dict) -> dict:
        assert args["state"] == "absent"
        path = self.local(args["path"])
        changed = path.exists()
        if changed and not self.check:
            path.unlink()
        return {"changed": changed}

    def fake_host(self, *, check_mode: bool = False) -> FakeHost:
        self.host = FakeHost(
            check_mode=check_mode,
            handlers={
                "cuda13_apt_read": self.read,
                "cuda13_apt_simulate": self.simulate,
                "ansible.builtin.dpkg_selections": self.dpkg_selections,
                "ansible.builtin.command": self.command,
                "ansible.builtin.apt": self.apt,
                "ansible.builtin.apt_repository": self.apt_repository,
                "ansible.builtin.file": self.file,
            },
        )
        return self.host


def changes(host: FakeHost) -> list[tuple[str, dict]]:
    """The calls of Ansible's own modules and of cuda13_record, in order."""
    return [
        (name, args) for name, args, _ in host.calls if name.startswith("ansible.") or name == "cuda13_record"
    ]


@pytest.fixture
def apt(tmp_path) -> FakeApt:
    return FakeApt(tmp_path)


# -- plan --------------------------------------------------------------------------------------


def test_a_host_without_nvidia_s_source_is_planned_to_add_it_and_its_transaction_simulated(tmp_path, apt):
    host = apt.fake_host()
    plan = toolkit.plan(host, options(tmp_path), apt_dir=str(apt.apt_dir))
    expected = aptplan.check_transaction("\n" + fixture(TOOLKIT_SIM) + "\n", ["cuda-toolkit-13-0=13.0.2-1"])
    assert plan == {
        "package": "cuda-toolkit-13-0",
        "version": "13.0.2-1",
        "toolkit_dir": "/usr/local/cuda-13.0",
        "own_source": apt.own,
        "installed": None,
        "to_install": True,
        "source": {"action": "add", "entries": [], "signed_by": str(apt.keyring), "reason": ""},
        "transaction": expected,
    }
    assert plan["transaction"]["install"] == [
        "cuda-toolkit-13-0-config-common=13.0.96-1",
        "cuda-toolkit-13-config-common=13.1.80-1",
        "cuda-cudart-13-0=13.0.96-1",
        "cuda-nvcc-13-0=13.0.88-1",
        "cuda-toolkit-13-0=13.0.2-1",
    ]
    assert host.called("cuda13_apt_simulate") == [
        {
            "package": "cuda-toolkit-13-0",
            "version": "13.0.2-1",
            "apt_dir": str(apt.apt_dir),
            "add_repository": True,
            "repo_url": REPO_URL,
            "keyring": str(apt.keyring),
            "install_keyring_package": False,
            "keyring_package_url": f"{REPO_URL}cuda-keyring_1.1-1_all.deb",
        }
    ]
    assert changes(host) == []


def test_an_entry_for_the_repository_in_a_deb822_file_with_another_keyring_is_reused(tmp_path, apt):
    source = apt.apt_dir / "sources.list.d" / "nvidia-drivers.sources"
    source.write_text(
        f"Types: deb\nURIs: {REPO_URL}\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-drivers.gpg\n"
    )
    host = apt.fake_host()
    plan = toolkit.plan(host, options(tmp_path), apt_dir=str(apt.apt_dir))
    assert plan["source"]["action"] == "reuse"
    assert plan["source"]["signed_by"] == "/etc/apt/keyrings/nvidia-drivers.gpg"
    assert [e["file"] for e in plan["source"]["entries"]] == [str(source)]
    assert host.called("cuda13_apt_simulate")[0]["add_repository"] is False


def test_entries_that_disagree_on_signed_by_are_refused_naming_both_before_any_change(tmp_path, apt):
    (apt.apt_dir / "sources.list").write_text(
        f"deb [signed-by=/etc/apt/keyrings/nvidia-drivers.gpg] {REPO_URL} /\n"
    )
    (apt.apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg] {REPO_URL} /\n"
    )
    host = apt.fake_host()
    opts = options(tmp_path, cuda_toolkit_apt_keyring="/usr/share/keyrings/cuda-sandbox-keyring.gpg")
    with pytest.raises(StepFailed) as failed:
        toolkit.plan(host, opts, apt_dir=str(apt.apt_dir))
    assert failed.value.msg == (
        f"NVIDIA's repository {REPO_URL} is a source more than once with different Signed-By keyrings"
        f" ({apt.apt_dir}/sources.list:1 signed-by=/etc/apt/keyrings/nvidia-drivers.gpg;"
        f" {apt.apt_dir}/sources.list.d/cuda-debian12-x86_64.list:1"
        " signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg), so apt refuses every command"
        f" (E: Conflicting values set for option Signed-By regarding source {REPO_URL} /:"
        " /etc/apt/keyrings/nvidia-drivers.gpg != /usr/share/keyrings/cuda-sandbox-keyring.gpg;"
        " E: The list of sources could not be read.). Keep one of these entries (remove the other file,"
        " or make both name the same keyring; the role writes"
        f" {apt.own} with signed-by=/usr/share/keyrings/cuda-sandbox-keyring.gpg"
        " only where no entry exists) and run again. Nothing on the host was changed."
    )
    assert failed.value.record["source"]["action"] == "conflict"
    assert failed.value.record["changed"] is False
    assert host.called("cuda13_apt_simulate") == []
    assert changes(host) == []


def test_a_toolkit_package_that_pulls_the_driver_is_refused_naming_its_packages(tmp_path):
    apt = FakeApt(tmp_path, simulation=PULLING_SIM)
    host = apt.fake_host()
    with pytest.raises(StepFailed) as failed:
        toolkit.plan(host, options(tmp_path, cuda_toolkit_package="cuda-13-0"), apt_dir=str(apt.apt_dir))
    reason = failed.value.record["transaction"]["reason"]
    assert failed.value.msg == (f"gpu-node-01: {reason} {SIMULATED_MSG} cuda-13-0=13.0.2-1).")
    assert reason.startswith("installing cuda-13-0=13.0.2-1 would also ")
    for text in (
        "install cuda-drivers 580.95.05-1 (driver)",
        "upgrade nvidia-driver 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)",
        "upgrade nvidia-alternative 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)",
        "upgrade libnvidia-ml1 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)",
        "upgrade libcuda1 535.216.03-2~bpo12+1 -> 580.95.05-1 (driver)",
        "cuda_toolkit_package",
    ):
        assert text in failed.value.msg
    assert changes(host) == []


def test_a_simulation_apt_could_not_make_is_refused_with_apt_s_errors(tmp_path, apt):
    apt.simulation = ""
    apt.update_stderr = "E: The repository 'http://127.0.0.1:8080/cuda/repos/debian12/x86_64  Release' does not have a Release file."
    host = apt.fake_host()
    with pytest.raises(StepFailed) as failed:
        toolkit.plan(host, options(tmp_path), apt_dir=str(apt.apt_dir))
    assert failed.value.msg == (
        "gpu-node-01: the apt simulation installs none of cuda-toolkit-13-0=13.0.2-1: E: The repository"
        " 'http://127.0.0.1:8080/cuda/repos/debian12/x86_64  Release' does not have a Release file."
        f" {SIMULATED_MSG} cuda-toolkit-13-0=13.0.2-1)."
    )


def test_a_host_with_the_pinned_package_installed_gets_no_transaction(tmp_path, apt):
    apt.installed["cuda-toolkit-13-0"] = "13.0.2-1 ii"
    host = apt.fake_host()
    plan = toolkit.plan(host, options(tmp_path), apt_dir=str(apt.apt_dir))
    assert plan["installed"] == "13.0.2-1 ii"
    assert plan["to_install"] is False
    assert plan["transaction"] is None
    assert host.called("cuda13_apt_simulate") == []


@pytest.mark.parametrize("installed", ["13.0.1-1 ii", "13.0.2-1 rc", "13.0.2-1 iU"])
def test_another_version_or_a_half_installed_package_is_installed(tmp_path, apt, installed):
    apt.installed["cuda-toolkit-13-0"] = installed
    plan = toolkit.plan(apt.fake_host(), options(tmp_path), apt_dir=str(apt.apt_dir))
    assert plan["to_install"] is True and plan["transaction"]["ok"]


def test_the_plan_runs_the_same_in_check_mode(tmp_path, apt):
    wet = toolkit.plan(apt.fake_host(), options(tmp_path), apt_dir=str(apt.apt_dir))
    host = apt.fake_host(check_mode=True)
    assert toolkit.plan(host, options(tmp_path), apt_dir=str(apt.apt_dir)) == wet
    assert changes(host) == []


# -- install -----------------------------------------------------------------------------------


def _install(apt: FakeApt, tmp_path: Path, *, check_mode: bool = False, **changes_):
    host = apt.fake_host(check_mode=check_mode)
    return host, toolkit.install(host, options(tmp_path, **changes_), apt_dir=str(apt.apt_dir))


def test_the_install_holds_pins_adds_the_source_records_and_installs_exactly_the_transaction(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    host, result = _install(apt, tmp_path)
    transaction = result["plan"]["transaction"]
    record = {
        "holds_added": DRIVER,
        "held": DRIVER,
        "source_added": apt.own,
        "source_used": apt.own,
    }
    assert changes(host) == [
        *[("ansible.builtin.dpkg_selections", {"name": name, "selection": "hold"}) for name in DRIVER],
        (
            "ansible.builtin.command",
            {"argv": ["update-alternatives", "--set", "cuda", "/usr/local/cuda-12.8"]},
        ),
        (
            "ansible.builtin.command",
            {"argv": ["update-alternatives", "--set", "cuda-12", "/usr/local/cuda-12.8"]},
        ),
        (
            "ansible.builtin.apt_repository",
            {
                "repo": f"deb [signed-by={apt.keyring}] {REPO_URL} /",
                "filename": "cuda-debian12-x86_64",
                "state": "present",
                "update_cache": False,
            },
        ),
        (
            "cuda13_record",
            {
                "files": [
                    {
                        "path": str(tmp_path / "state" / "apt.json"),
                        "content": json.dumps(record, indent=4, sort_keys=True) + "\n",
                        "mode": "0644",
                    }
                ]
            },
        ),
        (
            "ansible.builtin.apt",
            {"name": transaction["install"], "install_recommends": False, "update_cache": True},
        ),
        ("ansible.builtin.command", {"argv": ["/usr/local/cuda-13.0/bin/nvcc", "--version"]}),
    ]
    assert transaction["install"][-1] == "cuda-toolkit-13-0=13.0.2-1"
    assert result["apt_changes"] == record
    assert result["held"] == DRIVER
    assert result["pinned"] == ["cuda", "cuda-12"]
    assert result["nvcc"]["release"] == "13.0"
    assert result["changed"] is True
    assert result["transaction"] == transaction
    written = tmp_path / "state" / "apt.json"
    assert json.loads(written.read_text()) == record
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    # the pins held: /usr/local/cuda stays on 12.8 though 13.0 has the higher priority
    assert apt.groups["cuda"]["value"] == "/usr/local/cuda-12.8"
    assert apt.groups["editor"]["status"] == "auto"
    assert "pinned the alternatives group cuda -> /usr/local/cuda-12.8" in host.told
    assert f"held nvidia-driver {DRIVER_VERSION}" in host.told


def test_a_second_run_changes_nothing(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    _install(apt, tmp_path)
    before = (tmp_path / "state" / "apt.json").read_text()
    host, result = _install(apt, tmp_path)
    assert result["changed"] is False
    assert result["plan"]["to_install"] is False
    assert result["plan"]["source"]["action"] == "reuse"
    assert [name for name, _ in changes(host)] == ["cuda13_record", "ansible.builtin.command"]
    assert host.called("ansible.builtin.command")[0]["argv"][0] == "/usr/local/cuda-13.0/bin/nvcc"
    assert (tmp_path / "state" / "apt.json").read_text() == before
    assert result["apt_changes"]["source_added"] == apt.own
    assert result["apt_changes"]["holds_added"] == DRIVER


def test_check_mode_changes_nothing_and_skips_the_pins_and_nvcc_checks(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    host, result = _install(apt, tmp_path, check_mode=True)
    assert not (tmp_path / "state" / "apt.json").exists()
    assert not (apt.apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list").exists()
    assert all(sel == "i" for _, sel in apt.packages.values())
    assert apt.groups["cuda"]["status"] == "auto"
    assert "cuda-toolkit-13-0" not in apt.installed
    assert result["nvcc"] is None
    # what it would do, as Ansible's modules report it in check mode
    assert result["apt_changes"]["holds_added"] == DRIVER
    assert result["pinned"] == ["cuda", "cuda-12"]
    assert [args["argv"][0] for args in host.called("ansible.builtin.command")] == ["update-alternatives"] * 2
    assert host.called("ansible.builtin.apt") == [
        {"name": result["transaction"]["install"], "install_recommends": False, "update_cache": True}
    ]
    # no query of the groups after the install
    assert [args["query"] for args in host.called("cuda13_apt_read") if args.get("query")] == [
        ["cuda", "cuda-12"]
    ]
    assert "would hold nvidia-driver 535.216.03-2~bpo12+1" in host.told


def test_the_preflight_s_plan_is_reused(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    plan = toolkit.plan(apt.fake_host(), options(tmp_path), apt_dir=str(apt.apt_dir))
    host = apt.fake_host()
    # as the play registered it: the action's result around the plan
    result = toolkit.install(host, options(tmp_path), {**plan, "changed": False, "failed": False})
    assert result["plan"] == plan
    assert host.called("cuda13_apt_simulate") == []
    assert not any(args.get("package") for args in host.called("cuda13_apt_read"))
    assert host.called("ansible.builtin.apt")[0]["name"] == plan["transaction"]["install"]


def test_a_held_driver_package_is_held_but_not_recorded_as_added(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    apt.packages["libcuda1"][1] = "h"  # the operator's own hold
    host, result = _install(apt, tmp_path)
    assert [args["name"] for args in host.called("ansible.builtin.dpkg_selections")] == DRIVER[1:]
    assert result["apt_changes"]["holds_added"] == DRIVER[1:]
    assert result["held"] == DRIVER


def test_without_the_hold_and_the_pin_options_nothing_is_held_or_pinned(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    host, result = _install(
        apt, tmp_path, cuda_toolkit_hold_driver=False, cuda_toolkit_pin_alternatives="false"
    )
    assert host.called("ansible.builtin.dpkg_selections") == []
    assert [a["argv"][0] for a in host.called("ansible.builtin.command")] == ["/usr/local/cuda-13.0/bin/nvcc"]
    assert result["held"] == [] and result["pinned"] == []
    assert result["apt_changes"]["holds_added"] == [] and result["apt_changes"]["held"] == []
    # NVIDIA's scripts moved the auto group: what the pin is for
    assert apt.groups["cuda"]["value"] == "/usr/local/cuda-13.0"


def test_a_reused_source_is_recorded_as_used_not_added(tmp_path, apt):
    source = apt.apt_dir / "sources.list.d" / "nvidia-drivers.sources"
    source.write_text(
        f"Types: deb\nURIs: {REPO_URL}\nSuites: /\nSigned-By: /etc/apt/keyrings/nvidia-drivers.gpg\n"
    )
    host, result = _install(apt, tmp_path)
    assert host.called("ansible.builtin.apt_repository") == []
    assert result["apt_changes"]["source_added"] is None
    assert result["apt_changes"]["source_used"] == str(source)


def test_a_missing_keyring_is_installed_with_cuda_keyring(tmp_path, apt):
    host, result = _install(apt, tmp_path, cuda_toolkit_install_keyring_package=True)
    assert host.called("ansible.builtin.apt")[0] == {"deb": f"{REPO_URL}cuda-keyring_1.1-1_all.deb"}
    assert host.called("ansible.builtin.apt_repository")
    assert result["changed"] is True


def test_a_missing_keyring_without_cuda_keyring_is_refused(tmp_path, apt):
    host = apt.fake_host()
    with pytest.raises(StepFailed) as failed:
        toolkit.install(host, options(tmp_path), apt_dir=str(apt.apt_dir))
    assert failed.value.msg == (
        f"cuda_toolkit_apt_keyring={apt.keyring} does not exist on the host and"
        " cuda_toolkit_install_keyring_package is false: install the repository's keyring there,"
        " or let the role install NVIDIA's cuda-keyring package."
    )
    assert host.called("ansible.builtin.apt_repository") == [] and host.called("ansible.builtin.apt") == []
    assert not (tmp_path / "state" / "apt.json").exists()
    # the holds and pins came first, as before
    assert failed.value.record["held"] == DRIVER and failed.value.record["changed"] is True


def test_the_record_keeps_what_earlier_runs_added(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    state = tmp_path / "state"
    state.mkdir()
    (state / "apt.json").write_text(
        json.dumps(
            {
                "holds_added": ["nvidia-kernel-dkms"],
                "held": [],
                "source_added": "/etc/apt/sources.list.d/old.list",
            }
        )
    )
    _, result = _install(apt, tmp_path)
    assert result["apt_changes"] == {
        "holds_added": sorted(["nvidia-kernel-dkms", *DRIVER]),
        "held": DRIVER,
        "source_added": "/etc/apt/sources.list.d/old.list",
        "source_used": apt.own,
    }


def test_an_install_that_moves_a_pinned_group_fails_naming_it(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")

    def force(model):
        model.groups["cuda"].update(status="manual", value="/usr/local/cuda-13.0")

    apt.postinst = force
    with pytest.raises(StepFailed) as failed:
        _install(apt, tmp_path)
    assert failed.value.msg == (
        "Installing cuda-toolkit-13-0 moved the alternatives group cuda (/usr/local/cuda) from"
        " /usr/local/cuda-12.8 to /usr/local/cuda-13.0 (manual mode), under the running stack: something on"
        " the host sets CUDA alternatives outside dpkg's manual mode. Find it in /var/log/alternatives.log;"
        " rollback puts the group back."
    )
    assert failed.value.record["apt_changes"]["holds_added"] == DRIVER


def test_an_nvcc_of_another_release_fails(tmp_path):
    apt = FakeApt(tmp_path, nvcc="nvcc-12.8.txt")
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    with pytest.raises(StepFailed) as failed:
        _install(apt, tmp_path)
    assert failed.value.msg == (
        "/usr/local/cuda-13.0/bin/nvcc reports release 12.8, not cuda_toolkit_release=13.0: the package"
        " cuda-toolkit-13-0=13.0.2-1 does not hold that release."
    )
    assert failed.value.record["nvcc"]["release"] == "12.8"


def test_a_refused_plan_changes_nothing(tmp_path):
    apt = FakeApt(tmp_path, simulation=PULLING_SIM)
    host = apt.fake_host()
    with pytest.raises(StepFailed) as failed:
        toolkit.install(host, options(tmp_path, cuda_toolkit_package="cuda-13-0"), apt_dir=str(apt.apt_dir))
    assert "Nothing on the host was changed" in failed.value.msg
    assert changes(host) == []


# -- revert ------------------------------------------------------------------------------------


def test_revert_undoes_exactly_the_recorded_holds_and_source(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    apt.packages["libcuda1"][1] = "h"  # the operator's own hold stays
    _install(apt, tmp_path)
    own = apt.apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list"
    assert own.exists()
    host = apt.fake_host()
    result = toolkit.revert(host, options(tmp_path))
    record = tmp_path / "state" / "apt.json"
    assert changes(host) == [
        *[("ansible.builtin.dpkg_selections", {"name": name, "selection": "install"}) for name in DRIVER[1:]],
        ("ansible.builtin.file", {"path": apt.own, "state": "absent"}),
        ("ansible.builtin.apt", {"update_cache": True}),
        ("ansible.builtin.file", {"path": str(record), "state": "absent"}),
    ]
    assert result == {
        "record_path": str(record),
        "record": {
            "holds_added": DRIVER[1:],
            "held": DRIVER,
            "source_added": apt.own,
            "source_used": apt.own,
        },
        "released": DRIVER[1:],
        "source_removed": apt.own,
        "apt_updated": True,
        "record_removed": True,
        "changed": True,
    }
    assert not own.exists() and not record.exists()
    assert apt.packages["libcuda1"][1] == "h"
    assert all(apt.packages[name][1] == "i" for name in DRIVER[1:])
    assert (apt.apt_dir / "sources.list.d" / "debian.sources").exists()


def test_revert_of_a_reused_source_removes_no_source_and_runs_no_update(tmp_path, apt):
    state = tmp_path / "state"
    state.mkdir()
    used = "/etc/apt/sources.list.d/nvidia-drivers.sources"
    (state / "apt.json").write_text(
        json.dumps(
            {"holds_added": ["nvidia-driver"], "held": DRIVER, "source_added": None, "source_used": used}
        )
    )
    host = apt.fake_host()
    apt.packages["nvidia-driver"][1] = "h"
    result = toolkit.revert(host, options(tmp_path))
    assert changes(host) == [
        ("ansible.builtin.dpkg_selections", {"name": "nvidia-driver", "selection": "install"}),
        ("ansible.builtin.file", {"path": str(state / "apt.json"), "state": "absent"}),
    ]
    assert result["source_removed"] is None and result["apt_updated"] is False


def test_revert_without_a_record_does_nothing(tmp_path, apt):
    host = apt.fake_host()
    result = toolkit.revert(host, options(tmp_path))
    assert changes(host) == []
    assert result["record"] is None and result["changed"] is False


def test_revert_in_check_mode_changes_nothing(tmp_path, apt):
    apt.keyring.parent.mkdir()
    apt.keyring.write_bytes(b"keyring")
    _install(apt, tmp_path)
    host = apt.fake_host(check_mode=True)
    result = toolkit.revert(host, options(tmp_path))
    assert result["released"] == DRIVER and result["changed"] is True
    assert (tmp_path / "state" / "apt.json").exists()
    assert (apt.apt_dir / "sources.list.d" / "cuda-debian12-x86_64.list").exists()
    assert all(apt.packages[name][1] == "h" for name in DRIVER)


def test_revert_reads_the_toolkit_s_record_when_the_rollback_names_none(tmp_path, apt):
    state = tmp_path / "state"
    state.mkdir()
    (state / "apt.json").write_text(json.dumps({"holds_added": [], "source_added": None}))
    opts = options(tmp_path)
    del opts["rollback_apt_record"]
    result = toolkit.revert(apt.fake_host(), opts)
    assert result["record_removed"] is True and not (state / "apt.json").exists()


def test_a_record_that_is_not_json_is_refused(tmp_path, apt):
    state = tmp_path / "state"
    state.mkdir()
    (state / "apt.json").write_text("{half")
    with pytest.raises(StepFailed) as failed:
        toolkit.revert(apt.fake_host(), options(tmp_path))
    assert failed.value.msg.startswith(f"{state / 'apt.json'} (rollback_apt_record) is not JSON: ")


# -- the host modules' own functions -------------------------------------------------------------


def test_the_source_files_are_those_apt_reads(tmp_path):
    etc = tmp_path / "apt"
    parts = etc / "sources.list.d"
    parts.mkdir(parents=True)
    for name in ("sources.list", "x.list", "y.sources", ".hidden.list", "notes.txt", "x.list.save"):
        (etc / name if name == "sources.list" else parts / name).write_text("deb http://a/ b c\n")
    (etc / "trusted.gpg").write_text("key")
    target = tmp_path / "elsewhere.list"
    target.write_text("deb http://b/ b c\n")
    (parts / "linked.list").symlink_to(target)
    assert aptstate.source_files(str(etc)) == [
        str(etc / "sources.list"),
        str(parts / "linked.list"),
        str(parts / "x.list"),
        str(parts / "y.sources"),
    ]
    read = aptstate.apt_read_module(
        {
            "sources": True,
            "apt_dir": str(etc),
            "exists": [str(target), str(tmp_path / "no")],
            "read": [str(target)],
            "query": [],
        },
        True,
    )
    assert [s["path"] for s in read["sources"]] == aptstate.source_files(str(etc))
    assert read["sources"][1]["content"] == "deb http://b/ b c\n"
    assert read["exists"] == {str(target): True, str(tmp_path / "no"): False}
    assert read["read"][str(target)] == {"exists": True, "content": "deb http://b/ b c\n"}
    assert read["changed"] is False


@pytest.mark.skipif(not os.path.exists("/usr/bin/dpkg-query"), reason="needs dpkg-query")
def test_the_installed_version_is_dpkg_s():
    text = aptstate.installed_version("dpkg")
    assert text is not None and text.endswith(" ii")
    assert aptstate.installed_version("cuda13-no-such-package") is None


def test_the_simulation_fails_when_cuda_keyring_cannot_be_downloaded_and_leaves_no_scratch(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(aptstate.tempfile, "tempdir", str(tmp_path))
    result = aptstate.apt_simulate_module(
        {
            "package": "cuda-toolkit-13-0",
            "version": "13.0.2-1",
            "apt_dir": str(tmp_path / "none"),
            "add_repository": True,
            "repo_url": REPO_URL,
            "keyring": str(tmp_path / "missing.gpg"),
            "install_keyring_package": True,
            "keyring_package_url": f"file://{tmp_path}/no-such-cuda-keyring.deb",
        },
        False,
    )
    assert result["failed"] is True
    assert result["msg"].startswith(f"cannot download file://{tmp_path}/no-such-cuda-keyring.deb: ")
    assert list(tmp_path.glob("cuda13-apt-*")) == []
