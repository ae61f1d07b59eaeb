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
- a recorded baseline (:func:`recorded_baseline`, the step
  :mod:`cuda13_upgrade.steps.baseline`) skips the old stack's restarts.

With P profiles, one of them without arguments, that is at most 2P - 1
restarts per upgrade and P per rollback (switch or rollback restart included).

A plan is plain data (lists and dicts of strings, bools and ints), printed
before it runs and recorded in the host's result. Everything here is pure.
"""

from __future__ import annotations

import base64
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# What the main process runs is read on the host by the same functions (the
# host script carries them, standard library only).
from . import diagnosis, effective
from .hostscripts.service_cycle import main_process_argv, main_process_venv, running_args

__all__ = [
    "PHASES",
    "format_plan",
    "main_process_argv",
    "main_process_venv",
    "plan_phase",
    "plan_upgrade",
    "profile_args",
    "recorded_baseline",
    "running_args",
]

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
    driver_version: str | None = None,
) -> dict[str, Any]:
    """Whether the baseline recorded on the host can stand for this run's.

    ``recorded``: the host's ``baseline.json`` (``{"run_id", "taken_at",
    "taken_at_epoch": seconds since the epoch, "profiles": {name: {"server_args",
    "trials", "probe", ...}}}``), None or ``{}`` when there is none. ``profiles``:
    this run's profiles (``[{"name", "server_args"}]``). ``max_age_hours``:
    ``cuda13_baseline_max_age_hours``. ``now``: seconds since the epoch.
    ``driver_version``: the NVIDIA driver the host runs now (``""``: not known;
    None: not asked).

    Usable when it is younger than ``max_age_hours``, measured every profile of
    the run with the same server arguments (and no other), holds each
    profile's correctness probe, and, when it records the driver it was taken on
    (``"driver_version"``; records without it stand as before), that driver is the
    one the host runs now: a baseline of the old driver does not stand for a
    stack measured on another (a run that lost the host during a driver move).
    Returns ``{"usable": bool, "record": dict}``, ``record`` the recorded
    baseline (``{}`` when there is none).
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
    taken_on = str(record.get("driver_version") or "")
    usable = (
        now - taken < float(max_age_hours) * 3600
        and all(isinstance(value, Mapping) and "probe" in value for value in measured.values())
        and wanted == got
        and (not taken_on or driver_version is None or taken_on == driver_version)
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


def serve_outcome(
    cycle: Mapping[str, Any] | None,
    *,
    service: str,
    what: str,
    exec_start: str,
    venv: str,
    args: Sequence[Any],
    check: bool,
    restart: str = "always",
    files_changed: bool = False,
    url: str,
    timeout: int,
    leftover_timeout: float,
    service_user: str = "",
    stack: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What one start of the service into a profile came to, and the operator's message.

    ``cycle``: the JSON ``hostscripts/service_cycle.py`` printed (see its docstring);
    None or ``{}`` when it did not run (check mode). ``service``, ``what``: the unit and
    what was started, for the messages. ``exec_start``, ``venv``, ``args``: the own
    command, the venv whose Python must serve and the profile's arguments; checked
    against the main process when ``check``. ``restart`` (always, when-changed,
    never) and ``files_changed`` (a drop-in changed): in check mode, whether a
    restart would follow. ``url`` and ``timeout`` (s): where and
    how long the readiness wait was. ``leftover_timeout`` (s): cuda13_leftover_timeout,
    named in the leftovers' note. ``service_user``: the unit's ``User=``, named when
    the journal says it may not execute the venv's Python (``diagnosis.diagnose``).
    ``stack``: which stack serves, ``{"stack": "old" | "new", "stack_cuda": its CUDA release
    ("12.8"), "target_cuda": the upgrade's ("13.0"), "venv": its venv}``
    (:func:`cuda13_upgrade.steps.serve.stack_context`); every remedy the journal's diagnosis
    gives follows that stack (``diagnosis.diagnose``'s context). None or ``{}``: the remedies
    follow the target, as before.

    A server that generates must also have its GPUs: when ``/get_server_info`` reports a
    ``device`` other than ``cuda``, or a ``tp_size`` below the tensor parallel size its command
    asks for (``--tp``/``--tp-size``/``--tensor-parallel-size`` of ``exec_start`` plus ``args``,
    the last one given), the start failed (:func:`gpus_missing`); a field the server does not
    report (an older SGLang) is no evidence.

    Returns ``{"restarted": bool, "would_restart": bool, "leftovers": [{"pid", "command",
    "gpu_memory_mib"}], "running_args": list | None, "running_venv": str | None,
    "running_command": str, "effective": dict | None, "report": [str], "failed": bool,
    "msg": str}``: ``effective`` is the server's effective configuration
    (``effective.effective_config`` of the cycle's ``server_info`` and
    ``startup_log``), None when the cycle did not read it (no wait, check mode);
    ``report`` is what the operator reads on success (the restart, the leftover
    processes that were stopped, or in check mode the restart that would follow);
    ``msg`` is the failure, in lines, empty when none.
    """
    if not cycle:
        would = restart == "always" or (restart == "when-changed" and files_changed)
        return {
            "restarted": False,
            "would_restart": would,
            "leftovers": [],
            "running_args": None,
            "running_venv": None,
            "running_command": "",
            "effective": None,
            "report": [f"Would restart {service} ({what})." if would else f"{service} would not restart."],
            "failed": False,
            "msg": "",
        }
    release = cycle.get("release") or {}
    leftovers = list(release.get("leftovers") or [])
    cmdline = base64.b64decode(cycle.get("cmdline_b64") or "")
    running = {
        "running_args": running_args(cmdline, exec_start),
        "running_venv": main_process_venv(cmdline),
        "running_command": shlex.join(main_process_argv(cmdline)),
    }
    restarted = bool(cycle.get("restarted"))
    notes = [f"{service} serves {what}" + (" after a restart." if restarted else ", not restarted.")]
    if leftovers:
        listed = ", ".join(
            f"pid {p['pid']} ({_truncate(str(p.get('command', '')), 120)},"
            f" {p.get('gpu_memory_mib', 0)} MiB of GPU memory)"
            for p in leftovers
        )
        signals = list(dict.fromkeys((release.get("signalled") or {}).values()))
        how = (
            f"stopped with {' then '.join(signals)} after {leftover_timeout:g} s (cuda13_leftover_timeout)"
            if signals
            else f"they ended within {release.get('waited_s')} s"
        )
        notes.append(f"{service} left {len(leftovers)} process(es) after it stopped: {listed}; {how}.")
    msg: list[str] = []
    ready = cycle.get("ready")
    effective_record = (
        effective.effective_config(cycle.get("server_info"), cycle.get("startup_log"))
        if "server_info" in cycle
        else None
    )
    context = {
        "service_user": service_user,
        **{k: str(v) for k, v in (stack or {}).items() if k in _STACK_KEYS and v},
    }
    if release and not release.get("free", True):
        msg = [
            f"{service} stopped, but its processes {release.get('still_running')} still run or hold"
            f" GPU memory after SIGTERM and SIGKILL ({leftovers}): the other stack would start on"
            " occupied GPUs."
            " Find what keeps them (nvidia-smi --query-compute-apps=pid,used_memory"
            " --format=csv,noheader,nounits; a process in D state waits on the driver), end them,"
            " and run again."
        ]
    elif cycle.get("start_error"):
        msg = [f"{service} ({what}) did not start: {cycle['start_error']}."]
    elif ready and not ready.get("generated"):
        msg = [
            f"{service} ({what}) did not generate a token at {url} within {timeout} s"
            f" (last answer: {ready.get('last', 'none')})."
        ]
    if msg:
        known = diagnosis.diagnose(cycle.get("journal") or [], source="journal", context=context)
        msg.append(
            f"Cause: {known.cause}. Fix: {known.remedy}."
            if known.known
            else "Check that the service starts and loads its model; raise the wait with"
            " cuda13_health_timeout when loading takes longer."
        )
        if cycle.get("journal"):
            msg += ["Last lines of its journal:", *list(cycle["journal"])[-15:]]
    elif check and not _runs(running, venv, args):
        wanted = " ".join([exec_start, *(shlex.quote(str(a)) for a in args)])
        msg = [
            f"{service} does not run {what}: its main process runs {running['running_command']}, where that"
            f" needs {wanted} (the Python of {venv}). Nothing was measured on it. Check the drop-ins in"
            f" /etc/systemd/system/{service}.d/ (systemctl cat {service})."
        ]
    else:
        missing = gpus_missing(effective_record, exec_start, args)
        if missing:
            logged = [*(cycle.get("startup_log") or []), *(cycle.get("journal") or [])]
            known = diagnosis.diagnose(logged, source="journal", context=context)
            msg = [
                f"{service} ({what}) generates, but not on the GPUs it was asked for: {missing}."
                " Nothing was measured on it.",
                f"Cause: {known.cause}. Fix: {known.remedy}."
                if known.known
                else f"Check the GPUs the service sees: nvidia-smi, and CUDA_VISIBLE_DEVICES in"
                f" systemctl show -p Environment {service}.",
            ]
            if logged:
                msg += ["Last lines of its start-up log:", *logged[-15:]]
    return {
        "restarted": restarted,
        "would_restart": False,
        "leftovers": leftovers,
        **running,
        "effective": effective_record,
        "report": notes,
        "failed": bool(msg),
        "msg": "\n".join(msg),
    }


#: The keys of :func:`serve_outcome`'s ``stack`` that go to the diagnosis's context.
_STACK_KEYS = ("stack", "stack_cuda", "target_cuda", "venv")

#: SGLang's flags of ``ServerArgs.tp_size`` (python/sglang/srt/server_args.py: ``--tensor-parallel-size``,
#: ``--tp-size``; ``--tp``, its documented short form, reaches it by argparse's prefix matching).
TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")


def asked_tp(exec_start: str, args: Sequence[Any]) -> int | None:
    """The tensor parallel size a command asks for: the last of :data:`TP_FLAGS` in
    ``exec_start`` (a command line) followed by ``args`` (argparse keeps the last), as an int;
    None when none is given or its value is not a number."""
    try:
        words = shlex.split(exec_start or "")
    except ValueError:
        words = []
    asked = None
    for request in effective.requested_args([*words, *(str(a) for a in args)]):
        if request["flag"] in TP_FLAGS:
            asked = request["asked"]
    try:
        return int(asked) if asked is not None and asked is not True else None
    except (TypeError, ValueError):
        return None


def gpus_missing(effective_record: Mapping[str, Any] | None, exec_start: str, args: Sequence[Any]) -> str:
    """What the server's effective configuration (``effective.effective_config``) says against
    the GPUs its command asks for, ``""`` when nothing does.

    ``device`` other than ``cuda`` (SGLang's ``ServerArgs.device``, resolved at start:
    ``cuda``, or ``cpu`` when it found no GPU) and ``tp_size`` below :func:`asked_tp` are
    evidence; a field the server does not report (an older SGLang, the configuration not
    read) is none. E.g. ``"the command asks for --tp 8 (8 GPUs), /get_server_info reports
    tp_size=4"``.
    """
    if not isinstance(effective_record, Mapping) or not effective_record.get("read"):
        return ""
    reported = effective_record.get("args") or {}
    problems = []
    device = reported.get("device")
    if isinstance(device, str) and device and device.split(":", 1)[0] != "cuda":
        problems.append(f"/get_server_info reports device={device!r}, not 'cuda'")
    asked = asked_tp(exec_start, args)
    tp = reported.get("tp_size")
    if asked is not None and isinstance(tp, int) and not isinstance(tp, bool) and tp < asked:
        problems.append(
            f"the command asks for --tp {asked} ({asked} GPUs), /get_server_info reports tp_size={tp}"
        )
    return "; ".join(problems)


def _runs(running: Mapping[str, Any], venv: str, args: Sequence[Any]) -> bool:
    """The check of what the main process runs (:func:`serve_outcome`): one that cannot be read
    (a wrapper) passes."""
    venv_ok = running["running_venv"] is None or running["running_venv"] == (
        posixpath.normpath(venv) if venv else ""
    )
    args_ok = running["running_args"] is None or running["running_args"] == [str(a) for a in args]
    return venv_ok and args_ok


def _truncate(text: str, width: int) -> str:
    """Jinja's ``truncate(width)``: cut at a word boundary and end with '...'."""
    if len(text) <= width:
        return text
    return text[: width - 3].rsplit(" ", 1)[0] + "..."


def measure_plan(
    profiles: Sequence[Mapping[str, Any]],
    phase: str,
    *,
    plan: Mapping[str, Any] | None = None,
    running: Sequence[str] | None = None,
    exec_start: str = "",
    baseline: Mapping[str, Any] | None = None,
    baseline_probe: Mapping[str, Any] | None = None,
    probe: bool = False,
    probe_prompts: int = 1,
    probe_tokens: int = 1,
) -> dict[str, Any]:
    """The order in which one phase of verify_throughput measures the profiles, checked.

    ``profiles`` and ``phase``: as for :func:`plan_phase`. ``plan``: the calling
    play's plan for this phase (a :func:`plan_phase` result), or None/empty to
    plan here from ``running`` (what the service runs now, :func:`running_args`)
    ending on the own command. ``exec_start``: the service's own command, which
    must be set. In the candidate phase ``baseline`` (and, with ``probe``,
    ``baseline_probe``) must hold every profile: the gate compares with them.
    ``probe_prompts`` and ``probe_tokens`` (the correctness probe's size) must be
    at least 1.

    Returns the plan. Raises ``ValueError`` naming the option and the value
    when an input does not hold, or when the plan does not measure exactly the
    profiles.
    """
    names = [str(p.get("name")) for p in profiles if isinstance(p, Mapping)]
    if not profiles:
        raise ValueError("verify_throughput_profiles must not be empty")
    if not exec_start:
        raise ValueError("verify_throughput_exec_start must be set (the service's own command)")
    if phase == "candidate":
        for option, recorded, needed in (
            ("verify_throughput_baseline", baseline, True),
            ("verify_throughput_baseline_probe", baseline_probe, probe),
        ):
            missing = [n for n in names if n not in (recorded or {})]
            if needed and missing:
                raise ValueError(
                    f"in the candidate phase {option} must hold every profile: it has"
                    f" {sorted(recorded or {})}, without {missing}"
                )
    for option, value in (
        ("verify_throughput_probe_prompts", probe_prompts),
        ("verify_throughput_probe_tokens", probe_tokens),
    ):
        if int(value) < 1:
            raise ValueError(f"{option} must be at least 1, got {value}")
    chosen = dict(plan) if plan else plan_phase(profiles, phase, running=running, end_on_own_command=True)
    measured = [str(step.get("profile")) for step in chosen.get("steps", [])]
    if sorted(measured) != sorted(names):
        raise ValueError(
            f"verify_throughput_plan measures {measured}, but verify_throughput_profiles are {names}"
        )
    return chosen
