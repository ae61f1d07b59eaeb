"""Action cuda13_inventory: the inventory's own consistency, on the control node (documentation:
library/cuda13_inventory.py)."""

from __future__ import annotations

from typing import Any

from cuda13_upgrade import inventorycheck
from cuda13_upgrade.actionbase import StepAction
from cuda13_upgrade.steps.host import StepFailed


def _origin(value: Any) -> str:
    """Where ansible-core 2.19 read ``value`` (its data tag ``Origin``): ``path:line`` of an
    inventory file, ``-e`` for an extra variable, "" when it does not say."""
    try:
        from ansible._internal._datatag._tags import Origin
    except ImportError:  # another ansible-core: the source is not known
        return ""
    origin = Origin.get_tag(value)
    if origin is None:
        return ""
    if origin.path:
        return f"{origin.path}:{origin.line_num}" if origin.line_num else str(origin.path)
    return "-e" if "-e" in str(origin.description or "") else str(origin.description or "")


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {"hosts": {"type": "list", "elements": "str", "default": []}}

    def run_step(self, host, args, task_vars):
        hostvars = task_vars["hostvars"]
        hosts = args["hosts"] or list(task_vars.get("ansible_play_hosts_all") or [])
        values = {}
        for name in hosts:
            # hostvars hold what the inventory and -e set, not the roles' defaults.
            found = hostvars[name]
            given = {v: found[v] for v in inventorycheck.MUST_SET if v in found}
            values[name] = inventorycheck.value_sources(given, {v: _origin(x) for v, x in given.items()})
        checked = inventorycheck.check(
            task_vars.get("ansible_inventory_sources") or [],
            list(task_vars.get("groups") or {}),
            values,
            {name: list(hostvars[name].get("group_names") or []) for name in hosts},
        )
        if checked["failures"]:
            raise StepFailed(inventorycheck.failure_message(checked["failures"]))
        return {
            "sources": checked["sources"],
            "changed": False,
            "ansible_facts": {"cuda13_must_set_sources": checked["sources"]},
        }
