#!/usr/bin/env python3
"""The estimate of the night against what it took, per batch, on two rollouts of a sandbox fleet.

Replaces the sandbox hosts (``playbooks/sandbox.yml``, ``--hosts`` of them, default scenario),
rolls them out with ``cuda13-upgrade rollout`` in two batches (the canary, then the rest:
``cuda13_serial [1, N-1]``, the sandbox's ``cuda13_soak_seconds``), replaces the hosts again
(the reports directory kept) and rolls them out a second time, then removes them. Prints, for
each run, what its start estimated for each batch (``estimate.json``, closed by the report
play: :func:`cuda13_upgrade.estimate.close`) against what the batch took, and the estimate's
error in percent of the measured time. The first run has no earlier run to learn from (the
rough default, made for real hosts: minutes of model load per restart, gigabytes of wheels);
the second estimates each host from its own upgrade in the first (``history``), which is what
an operator's second night sees.

Usage: benchmarks/night_estimate.py [--hosts 3]   (from the repository root after ``make setup``,
``make image`` and ``make mirror``; it uses .venv/bin and podman)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from sandbox_env import BIN, call, fresh_sandbox, remove_sandbox


def rollout(reports: Path, run_id: str, count: int) -> tuple[float, dict]:
    """One rollout of the sandbox fleet in two batches; its wall time and closed estimate."""
    start = time.perf_counter()
    proc = call(
        [
            str(BIN / "cuda13-upgrade"), "rollout", "--yes", "-i", "inventory/sandbox",
            "--run-id", run_id, "--reports-dir", str(reports),
            "-e", json.dumps({"cuda13_serial": [1, max(1, count - 1)], "cuda13_breaker_rollbacks": 0}),
        ],
        check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    record_path = reports / run_id / "estimate.json"
    if not record_path.is_file():
        sys.exit(f"rollout {run_id} wrote no estimate.json (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    record = json.loads(record_path.read_text())
    statuses = {}
    for host_dir in sorted(p for p in (reports / run_id).iterdir() if (p / "result.json").is_file()):
        statuses[host_dir.name] = json.loads((host_dir / "result.json").read_text()).get("status")
    if set(statuses.values()) != {"kept"}:
        print(f"  note: run {run_id}: not every host kept the new stack: {statuses}")
    return seconds, record


def sources(row: dict) -> str:
    kinds = sorted({s.get("source", "?") for s in row.get("sources") or []})
    return ",".join(kinds) or "?"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.0f} %"


def table(run_id: str, wall_s: float, record: dict) -> list[float]:
    """Print the run's rows; return the batches' absolute errors in percent."""
    print(f"\nrun {run_id} (rollout command {wall_s:.0f} s wall)")
    print(f"  {'batch':<6} {'hosts':<40} {'source':<10} {'estimated s':>12} {'measured s':>11} {'error':>8}")
    errors = []
    for row in record.get("measured") or []:
        error = row.get("error_pct")
        errors.append(abs(error) if error is not None else float("nan"))
        print(
            f"  {row['number']:<6} {', '.join(row['hosts']):<40} {sources(row):<10} {row['estimated_s']:>12.0f}"
            f" {row['measured_s']:>11.0f} {pct(error):>8}"
        )
    whole = record.get("run") or {}
    if whole:
        print(
            f"  {'run':<6} {'(start to the report play)':<40} {'':<10} {whole['estimated_s']:>12.0f}"
            f" {whole['measured_s']:>11.0f} {pct(whole.get('error_pct')):>8}"
        )
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3, help="sandbox hosts (at least 2; default 3)")
    args = parser.parse_args()
    if args.hosts < 2:
        parser.error(f"--hosts must be at least 2 (a canary and a batch), got {args.hosts}")
    with tempfile.TemporaryDirectory(prefix="cuda13-night-") as scratch:
        reports = Path(scratch) / "reports"
        figures = []
        try:
            for n in (1, 2):
                fresh_sandbox(args.hosts)
                run_id = f"night-estimate-{n}"
                wall_s, record = rollout(reports, run_id, args.hosts)
                figures.append((run_id, wall_s, record))
        finally:
            remove_sandbox(check=False)
    print(
        f"The estimate against the measured time, {args.hosts} sandbox hosts, batches [1, {args.hosts - 1}]"
    )
    print("(error: estimated minus measured, in percent of measured; source: the hosts' figures)")
    for run_id, wall_s, record in figures:
        errors = table(run_id, wall_s, record)
        if errors:
            print(f"  mean absolute error per batch: {sum(errors) / len(errors):.0f} %")


if __name__ == "__main__":
    main()
