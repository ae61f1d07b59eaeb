#!/usr/bin/env python3
"""After the service stopped: wait until its processes are gone and their GPU memory is free.

Runs on the managed host, standard library only, between the stop and the start
of the SGLang unit (roles/cuda13/tasks/restart.yml). SGLang's scheduler
processes can outlive the server and hold tens of GB per GPU
(sgl-project/sglang#23627); the next stack would then start on occupied GPUs.

A process is the unit's when it is still in the unit's control group
(``systemctl show -p ControlGroup``; ``/sys/fs/cgroup<group>/cgroup.procs``,
or the group named in ``/proc/<pid>/cgroup``). The GPUs' compute processes come
from ``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits``
(one ``<pid>, <MiB>`` line per process and GPU). The unit's leftovers are waited
for ``--timeout`` seconds, then sent SIGTERM, and SIGKILL ``--kill-after`` seconds
later. Processes of other units on the GPUs are named, never signalled.

Usage: gpu_release.py --unit sglang.service [--timeout 30] [--kill-after 10]
[--nvidia-smi nvidia-smi]. Prints one JSON object::

    {"unit": "sglang.service", "free": true, "waited_s": 12.4,
     "leftovers": [{"pid": 4242, "command": "/opt/ml-env/bin/python ...", "gpu_memory_mib": 81234}],
     "signalled": {"4242": "SIGTERM"}, "others": [{"pid": 77, "command": "...", "gpu_memory_mib": 512}],
     "nvidia_smi_error": null}

Exit status 0 when the unit's processes are gone and hold no GPU memory, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def control_group(unit: str) -> str:
    """The unit's control group path, e.g. /system.slice/sglang.service ('' if unknown)."""
    try:
        out = subprocess.run(
            ["systemctl", "show", "--property=ControlGroup", "--value", unit],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return ""
    return out or f"/system.slice/{unit}"


def unit_pids(group: str) -> set[int]:
    """Pids in the unit's control group (cgroup v2, or v1's name=systemd hierarchy)."""
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        try:
            with open(f"{root}{group}/cgroup.procs", encoding="ascii") as handle:
                return {int(line) for line in handle if line.strip().isdigit()}
        except OSError:
            continue
    return set()


def in_group(pid: int, group: str) -> bool:
    """Whether /proc/<pid>/cgroup places the process in the group."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            # A container's processes may show the host's path above the unit's own.
            return any(line.rstrip("\n").split(":", 2)[-1].endswith(group) for line in handle)
    except OSError:
        return False


def command(pid: int) -> str:
    """The process's command line, or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def gpu_processes(nvidia_smi: str) -> tuple[dict[int, int], str | None]:
    """{pid: MiB summed over GPUs} of the compute processes, and an error text or None."""
    try:
        proc = subprocess.run(
            [nvidia_smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        return {}, str(exc)
    if proc.returncode != 0:
        return {}, (proc.stdout + proc.stderr).strip() or f"exit status {proc.returncode}"
    used: dict[int, int] = {}
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            memory = int(parts[1]) if parts[1].isdigit() else 0
            used[int(parts[0])] = used.get(int(parts[0]), 0) + memory
    return used, None


def alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait before SIGTERM")
    parser.add_argument("--kill-after", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)

    group = control_group(args.unit)
    started = time.monotonic()
    leftovers: dict[int, dict] = {}
    others: dict[int, dict] = {}
    signalled: dict[str, str] = {}
    error = None
    term_at = None
    while True:
        used, error = gpu_processes(args.nvidia_smi)
        mine = {p for p in unit_pids(group) if alive(p)}
        mine |= {p for p in used if in_group(p, group)}
        for pid in mine:
            leftovers.setdefault(
                pid, {"pid": pid, "command": command(pid), "gpu_memory_mib": used.get(pid, 0)}
            )
        for pid in set(used) - mine:
            others.setdefault(pid, {"pid": pid, "command": command(pid), "gpu_memory_mib": used[pid]})
        holding = {p for p in mine if alive(p)}
        if not holding:
            break
        waited = time.monotonic() - started
        if term_at is None and waited >= args.timeout:
            for pid in holding:
                try:
                    os.kill(pid, signal.SIGTERM)
                    signalled[str(pid)] = "SIGTERM"
                except OSError:
                    pass
            term_at = time.monotonic()
        elif term_at is not None and time.monotonic() - term_at >= args.kill_after:
            if all(signalled.get(str(p)) == "SIGKILL" for p in holding):
                if time.monotonic() - term_at >= args.kill_after + 5:
                    break
            for pid in holding:
                try:
                    os.kill(pid, signal.SIGKILL)
                    signalled[str(pid)] = "SIGKILL"
                except OSError:
                    pass
        time.sleep(args.interval)
    used, error = gpu_processes(args.nvidia_smi)
    still = [p for p in leftovers if alive(p) or p in used]
    result = {
        "unit": args.unit,
        "free": not still,
        "waited_s": round(time.monotonic() - started, 2),
        "leftovers": sorted(leftovers.values(), key=lambda e: e["pid"]),
        "signalled": signalled,
        "still_running": still,
        "others": sorted(others.values(), key=lambda e: e["pid"]),
        "nvidia_smi_error": error,
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0 if not still else 1


if __name__ == "__main__":
    sys.exit(main())
