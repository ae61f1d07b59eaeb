#!/usr/bin/python
"""Action cuda13_driver (action_plugins/cuda13_driver.py): the driver window's change, checks, measurement and rollback."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_driver
short_description: Move a host's NVIDIA driver to the driver window's target, check and measure it, or put the old one back
description:
  - C(cached) - the installed driver packages, each at its installed version, kept as .deb files in
    C(<cuda13_state_dir>/driver-cache/<driver version>/) (apt's cache first, else
    C(apt-get download)); a package found in neither refuses the move before any change.
  - C(moved) - stops the serving unit and the GPU clients the plan found (C(nvidia-persistenced),
    C(cuda13_driver_gpu_clients)), releases the driver's holds, installs the pinning package in an
    apt run of its own when there is one, then the target's packages, holds the driver's packages at
    their new versions, marks the kernel log and activates the driver - unloads C(nvidia_drm),
    C(nvidia_modeset), C(nvidia_uvm), C(nvidia_peermem), C(nvidia_fs), C(gdrdrv), C(nvidia) in this
    order and loads the modules that were loaded, or returns C(reboot) true (the play reboots with
    Ansible's C(reboot)) when the plan says so or a module stays in use under C(reload_or_reboot).
  - C(checked) - nvidia-smi answers with the target's version, without the driver/library
    version mismatch, with the same GPUs (bus ids) as the preflight saw; the GPU clients stopped
    are started again.
  - C(measured) - the serving stack, unchanged, measured on the new driver and judged by the stack's
    gate against the baseline taken on the old driver, with the kernel log since the activation; a
    kept move's measurement becomes the recorded baseline (C(<cuda13_state_dir>/baseline.json)).
    C(rollback) true with C(reason_to_roll_back) when it fails.
  - C(restored) - the cached packages installed again in one apt transaction with the packages
    the move added removed, held, activated (or C(reboot) true) and checked at the old version; the
    stack's rollback that follows in the rescue starts the service on its stack and measures it
    again. A restore that fails does not fail the task (the stack's rollback still runs) - it
    returns C(restore_failed) true with C(msg), and the host's result is failed with it.
  - An action plugin - it runs on the control node (C(cuda13_upgrade.steps.driver_move)) and reaches
    the host through C(cuda13_driver_facts), C(cuda13_kernel_log), C(cuda13_service) and Ansible's
    C(systemd_service), C(dpkg_selections), C(apt), C(command), C(copy) and C(file).
options:
  state:
    description: Which part of the window.
    type: str
    choices: [cached, moved, checked, measured, restored]
    required: true
  options:
    description: The validated options record (C(cuda13_options)).
    type: dict
    required: true
  plan:
    description: The preflight's driver window plan (C(nvidia_driver_check_preflight.driver_window)).
    type: dict
    default: {}
  run_id:
    description: The run's id (C(measured)).
    type: str
    default: ""
  cache:
    description: C(cached)'s record (C(restored)).
    type: dict
    default: {}
  moved:
    description: C(moved)'s record (C(checked), C(measured), C(restored)).
    type: dict
    default: {}
  checked:
    description: C(checked)'s record (C(measured)).
    type: dict
    default: {}
  snapshot:
    description: The snapshot step's record (C(measured)).
    type: dict
    default: {}
  baseline:
    description: The baseline step's record, taken on the old driver (C(measured)).
    type: dict
    default: {}
  gpus:
    description: The GPUs the preflight saw (C(checked), C(restored)).
    type: list
    elements: dict
    default: []
  in_rescue:
    description: >-
      With C(checked), in the rescue after a reboot onto the old driver - a failed check returns
      C(restore_failed) true with C(msg) instead of failing, so that the stack's rollback still runs.
    type: bool
    default: false
attributes:
  check_mode:
    support: partial
    description: >-
      Ansible's modules run in check mode (they report what they would change); nothing is
      downloaded, unloaded, loaded or measured.
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Keep the old driver's packages on the host
  cuda13_driver:
    state: cached
    options: "{{ cuda13_options }}"
    plan: "{{ nvidia_driver_check_preflight.driver_window }}"
  register: driver_cache

- name: Install the target driver and activate it
  cuda13_driver:
    state: moved
    options: "{{ cuda13_options }}"
    plan: "{{ nvidia_driver_check_preflight.driver_window }}"
  register: driver_moved
"""

RETURN = r"""
reboot:
  description: C(moved), C(restored) - the driver is activated by a reboot, which the play makes.
  returned: moved, restored
  type: bool
rollback:
  description: C(measured) - the stack on the new driver fails the gate.
  returned: measured
  type: bool
driver_version:
  description: C(checked) - the driver version nvidia-smi reports.
  returned: checked
  type: str
"""
