#!/usr/bin/env python3
"""Wall times of the upgrade on a sandbox host, measured side by side in one run.

Replaces the sandbox hosts (``playbooks/sandbox.yml``) and prints:

1. the upgrade's wall time (``upgrade-cuda13.yml``, default scenario);
2. the idempotent re-run's wall time, as a ratio to a play that only gathers
   facts on the same host;
3. the service's unavailability during the upgrade, from a prober on the host
   polling ``/health`` every 100 ms: every window, what caused it (a profile
   restart of the throughput gate, or the switch to the new stack), the
   longest, and the switch's window against one restart plus the health wait;
4. with ``--rollback``: the regression scenario's rollback time (decision to
   the old stack healthy, from the host's result) against rebuilding the old
   environment from the snapshot's ``pip freeze`` into a fresh venv on the
   same host, as a ratio; and, where the real PyPI stack is in
   ``$CUDA13_REAL_STACK_CACHE`` (``make real-stack-cache``), rebuilding a venv
   from the real stack's freeze (offline, from the cache, on this machine)
   against the same rollback time: the stand-ins' rebuild says nothing about a
   real host, where the rebuild reinstalls gigabytes;
5. with ``--restarts``: the restart plan on the regression scenario (upgraded,
   then rolled back), with the simulated server loading its model for
   ``--load-s`` seconds (scenario option ``startup_s``, 20 by default) so that
   restarts dominate as on real hosts: restarts per upgrade and per rollback,
   planned (the host's result) and seen (the prober's unavailability windows),
   and the time out of service (drain to undrain, the host's result). The
   previous plan (every profile restarted in every phase and a restart back to
   the service's own command after each: 2P + 3 per upgrade, P + 2 per
   rollback, 7 and 4 for two profiles) is not run again: its time out of
   service is estimated from this same run as the measured time plus the
   restarts it would add times the measured mean restart window (restart,
   model load and readiness wait), and shown as a ratio to the measured time.
   The re-run of a kept host against a facts-only play is item 2.

Usage: benchmarks/sandbox_timings.py [--rollback] [--restarts [--load-s 20]]   (run from the repository root
after ``make setup``; it uses .venv/bin/ansible-playbook and podman)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox_env import BIN, ENV, REPO, playbook, run
from sandbox_env import fresh_sandbox as replace_sandbox

HOST = "cuda13-sandbox-1"

PROBER = r"""
import json, time, urllib.request
out = open("/tmp/health-prober.log", "w", buffering=1)
while True:
    t = time.time()
    try:
        with urllib.request.urlopen("http://127.0.0.1:30000/health", timeout=0.5) as r:
            ok = r.status == 200
    except Exception:
        ok = False
    stack = ""
    if ok:
        try:
            with urllib.request.urlopen("http://127.0.0.1:30000/get_server_info", timeout=0.5) as r:
                info = json.load(r)
            stack = info.get("simulation", {}).get("rate_key", "?")
        except Exception:
            stack = "?"
    out.write("%.3f %d %s\n" % (t, ok, stack))
    time.sleep(max(0.0, 0.1 - (time.time() - t)))
"""


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, check=True).stdout


def fresh_sandbox(scenario: str, overrides: dict | None = None) -> None:
    replace_sandbox(1, sandbox_host_scenario=scenario, sandbox_host_scenario_overrides=overrides or {})


def windows(log: str) -> list[dict]:
    """Unavailability windows from the prober's log: start, seconds, stack before/after."""
    rows = []
    for line in log.splitlines():
        parts = line.split(" ")
        if len(parts) >= 2:
            rows.append((float(parts[0]), parts[1] == "1", parts[2] if len(parts) > 2 else ""))
    out, down_since, last_stack = [], None, None
    for t, ok, stack in rows:
        if not ok and down_since is None:
            down_since = t
        elif ok and down_since is not None:
            out.append(
                {
                    "start": down_since,
                    "seconds": t - down_since,
                    "before": last_stack,
                    "after": stack,
                }
            )
            down_since = None
        if ok and stack:
            last_stack = stack
    return out


