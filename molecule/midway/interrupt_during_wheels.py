#!/usr/bin/env python3
"""Run ``cuda13-upgrade rollout`` on one host and press Ctrl-C during the wheels step.

Usage: interrupt_during_wheels.py INVENTORY HOST REPORTS_DIR RUN_ID OUT.json

Before the run, and once the toolkit step is over (the new toolkit's nvcc is
there and the wheels step has begun the new venv), it records on the host
``readlink -f /usr/local/cuda``, ``update-alternatives --query cuda`` and the
old server's ``/health`` and serving venv: the link must not move under the
serving stack. Then it sends SIGINT to the command, as Ctrl-C in a terminal
would, and waits for it to end. OUT.json gets ``{"before", "after_toolkit",
"rc", "stdout", "stderr"}``. Exit status 0 when the interrupt happened during
the run.
"""

import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shared"))
from host_watch import container_root, seen  # noqa: E402

inventory, host, reports, run_id, out_file = sys.argv[1:6]
project = os.environ["MOLECULE_PROJECT_DIRECTORY"]


def _exec(*argv):
    proc = subprocess.run(["podman", "exec", host, *argv], capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout.strip()


def _capture():
    health = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health', timeout=5).status)"
    cmdline = "tr '\\0' ' ' </proc/$(systemctl show -p MainPID --value sglang.service)/cmdline"
    return {
        "readlink": _exec("readlink", "-f", "/usr/local/cuda")[1],
        "query": _exec("update-alternatives", "--query", "cuda")[1],
        "health": _exec("python3", "-c", health)[1],
        "serving": _exec("sh", "-c", cmdline)[1],
        "selections": _exec("update-alternatives", "--get-selections")[1],
    }


captured = {"before": _capture()}
proc = subprocess.Popen(
    [
        f"{project}/.venv/bin/cuda13-upgrade",
        "rollout",
        "--yes",
        "-i",
        inventory,
        "--limit",
        host,
        "--run-id",
        run_id,
        "--reports-dir",
        reports,
    ],
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
)
toolkit_done = "test -x /usr/local/cuda-13.0/bin/nvcc && test -d /opt/ml-env-cu130"
# Looked for without starting a process in the host (host_watch.py), confirmed inside it.
root = container_root(host)
deadline = time.monotonic() + 600
while time.monotonic() < deadline and proc.poll() is None:
    if (
        seen(root, "/usr/local/cuda-13.0/bin/nvcc", "/opt/ml-env-cu130")
        and _exec("sh", "-c", toolkit_done)[0] == 0
    ):
        captured["after_toolkit"] = _capture()
        proc.send_signal(signal.SIGINT)
        break
    time.sleep(0.2)
stdout, stderr = proc.communicate(timeout=300)
captured.update(rc=proc.returncode, stdout=stdout, stderr=stderr)
with open(out_file, "w", encoding="utf-8") as out:
    json.dump(captured, out, indent=2)
print(json.dumps({k: captured.get(k) for k in ("before", "after_toolkit", "rc")}, indent=2))
sys.exit(0 if "after_toolkit" in captured else 1)
