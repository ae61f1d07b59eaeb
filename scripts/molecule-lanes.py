#!/usr/bin/env python3
"""Run molecule scenarios in N lanes at once, each scenario's output in its own file.

Distinct scenarios use distinct container names and their own ephemeral
directories, so they can run side by side. Each ``molecule test -s NAME``
writes to ``LOG_DIR/NAME.log``; when a scenario ends, its whole log is printed
in one piece (never interleaved with another's), with its result and wall
time. At the end a table lists every scenario's result and duration; the exit
status is 1 when any scenario failed (every scenario is still run, so that one
run shows every failure), 130 on Ctrl-C.

Scenarios named in ``--first`` start first, in that order (the longest ones,
so that no long scenario is left to run alone at the end); the others follow
in the order given. ``--before NAME=COMMAND`` runs COMMAND in NAME's lane
just before its ``molecule test`` (output in the same log; a failure fails the
scenario): a download only that scenario needs then overlaps the others.

Usage: molecule-lanes.py [--lanes N] [--first "a b"] [--before NAME=COMMAND]...
                         [--log-dir DIR] [--molecule CMD] SCENARIO...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# molecule's action headers: "INFO     default ➜ create: Executing" (colour on) or
# "INFO     [default > create] Executing" (colour off), with ANSI codes around the names
# (molecule/logger.py section_logger, molecule/ansi_output.py format_scenario).
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")
_ACTION = re.compile(rb"^INFO\s+\[?[\w.-]+ (?:\xe2\x9e\x9c|>) ([a-z_]+)(?:\]|:) Executing\s*$")
# The table's columns: molecule's actions in the order a test sequence runs them.
PHASES = (
    "before",
    "setup",
    "dependency",
    "cleanup",
    "destroy",
    "syntax",
    "create",
    "prepare",
    "check",
    "converge",
    "idempotence",
    "side_effect",
    "verify",
)


def phase_of(line: bytes) -> str | None:
    """The molecule action a log line starts (``create``, ``converge``, ...), or None."""
    match = _ACTION.search(_ANSI.sub(b"", line))
    return match.group(1).decode() if match else None


def phase_table(phases: dict[str, dict[str, float]], results: dict[str, tuple[int, float]]) -> list[str]:
    """Rows of seconds per scenario and action (a repeated action, e.g. destroy, summed), longest first."""
    present = [p for p in PHASES if any(p in row for row in phases.values())]
    present += sorted({p for row in phases.values() for p in row} - set(present))
    header = f"   {'scenario':<14}" + "".join(f"{p[:11]:>12}" for p in present) + f"{'total':>9}"
    lines = [header]
    for name in sorted(phases, key=lambda n: -results.get(n, (0, 0.0))[1]):
        row = phases[name]
        cells = "".join(f"{row[p]:>11.0f}s" if p in row else f"{'-':>12}" for p in present)
        lines.append(f"   {name:<14}{cells}{results.get(name, (0, 0.0))[1]:>8.0f}s")
    return lines


def cpu_times() -> tuple[int, int, int] | None:
    """(busy, iowait, total) jiffies of all CPUs since boot from /proc/stat, None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    idle, iowait = fields[3], fields[4]
    total = sum(fields[:8])
    return total - idle - iowait, iowait, total


def cpu_use(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None) -> str:
    """The machine's CPU use between two readings: busy and I/O-wait percentages, idle the rest."""
    if not before or not after or after[2] <= before[2]:
        return "CPU use not measured (no /proc/stat)"
    span = after[2] - before[2]
    busy = 100.0 * (after[0] - before[0]) / span
    iowait = 100.0 * (after[1] - before[1]) / span
    return f"CPU {busy:.0f} % busy, {iowait:.0f} % waiting for I/O, {100 - busy - iowait:.0f} % idle"


def order(scenarios: list[str], first: list[str]) -> list[str]:
    """The scenarios to start, those of ``first`` (present in ``scenarios``) leading, in its order."""
    leading = [s for s in dict.fromkeys(first) if s in scenarios]
    return leading + [s for s in dict.fromkeys(scenarios) if s not in leading]


