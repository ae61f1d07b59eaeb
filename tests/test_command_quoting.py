"""No shell from option values: every value interpolated into a command
string of the YAML is quoted (``| quote``) or passed as ``argv``; no Python the project runs
(host modules, host scripts, steps, action plugins) starts a shell; path and URL options
holding whitespace or a shell metacharacter are refused naming the option, the value and
the character."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from cuda13_upgrade.options import RULES, _failure

REPO = Path(__file__).resolve().parents[1]

#: Modules whose free-form or ``cmd`` string is a command line (``script``'s is split by
#: shlex on the control node; ``shell`` and ``raw`` run it in a shell).
COMMAND_MODULES = {
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("command", "shell", "script", "raw")
}
EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.S)
QUOTED = re.compile(r"\|\s*quote\s*$")


def _tasks(node, found: list) -> None:
    """Every mapping that is an element of a list (a task, a handler, a block's task)."""
    if isinstance(node, list):
        for item in node:
            if isinstance(item, dict):
                found.append(item)
            _tasks(item, found)
    elif isinstance(node, dict):
        for value in node.values():
            _tasks(value, found)


def unquoted_interpolations(path: Path) -> list[str]:
    """``<file>: <module>: {{ expr }} in <command>`` for each ``{{ }}`` of a command string
    (the module's free-form value or its ``cmd``) that does not end in ``| quote``."""
    found: list = []
    _tasks(yaml.safe_load(path.read_text(encoding="utf-8")), found)
    problems = []
    for task in found:
        for module in COMMAND_MODULES & set(task):
            value = task[module]
            strings = [value] if isinstance(value, str) else []
            if isinstance(value, dict):
                strings += [value[k] for k in ("cmd", "_raw_params") if isinstance(value.get(k), str)]
            args = task.get("args")
            if isinstance(args, dict) and isinstance(args.get("cmd"), str):
                strings.append(args["cmd"])
            for command in strings:
                for expression in EXPRESSION.findall(command):
                    if not QUOTED.search(expression.strip()):
                        problems.append(
                            f"{path.relative_to(REPO)}: {module}: {{{{{expression}}}}} in {command!r}"
                        )
    return problems


def _yaml_files() -> list[Path]:
    roots = [REPO / "roles", REPO / "playbooks", REPO / "molecule"]
    return sorted(p for root in roots for p in [*root.rglob("*.yml"), *root.rglob("*.yaml")])


def test_no_command_string_of_the_roles_playbooks_or_molecule_interpolates_an_unquoted_value():
    problems = [problem for path in _yaml_files() for problem in unquoted_interpolations(path)]
    assert problems == []


def test_the_check_finds_an_unquoted_value_and_accepts_a_quoted_one_and_argv(tmp_path):
    path = REPO / "roles" / "x.yml"  # relative_to(REPO) needs a path under the repository
    text = """
- name: The injected command of the issue
  ansible.builtin.script:
    cmd: bench.py --url {{ verify_throughput_server_url }} --dir {{ verify_throughput_dir | quote }}
- name: Quoted
  ansible.builtin.command: /bin/ls {{ cuda13_state_dir | quote }}
- name: As argv
  ansible.builtin.command:
    argv: [/bin/ls, "{{ cuda13_state_dir }}"]
- name: A step's own option named command
  cuda13_step:
    command: "{{ __cuda13_command }}"
"""
    original = Path.read_text
    try:
        Path.read_text = lambda self, **kw: text if self == path else original(self, **kw)  # type: ignore[method-assign]
        assert unquoted_interpolations(path) == [
            "roles/x.yml: ansible.builtin.script: {{ verify_throughput_server_url }} in "
            "'bench.py --url {{ verify_throughput_server_url }} --dir {{ verify_throughput_dir | quote }}'"
        ]
    finally:
        Path.read_text = original  # type: ignore[method-assign]


#: Calls that run a shell: os.system, os.popen, subprocess.getoutput/getstatusoutput, and any
#: call given ``shell=True`` (subprocess) or ``use_unsafe_shell=True`` (AnsibleModule.run_command).
SHELL_CALLS = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
}


