#!/usr/bin/env python3
"""End a kept host's server with SIGFPE while the soak between batches watches it.

Usage: crash_in_soak.py HOST RUN_ID. Polls the host's step record
(/var/lib/cuda13-upgrade/step.json, read through the container's root as
host_watch.py does) until run RUN_ID has begun the host's batch_soak step: the
host was kept by the gate and is back in service. Then it sends SIGFPE to the
server's main process (systemctl kill --kill-whom=main), the end
sgl-project/sglang PR #40485 reports for a scheduler at its first real request
("ends in SIGFPE (exit code -8) ... The server starts normally and the first
real inference request kills the scheduler"). Gives up when the rollout of
RUN_ID (a process with ``--run-id RUN_ID`` in its arguments) has ended, or
after 1800 s. Prints what it did; exit status 0 when the signal was sent.
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared"))
from host_watch import container_root, rollout_running  # noqa: E402

STEP = "/var/lib/cuda13-upgrade/step.json"
LIMIT_S = 1800.0


def in_soak(root: str | None, host: str, run_id: str) -> bool:
    """Whether the host's step record says run ``run_id`` is in its batch_soak step."""
    try:
        if root is not None:
            with open(root + STEP, encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = subprocess.run(
                ["podman", "exec", host, "cat", STEP], capture_output=True, text=True
            ).stdout
        record = json.loads(text)
    except (OSError, ValueError):
        return False
    return record.get("run_id") == run_id and record.get("step") == "batch_soak"


host, run_id = sys.argv[1], sys.argv[2]
began = time.monotonic()
root = container_root(host)
# The rollout starts beside this script: give it time to appear before its end counts.
while time.monotonic() - began < LIMIT_S and (time.monotonic() - began < 60 or rollout_running(run_id)):
    if in_soak(root, host, run_id):
        subprocess.run(
            [
                "podman",
                "exec",
                host,
                "systemctl",
                "kill",
                "--kill-whom=main",
                "--signal=SIGFPE",
                "sglang.service",
            ],
            check=True,
            capture_output=True,
        )
        print(
            f"{host}: in the soak between batches of run {run_id}; sent SIGFPE to the server's main process"
        )
        sys.exit(0)
    time.sleep(0.2)
print(f"{host}: run {run_id} never reached the soak between batches")
sys.exit(1)
