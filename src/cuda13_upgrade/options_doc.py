"""docs/options.md from the roles' argument specs: every option with its default,
meaning, checks and tier.

The meaning is the spec's ``description``; the checks are the spec's type (with
its elements and choices), the rule of :data:`cuda13_upgrade.options.RULES` and
the relations of :data:`cuda13_upgrade.options.RELATIONS`. An option whose
default is another option (``stack_switch_health_timeout`` is
``{{ cuda13_health_timeout }}``) is an alias and says so.

The tier says who sets an option:

- ``must``: the values that describe a fleet's hosts (:data:`MUST`); their
  defaults are a guess at one typical host;
- ``tune``: the target, the gate and the rollout's pace (:data:`TUNE`); the
  defaults are safe;
- ``playbooks``: options the playbooks set themselves (:data:`PLAYBOOKS`, the
  ``vars:`` of a play or an ``include_role``, or a ``set_fact``); a value in the
  inventory changes nothing;
- ``advanced``: every other option, aliases among them.

``tests/test_options_doc.py`` keeps the lists honest (each names options that
exist; no alias is must-set or tune; every option an ``include_role`` passes is
in :data:`PLAYBOOKS`) and docs/options.md equal to :func:`options_doc`;
``scripts/options-doc.py`` rewrites it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from cuda13_upgrade.options import PLAY_OPTIONS, RELATIONS, RULES

__all__ = [
    "MARKER",
    "MUST",
    "PLAYBOOKS",
    "PLAY_OPTION_DOCS",
    "ROLES",
    "TIERS",
    "TUNE",
    "alias_of",
    "load_specs",
    "options_doc",
    "render_file",
    "tier",
]

#: The roles whose ``main`` options the action ``cuda13_options`` checks
#: (:data:`cuda13_upgrade.steps.options.ROLES`, always all of them).
ROLES = (
    "cuda13",
    "stack_snapshot",
    "cuda_toolkit",
    "cu130_wheels",
    "sglang_build",
    "stack_switch",
    "verify_throughput",
    "rollback",
    "artifact_cache",
    "nvidia_driver_check",
)

#: The options read by the playbooks themselves (:data:`cuda13_upgrade.options.PLAY_OPTIONS`)
#: have no argument spec: their default (as the playbooks write it) and meaning.
PLAY_OPTION_DOCS: dict[str, dict[str, Any]] = {
    "cuda13_serial": {
        "default": None,
        "description": "The rollout's batches in the form of the play's serial (a number, a percentage or "
        'a list of them, e.g. [1, "25%", "100%"]), read from the inventory or -e. Unset: a canary '
        "host, then 2, 4, 8, ... hosts, capped at cuda13_max_parallel (cuda13_upgrade.batches). The "
        "rollback playbook's default is 1.",
    },
    "cuda13_max_parallel": {
        "default": "25%",
        "description": "Without cuda13_serial: the most hosts a batch of the ramp takes at once, a count "
        "or a percentage of the fleet (rounded down, at least 1).",
    },
    "cuda13_window": {
        "default": {},
        "description": 'The maintenance window: {start: "HH:MM", end: "HH:MM", timezone: IANA name, '
        "days: [mon, ...]} (a window across midnight belongs to the day it starts). No batch starts "
        "outside it; a batch already running finishes (cuda13_upgrade.window). {} for none.",
    },
    "cuda13_until": {
        "default": None,
        "description": 'No batch starts after this time: "HH:MM" (the next such time after the run '
        "starts, on the control node's clock) or an ISO date and time.",
    },
    "cuda13_max_failed_hosts": {
        "default": 0,
        "description": "The rollout's failure budget over the whole fleet: the most hosts that may fail or "
        'roll back, a count or a percentage of the fleet (e.g. "10%", rounded down). Checked before each '
        "batch; once more hosts have failed, no new batch starts and the hosts left are reported "
        '"not reached: failure budget spent". 0 stops at the first (cuda13_upgrade.budget).',
    },
    "cuda13_breaker_rollbacks": {
        "default": 2,
        "description": "The breaker across runs: a rollout is refused before any change once the "
        "rollbacks and failures of earlier rollouts within cuda13_breaker_days reach this many, until "
        "cuda13_breaker_ack acknowledges them; 0 turns it off. 2: one rollback can be the host's own "
        "trouble and the gate already put it back; a second within the period says the target is "
        "slower on this fleet, and a third scheduled run would only restart serving hosts again "
        "(cuda13_upgrade.breaker).",
    },
    "cuda13_breaker_days": {
        "default": 7,
        "description": "The breaker's period in days: the rollbacks and failures of rollouts that "
        "finished this long ago or later count (a week of nightly runs, or one weekly window).",
    },
    "cuda13_breaker_ack": {
        "default": None,
        "description": "Acknowledge a tripped breaker: the run id its refusal names (the newest run "
        "counted; `cuda13-upgrade rollout --ack-breaker RUN_ID`). The rollbacks of that run and of "
        "earlier ones no longer count; those of later runs count again.",
    },
    "cuda13_block_on_alerts": {
        "default": {},
        "description": "Batches that wait for a quiet fleet: {url: the Prometheus server's URL, match: "
        "alerts that count (a regular expression on alertname, {label: regex}, or a list), ignore: alerts "
        "that do not, firing_only: true, interval_s: 60, timeout_s: 10, max_wait_s: null, on_unreachable: "
        "refuse}. Before each batch (the canary's first) the rollout asks Prometheus's rules API; while a "
        "matching alert is active the batch waits, asking again every interval_s, until the alerts clear "
        "or the window closes (cuda13_window, cuda13_until; max_wait_s, at most 604800 s: a run held a week "
        "is better stopped and started again; or an hour without either); the "
        "hosts not started are reported with the alerts that held them. An alert whose rule reads a "
        "cuda13_upgrade_* metric (the project's own) never counts. A Prometheus that does not answer "
        "starts no batch (on_unreachable: proceed starts it without the check). {} for none "
        "(cuda13_upgrade.alerts, docs/fleet.md).",
    },
    "cuda13_notify": {
        "default": {},
        "description": "Webhooks told what the rollout did: {targets: [{url: the webhook's URL, format: "
        "slack (Slack's incoming webhook, {text: ...}) or json (the event's record: event, run_id, at, "
        "text, its fields, summary)}], timeout_s: 5}. Sent at the run's start (the plan's summary), each "
        "batch's end, each host that rolled back or failed (with its reason), the breaker's refusal, the "
        "failure budget spent, the window closed or alerts holding hosts (the hosts left) and the run's "
        "end (counts and the report's path). A send waits at most timeout_s (1 to 60 s) for all targets; "
        "one that fails is recorded in notifications.json, run.json and summary.md, and the rollout goes "
        "on. The URLs are secrets: every record and log shows scheme://host/***. Check mode sends nothing. "
        "{} for none (cuda13_upgrade.notify, docs/fleet.md).",
    },
    "cuda13_max_fail_percentage": {
        "default": 0,
        "description": "The rollback playbook's max_fail_percentage: the share of a batch's hosts, in "
        "percent, that may fail before it stops. The rollout's budget is cuda13_max_failed_hosts.",
    },
    "cuda13_preflight_allow_partial": {
        "default": False,
        "description": "Upgrade the hosts that passed the preflight when others did not; by default one "
        "refused host stops the run before any host changes.",
    },
    "cuda13_break_lock": {
        "default": False,
        "description": "Take over a host's upgrade lock held by another run whose lease has not run out "
        "(only when that run is known to be dead); a lock of a dead run past its lease is taken over "
        "without it.",
    },
    "cuda13_driver_only": {
        "default": False,
        "description": "The driver window alone: each host below the driver floor is moved to "
        "cuda13_driver_target (cached, drained, measured on both drivers, rolled back where slower or "
        "failing) and its stack is left as it is; a host already at or above the floor is left alone. "
        "Set by cuda13-upgrade driver and playbooks/driver.yml; the stack follows on a later rollout "
        "(docs/driver.md).",
    },
    "cuda13_target_hosts": {
        "default": "blackwell",
        "description": "The inventory group (or host pattern) the playbooks upgrade; the inventory must "
        "name hosts in it. Read by the plays' hosts: (playbooks/*.yml), which Ansible templates "
        "before any host's variables exist: give it with -e cuda13_target_hosts=GROUP (a value in "
        "group_vars or host_vars is not read there), or name the group blackwell.",
    },
}

#: Must set for a fleet: what the hosts are (the unit, where the stacks live, the
#: server's profiles, the GPUs, the apt repository of their distribution, the
#: group) and how a host leaves the load balancer.
MUST: tuple[str, ...] = (
    "cuda13_target_hosts",
    "cuda13_service_name",
    "cuda13_server_url",
    "cuda13_old_venv",
    "cuda13_old_sglang_src",
    "cuda13_new_venv",
    "cuda13_new_sglang_src",
    "cuda13_profiles",
    "cuda13_drain_tasks",
    "cuda13_undrain_tasks",
    "cuda_toolkit_apt_repo_url",
    "nvidia_driver_check_expected_gpu_count",
)

#: Tune: the target, the gate, the rollout's pace and where results go.
TUNE: tuple[str, ...] = (
    # target
    "cuda13_toolkit_release",
    "cuda13_toolkit_package_version",
    "cuda_toolkit_package",
    "cuda13_wheels_index_url",
    "cuda13_wheels_extra_index_urls",
    "cu130_wheels_requirements",
    "cu130_wheels_lock_file",
    "cu130_wheels_pip_extra_args",
    "cu130_wheels_pip_environment",
    "sglang_build_method",
    "sglang_build_repo",
    "sglang_build_version",
    "sglang_build_environment",
    "cuda13_preflight_resolve",
    "cuda13_artifact_cache",
    # rollout
    "cuda13_serial",
    "cuda13_max_parallel",
    "cuda13_window",
    "cuda13_until",
    "cuda13_max_failed_hosts",
    "cuda13_breaker_rollbacks",
    "cuda13_breaker_days",
    "cuda13_breaker_ack",
    "cuda13_block_on_alerts",
    "cuda13_notify",
    "cuda13_soak_seconds",
    "cuda13_soak_interval_seconds",
    "cuda13_max_fail_percentage",
    "cuda13_preflight_allow_partial",
    "cuda13_break_lock",
    "cuda13_health_timeout",
    "cuda13_router_url",
    "cuda13_drain_wait_seconds",
    "cuda13_allow_undrained",
    "cuda13_driver_target",
    "cuda13_driver_packages",
    "cuda13_driver_flavour",
    "cuda13_driver_activation",
    "cuda13_driver_gpu_clients",
    "cuda13_driver_reboot_timeout",
    "cuda13_driver_boot_time_command",
    "cuda13_driver_only",
    "cuda13_extra_vars_allowed",
    "cuda13_reverify",
    "cuda13_rollback_verify",
    "cuda13_baseline_max_age_hours",
    "cuda13_lock_lease_hours",
    "rollback_remove_new_stack",
    # results
    "cuda13_reports_dir",
    "cuda13_metrics_textfile_dir",
    # gate
    "verify_throughput_tolerance_pct",
    "verify_throughput_min_trials",
    "verify_throughput_max_trials",
    "verify_throughput_method",
    "verify_throughput_metric",
    "verify_throughput_output_len",
    "verify_throughput_prompt_len",
    "verify_throughput_probe",
    "verify_throughput_probe_min_prefix_tokens",
    "verify_throughput_probe_min_agreeing_share",
    "verify_throughput_accept_length_drop_pct",
    "verify_throughput_disabled_flag_action",
    "verify_throughput_require_speculative_gain",
    "verify_throughput_ttft_prompt_len",
    "verify_throughput_ttft_tolerance_pct",
    "verify_throughput_concurrency",
    "verify_throughput_concurrency_tolerance_pct",
    "verify_throughput_soak_requests",
    "verify_throughput_soak_concurrency",
    "verify_throughput_soak_deadline_s",
    "verify_throughput_soak_baseline",
    # preflight
    "nvidia_driver_check_allowed_compute_capabilities",
    "nvidia_driver_check_required_disk_gib",
    "nvidia_driver_check_min_driver_version",
    "nvidia_driver_check_allow_mixed_gpu_models",
    "nvidia_driver_check_allow_busy_gpus",
    "nvidia_driver_check_allow_wsl",
)

#: Set by the playbooks: a play's or an include_role's vars or a set_fact (the run id, fixed
#: once per run from $CUDA13_RUN_ID, the CLI's --run-id). The steps' own inputs (the
#: verify_throughput phase and plan, the switch's and the rollback's profile arguments, the
#: SGLang release the preflight resolves) are not options the playbooks set: each step's
#: action works them out from the records it is given; those options remain the inputs of a
#: role's entry point called on its own (advanced).
PLAYBOOKS: tuple[str, ...] = ("cuda13_run_id",)

#: The tiers in the document's order: (key, heading, what it means).
TIERS: tuple[tuple[str, str, str], ...] = (
    (
        "must",
        "Must set for a fleet",
        "What your hosts are: the defaults are a guess at one typical host. Set these in the "
        "inventory's `group_vars/<group>/`, except `cuda13_target_hosts`: the plays read it in "
        "their `hosts:` before any host's variables exist, so it comes from `-e` (or the group "
        "is named `blackwell`).",
    ),
    (
        "tune",
        "Tune",
        "The target, the throughput gate, the rollout's pace and where results go: the defaults are "
        "safe; change them when you mean to.",
    ),
    (
        "advanced",
        "Advanced",
        "Paths, file names and the roles' own wiring. An alias (its default is another option, "
        "e.g. `stack_switch_health_timeout` is `cuda13_health_timeout`) follows that option: set "
        "the option it aliases, which every step reads, unless one step alone needs another value.",
    ),
    (
        "playbooks",
        "Set by the playbooks",
        "The playbooks set these themselves (a play's or an `include_role`'s `vars:`, or a "
        "`set_fact`), above the inventory's precedence: a value in the inventory changes nothing. "
        "Listed so that a role used on its own can be given them.",
    ),
)

#: The line after which docs/options.md is generated; the text above it is written by hand.
MARKER = "<!-- Generated from here on by scripts/options-doc.py: do not edit by hand. -->"

_ALIAS_RE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


def load_specs(repo: Path, roles: Iterable[str] = ROLES) -> dict[str, dict[str, Any]]:
    """The ``main`` options of ``roles`` (``roles/<role>/meta/argument_specs.yml``), merged.

    Returns ``{option: argument spec entry}``; raises ``OSError`` for a missing
    file and ``KeyError`` for a spec without ``argument_specs.main``.
    """
    merged: dict[str, dict[str, Any]] = {}
    for role in roles:
        text = (repo / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8")
        merged.update(yaml.safe_load(text)["argument_specs"]["main"].get("options") or {})
    return merged


def alias_of(spec: Mapping[str, Any]) -> str | None:
    """The option a spec's default names alone (``"{{ cuda13_health_timeout }}"``), else None."""
    default = spec.get("default")
    match = _ALIAS_RE.match(default) if isinstance(default, str) else None
    return match.group(1) if match else None


