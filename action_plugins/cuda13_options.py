"""Action cuda13_options: check every option once per host and run (documentation:
library/cuda13_options.py)."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleUndefinedVariable
from ansible.template import trust_as_template

from cuda13_upgrade.actionbase import StepAction
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


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {"roles": {"type": "list", "elements": "str", "default": list(options.ROLES)}}

    def run_step(self, host, args, task_vars):
        role_path = task_vars.get("role_path")
        roles_dir = Path(role_path).parent if role_path else Path(__file__).resolve().parents[1] / "roles"
        roles = list(dict.fromkeys([*args["roles"], "nvidia_driver_check"]))
        specs = options.read_specs(roles_dir, roles)
        raw = options.read_defaults(roles_dir, roles)
        names = options.option_names(specs)
        # What the inventory or -e set: hostvars hold neither role defaults nor play vars.
        inventory = task_vars["hostvars"][host.name]
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
        checked = options.check(host.name, given, specs, defaults)
        return {
            "changed": False,
            "given": checked["given"],
            "ansible_facts": {"cuda13_options": checked["values"]},
        }
