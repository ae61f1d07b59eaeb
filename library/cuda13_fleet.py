#!/usr/bin/python
"""Action cuda13_fleet (action_plugins/cuda13_fleet.py): the rollout's gates on the control node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_fleet
short_description: Plan the rollout's batches and check its window, failure budget, breaker and alerts, before the run and each batch
description:
  - C(start) - the batch plan over the play's hosts (C(cuda13_serial), or the ramp capped at C(cuda13_max_parallel)),
    the window (C(cuda13_window), C(cuda13_until)), the failure budget (C(cuda13_max_failed_hosts)), the alert gate
    (C(cuda13_block_on_alerts)) and, with O(breaker), the breaker across runs (from the reports); bad values refuse
    the run before any change, each named; a tripped breaker writes the refused run's report and refuses. Sets
    C(cuda13_fleet) (and C(cuda13_breaker)).
  - C(kept) - the hosts already kept leave the run (C(cuda13_run_hosts), C(cuda13_upgrade_hosts)); the batches are
    planned again over the hosts that upgrade.
  - C(batch) - before each batch (the canary's first), within the failure budget and inside the window; else C(start)
    is false, the hosts not started and why are written into the run's report at once and kept as
    C(cuda13_not_started).
  - With C(cuda13_block_on_alerts), C(batch) then asks Prometheus (C(GET <url>/api/v1/rules?type=alert)) for active
    alerts; while one matches, it prints a line and asks again every C(interval_s) until the alerts clear (the batch
    starts; the last line is kept as C(cuda13_notice)) or the window closes, C(cuda13_until) passes or C(max_wait_s)
    is over (the batch does not start; the reason names the alerts that held it). Alerts whose rule reads a
    C(cuda13_upgrade_*) metric (the project's own) never hold a batch. A Prometheus that does not answer starts no
    batch, naming the URL and the error, unless C(on_unreachable) is C(proceed).
  - With C(cuda13_notify), webhooks are told what happened (cuda13_upgrade.notify) - C(start) with O(notify) the run's
    start (the plan's summary) or the breaker's refusal; C(batch) the end of the batch before it (its hosts' outcomes)
    and each of its hosts that rolled back, failed or was lost, with the reason from its C(result.json), then, when
    the batch does not start, why (failure budget spent, window closed, alerts held, Prometheus unreachable). Each
    send waits at most the option's C(timeout_s) for all its webhooks; one that fails prints a line and is kept in
    the run's C(notifications.json), never failing the task. The option is read from the inventory (its URLs are
    secrets, so no task argument carries them, and C(cuda13_fleet.options) holds them masked). Check mode tells nothing.
  - Runs on the control node; the play delegates it to localhost with C(delegate_facts).
options:
  action: {description: Which gate., type: str, choices: [start, kept, batch], required: true}
  run_id: {description: This run's identifier., type: str, required: true}
  reports_dir: {description: The reports directory., type: path, required: true}
  breaker: {description: With C(start), consult the breaker across runs., type: bool, default: false}
  started: {description: With C(start), the run's start (ISO 8601; default now)., type: str, default: ""}
  notify:
    description: With C(start), tell C(cuda13_notify)'s webhooks the run's start (the rollout; the plan does not).
    type: bool
    default: false
attributes:
  check_mode: {support: full, description: The same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Plan the rollout's batches, window and failure budget
  cuda13_fleet:
    action: start
    run_id: "{{ cuda13_run_id }}"
    reports_dir: reports
  delegate_to: localhost
  delegate_facts: true
  run_once: true
"""

RETURN = r"""
start: {description: (C(batch)) the batch may start., type: bool, returned: always}
not_started:
  description: >-
    (C(batch)) when the batch does not start, C({said, reason, hosts}) and, held by alerts, C(alerts) (each
    C({alertname, labels, state, active_at, rule, query, group})); else null.
  type: dict
  returned: always
lines: {description: (C(start)) the plan as printed., type: list, elements: str, returned: always}
notified:
  description: >-
    (C(start) always, C(batch) when the run's start was told) each notification sent, per webhook and event
    C({event, url (masked), format, status (sent, failed, not sent), code, error, elapsed_s}).
  type: list
  elements: dict
  returned: sometimes
"""
