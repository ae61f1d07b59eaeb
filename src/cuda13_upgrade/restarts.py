"""The restart plan: in which order the profiles are measured, and which steps restart the service.

A restart of the SGLang server is the expensive step of an upgrade: the model's
weights load again (minutes for a large model over 8 GPUs). The upgrade
measures every profile (server arguments) on the old stack (baseline), switches
the service to the new stack, measures them again (candidate) and, after a
rollback, once more on the old stack (rollback re-check). The plan orders the
profiles so that the service restarts as few times as the profiles need:

- a profile whose arguments equal what the service runs now is measured first,
  without a restart;
- the switch (and the rollback) start the other stack straight into the first
  profile of the next phase, so that restart is also that profile's;
- on the candidate stack and after a rollback, the profile without arguments
  (the service's own command, what it keeps serving) is measured last, so no
  restart back to the own command follows; after the baseline the switch
  follows, which restarts anyway;
- a recorded baseline (``roles/upgrade_host/tasks/baseline.yml``) skips the old stack's
  restarts.

With P profiles, one of them without arguments, that is at most 2P - 1
restarts per upgrade and P per rollback (switch or rollback restart included).

A plan is plain data (lists and dicts of strings, bools and ints), printed
before it runs and recorded in the host's result. Everything here is pure.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

PHASES = ("baseline", "candidate", "rollback")


def profile_args(profile: Mapping[str, Any], phase: str) -> list[str]:
    """Arguments a profile adds to the service's command in a phase.

    ``profile``: ``{"name": str, "server_args": [str, ...], "new_stack_args": [str, ...]}``
    (``new_stack_args`` optional, added on the new stack only: the candidate phase).
    Returns the argument strings. Raises ``ValueError`` for an unknown phase or a
    profile without ``name``/``server_args`` lists.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    if not isinstance(profile, Mapping) or not isinstance(profile.get("name"), str):
        raise ValueError(f"a profile needs a name, got {profile!r}")
    server_args = profile.get("server_args", [])
    extra = profile.get("new_stack_args") or [] if phase == "candidate" else []
    if not isinstance(server_args, Sequence) or isinstance(server_args, str):
        raise ValueError(f"profile {profile['name']}: server_args must be a list, got {server_args!r}")
    if not isinstance(extra, Sequence) or isinstance(extra, str):
        raise ValueError(f"profile {profile['name']}: new_stack_args must be a list, got {extra!r}")
    return [str(a) for a in server_args] + [str(a) for a in extra]


def main_process_argv(cmdline: str | bytes | None) -> list[str]:
    """The argv of a process from its ``/proc/<pid>/cmdline`` (proc(5): the
    arguments each ended by a NUL byte), as text or bytes; ``[]`` when empty
    or None (not running)."""
    if not cmdline:
        return []
    text = cmdline.decode("utf-8", "replace") if isinstance(cmdline, bytes) else cmdline
    argv = text.split("\0")
    return argv[:-1] if argv[-1] == "" else argv


def running_args(cmdline: str | bytes | None, exec_start: str) -> list[str] | None:
    """The arguments the running server adds to the service's own command, or None.

    ``cmdline``: the main process's ``/proc/<pid>/cmdline`` (argv joined and ended
    by NUL bytes, proc(5)), as text or bytes; empty or None when the service is
    not running. ``exec_start``: the service's own command (the unit's ExecStart,
    a shell-quoted string). Returns the argv after the own command's words when
    the process runs that command, else None (another command, a wrapper, not
    running): the plan then restarts for every profile.
    """
    argv = main_process_argv(cmdline)
    if not argv:
        return None
    try:
        own = shlex.split(exec_start)
    except ValueError:
        return None
    if not own or argv[: len(own)] != own:
        return None
    return argv[len(own) :]


