"""apt's transaction, the driver's holds and NVIDIA's sources, on real apt outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda13_upgrade import aptplan

FIXTURES = Path(__file__).parent / "fixtures" / "apt"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_inst_remv_and_conf_lines_of_a_real_removal():
    actions = aptplan.parse_simulation(fixture("apt-get-s-remove-runc.txt"))
    assert actions == [
        {
            "action": "install",
            "package": "libyajl2",
            "version": "2.1.0-3+deb12u2",
            "old_version": None,
            "arch": "amd64",
            "origins": "Debian:12.15/oldstable",
        },
        {
            "action": "install",
            "package": "crun",
            "version": "1.8.1-1+deb12u1",
            "old_version": None,
            "arch": "amd64",
            "origins": "Debian:12.15/oldstable",
        },
        {
            "action": "remove",
            "package": "runc",
            "version": None,
            "old_version": "1.1.5+ds1-1+deb12u1",
            "arch": None,
            "origins": "",
        },
    ]


def test_an_upgrade_line_with_a_trailing_bracket_is_an_upgrade():
    actions = aptplan.parse_simulation(fixture("apt-get-s-install-jq.txt"))
    assert [(a["action"], a["package"], a["old_version"], a["version"]) for a in actions] == [
        ("upgrade", "jq", "1.6-2.1+deb12u1", "1.6-2.1+deb12u3"),
        ("upgrade", "libjq1", "1.6-2.1+deb12u1", "1.6-2.1+deb12u3"),
    ]


def test_the_driver_metapackage_is_refused_naming_dkms_the_driver_and_the_upgrades():
    verdict = aptplan.check_transaction(fixture("apt-get-s-install-nvidia-driver.txt"), ["nvidia-driver"])
    assert not verdict["ok"]
    refused = {r["package"]: r["kind"] for r in verdict["refused"]}
    assert refused["nvidia-driver"] == "driver"
    assert refused["nvidia-kernel-dkms"] == "dkms"
    assert refused["dkms"] == "dkms"
    assert refused["libnvidia-ml1"] == "driver"
    assert refused["firmware-nvidia-gsp"] == "driver"
    # systemd's upgrade is not the driver's, but it changes what the host runs.
    assert refused["systemd"] == "installed package"
    assert "upgrade systemd 252.38-1~deb12u1 -> 252.39-1~deb12u2 (installed package)" in verdict["reason"]
    assert "cuda_toolkit_hold_driver" in verdict["reason"]
    # packages that are neither: new and not the driver's
    assert "libepoxy0" not in refused and "pciutils" not in refused


def test_a_toolkit_whose_dependencies_pull_the_driver_libraries_is_refused():
    # Debian's own CUDA toolkit depends on libcuda1 and libnvidia-* of the driver
    # (canonical/checkbox#748 saw the same with NVIDIA's cuda metapackage).
    verdict = aptplan.check_transaction(
        fixture("apt-get-s-install-nvidia-cuda-toolkit.txt"), ["nvidia-cuda-toolkit"]
    )
    refused = {r["package"] for r in verdict["refused"]}
    assert {"libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1"} <= refused
    # the toolkit's own headers and tools are not the driver
    assert "libnvidia-ml-dev" not in refused
    assert "nvidia-cuda-toolkit" not in refused
    assert not verdict["ok"]


def test_kernel_headers_and_dkms_are_refused():
    verdict = aptplan.check_transaction(fixture("apt-get-s-install-dkms.txt"), ["dkms"])
    kinds = {r["package"]: r["kind"] for r in verdict["refused"]}
    assert kinds["dkms"] == "dkms"
    assert kinds["linux-headers-6.1.0-57-amd64"] == "kernel"
    assert kinds["linux-libc-dev"] == "installed package"
    assert "sudo" not in kinds and "kmod" not in kinds


def test_a_transaction_of_new_packages_alone_passes_and_is_pinned_exactly():
    text = (
        "Inst cuda-toolkit-13-0-config-common (13.0.96-1 cuda-sandbox [amd64])\n"
        "Inst cuda-cudart-13-0 (13.0.96-1 cuda-sandbox [amd64])\n"
        "Inst cuda-toolkit-config-common [12.8.90-1] (13.0.96-1 cuda-sandbox [amd64])\n"
        "Inst cuda-toolkit-13-0 (13.0.2-1 cuda-sandbox [amd64])\n"
        "Conf cuda-toolkit-13-0 (13.0.2-1 cuda-sandbox [amd64])\n"
    )
    verdict = aptplan.check_transaction(text, ["cuda-toolkit-13-0=13.0.2-1"])
    assert verdict["ok"], verdict["reason"]
    assert verdict["reason"] == ""
    assert verdict["install"] == [
        "cuda-toolkit-13-0-config-common=13.0.96-1",
        "cuda-cudart-13-0=13.0.96-1",
        "cuda-toolkit-config-common=13.0.96-1",
        "cuda-toolkit-13-0=13.0.2-1",
    ]


def test_an_output_without_the_requested_package_raises_with_apt_s_text():
    text = (
        "Reading package lists...\nBuilding dependency tree...\n"
        "E: Version '13.0.9-1' for 'cuda-toolkit-13-0' was not found\n"
    )
    with pytest.raises(ValueError, match="installs none of cuda-toolkit-13-0=13.0.9-1: .*was not found"):
        aptplan.check_transaction(text, ["cuda-toolkit-13-0=13.0.9-1"])


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvidia-driver", "driver"),
        ("nvidia-driver-590", "driver"),
        ("libnvidia-compute-590:amd64", "driver"),
        ("cuda-drivers-590", "driver"),
        ("nvidia-kernel-open-dkms", "dkms"),
        ("linux-image-6.1.0-57-amd64", "kernel"),
        ("linux-modules-nvidia-590-generic", "driver"),
        ("cuda-toolkit-13-0", None),
        ("nvidia-cuda-dev", None),
        ("libcudart12", None),
    ],
)
def test_package_kind(name, kind):
    assert aptplan.package_kind(name) == kind


def test_driver_packages_to_hold_skip_removed_packages_and_note_existing_holds():
    text = (
        "nvidia-driver\t590.48.01-1\tii \n"
        "libnvidia-ml1:amd64\t590.48.01-1\thi \n"
        "nvidia-kernel-open-dkms\t590.48.01-1\tii \n"
        "linux-modules-nvidia-590-generic\t6.8.0-49.49+1\tii \n"
        "linux-image-6.8.0-49-generic\t6.8.0-49.49\tii \n"
        "nvidia-old\t535.1-1\trc \n"
        "cuda-toolkit-12-8\t12.8.1-1\tii \n"
    )
    assert aptplan.driver_packages(text) == [
        {"package": "libnvidia-ml1:amd64", "version": "590.48.01-1", "kind": "driver", "held": True},
        {
            "package": "linux-modules-nvidia-590-generic",
            "version": "6.8.0-49.49+1",
            "kind": "driver",
            "held": False,
        },
        {"package": "nvidia-driver", "version": "590.48.01-1", "kind": "driver", "held": False},
        {"package": "nvidia-kernel-open-dkms", "version": "590.48.01-1", "kind": "dkms", "held": False},
    ]


def test_deb822_sources_of_a_real_host():
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/debian.sources", fixture("debian.sources"))
    assert [(e["uri"], e["suite"], e["signed_by"], e["line"]) for e in entries] == [
        ("http://deb.debian.org/debian", "bookworm", "/usr/share/keyrings/debian-archive-keyring.gpg", 1),
        (
            "http://deb.debian.org/debian",
            "bookworm-updates",
            "/usr/share/keyrings/debian-archive-keyring.gpg",
            1,
        ),
        (
            "http://deb.debian.org/debian-security",
            "bookworm-security",
            "/usr/share/keyrings/debian-archive-keyring.gpg",
            8,
        ),
    ]


NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
# cuda-keyring 1.1-1's own file, /etc/apt/sources.list.d/cuda-debian12-x86_64.list
KEYRING_LIST = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {NVIDIA} /\n"


def test_an_existing_entry_of_the_repository_is_reused_whatever_its_scheme():
    other = "deb [signed-by=/usr/share/keyrings/nvidia-drivers.gpg] http://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64 /\n"
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/nvidia-drivers.list", other)
    verdict = aptplan.repository_sources(
        entries, NVIDIA, "/usr/share/keyrings/cuda-archive-keyring.gpg", "/etc/apt/sources.list.d/cuda.list"
    )
    assert verdict["action"] == "reuse"
    assert verdict["signed_by"] == "/usr/share/keyrings/nvidia-drivers.gpg"


def test_no_entry_adds_one_and_disabled_entries_do_not_count():
    text = f"Types: deb\nURIs: {NVIDIA}\nSuites: /\nSigned-By: /usr/share/keyrings/x.gpg\nEnabled: no\n"
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/cuda.sources", text)
    assert entries and not entries[0]["enabled"]
    verdict = aptplan.repository_sources(entries, NVIDIA, "/k.gpg", "/etc/apt/sources.list.d/cuda.list")
    assert verdict == {"action": "add", "entries": [], "signed_by": "/k.gpg", "reason": ""}


def test_two_entries_with_different_keyrings_are_refused_naming_both_files():
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/cuda-debian12-x86_64.list", KEYRING_LIST)
    entries += aptplan.parse_sources(
        "/etc/apt/sources.list",
        "# an old entry\ndeb [arch=amd64 signed-by=/etc/apt/keyrings/nvidia.asc] " + NVIDIA + " /\n",
    )
    verdict = aptplan.repository_sources(
        entries, NVIDIA, "/usr/share/keyrings/cuda-archive-keyring.gpg", "/x.list"
    )
    assert verdict["action"] == "conflict"
    assert "/etc/apt/sources.list.d/cuda-debian12-x86_64.list:1" in verdict["reason"]
    assert "/etc/apt/sources.list:2 signed-by=/etc/apt/keyrings/nvidia.asc" in verdict["reason"]
    assert "E: Conflicting values set for option Signed-By regarding source" in verdict["reason"]


def test_an_entry_without_signed_by_conflicts_with_one_that_has_it():
    # apt's own text: "... regarding source https://nvidia.github.io/... /: /usr/share/keyrings/...gpg != "
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/a.list", KEYRING_LIST)
    entries += aptplan.parse_sources("/etc/apt/sources.list.d/b.list", f"deb {NVIDIA} /\n")
    verdict = aptplan.repository_sources(
        entries, NVIDIA, "/usr/share/keyrings/cuda-archive-keyring.gpg", "/x.list"
    )
    assert verdict["action"] == "conflict"
    assert "/etc/apt/sources.list.d/b.list:1 signed-by=(none)" in verdict["reason"]


def test_an_inline_key_is_named_as_such():
    text = (
        f"Types: deb\nURIs: {NVIDIA}\nSuites: /\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n"
        " mQINBGJYmlEBEAC6nJmeqByeReM+MSy4palACCnfOg==\n -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    entries = aptplan.parse_sources("/etc/apt/sources.list.d/cuda.sources", text)
    assert entries[0]["signed_by"] == "(inline key)"
