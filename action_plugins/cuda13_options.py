"""Action cuda13_options: check every option once per host and run (documentation:
library/cuda13_options.py)."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleUndefinedVariable
from ansible.template import trust_as_template

from cuda13_upgrade import varnames
from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.options import PLAY_OPTIONS
from cuda13_upgrade.steps import options


def _trusted(value):
    """A default as its role's file holds it, trusted for templating as a role default is."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def _extra_vars(loader):
    """The command's ``-e`` values, as ansible-playbook parsed them (names only are used)."""
    try:
        from ansible import context
        from ansible.utils.vars import load_extra_vars

        if not context.CLIARGS.get("extra_vars"):
            return {}
        return load_extra_vars(loader) or {}
    except Exception:  # noqa: BLE001 - origins are a courtesy: without them the message says so
        return {}


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {"roles": {"type": "list", "elements": "str", "default": list(options.ROLES)}}

    def _allowed(self, inventory):
        """``cuda13_extra_vars_allowed`` as the inventory or -e set it, templated ([] if unset)."""
        if "cuda13_extra_vars_allowed" not in inventory:
            return []
        value = self._templar.template(inventory["cuda13_extra_vars_allowed"])
        return value if isinstance(value, list) else []

    def run_step(self, host, args, task_vars):
        role_path = task_vars.get("role_path")
        roles_dir = Path(role_path).parent if role_path else Path(__file__).resolve().parents[1] / "roles"
        roles = list(dict.fromkeys([*args["roles"], "nvidia_driver_check"]))
        specs = options.read_specs(roles_dir, roles)
        raw = options.read_defaults(roles_dir, roles)
        names = options.option_names(specs)
        # What the inventory or -e set: hostvars hold neither role defaults nor play vars.
        inventory = task_vars["hostvars"][host.name]
        # A name with a role's prefix that nothing reads is a typo: refused, with where it was
        # set and the closest known name, before any other check.
        set_here = [str(name) for name in inventory if varnames.has_prefix(str(name))]
        # Retired names are known: they are warned about below, not refused.
        known = varnames.known_names(roles_dir.parent, PLAY_OPTIONS) | set(names)
        known |= set(getattr(options, "RETIRED", ()))
        if varnames.unknown(set_here, known, self._allowed(inventory)):
            found = varnames.origins(
                host.name,
                task_vars.get("group_names") or [],
                task_vars.get("ansible_inventory_sources") or [],
                task_vars.get("playbook_dir"),
                _extra_vars(self._loader),
            )
            options.check_names(host.name, set_here, known, self._allowed(inventory), found)
        given = {name: inventory[name] for name in names if name in inventory}
        variables = {**{k: _trusted(v) for k, v in raw.items()}, **task_vars}
        templar = self._templar.copy_with_new_env(available_variables=variables)
        defaults = {}
        for name in names:
            if name in given or name not in variables:
                continue
            try:
                defaults[name] = templar.template(variables[name])
            except AnsibleUndefinedVariable:
                defaults[name] = None
        # A relative hook is found where roles/upgrade_host/tasks/drain.yml's include finds it.
        playbook_dir = task_vars.get("playbook_dir")
        hook_search = [roles_dir / "upgrade_host" / "tasks", roles_dir / "upgrade_host"]
        hook_search += [Path(playbook_dir)] if playbook_dir else []
        checked = options.check(host.name, given, specs, defaults, hook_search)
        return {
            "changed": False,
            "warnings": options.retired(name for name in options.RETIRED if name in inventory),
            "given": checked["given"],
            "ansible_facts": {"cuda13_options": checked["values"]},
        }