def main_process_venv(cmdline: str | bytes | None) -> str | None:
    """The virtual environment whose Python the server's main process runs, or None.

    ``cmdline``: the main process's ``/proc/<pid>/cmdline`` (proc(5)), as text or
    bytes. Returns ``VENV`` (normalised, no trailing slash) when the process's
    program, ``argv[0]``, is ``VENV/bin/python`` (or ``python3``, ``python3.X``),
    else None (not running, a wrapper script, a system Python). Which stack
    serves is read from this, not from the unit's files: a drop-in written but
    not yet applied (a run killed between the write and the restart) leaves
    the service on the other stack with the new stack's files in place.
    """
    argv = main_process_argv(cmdline)
    head, _, name = (argv[0] if argv else "").rpartition("/bin/")
    if not head or not re.fullmatch(r"python(3(\.\d+)?)?", name):
        return None
    return posixpath.normpath(head)


def plan_phase(
    profiles: Sequence[Mapping[str, Any]],
    phase: str,
    *,
    running: Sequence[str] | None = None,
    entered: bool = False,
    end_on_own_command: bool = True,
) -> dict[str, Any]:
    """Order one phase's profiles and mark the restarts.

    ``profiles``: the profiles (see ``profile_args``), in the inventory's order.
    ``running``: the arguments the service runs with now on this phase's stack
    (``running_args``), None when unknown. ``entered``: the step before the phase
    (the switch, the rollback) starts the service straight into the first
    profile; that restart is counted in ``entry_restart`` and the first step
    needs none. ``end_on_own_command``: the service must serve its own command
    (no profile arguments) when the phase ends; false when a restart follows
    anyway (the baseline, before the switch).

    Returns ``{"phase", "steps": [{"profile", "args", "restart"}], "entry_args",
    "entry_restart", "restore", "restarts"}``: ``entry_args`` are the arguments the
    entering restart starts with (``[]`` when not ``entered``), ``restore`` a
    restart back to the own command after the last step, ``restarts`` every
    restart of the phase (entry, steps, restore). Raises ``ValueError`` for an
    empty list, duplicate names or bad profiles.
    """
    if not profiles:
        raise ValueError("the restart plan needs at least one profile")
    names = [p.get("name") if isinstance(p, Mapping) else None for p in profiles]
    args = {str(n): profile_args(p, phase) for n, p in zip(names, profiles, strict=True)}
    if len(args) != len(profiles):
        raise ValueError(f"profile names must be unique, got {names}")
    order = [str(n) for n in names]
    own = [n for n in order if not args[n]]
    if entered:
        # The entering restart starts the first profile; the own command's profile,
        # what the service keeps serving, comes last.
        order = [n for n in order if n not in own[:1]] + own[:1]
        running = args[order[0]]
    else:
        matching = [n for n in order if running is not None and args[n] == list(running)]
        if matching:
            order = matching[:1] + [n for n in order if n != matching[0]]
        if end_on_own_command and own and own[0] not in matching[:1] and len(order) > 1:
            order = [n for n in order if n != own[0]] + own[:1]
    steps = []
    current = None if running is None else list(running)
    for name in order:
        restart = current != args[name]
        steps.append({"profile": name, "args": args[name], "restart": restart})
        current = args[name]
    restore = bool(end_on_own_command and current != [])
    restarts = int(entered) + sum(s["restart"] for s in steps) + int(restore)
    return {
        "phase": phase,
        "steps": steps,
        "entry_args": args[order[0]] if entered else [],
        "entry_restart": entered,
        "restore": restore,
        "restarts": restarts,
    }


def recorded_baseline(
    recorded: Mapping[str, Any] | None,
    profiles: Sequence[Mapping[str, Any]],
    *,
    max_age_hours: float,
    now: float,
) -> dict[str, Any]:
    """Whether the baseline recorded on the host can stand for this run's.

    ``recorded``: the host's ``baseline.json`` (``{"run_id", "taken_at",
    "taken_at_epoch": seconds since the epoch, "profiles": {name: {"server_args",
    "trials", "probe", ...}}}``), None or ``{}`` when there is none. ``profiles``:
    this run's profiles (``[{"name", "server_args"}]``). ``max_age_hours``:
    ``cuda13_baseline_max_age_hours``. ``now``: seconds since the epoch.

    Usable when it is younger than ``max_age_hours``, measured every profile of
    the run with the same server arguments (and no other), and holds each
    profile's correctness probe. Returns ``{"usable": bool, "record": dict}``,
    ``record`` the recorded baseline (``{}`` when there is none).
    """
    record = dict(recorded) if isinstance(recorded, Mapping) else {}
    measured = record.get("profiles")
    if not isinstance(measured, Mapping):
        return {"usable": False, "record": record}
    try:
        taken = float(record.get("taken_at_epoch") or 0)
    except (TypeError, ValueError):
        taken = 0.0
    wanted = {str(p.get("name")): p.get("server_args") for p in profiles}
    got = {
        str(name): (value.get("server_args") if isinstance(value, Mapping) else None)
        for name, value in measured.items()
    }
    usable = (
        now - taken < float(max_age_hours) * 3600
        and all(isinstance(value, Mapping) and "probe" in value for value in measured.values())
        and wanted == got
    )
    return {"usable": usable, "record": record}


