"""The soak between batches: a kept host watched in service before the next batch starts.

The gate's own soak (:mod:`cuda13_upgrade.soak`) runs before the decision, on a drained
host. Some failures come later, under real traffic or after minutes: a server that passes
readiness and dies at its first real request (sgl-project/sglang PR #40485: "The server
starts normally and the first real inference request kills the scheduler"), one that
answers ``/health`` and "silently stops processing requests" after some completions
(sgl-project/sglang#22779), a GPU that falls off the bus. Rancher's system-upgrade-controller
waits ``postCompleteDelay`` after a node completes before the next starts; here, after a batch
is kept, each of its hosts is put back into service and watched for ``cuda13_soak_seconds``
before the next batch starts:

* readiness, by a real generation: every ``cuda13_soak_interval_seconds``, one greedy
  ``/generate`` of the correctness probe's first prompt, answered within
  ``verify_throughput_soak_deadline_s``;
* its output: the answer's token ids agree with one of the gate's own answers to that prompt
  (either stack, any profile) for the probe's ``verify_throughput_probe_min_prefix_tokens``
  (:func:`cuda13_upgrade.probe.common_prefix`, the probe's rule for one prompt);
* the server's process: the unit's main process stays the one of the watch's start;
* the kernel log: no Xid line since the switch that the gate would roll back
  (:func:`cuda13_upgrade.xid.kernel_log_verdict`).

A host that degrades is drained and rolled back (the upgrade's rescue) and counts against the
failure budget (:mod:`cuda13_upgrade.budget`). The host script is
``hostscripts/completion_bench.py --watch-seconds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import probe, soak, xid

__all__ = ["plan", "references", "verdict"]

_SECONDS = "cuda13_soak_seconds"


def plan(
    seconds: Any,
    *,
    host: str,
    batches: Sequence[Sequence[str]] | None,
    status: str,
    measured: bool,
) -> dict[str, Any]:
    """Whether ``host`` is watched after its batch.

    Args:
        seconds: ``cuda13_soak_seconds`` (validated: an int >= 0).
        host: the host's inventory name.
        batches: the batch plan's hosts per batch (``cuda13_fleet.batches`` of
            :func:`cuda13_upgrade.batches.plan`); None or empty when there is none (one
            batch).
        status: the host's status after the decision (``kept`` to be watched).
        measured: whether the gate measured the host this run (a host kept without
            measuring has no server answers to compare with).

    Returns:
        ``{"watch": bool, "seconds": int, "why": str}``: ``why`` says why the host is not
        watched (off, not kept, not measured, the last batch), or what the watch is.
    """
    try:
        planned = int(seconds or 0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{_SECONDS}: {seconds!r} is not a number of seconds (an int >= 0)") from exc
    if planned < 0:
        raise ValueError(f"{_SECONDS}: {seconds!r} is not a number of seconds (an int >= 0)")
    out = {"watch": False, "seconds": planned, "why": ""}
    if planned == 0:
        out["why"] = f"no soak between batches ({_SECONDS} 0)"
    elif status != "kept":
        out["why"] = f"not kept ({status})"
    elif not measured:
        out["why"] = "not measured this run"
    elif not batches or host in batches[-1]:
        out["why"] = "the last batch: no batch starts after it"
    else:
        out.update(watch=True, why=f"watched {planned} s in service before the next batch starts")
    return out


def references(
    candidate: Mapping[str, Mapping[str, Any]] | None, baseline: Mapping[str, Mapping[str, Any]] | None
) -> list[list[int]]:
    """The gate's answers to the probe's first prompt: the token ids of each profile's first
    probe output, the new stack's (the verify's ``measured.results``) then the old
    stack's (the baseline's ``profiles``), each ``{profile: {"probe": [output, ...]}}``.
    Outputs without a list of integer ``output_ids`` are left out."""
    found: list[list[int]] = []
    for side in (candidate or {}, baseline or {}):
        for record in side.values():
            outputs = (record or {}).get("probe") or []
            ids = outputs[0].get("output_ids") if outputs and isinstance(outputs[0], Mapping) else None
            if isinstance(ids, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                if ids not in found:
                    found.append(list(ids))
    return found


def _check_text(check: Mapping[str, Any], deadline_s: float) -> str:
    outcome = check.get("outcome")
    detail = str(check.get("detail") or "").strip()
    if outcome == "stall":
        return f"got no answer within {deadline_s:g} s"
    if outcome == "error":
        return f"got an error ({detail})" if detail else "got an error"
    return f"lost the server ({detail})" if detail else "lost the server"


def verdict(
    record: Mapping[str, Any] | None,
    *,
    reference_ids: Sequence[Sequence[int]] = (),
    kernel_log_mark: Any = None,
    kernel_log_read: Any = None,
    min_prefix_tokens: int = probe.DEFAULT_MIN_PREFIX_TOKENS,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The soak between batches, judged.

    Args:
        record: the ``watch`` record of ``completion_bench.py --watch-seconds`` (``{"seconds",
            "interval_s", "deadline_s", "watched_s", "checks": [{"at_s", "outcome", "detail",
            "output_ids"}], "unit_before", "unit_after", "journal_tail"}``).
        reference_ids: the gate's answers to the same prompt (:func:`references`); empty
            when the probe was off: the output is then not compared.
        kernel_log_mark, kernel_log_read: ``hostscripts/kernel_log.py``'s mark before the
            switch and a read after the watch (module ``cuda13_kernel_log``); None when not read.
        min_prefix_tokens: ``verify_throughput_probe_min_prefix_tokens``.
        context: the facts of the journal's diagnosis (the stack that serves,
            :func:`cuda13_upgrade.steps.serve.stack_context`): a degraded host's reason ends
            with the cause and remedy of what its journal tail says
            (:func:`cuda13_upgrade.soak.journal_cause`) when that is known.

    Returns:
        ``{"healthy": bool, "outcome": "healthy" | "crash" | "stall" | "error" | "output" |
        "xid", "seconds", "watched_s", "checks": n, "served": n, "output_compared": bool,
        "kernel_log": kernel_log_verdict | None, "reason": str | None, "journal_tail": [line]}``.
        ``reason`` (a degraded host only) names when and what, e.g. ``"degraded in service
        40 s into the 60 s soak between batches (cuda13_soak_seconds): check 5 got no answer
        within 60 s"``.

    Raises:
        ValueError: for a record without its ``seconds`` and ``checks``.
    """
    if not isinstance(record, Mapping) or not isinstance(record.get("checks"), list):
        raise ValueError(f"the soak between batches: not a watch record: {record!r}")
    checks = [c for c in record["checks"] if isinstance(c, Mapping)]
    seconds = record.get("seconds")
    deadline_s = float(record.get("deadline_s") or 0)
    served = sum(1 for c in checks if c.get("outcome") == "served")
    logged = xid.kernel_log_verdict(kernel_log_mark, kernel_log_read) if kernel_log_mark is not None else None
    out: dict[str, Any] = {
        "healthy": True,
        "outcome": "healthy",
        "seconds": seconds,
        "watched_s": record.get("watched_s"),
        "checks": len(checks),
        "served": served,
        "output_compared": bool(reference_ids),
        "kernel_log": logged,
        "reason": None,
        "journal_tail": list(record.get("journal_tail") or []),
    }
    found: tuple[str, str] | None = None
    gone = soak.process_gone(record.get("unit_before") or {}, record.get("unit_after") or {})
    for number, check in enumerate(checks, start=1):
        at = f"{float(check.get('at_s') or 0):.0f} s"
        if check.get("outcome") != "served":
            text = f"check {number} at {at} {_check_text(check, deadline_s)}"
            found = (
                "crash" if gone else str(check.get("outcome") or "crash"),
                f"{text}; {gone}" if gone else text,
            )
            break
        ids = check.get("output_ids") or []
        if reference_ids and not any(
            probe.common_prefix(ref, ids) >= min(min_prefix_tokens, len(ref), len(ids))
            for ref in reference_ids
        ):
            best = max(probe.common_prefix(ref, ids) for ref in reference_ids)
            found = (
                "output",
                f"check {number} at {at} answered the probe's first prompt differently from the gate's "
                f"answers (first {best} tokens equal, {min_prefix_tokens} needed)",
            )
            break
    if found is None and gone:
        found = ("crash", gone)
    if found is None and logged and logged.get("gated"):
        found = ("xid", str(logged.get("reason")))
    if found is not None:
        watched = float(record.get("watched_s") or 0)
        planned = float(seconds or 0)
        out.update(
            healthy=False,
            outcome=found[0],
            reason=(
                f"degraded in service {watched:.0f} s into the {planned:g} s soak between batches "
                f"({_SECONDS}): {found[1]}" + soak.journal_cause(out["journal_tail"], context)
            ),
        )
    return out
