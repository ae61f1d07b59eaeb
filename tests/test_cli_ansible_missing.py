"""The command says so when ansible-playbook is missing (docs/cli.md's install line).

``pip install -e .`` brings ansible-runner but not Ansible (pyproject.toml: ``ansible`` is in the
``dev`` extra); ansible-runner then failed with a bare "command not found". The command now
refuses before running anything, with exit status 2 and what to install.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cuda13_upgrade.cli import runner
from cuda13_upgrade.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


def _message(path: str) -> str:
    return (
        f"ansible-playbook was not found (searched {path}). The cuda13-upgrade command runs Ansible, "
        "which 'pip install -e .' does not install: install it into the same environment with "
        "pip install -e '.[dev]' (or pip install 'ansible>=12,<13'), or put ansible-playbook on PATH. "
        "Nothing on any host was changed."
    )


def test_a_path_without_ansible_playbook_is_refused_naming_what_to_install(tmp_path):
    with pytest.raises(UsageError) as refused:
        runner.ansible_playbook_path(str(tmp_path))
    assert str(refused.value) == _message(str(tmp_path))


def test_the_venvs_ansible_playbook_is_found():
    assert runner.ansible_playbook_path(str(Path(sys.executable).parent)) == str(
        Path(sys.executable).with_name("ansible-playbook")
    )


def test_run_playbook_refuses_before_ansible_runner_runs(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as refused:
        runner.run_playbook(
            REPO / "playbooks" / "preflight.yml",
            "localhost,",
            home=REPO,
            run_id="r1",
            reports_dir=tmp_path / "reports",
        )
    assert str(refused.value) == _message(f"{bin_dir}:{tmp_path / 'empty'}")
    assert not (tmp_path / "reports").exists()


def test_the_install_line_of_docs_cli_md_brings_ansible():
    text = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert "It is installed with the package (`pip install -e '.[dev]'`, or `make venv`)" in text
