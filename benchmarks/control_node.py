#!/usr/bin/env python3
"""What one host's upgrade costs the control node, two revisions side by side in one run.

For a kept upgrade (sandbox scenario ``default``: the new stack is faster, two
profiles, plain and EAGLE-3) and a regression rolled back (scenario
``regression``), on one fresh sandbox host each time, it runs
``ansible-playbook upgrade-cuda13.yml -i inventory/sandbox`` from a checkout of
``--before`` (a git revision, checked out into a temporary worktree) and from
this checkout, one after the other, and prints for each:

- task results per host: the host's row of the play recap, ``ok`` (which
  includes ``changed``) + ``skipped`` + ``failed`` + ``unreachable``; the
  plays on localhost (start of the run, report) are shown apart;
- control-node CPU seconds: user + sys of the ``ansible-playbook`` process
  tree (``getrusage(RUSAGE_CHILDREN)`` around the run, which counts every
  descendant that was waited for: the forks, their ``ssh`` clients) plus the
  ssh ControlPersist masters the run left (detached, so read from
  ``/proc/<pid>/stat`` and then closed);
- wall seconds, and the host's outcome from its ``result.json``.

Each run's output is kept in ``.sandbox/bench-control-node/<run id>.log``.

With ``--mitogen PATH`` (an unpacked ``mitogen`` wheel or sdist, PyPI
``mitogen``; its ``ansible_mitogen`` package must be under PATH) it also runs
this checkout under Mitogen for Ansible's ``mitogen_linear`` strategy
(``ANSIBLE_STRATEGY_PLUGINS``, ``ANSIBLE_STRATEGY``), which runs the tasks
over one persistent Python interpreter per host instead of one ssh command
and module upload each.

With ``--profiles 1 2 3`` each scenario runs with one profile (plain), the
sandbox inventory's two (plain and EAGLE-3) and three (a third, plain decode with
``--context-length 32768``), given with ``-e @file`` to both revisions alike; the
last lines then say what each extra profile costs.

The figures are ratios of runs made minutes apart on the same machine: the
machine is shared, so compare the ratios, not absolute seconds across days.

Usage (from the repository root, after ``make setup``; uses podman, one
benchmark or molecule run at a time on a machine)::

    benchmarks/control_node.py --before REV [--mitogen PATH] [--scenario default|regression ...]
        [--profiles 1 2 3]

The last lines have the form ``task results per host (kept, 2 profiles): N`` and
``control-node CPU per host (kept, 2 profiles): A s -> B s`` for this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
HOST = "cuda13-sandbox-1"
OUTCOME = {"default": "kept", "regression": "rolled back"}
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$", re.MULTILINE)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Each run's output, to see which tasks a host runs how often.
LOGS = REPO / ".sandbox" / "bench-control-node"


def base_env() -> dict[str, str]:
    return {
        **os.environ,
        "CONTAINERS_CONF": str(REPO / "sandbox" / "containers.conf"),
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "ANSIBLE_NOCOLOR": "1",
    }


def check_run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        )


def fresh_sandbox(scenario: str) -> None:
    """Replace the sandbox host with a fresh one of ``scenario`` (this checkout's sandbox)."""
    env = {**base_env(), "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    playbook = str(BIN / "ansible-playbook")
    check_run([playbook, "playbooks/sandbox.yml", "-e", "sandbox_state=absent"], REPO, env)
    check_run([playbook, "playbooks/sandbox.yml", "-e", f"sandbox_host_scenario={scenario}"], REPO, env)


def control_masters() -> dict[int, float]:
    """CPU seconds (user + sys) of each live ssh ControlPersist master, by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if not cmdline or not cmdline[0].endswith(b"ssh") or b"ControlPersist=60s" not in b" ".join(cmdline):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return found


def close_masters(pids: dict[int, float]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def recap_rows(stdout: str) -> dict[str, dict[str, int]]:
    """The play recap: {host: {"ok": N, "changed": N, "skipped": N, ...}}."""
    rows = {}
    for match in RECAP.finditer(stdout):
        rows[match["host"]] = {k: int(v) for k, v in (pair.split("=") for pair in match["counts"].split())}
    return rows


def task_results(row: dict[str, int]) -> int:
    return row.get("ok", 0) + row.get("skipped", 0) + row.get("failed", 0) + row.get("unreachable", 0)


#: The server profiles of ``--profiles N``: the sandbox inventory's plain and EAGLE-3
#: (inventory/sandbox/group_vars/all/upgrade.yml), then plain decode with a longer context.
def profiles(count: int) -> list[dict]:
    inventory = yaml.safe_load(
        (REPO / "inventory" / "sandbox" / "group_vars" / "all" / "upgrade.yml").read_text()
    )
    found = list(inventory["cuda13_profiles"])
    extra = [{"name": "long-context", "server_args": ["--context-length", "32768"]}]
    return (found + extra)[:count]


def measure(
    checkout: Path, scenario: str, label: str, mitogen: Path | None = None, profile_count: int | None = None
) -> dict:
    """One upgrade of a fresh ``scenario`` host by ``checkout``'s playbook: the figures above."""
    fresh_sandbox(scenario)
    close_masters(control_masters())
    run_id = f"bench-{label.replace(' ', '-')}-{scenario}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    env = {
        **base_env(),
        "ANSIBLE_CONFIG": str(checkout / "ansible.cfg"),
        "PYTHONPATH": str(checkout / "src"),
        "CUDA13_RUN_ID": run_id,
        # A reports directory of its own per run: the breaker across runs counts the
        # rollbacks under it (the checkout's holds earlier runs, and the regression
        # scenario rolls back on purpose).
        "CUDA13_REPORTS_DIR": str(LOGS / "reports" / run_id),
    }
    if mitogen is not None:
        env["ANSIBLE_STRATEGY_PLUGINS"] = str(mitogen / "ansible_mitogen" / "plugins" / "strategy")
        env["ANSIBLE_STRATEGY"] = "mitogen_linear"
    argv = [str(BIN / "ansible-playbook"), "upgrade-cuda13.yml", "-i", str(REPO / "inventory" / "sandbox")]
    if profile_count is not None:
        LOGS.mkdir(parents=True, exist_ok=True)
        given = LOGS / f"profiles-{profile_count}.json"
        given.write_text(json.dumps({"cuda13_profiles": profiles(profile_count)}))
        argv += ["-e", f"@{given}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{run_id}.log").write_text(proc.stdout + proc.stderr)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    masters = control_masters()
    close_masters(masters)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) + sum(masters.values())
    rows = recap_rows(proc.stdout)
    if HOST not in rows:
        sys.exit(
            f"{label}: no recap row for {HOST} (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        )
    result = LOGS / "reports" / run_id / run_id / HOST / "result.json"
    try:
        status = json.loads(result.read_text())["status"]
    except (OSError, ValueError, KeyError):
        status = "none"
    host = rows[HOST]
    local = rows.get("localhost", {})
    return {
        "label": label,
        "profiles": profile_count,
        "tasks": task_results(host),
        "ok": host.get("ok", 0) - host.get("changed", 0),
        "changed": host.get("changed", 0),
        "skipped": host.get("skipped", 0),
        "localhost": task_results(local),
        "cpu_s": cpu,
        "wall_s": wall,
        "status": status,
        "rc": proc.returncode,
    }


def print_table(scenario: str, runs: list[dict]) -> None:
    base = runs[0]
    count = f", {base['profiles']} profile(s)" if base.get("profiles") else ""
    print(f"\n== {OUTCOME[scenario]}: scenario {scenario}{count}, one sandbox host")
    print(f"  {'':34s}" + "".join(f"{r['label']:>22s}" for r in runs))

    def line(name: str, key: str, fmt: str, ratio: bool = False) -> None:
        cells = []
        for r in runs:
            cell = format(r[key], fmt)
            if ratio and r is not base and base[key]:
                cell += f" ({(r[key] - base[key]) / base[key] * 100:+.0f} %)"
            cells.append(f"{cell:>22s}")
        print(f"  {name:34s}" + "".join(cells))

    line("task results per host", "tasks", "d", ratio=True)
    line("  ok (not changed)", "ok", "d")
    line("  changed", "changed", "d")
    line("  skipped", "skipped", "d")
    line("task results on localhost", "localhost", "d")
    line("control-node CPU (s)", "cpu_s", ".1f", ratio=True)
    line("wall (s)", "wall_s", ".1f", ratio=True)
    line("outcome (result.json)", "status", "s")


def worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="cuda13-bench-"))
    check_run(["git", "worktree", "add", "--detach", "--force", str(path), rev], REPO, base_env())
    # Compiled as this checkout already is, so that no run pays for compiling the other's Python.
    for tree in (path, REPO):
        check_run(
            [sys.executable, "-m", "compileall", "-q", "src", "filter_plugins", "roles"], tree, base_env()
        )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, metavar="REV", help="the git revision to compare with")
    parser.add_argument("--mitogen", type=Path, metavar="PATH", help="an unpacked mitogen release")
    parser.add_argument(
        "--scenario", action="append", choices=sorted(OUTCOME), help="default and regression unless given"
    )
    parser.add_argument(
        "--profiles",
        type=int,
        nargs="+",
        choices=(1, 2, 3),
        help="profile counts to run (default: the inventory's)",
    )
    args = parser.parse_args()
    if args.mitogen is not None and not (args.mitogen / "ansible_mitogen").is_dir():
        parser.error(f"--mitogen {args.mitogen}: no ansible_mitogen package there (unpack the mitogen wheel)")
    scenarios = args.scenario or ["default", "regression"]
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.before], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    before = worktree(rev)
    try:
        results = {}
        for scenario in scenarios:
            for count in args.profiles or [None]:
                runs = [
                    measure(before, scenario, f"before {rev}", profile_count=count),
                    measure(REPO, scenario, f"after {head}", profile_count=count),
                ]
                if args.mitogen is not None:
                    runs.append(
                        measure(
                            REPO, scenario, "after, mitogen_linear", mitogen=args.mitogen, profile_count=count
                        )
                    )
                results[(scenario, count)] = runs
                print_table(scenario, runs)
        print()
        for (scenario, count), runs in results.items():
            what = OUTCOME[scenario] + (f", {count} profile(s)" if count else "")
            print(f"task results per host ({what}): {runs[0]['tasks']} -> {runs[1]['tasks']}")
            print(f"control-node CPU per host ({what}): {runs[0]['cpu_s']:.1f} s -> {runs[1]['cpu_s']:.1f} s")
        for scenario in scenarios:
            counted = sorted((c, r) for (s, c), r in results.items() if s == scenario and c)
            for (low, before_runs), (high, after_runs) in zip(counted, counted[1:], strict=False):
                for index, side in ((0, "before"), (1, "after")):
                    step = (after_runs[index]["tasks"] - before_runs[index]["tasks"]) / (high - low)
                    print(
                        f"task results per extra profile ({OUTCOME[scenario]}, {side}, {low}->{high}): {step:+.0f}"
                    )
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, capture_output=True)
        shutil.rmtree(before, ignore_errors=True)


if __name__ == "__main__":
    main()