def upgrade_figures() -> None:
    fresh_sandbox("default")
    podman("exec", "-d", HOST, "python3", "-c", PROBER)
    time.sleep(1.0)
    upgrade_s = playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox")
    time.sleep(0.5)
    podman("exec", HOST, "pkill", "-f", "health-prober")
    log = podman("exec", HOST, "cat", "/tmp/health-prober.log")
    rerun_s = playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox")
    facts_s = run([str(BIN / "ansible"), HOST, "-i", "inventory/sandbox", "-m", "ansible.builtin.setup"])

    print(f"upgrade (default scenario, plain + eagle3 profiles): {upgrade_s:7.1f} s")
    print(f"idempotent re-run:                                   {rerun_s:7.1f} s")
    print(f"facts-only play on the same host:                    {facts_s:7.1f} s")
    print(f"re-run / facts-only:                                 {rerun_s / facts_s:7.1f} x")
    ws = windows(log)
    restarts = [w for w in ws if (w["before"] or "").split("/")[0] == (w["after"] or "").split("/")[0]]
    switch = [w for w in ws if w not in restarts]
    print(
        f"unavailability windows during the upgrade: {len(ws)}, {sum(w['seconds'] for w in ws):.1f} s in all"
    )
    for w in ws:
        kind = "switch" if w in switch else "profile restart"
        print(f"  {w['seconds']:5.2f} s  {kind:15s}  {w['before']} -> {w['after']}")
    if restarts and switch:
        typical = sorted(w["seconds"] for w in restarts)[len(restarts) // 2]
        print(
            f"switch window {switch[0]['seconds']:.2f} s vs a profile restart (restart + health wait, "
            f"median) {typical:.2f} s: ratio {switch[0]['seconds'] / typical:.2f}"
        )


FACTS_PLAY = """
- name: Gather facts only
  hosts: blackwell
  gather_facts: true
  tasks: []
"""

DROP_DIGEST = r"""
import json
path = "/var/lib/cuda13-upgrade/result.json"
result = json.load(open(path))
result.pop("stack_digest", None)
open(path, "w").write(json.dumps(result, indent=2) + "\n")
"""


def kept_rerun_figures() -> None:
    """The re-run of a host that kept this target (upgrade-cuda13.yml: the options
    checked, one script on the host before the preflight, "already kept"), a
    facts-only play on the same host, and the same re-run walking every role
    (the host's recorded digest removed, so the comparison cannot match), side
    by side. Needs the sandbox host upgraded (upgrade_figures)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=REPO / "playbooks", delete=False) as f:
        f.write(FACTS_PLAY)
    try:
        facts_s = playbook(f.name, "-i", "inventory/sandbox")
    finally:
        os.unlink(f.name)
    kept_s = playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox")
    podman("exec", HOST, "python3", "-c", DROP_DIGEST)
    walk_s = playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox")
    print(f"re-run of the kept host (already kept):              {kept_s:7.1f} s")
    print(f"facts-only play on the same host:                    {facts_s:7.1f} s")
    print(f"re-run walking every role (no digest to compare):    {walk_s:7.1f} s")
    print(f"already kept / facts-only play:                      {kept_s / facts_s:7.1f} x")
    print(f"walking every role / already kept:                   {walk_s / kept_s:7.1f} x")


def rollback_figures() -> None:
    fresh_sandbox("regression")
    playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox", check=False)
    result = json.loads(podman("exec", HOST, "cat", "/var/lib/cuda13-upgrade/result.json"))
    if result.get("status") != "rolled_back":
        sys.exit(f"expected a rollback, got {result.get('status')}: {result.get('reason')}")
    rollback_s = float(result["rollback"]["seconds"])
    snapshot = json.loads(podman("exec", HOST, "cat", "/var/lib/cuda13-upgrade/snapshots/pre-upgrade.json"))
    freeze = "\n".join(line for line in snapshot["venv"]["pip_freeze"] if not line.startswith("-e ")) + "\n"
    script = (
        "set -e; python3 -m venv /tmp/rebuild; "
        "/tmp/rebuild/bin/pip install --isolated -q -r /tmp/rebuild.txt "
        "--index-url http://127.0.0.1:8080/whl/cu128 --extra-index-url http://127.0.0.1:8080/sgl-whl/cu128 "
        "--extra-index-url http://127.0.0.1:8080/flashinfer-whl/cu128 --extra-index-url http://127.0.0.1:8080/pypi/simple; "
        "/tmp/rebuild/bin/pip install --isolated -q --no-build-isolation --no-deps --no-index -e /opt/sglang/python"
    )
    subprocess.run(
        ["podman", "exec", "-i", HOST, "sh", "-c", "rm -rf /tmp/rebuild; cat > /tmp/rebuild.txt"],
        input=freeze,
        env=ENV,
        text=True,
        check=True,
    )
    start = time.perf_counter()
    subprocess.run(
        ["podman", "exec", HOST, "sh", "-c", script],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    rebuild_s = time.perf_counter() - start
    print(f"rollback (decision to old stack healthy):            {rollback_s:7.1f} s")
    print(
        f"rebuild of the old venv from the snapshot's freeze:  {rebuild_s:7.1f} s "
        f"({len(snapshot['venv']['pip_freeze'])} requirements, stand-in wheels)"
    )
    print(f"rebuild / rollback:                                  {rebuild_s / rollback_s:7.1f} x")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import real_stack

    if not (real_stack.CACHE / "wheels").is_dir():
        print(f"real wheels: not measured (no real stack in {real_stack.CACHE}; make real-stack-cache)")
        return
    with tempfile.TemporaryDirectory(prefix="real-stack-rebuild-") as work:
        _, stack_pip = real_stack.install_stack(Path(work))
        real_s, lines = real_stack.rebuild_from_freeze(Path(work), stack_pip)
    print(
        f"rebuild from the real stack's freeze:                {real_s:7.1f} s ({lines} requirements, real wheels)"
    )
    print(f"rebuild (real wheels) / rollback:                    {real_s / rollback_s:7.1f} x")


def restart_figures(load_s: float) -> None:
    fresh_sandbox("regression", {"startup_s": load_s})
    podman("exec", "-d", HOST, "python3", "-c", PROBER)
    time.sleep(1.0)
    playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox", "-e", "cuda13_health_timeout=300", check=False)
    time.sleep(0.5)
    podman("exec", HOST, "pkill", "-f", "health-prober")
    log = podman("exec", HOST, "cat", "/tmp/health-prober.log")
    result = json.loads(podman("exec", HOST, "cat", "/var/lib/cuda13-upgrade/result.json"))
    plan = result.get("restart_plan") or {}
    if result.get("status") != "rolled_back" or not plan:
        sys.exit(
            f"expected a rollback with a restart plan, got {result.get('status')}: {result.get('reason')}"
        )
    profiles = len(plan["candidate"]["steps"])
    old_upgrade, old_rollback = 2 * profiles + 3, profiles + 2
    new_upgrade, new_rollback = int(plan["restarts_upgrade"]), int(plan["restarts_rollback"])
    ws = windows(log)
    mean_window = sum(w["seconds"] for w in ws) / len(ws) if ws else float("nan")
    out_s = float(result["out_of_service_s"])
    old_out_s = out_s + (old_upgrade + old_rollback - new_upgrade - new_rollback) * mean_window
    print(f"restart plan, regression scenario, {profiles} profiles, model load {load_s:.0f} s:")
    for line in plan_lines(plan):
        print(f"  {line}")
    print(f"restarts per upgrade:   previous plan {old_upgrade:3d}   new plan {new_upgrade:3d}")
    print(f"restarts per rollback:  previous plan {old_rollback:3d}   new plan {new_rollback:3d}")
    print(
        f"restarts seen on the host (unavailability windows): {len(ws)}; "
        f"done by the run (result): {result.get('restarts')}"
    )
    print(f"mean restart window (restart, load, readiness): {mean_window:7.1f} s")
    print(f"time out of service, new plan (measured):       {out_s:7.1f} s")
    print(f"time out of service, previous plan (estimated): {old_out_s:7.1f} s")
    print(f"previous / new:                                 {old_out_s / out_s:7.2f} x")


def plan_lines(plan: dict) -> list[str]:
    sys.path.insert(0, str(REPO / "src"))
    from cuda13_upgrade import restarts

    return restarts.format_plan(plan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollback", action="store_true", help="also measure rollback against a rebuild")
    parser.add_argument("--restarts", action="store_true", help="measure the restart plan instead")
    parser.add_argument("--load-s", type=float, default=20.0, help="simulated model load time (s)")
    parser.add_argument(
        "--kept-rerun-only", action="store_true", help="only the upgrade and the re-run of the kept host"
    )
    args = parser.parse_args()
    if args.restarts:
        restart_figures(args.load_s)
        return
    if args.kept_rerun_only:
        fresh_sandbox("default")
        playbook("upgrade-cuda13.yml", "-i", "inventory/sandbox")
        kept_rerun_figures()
        return
    upgrade_figures()
    kept_rerun_figures()
    if args.rollback:
        rollback_figures()


if __name__ == "__main__":
    main()