def shell_uses(path: Path) -> list[str]:
    """``<file>:<line>: <what>`` for each place the file starts a shell or asks a host for a
    command string (``ansible.builtin.shell``/``raw``/``script``, or ``command`` with ``cmd``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    where = path.relative_to(REPO)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if (func.value.id, func.attr) in SHELL_CALLS:
                found.append(f"{where}:{node.lineno}: {func.value.id}.{func.attr}")
        for keyword in node.keywords:
            if keyword.arg in ("shell", "use_unsafe_shell") and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                found.append(f"{where}:{node.lineno}: {keyword.arg}=")
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            module = node.args[0].value
            if module.rsplit(".", 1)[-1] in ("shell", "raw", "script") and module.startswith("ansible."):
                found.append(f"{where}:{node.lineno}: {module}")
            if module.endswith(".command") and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
                keys = {k.value for k in node.args[1].keys if isinstance(k, ast.Constant)}
                if keys & {"cmd", "_raw_params"}:
                    found.append(f"{where}:{node.lineno}: {module} with a command string")
    return found


def _python_files() -> list[Path]:
    roots = ["src", "library", "action_plugins", "filter_plugins", "module_utils", "roles"]
    return sorted(
        p
        for root in roots
        for p in (REPO / root).rglob("*.py")
        if "__pycache__" not in p.parts and p.is_file()
    )


def test_no_host_script_module_step_or_plugin_starts_a_shell():
    files = _python_files()
    assert any(p.name == "service_cycle.py" for p in files)  # the host scripts are searched
    assert [use for path in files for use in shell_uses(path)] == []


def test_the_shell_check_finds_shell_true_and_os_system(tmp_path):
    path = REPO / "src" / "x.py"
    text = "import os, subprocess\nsubprocess.run('ls ' + d, shell=True)\nos.system(c)\nhost.module('ansible.builtin.shell', {})\n"
    original = Path.read_text
    try:
        Path.read_text = lambda self, **kw: text if self == path else original(self, **kw)  # type: ignore[method-assign]
        assert shell_uses(path) == [
            "src/x.py:2: shell=",
            "src/x.py:3: os.system",
            "src/x.py:4: ansible.builtin.shell",
        ]
    finally:
        Path.read_text = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("option", "value", "character"),
    [
        ("verify_throughput_server_url", "http://127.0.0.1:30000;touch /tmp/injected", ";"),
        ("cuda13_server_url", "http://127.0.0.1:30000/$(touch /tmp/injected)", "$"),
        ("cuda13_wheels_index_url", "https://pypi.example/simple`id`", "`"),
        ("verify_throughput_dir", "/opt/cuda13 bench", " "),
        ("verify_throughput_venv", "/opt/venv|sh", "|"),
        ("cuda13_new_venv", "/opt/new&venv", "&"),
        ("cuda13_state_dir", "/var/lib/x>y", ">"),
        ("stack_snapshot_dir", "/var/lib/x<y", "<"),
        ("cu130_wheels_python", "/usr/bin/python3'", "'"),
        ("sglang_build_src", '/opt/"sglang"', '"'),
        ("cuda13_old_venv", "/opt/ml-env\nrm", "\n"),
    ],
)
def test_a_path_or_url_with_a_shell_character_is_refused_naming_option_value_and_character(
    option, value, character
):
    refused = RULES[option](value)
    assert refused is not None
    message = _failure(option, value, *refused)["message"]
    what = "URL" if option.endswith("_url") else "path"
    assert message.startswith(
        f"{option} holds {character!r}, which a {what} given to the upgrade may not hold "
        f"(whitespace or a shell metacharacter): {value!r}. Option: {option}. Fix: give a {what} without "
        "whitespace, control characters or any of ; $ ` | & < > ' \" \\"
    )


def test_lists_of_urls_and_paths_are_refused_naming_the_element():
    refused = RULES["cu130_wheels_extra_index_urls"](["https://ok.example/simple", "https://x.example/a b"])
    assert _failure("cu130_wheels_extra_index_urls", ["x"], *refused)["message"].startswith(
        "cu130_wheels_extra_index_urls holds 'https://x.example/a b', which holds ' ', which a URL given to "
        "the upgrade may not hold"
    )
    refused = RULES["rollback_clear_dirs"](["/var/cache/a;b"])
    assert refused[0] == (
        "holds '/var/cache/a;b', which holds ';', which a path given to the upgrade may not hold "
        "(whitespace or a shell metacharacter)"
    )


def test_ordinary_paths_and_urls_are_accepted():
    assert RULES["cuda13_server_url"]("http://[::1]:30000/~sglang/v1?x=1") is None
    assert RULES["cu130_wheels_index_url"]("https://download.pytorch.org/whl/cu130") is None
    assert RULES["cuda13_new_venv"]("/opt/ml-env-cu130_1.2+x") is None
    assert RULES["cu130_wheels_extra_index_urls"](["file:///srv/wheels%20cache/simple"]) is None
