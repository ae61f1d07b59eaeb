#!/usr/bin/env python3
"""Make a host unreachable right after the switch: podman pause, then unpause.

Usage: pause_after_switch.py HOST SECONDS [RUN_ID]. Polls the host (host_watch.py)
for the switch drop-in; once it exists, waits a second (the service restarting
on the new stack), pauses the container (every process in it frozen, its sshd
included: to Ansible a host that stopped answering, as one behind a lost link
or a hung kernel) for SECONDS and, with RUN_ID, for as long as the rollout of
that run (a process with ``--run-id RUN_ID`` in its arguments) still runs, at
most 900 s; then unpauses it. Held until the rollout ends, the host is lost to
its next task whatever that task waits for: under the linear strategy a host
may sit idle for minutes while the other hosts of its batch roll back, and a
pause that ended within that time would not be seen. Run beside a rollout that
includes the host; SECONDS must exceed the host's SSH keepalive
(ServerAliveInterval times ServerAliveCountMax). Prints what it did; exit
status 0 when the pause happened.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared"))
from host_watch import SWITCH_DROPIN, rollout_running, wait_for_path  # noqa: E402

#: The longest the host stays paused, whatever the rollout does.
LIMIT_S = 900.0


host, seconds = sys.argv[1], float(sys.argv[2])
run_id = sys.argv[3] if len(sys.argv) > 3 else None
if not wait_for_path(host, SWITCH_DROPIN, running=lambda: True, timeout_s=3000.0):
    print(f"the switch was not seen on {host}")
    sys.exit(1)
time.sleep(1.0)
subprocess.run(["podman", "pause", host], check=True, capture_output=True)
paused_at = time.monotonic()
try:
    time.sleep(seconds)
    while run_id and rollout_running(run_id) and time.monotonic() - paused_at < LIMIT_S:
        time.sleep(1.0)
finally:
    subprocess.run(["podman", "unpause", host], check=True, capture_output=True)
print(f"paused {host} right after the switch for {time.monotonic() - paused_at:.0f} s, then unpaused it")