class Lanes:
    def __init__(self, molecule: list[str], log_dir: Path, before: dict[str, str] | None = None) -> None:
        self.molecule = molecule
        self.before = before or {}
        self.log_dir = log_dir
        self.print_lock = threading.Lock()
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = False
        self.results: dict[str, tuple[int, float]] = {}
        self.phases: dict[str, dict[str, float]] = {}

    def run(self, scenario: str) -> None:
        if self.stopping:
            return
        log = self.log_dir / f"{scenario}.log"
        start = time.monotonic()
        with self.print_lock:
            print(f"== molecule test -s {scenario}: started (output in {log})", flush=True)
        commands = [[*self.molecule, "test", "-s", scenario]]
        if scenario in self.before:
            commands.insert(0, ["bash", "-c", self.before[scenario]])
        rc = 0
        phases: dict[str, float] = {}
        self.phases[scenario] = phases
        with open(log, "wb") as out:
            for argv in commands:
                if self.stopping:
                    rc = 130
                    break
                out.write(f"== {shlex.join(argv)}\n".encode())
                out.flush()
                proc = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                self.procs[scenario] = proc
                phase = "before" if argv[0] == "bash" else "setup"
                mark = time.monotonic()
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    step = phase_of(line)
                    if step:
                        now = time.monotonic()
                        phases[phase] = phases.get(phase, 0.0) + now - mark
                        phase, mark = step, now
                rc = proc.wait()
                phases[phase] = phases.get(phase, 0.0) + time.monotonic() - mark
                if rc != 0:
                    break
        seconds = time.monotonic() - start
        self.results[scenario] = (rc, seconds)
        verdict = "passed" if rc == 0 else f"FAILED (exit {rc})"
        with self.print_lock:
            print(f"== molecule test -s {scenario}: output", flush=True)
            sys.stdout.buffer.write(log.read_bytes())
            print(f"== molecule test -s {scenario}: {verdict} in {seconds:.0f} s", flush=True)

    def stop(self, *_args) -> None:
        """Stop every running scenario (SIGINT to its process group, as a terminal's Ctrl-C)."""
        self.stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+", help="scenario names (molecule/NAME)")
    parser.add_argument("--lanes", type=int, default=2, help="scenarios run at once (default 2)")
    parser.add_argument("--first", default="", help="scenarios to start first, space-separated")
    parser.add_argument(
        "--before", action="append", default=[], metavar="NAME=COMMAND", help="run COMMAND before NAME"
    )
    parser.add_argument("--log-dir", type=Path, default=Path(".sandbox/molecule-logs"))
    parser.add_argument("--molecule", default="molecule", help="the molecule command (default: molecule)")
    args = parser.parse_args(argv)
    if args.lanes < 1:
        parser.error(f"--lanes {args.lanes}: must be 1 or more")

    before = {}
    for item in args.before:
        name, sep, command = item.partition("=")
        if not sep or not name or not command:
            parser.error(f"--before {item!r}: expected NAME=COMMAND")
        before[name] = command
    args.log_dir.mkdir(parents=True, exist_ok=True)
    lanes = Lanes(shlex.split(args.molecule), args.log_dir, before)
    scenarios = order(args.scenarios, args.first.split())
    print(f"== {len(scenarios)} scenarios in {args.lanes} lane(s): {' '.join(scenarios)}", flush=True)

    signal.signal(signal.SIGINT, lanes.stop)
    signal.signal(signal.SIGTERM, lanes.stop)
    start = time.monotonic()
    cpu_start = cpu_times()
    with ThreadPoolExecutor(max_workers=args.lanes) as pool:
        for future in [pool.submit(lanes.run, s) for s in scenarios]:
            future.result()
    total = time.monotonic() - start

    # Idle CPU over the run says whether another lane would have had room.
    print(f"== molecule: {args.lanes} lane(s), {total:.0f} s in all; {cpu_use(cpu_start, cpu_times())}")
    failed = []
    for scenario in scenarios:
        if scenario not in lanes.results:
            print(f"   {scenario:<16} not run")
            failed.append(scenario)
            continue
        rc, seconds = lanes.results[scenario]
        print(f"   {scenario:<16} {'passed' if rc == 0 else f'FAILED (exit {rc})':<18} {seconds:6.0f} s")
        if rc != 0:
            failed.append(scenario)
    print("== molecule: seconds per scenario and action")
    for line in phase_table(lanes.phases, lanes.results):
        print(line)
    (args.log_dir / "phases.json").write_text(
        json.dumps(
            {
                n: {
                    "rc": lanes.results.get(n, (None, 0.0))[0],
                    "seconds": lanes.results.get(n, (None, 0.0))[1],
                    "phases": p,
                }
                for n, p in lanes.phases.items()
            },
            indent=2,
        )
        + "\n"
    )
    if lanes.stopping:
        return 130
    if failed:
        print(f"== molecule: failed: {' '.join(failed)} (logs in {args.log_dir})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
