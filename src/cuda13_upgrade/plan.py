"""What a rollout would do, host by host, before it changes anything (``cuda13-upgrade plan``).

``playbooks/plan.yml`` runs the rollout's read-only passes (the run's batch
plan, each host's state, the preflight with the toolkit's apt simulation and
pip's resolution of the target) and hands what they found, per host, to
:func:`host_plan`; :func:`rollout_plan` adds the batches and the fleet's
summary, and :func:`render_text` prints it. The same decisions as the rollout
make each part:

- the path: ``already kept`` (:func:`cuda13_upgrade.rerun.host_verdict`, the
  early pass of ``upgrade-cuda13.yml``), ``staged`` (``staged.json`` recorded
  for this very target and resolved set, as
  :func:`cuda13_upgrade.steps.host_state.staged_verdict` decides; the new venv's
  ``pip freeze`` is compared again at the window),
  ``full``, ``refused`` (a preflight check, the apt transaction or the
  resolution refused the host, with the message the rollout would print), or
  ``unreachable`` (Ansible could not connect to it; the reason recorded, the
  plan finished for the other hosts, :func:`unreachable_plan`);
- the apt transaction: ``cuda13_upgrade.aptplan.check_transaction``'s record;
- the wheels: the count of pip's resolution (``cuda13_upgrade.resolve.resolved_set``)
  and the bytes recorded for the stack in ``stack-space.yml`` (pip's report has
  no sizes: ``nvidia_driver_check_space_stack`` names the record);
- the space: the preflight's one result per filesystem (:func:`cuda13_upgrade.space.plan`);
- the restarts: :func:`cuda13_upgrade.restarts.plan_upgrade` with what the
  service runs now unknown (the snapshot reads it), so the baseline restarts
  into every profile: an upper bound;
- the time out of service: the drain-to-undrain time the host's own last run
  recorded (``result.json``'s ``out_of_service_s``; that run's own drain to undrain,
  from its ``steps``, where it counted from an earlier run's drain), else the longest
  another host of the plan recorded, else unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import batches, ondemand, rerun, restarts, timeline
from cuda13_upgrade.space import human_bytes
from cuda13_upgrade.summary import format_duration

ALREADY_KEPT = "already kept"
STAGED = "staged"
FULL = "full"
REFUSED = "refused"
UNREACHABLE = "unreachable"
#: Every path, in the order the summary lists them.
PATHS = (FULL, STAGED, ALREADY_KEPT, REFUSED, UNREACHABLE)


def unreachable_plan(host: str, reason: str) -> dict[str, Any]:
    """The plan of a host Ansible could not connect to: path ``unreachable``, ``why`` the
    connection's reason (Ansible's message, its "Task failed: " prefix and line breaks
    dropped), no batch, nothing else known. The rollout would stop at such a host's
    preflight (:func:`rollout_plan` counts it as it counts a refused host)."""
    text = " ".join(str(reason).split())
    text = text.removeprefix("Task failed: ") or "Ansible could not connect to it"
    return {
        "host": host,
        "path": UNREACHABLE,
        "why": text,
        "refusals": [],
        "notice": "",
        "apt": None,
        "wheels": None,
        "space": [],
        "restarts": None,
        "drain": {"drain": "", "undrain": ""},
        "warnings": [],
        "out_of_service_s": None,
        "estimate_from": "",
        "gpu_model": "",
        "profile_count": None,
        "soak_s": None,
    }


def _size(count: float | None) -> str:
    return "unknown" if count is None else human_bytes(count)


def _pins(resolved: Sequence[Mapping[str, Any]] | None) -> list[str]:
    return [f"{d.get('name')}=={d.get('version')}" for d in resolved or [] if isinstance(d, Mapping)]


def staged_for(staged: Mapping[str, Any] | None, target: Mapping[str, Any], pins: Sequence[str]) -> bool:
    """Whether ``staged.json`` (``{"target", "resolved_target": ["name==version"], ...}``)
    was recorded for this run's ``target`` and resolved set (``pins``), as
    :func:`cuda13_upgrade.steps.host_state.staged_verdict` decides before it compares the freeze."""
    if not isinstance(staged, Mapping) or not staged:
        return False
    recorded_pins = list(staged.get("resolved_target") or [])
    return rerun.same_target(staged.get("target"), target) and recorded_pins == list(pins)


def host_plan(
    host: str,
    *,
    verdict: Mapping[str, Any] | None,
    state: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
    refusals: Sequence[str] = (),
    preflight: Mapping[str, Any] | None = None,
    toolkit: Mapping[str, Any] | None = None,
    resolved: Sequence[Mapping[str, Any]] | None = None,
    wheels_bytes: int | None = None,
    wheels_record: str = "",
    profiles: Sequence[Mapping[str, Any]] = (),
    rollback_verify: bool = True,
    drain_tasks: str = "",
    undrain_tasks: str = "",
    allow_undrained: bool = False,
    service: str = "the service",
    gpu_model: str = "",
    soak_s: int | None = None,
    driver: Sequence[str] = (),
    driver_move: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One host's plan.

    Args:
        host: the inventory name.
        verdict: :func:`cuda13_upgrade.rerun.host_verdict`'s record for the host
            (``already_kept``, ``reason``, ``previous``: its ``result.json``, ``notice``),
            or None when the state could not be read (a refusal says why).
        state: ``stack_digest.py --state``'s ``state`` (``staged``: ``staged.json`` or None).
        target: the run's target (:func:`cuda13_upgrade.rerun.target`).
        refusals: what refused the host, each the message the rollout prints.
        preflight: the preflight's report (``{"ok", "passed", "failures"}``, each
            ``{"check", "message", ...}``), or None where it did not run.
        toolkit: ``{"package": "cuda-toolkit-13-0=13.0.2-1", "to_install": bool,
            "transaction": aptplan.check_transaction record or None}``.
        resolved: pip's resolved set (:func:`cuda13_upgrade.resolve.resolved_set`), or None.
        wheels_bytes: the recorded download size of the stack's wheels, bytes, or None.
        wheels_record: where ``wheels_bytes`` comes from.
        profiles: the server profiles (``cuda13_profiles``).
        rollback_verify: ``cuda13_rollback_verify``.
        drain_tasks, undrain_tasks: ``cuda13_drain_tasks``, ``cuda13_undrain_tasks``.
        allow_undrained: ``cuda13_allow_undrained``; service: ``cuda13_service_name``. A host
            that would change with no drain hook is refused unless ``allow_undrained``, and
            warned about with it (:func:`cuda13_upgrade.ondemand.drain_plan`, the rule the
            rollout's preflight applies).
        gpu_model: the host's GPU model(s) as the preflight's nvidia-smi names them ("" unknown);
            soak_s: ``cuda13_soak_seconds`` (None unknown). With ``profiles`` they are what the
            estimate of the night reads (:mod:`cuda13_upgrade.estimate`).
        driver: the driver window's lines (:func:`cuda13_upgrade.driverplan.describe`), or none
            without ``cuda13_driver_target``; driver_move: the window's verdict,
            ``{"state": "at_floor"|"ready"|"blocked", "blockers": [check]}`` (None without it).

    Returns:
        ``{"host", "path", "why", "refusals": [str], "notice": str,
        "apt": {"package", "to_install", "install": [str]} | None,
        "wheels": {"count", "bytes", "record", "distributions": [str]} | None,
        "space": [str], "restarts": {"upgrade", "rollback", "lines": [str]} | None,
        "drain": {"drain", "undrain"}, "warnings": [str],
        "out_of_service_s": float | None, "estimate_from": str, "gpu_model": str,
        "profile_count": int, "soak_s": int | None, "driver": [str], "driver_move": dict | None}``;
        ``batch`` is added by
        :func:`rollout_plan`.
    """
    verdict = verdict or {}
    previous = verdict.get("previous") if isinstance(verdict.get("previous"), Mapping) else {}
    pins = _pins(resolved)
    measured_out = _seconds(previous.get("out_of_service_s"))
    if previous.get("out_of_service_since") and isinstance(previous.get("steps"), list):
        # That run resolved an earlier one that left the host drained: its time counts the stop
        # between the runs; the estimate is its own drain to undrain (cuda13_upgrade.timeline).
        measured_out = _seconds(timeline.out_of_service_s(previous["steps"]))
    record: dict[str, Any] = {
        "host": host,
        "path": FULL,
        "why": "",
        "refusals": [str(r).strip() for r in refusals if str(r).strip()],
        "notice": str(verdict.get("notice") or ""),
        "apt": None,
        "wheels": None,
        "space": [],
        "restarts": None,
        "drain": {"drain": drain_tasks or "", "undrain": undrain_tasks or ""},
        "warnings": [],
        "out_of_service_s": measured_out,
        "estimate_from": f"{host}'s run {previous.get('run_id')}" if measured_out else "",
        "gpu_model": str(gpu_model or ""),
        "profile_count": len(profiles),
        "soak_s": soak_s,
        "driver": [str(line) for line in driver],
        "driver_move": dict(driver_move) if driver_move else None,
    }
    for failure in (preflight or {}).get("failures") or []:
        message = str(failure.get("message") or "") if isinstance(failure, Mapping) else str(failure)
        if message and not any(message in r for r in record["refusals"]):
            record["refusals"].append(message)
    record["space"] = [
        str(p.get("message"))
        for p in (preflight or {}).get("passed") or []
        if isinstance(p, Mapping) and p.get("check") == "space"
    ]
    if verdict.get("already_kept"):
        record["path"] = ALREADY_KEPT
        verified = previous.get("verified_in_run") or previous.get("run_id")
        record["why"] = str(
            verdict.get("reason") or f"run {verified} verified this target and the stack it kept is unchanged"
        )
        return record
    drain = ondemand.drain_plan("upgrade", host, service, drain_tasks, undrain_tasks, allow_undrained)
    # The preflight's first check (steps/preflight.py): after an earlier refusal it never ran.
    if drain["refusal"] and not record["refusals"]:
        record["refusals"].append(drain["refusal"])
    if record["refusals"]:
        record["path"] = REFUSED
        record["why"] = "the rollout's preflight refuses it; no host is changed while one is refused"
        return record
    staged = (state or {}).get("staged") if isinstance(state, Mapping) else None
    if target is not None and resolved is not None and staged_for(staged, target, pins):
        record["path"] = STAGED
        record["why"] = (
            f"staged by run {staged.get('run_id')} at {staged.get('staged_at')} for this target; "
            "straight to the window if its new venv still freezes as recorded"
        )
    else:
        reason = str(verdict.get("reason") or "not kept for this target")
        record["why"] = reason if previous else "never upgraded"
        toolkit = toolkit or {}
        transaction = toolkit.get("transaction") if isinstance(toolkit.get("transaction"), Mapping) else None
        record["apt"] = {
            "package": str(toolkit.get("package") or ""),
            "to_install": bool(toolkit.get("to_install")),
            "install": list((transaction or {}).get("install") or []) if toolkit.get("to_install") else [],
        }
        if resolved is not None:
            record["wheels"] = {
                "count": len(pins),
                "bytes": wheels_bytes,
                "record": wheels_record,
                "distributions": pins,
            }
    if profiles:
        upgrade = restarts.plan_upgrade(profiles, running=None, rollback_verify=rollback_verify)
        record["restarts"] = {
            "upgrade": upgrade["restarts_upgrade"],
            "rollback": upgrade["restarts_rollback"],
            "lines": restarts.format_plan(upgrade),
        }
    if drain["warning"]:
        record["warnings"].append(drain["warning"])
    return record


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}{'es' if noun.endswith('ch') else 's'}"


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def rollout_plan(
    hosts: Sequence[Mapping[str, Any]],
    *,
    serial: Any = None,
    max_parallel: Any = None,
    run_id: str = "",
    allow_partial: bool = False,
    fleet_lines: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole plan: the hosts' plans (:func:`host_plan`) with their batch and the summary.

    Args:
        hosts: one :func:`host_plan` record per host of the run, in the inventory's order.
        serial, max_parallel: ``cuda13_serial`` and ``cuda13_max_parallel``: the
            batches of the hosts that change (:func:`cuda13_upgrade.batches.plan`,
            over the hosts not already kept nor refused, as the rollout plans them
            once the already-kept have left).
        run_id: the plan's run identifier.
        allow_partial: ``cuda13_preflight_allow_partial`` (a refused host does not stop the rollout).
        fleet_lines: the window and the failure budget, as ``playbooks/start.yml`` prints them.

    Returns:
        ``{"run_id", "hosts": [record with "batch": int | None], "batches": [[host]],
        "summary": {"hosts", "paths": {path: [host]}, "refused": [host],
        "unreachable": [host], "stops": bool,
        "changes": int, "restarts": int, "wheels_bytes": int | None,
        "out_of_service_s": float | None, "driver_only": bool, "driver_ready": [host],
        "lines": [str]}}``; ``stops``: the rollout would stop at its preflight, changing no host;
        ``driver_ready``: the hosts whose driver the run moves (none when it stops);
        ``driver_only``: a plan of ``cuda13-upgrade driver`` (the stack lines left out).

    Raises:
        ValueError: a bad ``serial`` or ``max_parallel``, naming the option.
    """
    changing_hosts = [r["host"] for r in hosts if r["path"] in (FULL, STAGED)]
    the_batches = batches.plan(changing_hosts, serial, max_parallel)
    batch_lines = batches.format_plan(the_batches) if changing_hosts else []
    batch_list = the_batches["batches"]
    where = {host: k + 1 for k, batch in enumerate(batch_list) for host in batch}
    records = []
    for record in hosts:
        records.append({**record, "batch": where.get(record["host"])})
    known = [(r["out_of_service_s"], r["host"]) for r in records if r.get("out_of_service_s")]
    if known:
        longest, source = max(known)
        for r in records:
            if not r.get("out_of_service_s") and r["path"] in (FULL, STAGED):
                r["out_of_service_s"] = longest
                r["estimate_from"] = f"{source}'s last run (the longest recorded)"
    paths: dict[str, list[str]] = {path: [] for path in PATHS}
    for r in records:
        paths.setdefault(r["path"], []).append(r["host"])
    refused = paths[REFUSED]
    unreachable = paths[UNREACHABLE]
    changing = [r for r in records if r["path"] in (FULL, STAGED)]
    # With cuda13_preflight_allow_partial the hosts that passed go on; with none passed, none do.
    # An unreachable host fails the rollout's preflight as a refused one does.
    stops = bool(refused or unreachable) and (not allow_partial or not changing)
    wheel_sizes = [r["wheels"]["bytes"] for r in changing if r.get("wheels")]
    total_bytes = sum(wheel_sizes) if wheel_sizes and None not in wheel_sizes else None
    restarts_total = sum((r.get("restarts") or {}).get("upgrade", 0) for r in changing)
    outs = [r["out_of_service_s"] for r in changing]
    lines = [
        f"{_count(len(records), 'host')}: "
        + ", ".join(f"{len(paths[p])} {p}" for p in PATHS if paths[p])
        + ("" if records else "none"),
    ]
    stopped_by = [f"{', '.join(refused)} refused"] if refused else []
    stopped_by += [f"{', '.join(unreachable)} unreachable"] if unreachable else []
    if stops:
        lines.append(
            f"the rollout would stop at its preflight and change no host: {'; '.join(stopped_by)} "
            "(fix them, leave them out with --limit, or set cuda13_preflight_allow_partial=true)"
        )
    elif stopped_by:
        lines.append(f"{'; '.join(stopped_by)}; cuda13_preflight_allow_partial=true upgrades the others")
    driver_only = any(r.get("driver_only") for r in records)
    if changing and not stops and not driver_only:
        lines.append(
            f"{_count(len(changing), 'host')} {'changes' if len(changing) == 1 else 'change'},"
            f" in {_count(len(batch_list), 'batch')};"
            f" {restarts_total} service restarts in all"
            + (
                f"; wheels to install: {_size(total_bytes)} per the stack's record"
                if total_bytes is not None
                else ""
            )
        )
        if None not in outs:
            longest = format_duration(max(outs))
            lines.append(f"out of service per host: about {longest} (longest recorded run)")
        else:
            lines.append("out of service per host: not known (no host of the plan has a recorded run)")
        undrained = [r["host"] for r in changing if not r["drain"]["drain"]]
        if undrained:
            lines.append(
                f"no drain hook for {', '.join(undrained)} (cuda13_allow_undrained): traffic reaches them"
                " while they restart"
            )
    lines += _driver_lines(records, driver_only=driver_only)
    lines += [str(line) for line in batch_lines] + [str(line) for line in fleet_lines]
    return {
        "run_id": run_id,
        "hosts": records,
        "batches": [list(b) for b in batch_list],
        "summary": {
            "hosts": len(records),
            "paths": paths,
            "refused": refused,
            "unreachable": unreachable,
            "stops": stops,
            "changes": 0 if stops else len(changing),
            "restarts": restarts_total,
            "wheels_bytes": total_bytes,
            "out_of_service_s": max(outs) if outs and None not in outs else None,
            "driver_only": driver_only,
            "driver_ready": [] if stops else _driver_ready(records),
            "lines": lines,
        },
    }


def _must_set_lines(sources: Mapping[str, str]) -> list[str]:
    """Where a host's must-set values came from (``must_set_from``: option -> ``path:line``,
    ``-e`` or "role default"), one line per source file, the role defaults last."""
    by_source: dict[str, list[str]] = {}
    for name, where in sources.items():
        by_source.setdefault(
            str(where).rsplit(":", 1)[0] if str(where)[:1] == "/" else str(where), []
        ).append(name)
    defaults = by_source.pop("role default", [])
    lines = [f"  set in {where}: {', '.join(names)}" for where, names in by_source.items()]
    if defaults:
        lines.append(f"  role default: {', '.join(defaults)}")
    return lines


def _driver_ready(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The hosts whose driver the run moves: below the floor, every check of the move passed."""
    return [r["host"] for r in records if (r.get("driver_move") or {}).get("state") == "ready"]


