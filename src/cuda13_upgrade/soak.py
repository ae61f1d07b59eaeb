"""The soak of a stack before the decision: judged here, run by ``hostscripts/completion_bench.py``.

After the switch, the new stack's server serves ``verify_throughput_soak_requests``
completions per profile at the profile's production concurrency, each of which must end
within ``verify_throughput_soak_deadline_s``. Two field reports are why a server that
answers the benchmark can still be unfit to keep: symmetric memory on PCIe GPUs without P2P
ends in SIGFPE at the first real request (sgl-project/sglang PR #40485), and a relaunched
server that answers ``/health`` with 200 stops processing requests after some completions
(sgl-project/sglang#22779).

The host script's record (``soak`` of its ``--load-metrics`` output): ``{"requests",
"concurrency", "deadline_s", "max_tokens", "served", "seconds", "failures": [{"request",
"outcome": "crash" | "stall" | "error", "detail", "tokens", "seconds"}], "unit_before",
"unit_after", "journal_tail"}``. ``judge`` turns it into the gate's record and reason.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import diagnosis

# systemctl show's ExecMainCode: the si_code of the main process's end (<signal.h>).
_CLD_CODES = {"1": "exited", "2": "killed", "3": "dumped"}


def _signal_name(number: str) -> str:
    try:
        return signal.Signals(int(number)).name
    except (TypeError, ValueError):
        return f"signal {number}"


def _end(state: Mapping[str, Any]) -> str:
    """How the main process of a ``systemctl show`` reading ended (its ExecMainCode and
    ExecMainStatus), or ``""`` when the reading does not say (code 0: it had not ended)."""
    code = str(state.get("ExecMainCode") or "")
    status = str(state.get("ExecMainStatus") or "")
    how = _CLD_CODES.get(code)
    if how in ("killed", "dumped"):
        return f"{how} by {_signal_name(status)}"
    if how == "exited":
        return f"exited with status {status}"
    return ""


def process_gone(before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """What systemd says of the unit's main process after a failed request, when it is not
    the one that served before: ``None`` while the same process still runs (or either state
    is unknown).

    ``before``: the unit read when the soak started (the PID it watched, ``MainPID``);
    ``after``: read after the failure. systemd reports ``MainPID=0`` for a unit whose main
    process has exited, and keeps the last one's PID and end in ``ExecMainPID``,
    ``ExecMainCode`` and ``ExecMainStatus`` (org.freedesktop.systemd1(5): "information of
    the last run of the process"). A unit that had no main process when the soak started
    (the server ended before it, e.g. at the first request that reached it after the undrain)
    is said so, with the last main process's PID where the reading has it, e.g. ``"the
    unit's main process 4300 had already ended when the soak started (dumped by SIGFPE;
    unit failed/failed, no main process)"``; never as "main process 0".
    """
    if not before or not after:
        return None
    pid_before, pid_after = str(before.get("MainPID") or ""), str(after.get("MainPID") or "")
    active = after.get("ActiveState") == "active"
    if pid_before and pid_before != "0" and pid_before == pid_after and active:
        return None
    state = f"unit {after.get('ActiveState') or '?'}/{after.get('SubState') or '?'}"
    now = f"main PID now {pid_after}" if pid_after not in ("", "0") else "no main process"
    if pid_before in ("", "0"):
        # Nothing ran when the soak started: the end in the reading at the start is the last
        # main process's (after's, when the start's reading does not say and none runs since).
        ended = after if pid_after in ("", "0") else {}
        end = _end(before) or _end(ended)
        last = str(before.get("ExecMainPID") or ended.get("ExecMainPID") or "")
        said = "; ".join(part for part in (end, f"{state}, {now}") if part)
        if last not in ("", "0"):
            return f"the unit's main process {last} had already ended when the soak started ({said})"
        return f"the unit had no main process when the soak started ({said})"
    return f"the unit's main process {pid_before} {_end(after) or 'gone'} ({state}, {now})"


def _failure_text(failure: Mapping[str, Any], deadline_s: float, gone: str | None) -> str:
    number = failure.get("request")
    outcome = failure.get("outcome")
    detail = str(failure.get("detail") or "").strip()
    if outcome == "stall" and not gone:
        text = f"request {number} got no answer within {deadline_s:g} s"
    elif outcome == "error":
        text = f"request {number} got an error ({detail})" if detail else f"request {number} got an error"
    else:
        text = (
            f"request {number} lost the server ({detail})" if detail else f"request {number} lost the server"
        )
    return f"{text}; {gone}" if gone else text


def journal_cause(journal: Sequence[Any] | None, context: Mapping[str, Any] | None = None) -> str:
    """``"; cause: <cause>; fix: <remedy>"`` of what the unit's journal says
    (:func:`cuda13_upgrade.diagnosis.diagnose`, ``context`` its facts: the stack that serves),
    ``""`` when it says nothing known: the reason a failed soak gives ends with it."""
    known = diagnosis.diagnose([str(line) for line in journal or []], source="journal", context=context)
    return f"; cause: {known.cause}; fix: {known.remedy}" if known.known else ""


def judge(
    record: Mapping[str, Any] | None, *, profile: str = "", context: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The gate's record of one profile's soak.

    Returns ``{"passed": bool, "served": n, "requests": n, "concurrency": c, "seconds": s,
    "outcome": "served" | "crash" | "stall" | "error", "reason": str | None, "failure":
    first failed request | None, "journal_tail": [line, ...]}``. The first failed request (by
    number) decides the outcome; a stall or error after which the unit's main process is no
    longer the one that served counts as a crash. ``reason`` (a failed soak only), e.g.
    ``"plain: the soak served 3 of 64 requests; request 4 got no answer within 30 s"``, followed
    by the journal tail's cause and remedy when it has a known one (:func:`journal_cause`;
    ``context``: the diagnosis's facts, e.g. the stack that serves).
    Raises ``ValueError`` for a record without a request count.
    """
    if not isinstance(record, Mapping) or not isinstance(record.get("requests"), int):
        raise ValueError(f"soak of {profile or 'a profile'}: not a soak record: {record!r}")
    requests = int(record["requests"])
    served = int(record.get("served") or 0)
    failures = sorted(record.get("failures") or [], key=lambda f: int(f.get("request") or 0))
    out: dict[str, Any] = {
        "passed": True,
        "served": served,
        "requests": requests,
        "concurrency": record.get("concurrency"),
        "seconds": record.get("seconds"),
        "outcome": "served",
        "reason": None,
        "failure": None,
        "journal_tail": list(record.get("journal_tail") or []),
    }
    if not failures and served >= requests:
        return out
    first = dict(failures[0]) if failures else {"request": served + 1, "outcome": "stall", "detail": ""}
    gone = process_gone(record.get("unit_before") or {}, record.get("unit_after") or {})
    outcome = "crash" if gone else str(first.get("outcome") or "crash")
    prefix = f"{profile}: " if profile else ""
    text = _failure_text(first, float(record.get("deadline_s") or 0), gone)
    out.update(
        passed=False,
        outcome=outcome,
        failure=first,
        reason=f"{prefix}the soak served {served} of {requests} requests; {text}"
        + journal_cause(out["journal_tail"], context),
    )
    return out


def failed_profile(results: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    """The first profile of one phase's results (:func:`cuda13_upgrade.steps.measure.phase`'s) whose
    soak failed, or ``None``: the profiles after it are not measured on that server."""
    for name, measured in (results or {}).items():
        record = (measured or {}).get("soak") or {}
        if record and not judge(record, profile=str(name))["passed"]:
            return str(name)
    return None
