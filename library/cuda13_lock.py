#!/usr/bin/python
"""Action cuda13_lock (action_plugins/cuda13_lock.py): one upgrade run per host at a time."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_lock
short_description: Take or release a host's upgrade lock, taking over the lock of a dead run
description:
  - One run per host at a time. C(mkdir <state_dir>/run.lock) is atomic, so the first run to
    create the directory holds it; the run writes its owner into it (run id, control node,
    the pid of its ansible-playbook, when it started, when its lease ends).
  - A second run is refused, naming the holder, unless the holder is dead
    (cuda13_upgrade.runlock.lock_verdict) - its result is recorded on the host, its
    ansible-playbook is gone from this control node, or its lease has expired - or
    O(break) is set; then this run takes the lock over and says whose it was (the notice
    C(cuda13_notice), which the C(cuda13-upgrade) command prints).
  - An action plugin - it runs on the control node (the verdict needs its processes) and
    calls the module C(cuda13_lock_dir) on the host for the directory itself.
options:
  state:
    description: C(acquired) takes the lock, C(released) releases the lock this run holds.
    type: str
    choices: [acquired, released]
    required: true
  state_dir: {description: The host's state directory (C(cuda13_state_dir))., type: path, required: true}
  run_id: {description: This run's identifier., type: str, required: true}
  lease_hours: {description: Hours after which a run that did not release its lock counts as dead (C(cuda13_lock_lease_hours))., type: float, default: 24}
  break: {description: Take the lock over even from a run that may be alive (C(cuda13_break_lock))., type: bool, default: false}
  lock: {description: With C(released), the record C(acquired) returned (a lock this run does not hold is left)., type: dict, default: {}}
attributes:
  check_mode: {support: full, description: Does nothing in check mode (C(held) false).}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Take the host's upgrade lock
  cuda13_lock:
    state: acquired
    state_dir: "{{ cuda13_options.cuda13_state_dir }}"
    run_id: "{{ cuda13_run_id }}"
  register: __cuda13_lock

- name: Release the lock
  cuda13_lock:
    state: released
    state_dir: "{{ cuda13_options.cuda13_state_dir }}"
    run_id: "{{ cuda13_run_id }}"
    lock: "{{ __cuda13_lock }}"
"""

RETURN = r"""
held:
  description: Whether this run holds the lock now (C(acquired)), or held it until now (C(released)).
  type: bool
  returned: always
taken_over:
  description: The owner record of the dead run whose lock this run took over, or null.
  type: dict
  returned: always
owner: {description: This run's owner record., type: dict, returned: when held}
"""