def tier(option: str) -> str:
    """The tier key of an option: ``must``, ``tune``, ``playbooks`` or ``advanced``."""
    if option in MUST:
        return "must"
    if option in TUNE:
        return "tune"
    if option in PLAYBOOKS:
        return "playbooks"
    return "advanced"


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped (also inside code)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(spec: Mapping[str, Any]) -> str:
    if "default" not in spec:
        return "(none)"
    value = spec["default"]
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{json.dumps(value)}`"


def _meaning(option: str, spec: Mapping[str, Any]) -> str:
    description = spec.get("description", "")
    if isinstance(description, list):
        description = " ".join(str(d) for d in description)
    alias = alias_of(spec)
    if alias:
        return f"**Alias of `{alias}`** (its value unless set). {description}"
    return str(description)


def _checks(option: str, spec: Mapping[str, Any]) -> str:
    kind = spec.get("type", "str")
    if spec.get("elements"):
        kind += f" of {spec['elements']}"
    if spec.get("choices"):
        kind += " in " + ", ".join(str(c) for c in spec["choices"])
    parts = [kind]
    if spec.get("required"):
        parts.append("required")
    rule = RULES.get(option)
    if rule and (rule.__doc__ or "").strip():
        parts.append((rule.__doc__ or "").strip())
    if option in RELATIONS:
        parts.append(RELATIONS[option])
    return "; ".join(parts)


def options_doc(specs: Mapping[str, Mapping[str, Any]]) -> str:
    """The generated part of docs/options.md (from :data:`MARKER` on).

    Args:
        specs: ``{option: argument spec entry}`` of every role (:func:`load_specs`);
            :data:`PLAY_OPTIONS` with :data:`PLAY_OPTION_DOCS` are added.

    Returns:
        Markdown: the marker, a count per tier, then per tier a table of its
        options (sorted by name) with default, meaning and checks.
    """
    merged: dict[str, dict[str, Any]] = {
        name: {**spec, **PLAY_OPTION_DOCS.get(name, {})} for name, spec in PLAY_OPTIONS.items()
    }
    merged.update({name: dict(spec) for name, spec in specs.items()})
    by_tier: dict[str, list[str]] = {key: [] for key, _, _ in TIERS}
    for option in sorted(merged):
        by_tier[tier(option)].append(option)
    counts = ", ".join(f"{len(by_tier[key])} {heading.lower()}" for key, heading, _ in TIERS)
    lines = [
        MARKER,
        "",
        f"{len(merged)} options: {counts}. Regenerate with `.venv/bin/python scripts/options-doc.py` "
        "after changing an argument spec or a tier (`src/cuda13_upgrade/options_doc.py`).",
    ]
    for key, heading, about in TIERS:
        lines += [
            "",
            f"## {heading}",
            "",
            about,
            "",
            "| option | default | meaning | checks |",
            "| --- | --- | --- | --- |",
        ]
        for option in by_tier[key]:
            spec = merged[option]
            cells = [f"`{option}`", _default(spec), _meaning(option, spec), _checks(option, spec)]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_file(current: str, specs: Mapping[str, Mapping[str, Any]]) -> str:
    """docs/options.md's text: ``current``'s hand-written part (up to :data:`MARKER`)
    followed by :func:`options_doc`. Raises ``ValueError`` when ``current`` lacks the marker."""
    head, found, _ = current.partition(MARKER)
    if not found:
        raise ValueError(f"docs/options.md has no line {MARKER!r} to generate after")
    return head + options_doc(specs)
