"""Reports of a run: one JSON result per host, a fleet summary of them.

A run's directory on the control node (``reports/<run id>/``) holds
``<host>/result.json`` (written by the upgrade play for every host it
reached) and, from this module, ``summary.json`` and ``summary.md``. A host
of the run without a result was not reached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NOT_REACHED = "not reached"


def load_results(run_dir: str | Path, hosts: list[str] | None = None) -> list[dict[str, Any]]:
    """The results of ``hosts`` (all result files when None), in host order.

    A host without ``<run_dir>/<host>/result.json`` gets ``{"host": h,
    "status": "not reached"}``. Raises ``ValueError`` naming a result file
    that is not JSON.
    """
    run = Path(run_dir)
    if hosts is None:
        hosts = sorted(p.parent.name for p in run.glob("*/result.json"))
    results = []
    for host in hosts:
        path = run / host / "result.json"
        if not path.exists():
            results.append({"host": host, "status": NOT_REACHED})
            continue
        try:
            results.append(json.loads(path.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a JSON result: {exc}") from exc
    return results


def _median(result: dict[str, Any], phase: str, profile: str) -> float | None:
    try:
        return float(result["throughput"][phase][profile]["summary"]["median"])
    except (KeyError, TypeError, ValueError):
        return None


def profiles_of(results: list[dict[str, Any]]) -> list[str]:
    """Profile names measured anywhere in the run, in first-seen order."""
    names: list[str] = []
    for result in results:
        for phase in (result.get("throughput") or {}).values():
            for name in phase or {}:
                if name not in names:
                    names.append(name)
    return names


def summary_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per host: status, stacks, per-profile medians before/after (tok/s)."""
    profiles = profiles_of(results)
    rows = []
    for r in results:
        before = r.get("stack_before") or {}
        after = r.get("stack_after") or {}
        row = {
            "host": r.get("host"),
            "status": r.get("status"),
            "torch_before": before.get("torch"),
            "torch_after": after.get("torch"),
            "cuda_before": before.get("cuda"),
            "failed_step": r.get("failed_step"),
            "reason": r.get("reason"),
            "rollback_s": (r.get("rollback") or {}).get("seconds"),
            "started_at": r.get("started_at"),
            "finished_at": r.get("finished_at"),
            "profiles": {},
        }
        for name in profiles:
            row["profiles"][name] = {
                "before": _median(r, "baseline", name),
                "after": _median(r, "candidate", name),
                "after_rollback": _median(r, "rollback", name),
                "verdict": ((r.get("decisions") or {}).get(name) or {}).get("verdict"),
            }
        rows.append(row)
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_markdown(run_id: str, rows: list[dict[str, Any]]) -> str:
    """The fleet summary as a Markdown table, one row per host."""
    profiles = list(rows[0]["profiles"]) if rows else []
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = [
        f"# cuda13-upgrade run {run_id}",
        "",
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no hosts",
        "",
    ]
    header = ["host", "status", "torch before", "torch after"]
    for name in profiles:
        header += [f"{name} before (tok/s)", f"{name} after (tok/s)"]
    header += ["rollback (s)", "reason"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in rows:
        cells = [row["host"], row["status"], row["torch_before"] or "-", row["torch_after"] or "-"]
        for name in profiles:
            p = row["profiles"][name]
            cells += [_fmt(p["before"]), _fmt(p["after"] if p["after"] is not None else p["after_rollback"])]
        reason = (row.get("reason") or "").replace("|", "/").replace("\n", " ")
        cells += [_fmt(row["rollback_s"]) if row["rollback_s"] else "-", reason[:160] or "-"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def fleet_summary(run_dir: str | Path, hosts: list[str] | None = None) -> dict[str, Any]:
    """Summarise a run: writes ``summary.json`` into ``run_dir`` and returns
    ``{"run_id", "rows", "markdown"}``."""
    run = Path(run_dir)
    rows = summary_rows(load_results(run, hosts))
    summary = {"run_id": run.name, "rows": rows, "markdown": render_markdown(run.name, rows)}
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps({"run_id": run.name, "rows": rows}, indent=2) + "\n")
    return summary
