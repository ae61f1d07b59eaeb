"""The drain-hook rule and the unknown-name rule through ansible-playbook on localhost
(playbooks/preflight.yml, the rollout's preflight): a host without a drain hook is refused unless
cuda13_allow_undrained; a hook file that does not exist, or a drain hook without its undrain hook,
is refused by the options step; an unknown name with a project prefix is refused naming it, where it
was set and the name meant. Each refusal comes before the host is read, and nothing runs after it."""

import os
import sys
from pathlib import Path

from playbook import extra_vars, run_playbook

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "sandbox" / "host" / "nvidia-smi"
HOOKS = REPO / "playbooks" / "hooks"
#: The task that reads the host (action cuda13_preflight): never reached after a refusal.
READS_HOST = "TASK [nvidia_driver_check : Check the host, the toolkit's apt transaction"


def _base(tmp_path: Path) -> dict:
    host = tmp_path / "host"
    (host / "opt").mkdir(parents=True, exist_ok=True)
    return {
        # localhost has no package index: the resolution is tests/test_resolve_step.py's
        "cuda13_preflight_resolve": "false",
        "cuda13_target_hosts": "all",
        "nvidia_driver_check_host_checks": "false",
        "nvidia_driver_check_nvidia_smi": DOUBLE,
        "cuda13_state_dir": f"{host}/state",
        "cuda13_cache_root": f"{host}/cache",
        "nvidia_driver_check_disk_path": f"{host}/opt",
        "nvidia_driver_check_space_stack": "sandbox",
    }


