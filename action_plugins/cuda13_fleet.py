"""Action cuda13_fleet: the rollout's gates on the control node (documentation: library/cuda13_fleet.py)."""

from __future__ import annotations

from cuda13_upgrade import alerts, notify
from cuda13_upgrade.actionbase import StepAction, display
from cuda13_upgrade.steps import fleet
from cuda13_upgrade.steps.host import StepFailed


def inventory_value(hostvars, hosts, option):
    """``option`` as the inventory or -e gives it to the first of ``hosts`` that has it (the start
    gate checked that every host of the rollout has the same), or None. Read here, not from the
    plan, which holds it masked: ``cuda13_notify``'s URLs, ``cuda13_block_on_alerts``'s
    ``user:password@``."""
    for h in hosts:
        if h in hostvars and option in hostvars[h]:
            return hostvars[h][option]
    return None


def notify_value(hostvars, hosts):
    """``cuda13_notify`` as the inventory gives it (:func:`inventory_value`), or None."""
    return inventory_value(hostvars, hosts, notify.OPTION)


def _estimate_inputs(host_vars):
    """``{"profiles": the number of cuda13_profiles, "soak_s": cuda13_soak_seconds}`` as a host's
    inventory gives them, each None when it gives none or a value that cannot be read here (the
    preflight refuses a bad one; the estimate counts it unknown)."""
    out = {}
    for key, name in (("profiles", "cuda13_profiles"), ("soak_s", "cuda13_soak_seconds")):
        try:
            value = host_vars.get(name)
        except Exception:  # noqa: BLE001 - a value that cannot be templated: unknown here
            value = None
        if key == "profiles":
            value = len(value) if isinstance(value, list) and value else None
        elif isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        out[key] = value
    return out


def say_unsent(records):
    """A line for each notification that could not be sent (the rollout goes on)."""
    for line in notify.failure_lines(records):
        display.display(line)


class ActionModule(StepAction):
    _requires_connection = False
    ARGUMENT_SPEC = {
        "action": {"type": "str", "choices": ["start", "kept", "batch"], "required": True},
        "run_id": {"type": "str", "required": True},
        "reports_dir": {"type": "path", "required": True},
        "breaker": {"type": "bool", "default": False},
        "started": {"type": "str", "default": ""},
        "notify": {"type": "bool", "default": False},
    }

    def run_step(self, host, args, task_vars):
        hostvars = task_vars["hostvars"]
        localhost = hostvars["localhost"] if "localhost" in hostvars else {}
        play_hosts = list(task_vars.get("ansible_play_hosts_all") or [])
        if args["action"] == "start":
            given = {
                h: {name: hostvars[h][name] for name in fleet.FLEET_OPTIONS if name in hostvars[h]}
                for h in play_hosts
            }
            gate = fleet.start(
                play_hosts,
                given,
                run_id=args["run_id"],
                reports_dir=args["reports_dir"],
                use_breaker=args["breaker"],
                started=args["started"] or None,
                # Check mode tells no webhook: nothing happens to tell.
                tell=args["notify"] and not self._task.check_mode,
                # What the estimate takes from the inventory without a plan (rollout --yes).
                inventory={h: _estimate_inputs(hostvars[h]) for h in play_hosts},
            )
            say_unsent(gate["notified"])
            if gate["failures"]:
                lines = "\n".join(f"- {failure}" for failure in gate["failures"])
                raise StepFailed(
                    "The rollout's batches, window, failure budget or breaker have bad values; no host was"
                    f" changed.\n{lines}"
                )
            if gate["not_started"] is not None:
                raise StepFailed(gate["breaker"]["message"], {"not_started": gate["not_started"]})
            display.display("\n".join(gate["lines"]))
            facts = {"cuda13_fleet": gate["fleet"]}
            if gate["breaker"] is not None:
                facts["cuda13_breaker"] = gate["breaker"]
            return {"lines": gate["lines"], "changed": False, "ansible_facts": facts}
        the_fleet = dict(localhost.get("cuda13_fleet") or {})
        if args["action"] == "kept":
            active = list(task_vars.get("ansible_play_hosts") or [])
            kept = [h for h in active if (hostvars[h].get("cuda13_host_run") or {}).get("already_kept")]
            upgrade = [h for h in play_hosts if h not in kept]
            facts = {"cuda13_run_hosts": play_hosts, "cuda13_upgrade_hosts": upgrade}
            if the_fleet and len(upgrade) < len(play_hosts):
                estimate = the_fleet.get("estimate")  # the start's (cuda13_upgrade.estimate)
                the_fleet = fleet.plan(upgrade, the_fleet.get("options") or {}, the_fleet.get("started"))
                if estimate:
                    the_fleet["estimate"] = estimate
                display.display("\n".join(the_fleet["lines"]))
                facts["cuda13_fleet"] = the_fleet
            return {"kept": kept, "upgrade": upgrade, "changed": False, "ansible_facts": facts}
        statuses = {}
        for h in play_hosts:
            result = hostvars[h].get("cuda13_result")
            statuses[h] = result.get("status") if isinstance(result, dict) else None
        waits: list[str] = []

        def say(line: str) -> None:
            # Each time a batch waits for Prometheus's alerts (cuda13_block_on_alerts), at once.
            waits.append(line)
            display.display(line)

        gate = fleet.batch_gate(
            the_fleet,
            hosts=play_hosts,
            batch=list(task_vars.get("ansible_play_batch") or []),
            active=list(task_vars.get("ansible_play_hosts") or []),
            statuses=statuses,
            run_id=args["run_id"],
            reports_dir=args["reports_dir"],
            run_hosts=list(localhost.get("cuda13_run_hosts") or play_hosts),
            say=say,
            notify_value=None if self._task.check_mode else notify_value(hostvars, play_hosts),
            # The Prometheus URL with its credentials: the plan (the fact cuda13_fleet) holds it masked.
            alerts_value=inventory_value(hostvars, play_hosts, alerts.OPTION),
        )
        say_unsent(gate.get("notified") or [])
        facts = {}
        if waits and gate["not_started"] is None:
            facts["cuda13_notice"] = waits[-1]  # the batch waited, or started without the check
        if gate["not_started"] is not None:
            said = gate["not_started"]
            display.display(f"{said['said']}: {said['reason']} (hosts {', '.join(said['hosts'])})")
            facts["cuda13_not_started"] = said
        return {**gate, "changed": False, "ansible_facts": facts}
