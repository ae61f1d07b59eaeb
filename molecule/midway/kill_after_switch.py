#!/usr/bin/env python3
"""Start the upgrade of one host and SIGKILL ansible-playbook right after the switch.

Usage: kill_after_switch.py INVENTORY HOST. Polls the host (host_watch.py) for
the switch drop-in; once it exists, waits a second (the service restarting on
the new stack) and kills the whole process group, as a lost control node or
an operator's kill -9 would. Prints what it saw; exit status 0 when the kill
happened after the switch and before the run finished.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared"))
from host_watch import SWITCH_DROPIN, wait_for_path  # noqa: E402

inventory, host = sys.argv[1], sys.argv[2]
project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
env = {**os.environ, "ANSIBLE_CONFIG": f"{project}/ansible.cfg"}
proc = subprocess.Popen(
    [
        f"{project}/.venv/bin/ansible-playbook",
        f"{project}/upgrade-cuda13.yml",
        "-i",
        inventory,
        "--limit",
        host,
    ],
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    start_new_session=True,
)
if wait_for_path(host, SWITCH_DROPIN, running=lambda: proc.poll() is None):
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    print(f"killed ansible-playbook after the switch on {host}")
    sys.exit(0)
print(f"the run ended (rc {proc.poll()}) before the switch was seen on {host}")
sys.exit(1)
