#!/usr/bin/env python3
"""Make a host unreachable right after the switch: podman pause, then unpause.

Usage: pause_after_switch.py HOST SECONDS. Polls the host (host_watch.py) for the
switch drop-in; once it exists, waits a second (the service restarting on the
new stack), pauses the container for SECONDS (every process in it frozen, its
sshd included: to Ansible a host that stopped answering, as one behind a lost
link or a hung kernel) and unpauses it. Run beside a rollout that includes the
host; SECONDS must exceed the host's SSH keepalive (ServerAliveInterval times
ServerAliveCountMax). Prints what it did; exit status 0 when the pause
happened.
"""

import subprocess
import sys
import time

from host_watch import SWITCH_DROPIN, wait_for_path

host, seconds = sys.argv[1], float(sys.argv[2])
if not wait_for_path(host, SWITCH_DROPIN, running=lambda: True, timeout_s=3000.0):
    print(f"the switch was not seen on {host}")
    sys.exit(1)
time.sleep(1.0)
subprocess.run(["podman", "pause", host], check=True, capture_output=True)
paused_at = time.monotonic()
try:
    time.sleep(seconds)
finally:
    subprocess.run(["podman", "unpause", host], check=True, capture_output=True)
print(f"paused {host} right after the switch for {time.monotonic() - paused_at:.0f} s, then unpaused it")
