#!/usr/bin/env python3
"""Fill the new venv's filesystem as soon as the wheels step begins the venv.

Usage: fill_during_wheels.py HOST VENV. Polls the host (host_watch.py, every
0.1 s) for VENV, which the wheels step creates first (an empty directory,
before `python -m venv` and pip run in it); then writes zeros to
``<parent of VENV>/filler`` until the filesystem is full, as another process
filling the disk mid-run would. Run beside a rollout that includes the host;
the filler stays, so that the test sees what the run left beside it. Prints
the filler's size; exit status 0 when the filesystem was filled.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared"))
from host_watch import wait_for_path  # noqa: E402

host, venv = sys.argv[1], sys.argv[2]
filler = venv.rsplit("/", 1)[0] + "/filler"
if not wait_for_path(host, venv, running=lambda: True, timeout_s=3000.0, every_s=0.1):
    print(f"{venv} did not appear on {host}")
    sys.exit(1)
# dd stops at ENOSPC with "No space left on device" and exit status 1.
subprocess.run(["podman", "exec", host, "dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)
size = subprocess.run(["podman", "exec", host, "stat", "-c", "%s", filler], capture_output=True, text=True)
free = subprocess.run(
    ["podman", "exec", host, "df", "--output=avail", "--block-size=1", filler], capture_output=True, text=True
)
print(f"filled {filler} on {host} with {size.stdout.strip()} bytes; free after: {free.stdout.split()[-1]}")
sys.exit(0 if size.returncode == 0 and int(free.stdout.split()[-1]) < (1 << 20) else 1)