def _inventory(tmp_path: Path, group_vars: str = "") -> Path:
    """localhost in the group gpus, whose group_vars/gpus/serving.yml names the service (a value
    a fleet must set comes from the inventory) and holds ``group_vars``."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "gpus").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n      hosts:\n        localhost:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
    )
    (inventory / "group_vars" / "gpus" / "serving.yml").write_text(
        "cuda13_service_name: sglang.service\n" + group_vars
    )
    return inventory


def _preflight(tmp_path: Path, *extra: str, group_vars: str = "", **values: object):
    proc = run_playbook(
        REPO / "playbooks" / "preflight.yml",
        *extra_vars(**{**_base(tmp_path), **values}),
        *extra,
        inventory=_inventory(tmp_path, group_vars),
        interpreter=False,
        cwd=REPO,
        timeout=180,
    )
    return proc, proc.stdout + proc.stderr


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- drain -----------------------------------------------------------------------------------


def test_a_host_without_a_drain_hook_is_refused_before_it_is_read(tmp_path):
    proc, out = _preflight(tmp_path)
    assert proc.returncode != 0
    assert _one_line(
        "localhost: the rollout restarts sglang.service into each profile on both stacks and sends it the "
        "gate's benchmark load, and no drain hook takes the host out of service first: cuda13_drain_tasks "
        "is empty. Nothing was changed. Set cuda13_drain_tasks and cuda13_undrain_tasks "
        "(playbooks/hooks/sglang-router-drain.yml and -undrain.yml with cuda13_router_url), or run it while "
        "the host serves with -e cuda13_allow_undrained=true."
    ) in _one_line(out)
    # Refused before nvidia-smi was asked: no check passed, nothing written on the host.
    assert "localhost: passed:" not in out
    assert not (tmp_path / "host" / "state").exists()
    assert "hosts passed the preflight" not in out


def test_allow_undrained_lets_the_preflight_go_on(tmp_path):
    proc, out = _preflight(tmp_path, cuda13_allow_undrained="true")
    assert proc.returncode == 0, out[-3000:]
    assert "1 of 1 hosts passed the preflight" in out


def test_the_router_hooks_as_the_inventory_gives_them_pass(tmp_path):
    proc, out = _preflight(
        tmp_path,
        cuda13_drain_tasks=HOOKS / "sglang-router-drain.yml",
        cuda13_undrain_tasks="hooks/sglang-router-undrain.yml",  # relative: the playbook's directory
        cuda13_router_url="http://127.0.0.1:1",
    )
    assert proc.returncode == 0, out[-3000:]
    assert "1 of 1 hosts passed the preflight" in out


def test_a_hook_file_that_does_not_exist_is_refused_by_the_options_step(tmp_path):
    missing = tmp_path / "hooks" / "drain.yml"
    proc, out = _preflight(
        tmp_path, cuda13_drain_tasks=missing, cuda13_undrain_tasks=HOOKS / "sglang-router-undrain.yml"
    )
    assert proc.returncode != 0
    flat = _one_line(out)
    assert "localhost: invalid option values; nothing on the host was changed." in flat
    assert (
        _one_line(
            f"the drain hook is no task file on the control node (a relative path is looked up in "
            f"{REPO / 'roles' / 'upgrade_host' / 'tasks'}, {REPO / 'roles' / 'upgrade_host'}, {REPO / 'playbooks'}): "
            f"'{missing}'. Option: cuda13_drain_tasks. Fix: give the path of the hook's task file, e.g. "
            '"{{ playbook_dir }}/hooks/sglang-router-drain.yml".'
        )
        in flat
    )
    assert READS_HOST not in out
    assert not (tmp_path / "host" / "state").exists()


def test_a_drain_hook_without_an_undrain_hook_is_refused(tmp_path):
    proc, out = _preflight(tmp_path, cuda13_drain_tasks=HOOKS / "sglang-router-drain.yml")
    assert proc.returncode != 0
    assert _one_line(
        f"a drain hook ({HOOKS / 'sglang-router-drain.yml'}) without an undrain hook: a drained host would "
        "stay out of the load balancer after its upgrade: ''. Option: cuda13_undrain_tasks. Fix: set "
        "cuda13_undrain_tasks to the hook that puts the host back (playbooks/hooks/sglang-router-undrain.yml "
        "pairs with sglang-router-drain.yml)."
    ) in _one_line(out)
    assert READS_HOST not in out


# --- unknown names ---------------------------------------------------------------------------


def test_the_issues_typos_given_with_e_are_refused_naming_each_and_the_name_meant(tmp_path):
    proc, out = _preflight(
        tmp_path,
        "-e",
        "verify_throughput_tolerence_pct=5.0",
        "-e",
        "cuda13_max_failed_host=2",
        "-e",
        "cuda13_drain_task=",
        cuda13_allow_undrained="true",
    )
    assert proc.returncode != 0
    assert (
        "localhost: unknown variables with a prefix of cuda13-upgrade's roles; no role or playbook reads "
        "them, so their values would be ignored. Nothing on the host was changed.\n"
        "- cuda13_drain_task (set with -e): did you mean cuda13_drain_tasks?\n"
        "- cuda13_max_failed_host (set with -e): did you mean cuda13_max_failed_hosts?\n"
        "- verify_throughput_tolerence_pct (set with -e): did you mean verify_throughput_tolerance_pct?\n"
        "Rename each to the option meant (docs/options.md), or list your own variables with these "
        "prefixes in cuda13_extra_vars_allowed."
    ) in out
    assert READS_HOST not in out
    assert not (tmp_path / "host" / "state").exists()


def test_a_typo_in_group_vars_is_refused_naming_its_file(tmp_path):
    proc, out = _preflight(
        tmp_path, group_vars="verify_throughput_tolerence_pct: 5.0\n", cuda13_allow_undrained="true"
    )
    assert proc.returncode != 0
    # The file, relative to the directory the command ran in.
    where = os.path.relpath(tmp_path / "inventory" / "group_vars" / "gpus" / "serving.yml", REPO)
    assert (
        "localhost: unknown variable with a prefix of cuda13-upgrade's roles; no role or playbook reads it, "
        "so its value would be ignored. Nothing on the host was changed.\n"
        f"- verify_throughput_tolerence_pct (set in {where}): did you mean verify_throughput_tolerance_pct?\n"
    ) in out, out[-3000:]
    assert READS_HOST not in out


def test_an_operators_own_name_listed_in_the_escape_hatch_passes(tmp_path):
    proc, out = _preflight(
        tmp_path,
        "-e",
        "cuda13_site_rack=r12",
        "-e",
        '{"cuda13_extra_vars_allowed": ["cuda13_site_*"]}',
        cuda13_allow_undrained="true",
    )
    assert proc.returncode == 0, out[-3000:]
    assert "unknown variable" not in out