def _driver_lines(records: Sequence[Mapping[str, Any]], *, driver_only: bool = False) -> list[str]:
    """The driver window's line of the summary: the hosts below the floor, ready for the move or
    blocked (with the checks that block each). ``driver_only``: the run is ``cuda13-upgrade
    driver`` (``cuda13_driver_only``), which moves drivers and leaves the stacks."""
    moves = [(r["host"], r["driver_move"]) for r in records if r.get("driver_move")]
    below = [(host, move) for host, move in moves if move.get("state") in ("ready", "blocked")]
    if not below:
        if not moves:
            return []
        who = "the host meets" if len(moves) == 1 else f"all {len(moves)} hosts meet"
        return [f"driver window: {who} the driver floor, no driver change"]
    what = (
        "cuda13-upgrade driver moves the ready ones, measured and rolled back like the stack"
        " (docs/driver.md), leaves every stack as it is,"
        if driver_only
        else "the rollout moves the ready ones first, measured and rolled back like the stack"
        " (docs/driver.md),"
    )
    ready = [host for host, move in below if move["state"] == "ready"]
    blocked = [
        f"{host} ({', '.join(move.get('blockers') or [])})"
        for host, move in below
        if move["state"] == "blocked"
    ]
    parts = [f"{len(ready)} ready for the move" + (f" ({', '.join(ready)})" if ready else "")]
    if blocked:
        parts.append(f"{len(blocked)} blocked: {'; '.join(blocked)}")
    return [
        f"driver window: {_count(len(below), 'host')} below the driver floor, {', '.join(parts)};"
        f" {what} and refuses the blocked ones"
    ]


