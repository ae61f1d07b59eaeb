"""The README and docs say what the code does (no documentation drift).

Each test reads the fact from where the code keeps it and the sentence from the document that
states it: the readiness endpoint of a restart, where cuda13_target_hosts is read, the restart
counts, the command's options, the driver floor and kernel module flavour of the install section,
the example inventory's paths, and no paragraph that stops mid-sentence.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade import restarts, versions
from cuda13_upgrade.cli import parser as cli_parser

REPO = Path(__file__).resolve().parents[1]
README = " ".join((REPO / "README.md").read_text().split())
DOCS = sorted((REPO / "docs").glob("*.md"))


def _flat(path: Path) -> str:
    return " ".join(path.read_text().split())


def test_no_text_says_a_restart_waits_for_health_200():
    # service_cycle waits until the server generates (/health_generate), not for /health's 200.
    said = []
    for path in [
        *(REPO / "roles").glob("*/meta/argument_specs.yml"),
        *(REPO / "roles").glob("*/defaults/main.yml"),
        REPO / "docs" / "options.md",
        REPO / "README.md",
    ]:
        text = _flat(path)
        for wrong in (
            "/health must answer",
            "/health to answer",
            "Seconds to wait for /health.",
            "its /health endpoint",
        ):
            if wrong in text:
                said.append((path.relative_to(REPO).as_posix(), wrong))
    assert said == []


def test_options_md_says_cuda13_target_hosts_comes_from_e():
    text = _flat(REPO / "docs" / "options.md")
    assert (
        "except `cuda13_target_hosts`: the plays read it in their `hosts:` before any host's variables exist, so it comes from `-e`"
        in text
    )
    (row,) = [
        line
        for line in (REPO / "docs" / "options.md").read_text().splitlines()
        if line.startswith("| `cuda13_target_hosts` |")
    ]
    assert (
        "give it with -e cuda13_target_hosts=GROUP (a value in group_vars or host_vars is not read there)"
        in row
    )


def test_the_restart_counts_are_the_plans():
    two = [
        {"name": "plain", "server_args": []},
        {"name": "eagle3", "server_args": ["--speculative-algorithm", "EAGLE3"]},
    ]
    runs_one = restarts.plan_upgrade(two, running=[])
    runs_neither = restarts.plan_upgrade(two, running=None)
    assert (
        runs_one["restarts_upgrade"],
        runs_neither["restarts_upgrade"],
        runs_one["restarts_rollback"],
    ) == (3, 4, 2)
    assert (
        "2 profiles: 3 restarts to keep when the service runs one of them, at most 4 otherwise - the count `plan` prints; 2 more to roll back"
        in README
    )
    how = _flat(REPO / "docs" / "how-it-works.md")
    assert (
        "two profiles cost 3 restarts per upgrade when the service runs one of them (at most 4 when it runs neither"
        in how
    )
    assert "and 2 more per rollback" in how
    assert "restarts: at most 4 for the upgrade, 2 more for a rollback" in _flat(REPO / "docs" / "cli.md")


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    found = set()
    for action in parser._actions:
        found |= {o for o in action.option_strings if o.startswith("--")}
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _long_options(sub)
    return found


def test_every_option_of_the_command_is_in_docs_cli_md():
    text = (REPO / "docs" / "cli.md").read_text()
    options = _long_options(cli_parser.build_parser()) - {"--help"}
    assert {"--yes", "--until", "--json"} <= options
    assert sorted(o for o in options if f"`{o}" not in text) == []


def test_the_install_section_states_the_driver_floor_and_the_open_kernel_module():
    defaults = yaml.safe_load((REPO / "roles" / "cuda13" / "defaults" / "main.yml").read_text())
    package = defaults["cuda13_toolkit_package_version"]
    floor = versions.DRIVER_TABLE[versions.toolkit_version_from_package(package)]
    assert (package, floor) == ("13.0.2-1", "580.95.05")
    install = README.partition("## Install")[2].partition("## Quickstart")[0]
    assert f"{floor} or later for the default toolkit package (`{package}`, CUDA 13.0 Update 2" in install
    assert (
        "in NVIDIA's open GPU kernel module flavour, which Blackwell GPUs need: the preflight refuses the proprietary one"
        in install
    )


def test_the_readme_names_the_example_inventorys_paths():
    stack = yaml.safe_load(
        (REPO / "inventory" / "blackwell" / "group_vars" / "blackwell" / "stack.yml").read_text()
    )
    paths = [
        stack[k]
        for k in ("cuda13_old_venv", "cuda13_old_sglang_src", "cuda13_new_venv", "cuda13_new_sglang_src")
    ]
    assert (
        "the four paths of the stacks under `/root` ("
        + ", ".join(f"`{p}`" for p in paths)
        + ", in `stack.yml`)"
        in README
    )


def _unfinished(text: str) -> list[str]:
    """Paragraphs (not code, headings, tables, lists) that end without a sentence's end."""
    out, in_code, para = [], False, []
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            in_code, para = not in_code, []
            continue
        if in_code:
            continue
        if line.strip():
            para.append(line)
            continue
        indented_code = para and para[0].startswith("    ")
        if para and not indented_code and not re.match(r"(#|\||[-*+] |\d+\. |<|>|!\[)", para[0].lstrip()):
            if not re.search(r"[.:!?)`>*]$", para[-1].rstrip()):
                out.append(" ".join(para)[-100:])
        para = []
    return out


@pytest.mark.parametrize("path", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_no_paragraph_stops_mid_sentence(path):
    # docs/how-it-works.md once ended one with "each role's own options, with".
    assert _unfinished(path.read_text()) == []
    assert _unfinished("The shared values are in one file; each role's own options, with\n\nNext.\n")
