#!/usr/bin/python
"""Module cuda13_driver_facts: what moving the NVIDIA driver needs on a host, read in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_driver_facts
short_description: Read what the driver window's preflight judges on a host - packages, headers, Secure Boot, GPU clients
description:
  - Read-only. Reads the installed NVIDIA driver packages and their holds (C(dpkg-query)), the kernel release
    and whether its headers are installed (C(/lib/modules/RELEASE/build)), Secure Boot (C(mokutil --sb-state),
    the EFI variable) and whether DKMS's signing key is enrolled (C(mokutil --test-key)), every process holding
    C(/dev/nvidia*) with its systemd unit, the loaded NVIDIA kernel modules (C(/proc/modules)), the loaded
    module's version (C(/proc/driver/nvidia/version)), NVSwitch devices, and the state of the fabric manager,
    nvidia-persistenced and the named GPU client units.
  - The host's side of the action C(cuda13_preflight) when C(cuda13_driver_target) is set and the driver is
    below the CUDA release's floor (cuda13_upgrade.driverplan judges it); the logic is
    C(src/cuda13_upgrade/hostscripts/driver_facts.py).
options:
  proc: {description: The proc file system., type: path, default: /proc}
  dev: {description: The device directory., type: path, default: /dev}
  lib_modules: {description: Where the kernel's modules and build links are., type: path, default: /lib/modules}
  efivars: {description: The EFI variables., type: path, default: /sys/firmware/efi/efivars}
  mok_key:
    description: DKMS's module signing certificate; empty to take the mok_certificate of O(dkms_framework), else the first of /var/lib/shim-signed/mok/MOK.der (Ubuntu) and /var/lib/dkms/mok.pub that exists.
    type: str
    default: ""
  dkms_framework: {description: DKMS's framework.conf., type: path, default: /etc/dkms/framework.conf}
  units: {description: More systemd units that open the GPUs (cuda13_driver_gpu_clients)., type: list, elements: str, default: []}
  timeout: {description: Seconds each command may take., type: int, default: 30}
attributes:
  check_mode: {support: full, description: Read-only; runs the same in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Read what moving the driver needs
  cuda13_driver_facts:
    units: [nvidia-dcgm.service]
"""

RETURN = r"""
facts:
  description: >-
    packages ([{name, version, status, held}]), dpkg_query (its raw text), dpkg_query_exit ({rc, stderr}),
    kernel_release, headers ({path, exists, link, target}), secure_boot ({rc, stdout, stderr}), efi_secure_boot
    (bool or null), efi (booted through UEFI), mok_key (the signing certificate's path), mok_key_exists, mok_test_key ({rc, stdout, stderr} or null), device_holders ([{pid, comm, device, unit}]),
    modules ([{name, size, refcount, users, state}]),
    proc_version (text or null), fabric_manager ({rc, stdout, stderr}), nvswitch (count), persistenced, units
    ({unit - {rc, stdout, stderr}}).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.driver_facts import FACTS_SPEC, facts_module


def main() -> None:
    module = AnsibleModule(argument_spec=FACTS_SPEC, supports_check_mode=True)
    result = facts_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