def plan_upgrade(
    profiles: Sequence[Mapping[str, Any]],
    *,
    running: Sequence[str] | None,
    baseline_recorded: bool = False,
    rollback_verify: bool = True,
) -> dict[str, Any]:
    """The whole upgrade's restart plan: baseline, switch, candidate, rollback re-check.

    ``running``: the arguments the old stack's server runs with now
    (``running_args``; None when unknown or not running). ``baseline_recorded``:
    a usable recorded baseline replaces the old stack's measurement.
    ``rollback_verify``: a rollback measures the old stack again
    (``cuda13_rollback_verify``).

    Returns ``{"baseline": phase plan or None, "switch_args": [str],
    "candidate": phase plan, "rollback": phase plan or None, "rollback_args": [str],
    "restarts_upgrade": int, "restarts_rollback": int}`` (phase plans as
    ``plan_phase``). ``restarts_upgrade`` counts the baseline's, the switch's and
    the candidate's restarts; ``restarts_rollback`` the rollback's own restart and
    its re-check's. Raises ``ValueError`` as ``plan_phase``.
    """
    baseline = (
        None
        if baseline_recorded
        else plan_phase(profiles, "baseline", running=running, end_on_own_command=False)
    )
    candidate = plan_phase(profiles, "candidate", entered=True)
    rollback = plan_phase(profiles, "rollback", entered=True) if rollback_verify else None
    return {
        "baseline": baseline,
        "switch_args": candidate["entry_args"],
        "candidate": candidate,
        "rollback": rollback,
        "rollback_args": rollback["entry_args"] if rollback else [],
        "restarts_upgrade": (baseline["restarts"] if baseline else 0) + candidate["restarts"],
        "restarts_rollback": rollback["restarts"] if rollback else 1,
    }


def format_plan(plan: Mapping[str, Any]) -> list[str]:
    """Lines that show a plan from ``plan_upgrade`` before it runs, one per phase.

    For example ``baseline (old stack): plain (no restart, it runs now), eagle3 (restart)``.
    """

    def step(s: Mapping[str, Any], entered: bool, first: bool) -> str:
        if first and entered:
            how = "started by the step before"
        elif s["restart"]:
            how = "restart"
        else:
            how = "no restart, it runs now"
        return f"{s['profile']} ({how})"

    def phase(label: str, p: Mapping[str, Any] | None, none: str) -> str:
        if p is None:
            return f"{label}: {none}"
        steps = ", ".join(step(s, p["entry_restart"], i == 0) for i, s in enumerate(p["steps"]))
        tail = ", then a restart on the own command" if p["restore"] else ""
        return f"{label}: {steps}{tail} ({p['restarts']} restarts)"

    def args(a: Sequence[str]) -> str:
        return " ".join(shlex.quote(x) for x in a) if a else "no profile arguments"

    return [
        phase("baseline (old stack)", plan["baseline"], "recorded baseline, no restart"),
        f"switch: one restart into the new stack with {args(plan['switch_args'])}",
        phase("candidate (new stack)", plan["candidate"], ""),
        phase(
            "rollback (old stack, only if needed)",
            plan["rollback"],
            "one restart, no re-check",
        )
        + ("" if plan["rollback"] is None else f"; the rollback starts with {args(plan['rollback_args'])}"),
        f"restarts: {plan['restarts_upgrade']} per upgrade, {plan['restarts_rollback']} more for a rollback",
    ]