def render_text(plan: Mapping[str, Any]) -> str:
    """The plan as the terminal shows it: per host its batch, path and what the
    rollout would do to it, then the fleet's summary."""
    out: list[str] = []
    for r in plan.get("hosts") or []:
        batch = f"batch {r['batch']}" if r.get("batch") else "no batch"
        out.append(f"{r['host']}: {r['path']} ({batch})" + (f": {r['why']}" if r.get("why") else ""))
        for refusal in r.get("refusals") or []:
            first, *rest = refusal.splitlines() or [""]
            out.append(f"  refused: {first}")
            out += [f"    {line}" for line in rest]
        out += [f"  {line}" for line in r.get("driver") or []]
        if r.get("notice"):
            out += [f"  notice: {line}" for line in r["notice"].splitlines()]
        out += _must_set_lines(r.get("must_set_from") or {})
        apt = r.get("apt")
        if apt:
            if apt["to_install"]:
                out.append(f"  apt: installs {apt['package']} ({len(apt['install'])} packages, simulated)")
            else:
                out.append(f"  apt: nothing to install ({apt['package']} is installed)")
        wheels = r.get("wheels")
        if wheels:
            size = f", {_size(wheels['bytes'])}" if wheels.get("bytes") is not None else ""
            out.append(f"  wheels: {wheels['count']} distributions resolved{size}")
        out += [f"  space: {line}" for line in r.get("space") or []]
        if r["path"] in (FULL, STAGED):
            restarts_ = r.get("restarts") or {}
            if restarts_:
                out.append(
                    f"  restarts: at most {restarts_['upgrade']} for the upgrade,"
                    f" {restarts_['rollback']} more for a rollback"
                )
            if r.get("out_of_service_s"):
                took = format_duration(r["out_of_service_s"])
                out.append(f"  out of service: about {took} (from {r['estimate_from']})")
            else:
                out.append("  out of service: not known before a first run")
            drain = r["drain"]
            undrain = drain["undrain"] or "none"
            hooks = f"{drain['drain']}, undrain: {undrain}" if drain["drain"] else "none"
            out.append(f"  drain: {hooks}")
        out += [f"  warning: {w}" for w in r.get("warnings") or [] if r["path"] in (FULL, STAGED)]
    out.append("")
    out.append("Summary:")
    out += [f"  {line}" for line in (plan.get("summary") or {}).get("lines") or []]
    return "\n".join(out) + "\n"
