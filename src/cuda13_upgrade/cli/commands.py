"""The subcommands of ``cuda13-upgrade``, end to end, and the exit status they end with.

:func:`run_command` runs a playbook subcommand (the playbook, ``run.json``, the
ansible log, the fleet report); :func:`report_command`, :func:`status_command`
and :func:`plan_command` the others; :func:`confirm_command` asks before a
``rollout`` or ``rollback`` changes hosts. :func:`exit_status` is the status a
script acts on.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from cuda13_upgrade import notify, reportfiles
from cuda13_upgrade.cli.parser import COMMANDS, CONFIRMED, Command, Options, default_run_id, playbook_path
from cuda13_upgrade.cli.runner import (
    RunResult,
    ansible_flags,
    ask_secrets,
    host_key_checking_off,
    host_key_warning,
    host_outcomes,
    run_playbook,
)
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.hostresult import NOT_REACHED, load_run_record, result_status
from cuda13_upgrade.progress import extra_var, natural_key
from cuda13_upgrade.redact import redact
from cuda13_upgrade.summary import fleet_summary

EXIT_OK = 0
EXIT_HOSTS = 1
EXIT_USAGE = 2
EXIT_ANSIBLE = 3
#: The breaker across runs is tripped: the rollout was refused before any change (docs/cli.md).
EXIT_BREAKER = 4
#: SIGINT (Ctrl-C); SIGTERM and SIGHUP end with 128 + their number too: 143 and 129.
EXIT_INTERRUPTED = 130


def interrupted_status(signum: int | None) -> int:
    """The exit status after an interrupted run: 128 + the signal's number (SIGINT 130,
    SIGTERM 143, SIGHUP 129), the shells' convention; 130 when the signal is not known."""
    return 128 + signum if signum else EXIT_INTERRUPTED


def check_target_hosts(options: Options) -> list[str]:
    """The hosts of the target group (:func:`target_group`) in ``options``' inventory, before
    any playbook runs, so that every command ends the same way on a group without hosts:
    :class:`UsageError` (exit status 2) with the message of ``playbooks/start.yml``
    (:func:`cuda13_upgrade.fleetstate.inventory_hosts`). ``--limit`` is not applied here
    (ansible-playbook says itself when it matches nothing)."""
    from cuda13_upgrade import fleetstate

    assert options.inventory is not None
    os.environ["ANSIBLE_CONFIG"] = str(options.home / "ansible.cfg")
    return fleetstate.inventory_hosts(options.inventory, target_group(options.extra_vars))


def breaker_refused(run_dir: Path, started: float) -> dict[str, Any] | None:
    """The breaker's refusal of this run (``not_started.json`` written since ``started``, a Unix
    time, with ``before_any_change``: only the tripped breaker writes it, steps/fleet.py), else None."""
    path = run_dir / "not_started.json"
    try:
        if path.stat().st_mtime < started:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("before_any_change") else None


def exit_status(
    rows: Iterable[Mapping[str, Any]],
    runner_rc: int | None,
    ok_statuses: Iterable[str] = ("kept",),
) -> int:
    """The exit status of a run from its fleet report rows and ansible-playbook's status.

    ``rows``: :func:`cuda13_upgrade.summary.summary_rows` rows (only ``status``
    is read), one per host of the run. ``runner_rc``: ansible-playbook's exit
    status (None: unknown, taken as 0). ``ok_statuses``: the statuses of a
    host that did what the command is for (``kept`` for a rollout,
    ``passed`` for preflight, ``rolled_back`` for a rollback).

    Returns 3 when no host has a result ("not reached" everywhere, or no
    hosts) and ansible-playbook failed: it failed before any host (syntax
    error, a failed control-node play); 1 when there is no host at all, when
    a host's status is not in ``ok_statuses`` (failed, rolled back,
    unreachable, not reached), or when every host is fine but
    ansible-playbook still failed (e.g. in the report play); else 0.
    """
    ok = set(ok_statuses)
    statuses = [str(row.get("status")) for row in rows]
    rc = runner_rc or 0
    if all(s == NOT_REACHED for s in statuses) and rc != 0:
        return EXIT_ANSIBLE
    if not statuses or any(s not in ok for s in statuses) or rc != 0:
        return EXIT_HOSTS
    return EXIT_OK


def recorded_outcomes(
    run_dir: Path, hosts: list[str], outcomes: Mapping[str, dict[str, Any]], started: float
) -> dict[str, dict[str, Any]]:
    """``run.json``'s ``outcomes``: per host of the run, ``{"status": S}`` from the
    result file it wrote during this run (:func:`cuda13_upgrade.hostresult.result_status`:
    ``"kept"``, ``"already kept"``, ``"rolled_back"`` ...), else what the runner saw
    of it (:func:`cuda13_upgrade.cli.runner.host_outcomes`: failed, unreachable, or the
    command's status for a host without a result, e.g. "not reached"). A result file
    that cannot be read leaves the runner's outcome."""
    recorded: dict[str, dict[str, Any]] = {}
    for host in hosts:
        path = run_dir / host / "result.json"
        try:
            if path.stat().st_mtime >= started:
                result = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(result, dict):
                    recorded[host] = {"status": result_status(result)}
                    continue
        except (OSError, ValueError):
            pass
        if host in outcomes:
            recorded[host] = outcomes[host]
    return recorded


def _tail(text: str, lines: int = 25) -> str:
    return redact("\n".join(text.rstrip().splitlines()[-lines:]))


def _run_hosts(run_dir: Path, run: RunResult, started: float) -> list[str]:
    """Hosts of this run, in natural order (``gpu-node-2`` before ``gpu-node-10``):
    those the runner saw in a play not only for localhost (the rollout's
    preflight play sees every host of the run, also those of batches it will
    not reach), those with a result file written during this run, and those a
    ``not_started.json`` written during this run names (a run the breaker refused
    runs its refusal once, on the first host: the runner saw that one only).

    ``summary.json`` is not a source: ``playbooks/report.yml`` lists the whole
    target group there when the run did not record its hosts (``cuda13_run_hosts``).
    """
    hosts = list(run.hosts)
    for path in sorted(run_dir.glob("*/result.json")):
        if path.stat().st_mtime >= started:
            hosts.append(path.parent.name)
    not_started = run_dir / "not_started.json"
    try:
        if not_started.stat().st_mtime >= started:
            named = json.loads(not_started.read_text(encoding="utf-8")).get("hosts") or []
            hosts += [str(h) for h in named if isinstance(h, str)]
    except (OSError, ValueError, AttributeError):
        pass  # no refusal this run, or a damaged record: the runner's hosts stand
    return sorted(set(hosts), key=natural_key)


def run_command(options: Options, stream: TextIO | None = None) -> int:
    """Run a playbook subcommand end to end: the playbook, ``run.json``,
    the ansible log, the fleet report; returns the exit status."""
    out = stream if stream is not None else sys.stdout
    command = COMMANDS[options.command]
    playbook = playbook_path(options)
    assert options.inventory is not None and options.run_id is not None
    run_dir = options.reports_dir / options.run_id
    print(
        f"cuda13-upgrade {command.name}: {playbook.name} on {options.inventory}"
        + (f" --limit {options.limit}" if options.limit else "")
        + (" (check mode)" if options.check else "")
        + f", run {options.run_id}",
        file=out,
        flush=True,
    )
    if not _confirmed(options):  # confirm_command checked the group already
        check_target_hosts(options)
    host_keys_off = host_key_checking_off()
    if host_keys_off:
        print(host_key_warning(host_keys_off), file=sys.stderr, flush=True)
    # asked once: a confirmation's plan run (confirm_command) asked already
    options.passwords = options.passwords or ask_secrets(options)
    started = datetime.now(UTC).timestamp() - 1.0
    run = run_playbook(
        playbook,
        options.inventory,
        home=options.home,
        run_id=options.run_id,
        reports_dir=options.reports_dir,
        limit=options.limit,
        extra_vars=options.extra_vars,
        check=options.check,
        flags=ansible_flags(options),
        passwords=options.passwords,
        stream=out,
    )
    reportfiles.private_dir(run_dir)
    log = run_dir / f"ansible-{command.name}.log"
    reportfiles.write_text(log, run.stdout + (("\n" + run.stderr) if run.stderr else ""))
    hosts = _run_hosts(run_dir, run, started)
    record = {
        "command": command.name,
        "playbook": str(playbook),
        "inventory": options.inventory,
        "limit": options.limit,
        "check": options.check,
        "runner_rc": run.rc,
        "runner_status": run.status,
        "ok_status": command.ok_status,
        "hosts": hosts,
        "outcomes": recorded_outcomes(run_dir, hosts, host_outcomes(run, command), started),
        "started_at": datetime.fromtimestamp(started + 1.0, UTC).isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "batches": run.batches,
        # cuda13_notify: each event told, to how many webhooks, and what failed (notifications.json)
        "notifications": notify.run_record(run_dir),
        "host_key_checking": (
            {"off": True, "by": f"{host_keys_off} (the caller's environment)"}
            if host_keys_off
            else {"off": False, "by": ""}
        ),
    }
    if run.signum is not None:
        import signal

        record["interrupted_by"] = signal.Signals(run.signum).name
    reportfiles.write_text(run_dir / "run.json", json.dumps(redact(record), indent=2) + "\n")
    if not (run.interrupted or run.status == "canceled"):  # after an interrupt: _after_interrupt
        _tell_end(options, command, run_dir)
    if run.interrupted or run.status == "canceled":
        if run.doing:
            print("interrupted; what each host was doing:", file=sys.stderr)
            print("\n".join(f"  {line}" for line in run.doing), file=sys.stderr)
        return _after_interrupt(options, command, run, hosts, log, out)
    rows = _show_report(run_dir, hosts, out) if hosts else []
    status = exit_status(rows, run.rc, command.ok_statuses)
    refused = breaker_refused(run_dir, started) if command.name in _FLEET_NIGHTS else None
    if refused is not None and status != EXIT_OK:
        print(
            f"The breaker refused the {_NIGHT_NAMES[command.name]}; no host was changed"
            f" (exit status {EXIT_BREAKER}): "
            f"{refused.get('reason')} (full output: {log})",
            file=sys.stderr,
        )
        return EXIT_BREAKER
    if status == EXIT_ANSIBLE:
        print(
            f"ansible-playbook failed (rc {run.rc}) before any host had a result:\n"
            f"{_tail(run.stderr or run.stdout)}\n(full output: {log})",
            file=sys.stderr,
        )
    elif not hosts:
        print(f"no host of the inventory was targeted (full output: {log})", file=sys.stderr)
    return status


#: Commands whose playbooks take the hosts' locks (action cuda13_lock).
_LOCKING = ("rollout", "driver", "stage", "rollback")

#: Commands that run the rollout's fleet night (playbooks/upgrade.yml: batches, budget, window,
#: breaker, notifications).
_FLEET_NIGHTS = ("rollout", "driver")
#: How the messages name each of them.
_NIGHT_NAMES = {"rollout": "rollout", "driver": "driver window"}


def _after_interrupt(
    options: Options, command: Command, run: RunResult, hosts: list[str], log: Path, out: TextIO
) -> int:
    """After Ctrl-C, SIGTERM or SIGHUP: run ``playbooks/interrupted.yml`` on the run's hosts
    (each host's step recorded in its result, this run's locks released), print
    where each host was, and return :func:`interrupted_status` (130, 143, 129)."""
    assert options.inventory is not None and options.run_id is not None
    steps = {h: run.steps.get(h, "not started") for h in hosts}
    cleanup = options.home / "playbooks" / "interrupted.yml"
    released = ""
    if command.name in _LOCKING and hosts and not options.check and cleanup.is_file():
        print("== Recording the interrupted hosts and releasing their locks", file=out, flush=True)
        extra = json.dumps({"cuda13_interrupted_steps": steps, "cuda13_interrupted_by": _signal_name(run)})
        done = run_playbook(
            cleanup,
            options.inventory,
            home=options.home,
            run_id=options.run_id,
            reports_dir=options.reports_dir,
            limit=",".join(hosts),
            extra_vars=[*options.extra_vars, extra],
            # The operator's tags would skip the clean-up's own tasks.
            flags=ansible_flags(replace(options, tags=[], skip_tags=[])),
            passwords=options.passwords,
            stream=out,
        )
        released = (
            " Their locks are released."
            if done.rc == 0
            else f" Releasing their locks failed (rc {done.rc}): see the lines above."
        )
    _tell_end(options, command, options.reports_dir / options.run_id)
    where = "; ".join(f"{h} during {s}" for h, s in steps.items()) or "before any host"
    print(
        f"interrupted: {where}.{released} Run the same command again to continue (Ansible's output: {log})",
        file=sys.stderr,
    )
    return interrupted_status(run.signum)


def _tell_end(options: Options, command: Command, run_dir: Path) -> bool:
    """The run's end to ``cuda13_notify``'s webhooks when the playbook stopped before its report
    play told it: a rollout whose start was told (``notifications.json``) and whose end was not
    (the preflight refused a host, the run was interrupted, Ansible failed). Runs
    ``playbooks/report.yml`` once more, quietly (it reads the webhooks from the inventory, writes
    the summary, closes the estimate and tells the end) after ``run.json`` is written, whose hosts'
    outcomes the end's counts take, then records the sends in ``run.json``. Returns whether it
    ran; never raises for the playbook's failure (its output is in ``ansible-report.log``)."""
    if command.name not in _FLEET_NIGHTS or options.check:
        return False
    if options.inventory is None or options.run_id is None:
        return False
    state = notify.load_state(run_dir)
    if not state.get("started") or state.get("ended"):
        return False
    import io

    try:
        hosts = [h for h in load_run_record(run_dir).get("hosts") or [] if isinstance(h, str)]
    except ValueError:
        hosts = []  # a damaged run.json: the report takes the target group
    told = run_playbook(
        options.home / "playbooks" / "report.yml",
        options.inventory,
        home=options.home,
        run_id=options.run_id,
        reports_dir=options.reports_dir,
        # The report's play runs on localhost, which a --limit of hosts leaves out.
        limit=f"{options.limit},localhost" if options.limit else None,
        # The run's hosts (run.json), not the whole target group.
        extra_vars=[*options.extra_vars, *([json.dumps({"cuda13_run_hosts": hosts})] if hosts else [])],
        # The operator's tags would skip the report's own task.
        flags=ansible_flags(replace(options, tags=[], skip_tags=[])),
        passwords=options.passwords,
        stream=io.StringIO(),
    )
    reportfiles.write_text(
        run_dir / "ansible-report.log", told.stdout + (("\n" + told.stderr) if told.stderr else "")
    )
    try:  # run.json, written before, with the end told
        recorded = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        recorded["notifications"] = notify.run_record(run_dir)
        reportfiles.write_text(run_dir / "run.json", json.dumps(redact(recorded), indent=2) + "\n")
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # run.json keeps what it said; notifications.json has the end
    return True


def _signal_name(run: RunResult) -> str:
    """What interrupted ``run``, as the host's record says it: "Ctrl-C" for SIGINT, else the
    signal's name ("SIGTERM", "SIGHUP")."""
    import signal

    if run.signum is None or run.signum == signal.SIGINT:
        return "Ctrl-C"
    return signal.Signals(run.signum).name


def _show_report(run_dir: Path, hosts: list[str] | None, out: TextIO) -> list[dict[str, Any]]:
    summary = fleet_summary(run_dir, hosts)
    print("", file=out)
    print(summary["markdown"], file=out, end="")
    files = summary["files"]
    print(f"\nreport: {files['markdown']}", file=out)
    print(f"        {files['json']}", file=out)
    if files.get("metrics"):
        print(f"        {files['metrics']}", file=out)
    if files["chart"]:
        print(f"        {files['chart']}", file=out)
    else:
        print(f"        ({summary.get('chart_error') or summary.get('chart_note')})", file=out)
    print(f"run:    {run_dir / 'run.json'}", file=out, flush=True)
    return summary["rows"]


def latest_run(reports_dir: Path) -> Path | None:
    """The run directory under ``reports_dir`` written last (by the newest
    mtime of its ``run.json``, ``summary.json`` or result files), or None."""
    best: tuple[float, str] | None = None
    found: Path | None = None
    if not reports_dir.is_dir():
        return None
    for run in reports_dir.iterdir():
        if not run.is_dir():
            continue
        files = [run / "run.json", run / "summary.json", *run.glob("*/result.json")]
        times = [f.stat().st_mtime for f in files if f.exists()]
        if times and (best is None or (max(times), run.name) > best):
            best, found = (max(times), run.name), run
    return found


def report_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``report`` subcommand: rewrite and print the report of a run;
    the exit status is :func:`exit_status` of its rows, with the ansible
    status and command recorded in ``run.json`` (rollout's when absent)."""
    out = stream if stream is not None else sys.stdout
    if options.run_id is not None:
        run_dir = options.reports_dir / options.run_id
        if not run_dir.is_dir():
            raise UsageError(f"--run-id {options.run_id}: no such run under {options.reports_dir}")
    else:
        latest = latest_run(options.reports_dir)
        if latest is None:
            raise UsageError(
                f"no runs under {options.reports_dir} (--reports-dir); pass --run-id or --reports-dir"
            )
        run_dir = latest
    record = load_run_record(run_dir)
    rows = _show_report(run_dir, None, out)
    command = COMMANDS.get(str(record.get("command")), COMMANDS["rollout"])
    ok = record.get("ok_status")
    return exit_status(rows, record.get("runner_rc"), [ok, *command.also_ok] if ok else command.ok_statuses)


def target_group(extra_vars: Iterable[str]) -> str:
    """The hosts a run acts on: ``cuda13_target_hosts`` as ``-e`` gives it, else
    ``blackwell``. The playbooks' plays take ``hosts: "{{ cuda13_target_hosts |
    default('blackwell') }}"``, a play keyword Ansible templates without a host,
    so only an extra variable changes it."""
    value = extra_var(extra_vars, "cuda13_target_hosts")
    return str(value) if value else "blackwell"


def status_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``status`` subcommand: each host of the target group with its state
    from the newest record under the reports directory
    (:func:`cuda13_upgrade.fleetstate.host_states`), as a table or as JSON
    (``{"inventory", "group", "reports_dir", "hosts": [...]}``). Reads the
    inventory and the reports, nothing else; returns 0."""
    from cuda13_upgrade import fleetstate

    out = stream if stream is not None else sys.stdout
    assert options.inventory is not None
    group = target_group(options.extra_vars)
    # The inventory plugins the runs enable (the checkout's ansible.cfg, as runner_envvars sets it).
    os.environ["ANSIBLE_CONFIG"] = str(options.home / "ansible.cfg")
    hosts = fleetstate.inventory_hosts(options.inventory, group)
    states = fleetstate.host_states(options.reports_dir, hosts)
    running = running_estimate(options.reports_dir)
    if options.json_output:
        document = {
            "inventory": options.inventory,
            "group": group,
            "reports_dir": str(options.reports_dir),
            "hosts": states,
        }
        if running:
            document["estimate"] = running
        print(json.dumps(document, indent=2), file=out)
    else:
        text = fleetstate.render_text(
            states, inventory=options.inventory, group=group, reports_dir=options.reports_dir
        )
        print(text, file=out, end="")
        if running:
            print(running["line"], file=out)
    return EXIT_OK


def running_estimate(reports_dir: Path) -> dict[str, Any] | None:
    """The estimate of the newest run still going (its ``estimate.json``, no ``run.json`` yet:
    :mod:`cuda13_upgrade.estimate`, updated by each batch gate): ``{"run_id", "estimated_end",
    "updated_at", "left_hosts", "line"}``, the line ``"run R: estimated end 03:20 UTC (updated
    02:41 UTC, after 2 of 5 batches)"``; None when there is none."""
    from cuda13_upgrade import estimate

    found = [p.parent for p in reports_dir.glob("*/estimate.json")] if reports_dir.is_dir() else []
    newest = max(found, key=lambda run: ((run / "estimate.json").stat().st_mtime, run.name), default=None)
    if newest is None or (newest / "run.json").exists():
        return None
    record = estimate.load(newest)
    if not record.get("estimated_end"):
        return None
    end, updated = str(record["estimated_end"]), str(record.get("updated_at") or "")
    done, total = len(record.get("done") or []), len(record.get("batches") or [])
    line = f"run {newest.name}: estimated end {end[11:16]} UTC"
    line += f" (updated {updated[11:16]} UTC, after {done} of {total} batches)" if updated else ""
    left = list(record.get("left_hosts") or [])
    if left:
        line += f"; expected not to start in this run: {', '.join(left)}"
    return {
        "run_id": newest.name,
        "estimated_end": end,
        "updated_at": updated,
        "left_hosts": left,
        "line": line,
    }


def run_plan(options: Options, out: TextIO) -> tuple[int, dict[str, Any] | None]:
    """Run ``playbooks/plan.yml`` (read-only) for ``options``' inventory, limit and
    extra variables, with its run id, and read the plan it wrote
    (``<reports>/<run id>/plan.json``, :func:`cuda13_upgrade.plan.rollout_plan`).

    Returns ``(status, plan)``: 0 with the plan when no host is refused nor
    unreachable, 1 with the plan when one is, 3 and None when the playbook wrote
    no plan (its output's tail is printed, the whole of it is in
    ``ansible-plan.log``), 128 + the signal and None when it was interrupted.
    Raises :class:`UsageError` when the target group has no hosts
    (:func:`check_target_hosts`).
    """
    assert options.inventory is not None
    run_id = options.run_id or default_run_id()
    own = options.home / str(COMMANDS["plan"].playbook)
    playbook = playbook_path(options) if options.command == "plan" else own
    check_target_hosts(options)
    host_keys_off = host_key_checking_off()
    if host_keys_off and options.command == "plan":  # a rollout's own run warns after its plan
        print(host_key_warning(host_keys_off), file=sys.stderr, flush=True)
    options.passwords = options.passwords or ask_secrets(options)
    run = run_playbook(
        playbook,
        options.inventory,
        home=options.home,
        run_id=run_id,
        reports_dir=options.reports_dir,
        limit=options.limit,
        extra_vars=options.extra_vars,
        flags=ansible_flags(options),
        passwords=options.passwords,
        stream=out,
    )
    run_dir = options.reports_dir / run_id
    reportfiles.private_dir(run_dir)
    log = run_dir / "ansible-plan.log"
    reportfiles.write_text(log, run.stdout + (("\n" + run.stderr) if run.stderr else ""))
    if run.interrupted:
        print(
            f"interrupted; no plan was made and nothing was changed (Ansible's output: {log})",
            file=sys.stderr,
        )
        return interrupted_status(run.signum), None
    try:
        the_plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        the_plan = None
    if run.rc != 0 or not isinstance(the_plan, dict):
        print(
            f"the plan could not be made (ansible-playbook rc {run.rc}):\n"
            f"{_tail(run.stderr or run.stdout)}\n(full output: {log})",
            file=sys.stderr,
        )
        return EXIT_ANSIBLE, None
    summary = the_plan["summary"]
    return (EXIT_HOSTS if summary["refused"] or summary.get("unreachable") else EXIT_OK), the_plan


def plan_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``plan`` subcommand: :func:`run_plan`, then the plan as text
    (:func:`cuda13_upgrade.plan.render_text`) or, with ``--json``, as JSON on
    stdout (the progress then goes to stderr). Returns :func:`run_plan`'s status."""
    from cuda13_upgrade import plan

    out = stream if stream is not None else sys.stdout
    status, the_plan = run_plan(options, sys.stderr if options.json_output else out)
    if the_plan is None:
        return status
    if options.json_output:
        print(json.dumps(the_plan, indent=2), file=out)
    else:
        print("", file=out)
        print(plan.render_text(the_plan), file=out, end="")
        print(f"\nplan: {options.reports_dir / the_plan['run_id'] / 'plan.json'}", file=out)
    return status


def _confirmed(options: Options) -> bool:
    """Whether :func:`confirm_command` asks (and so has read the target group) for ``options``."""
    return options.command in CONFIRMED and not options.yes and not options.check


def _isatty(handle: Any) -> bool:
    try:
        return bool(handle.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def ask(question: str, stdin: TextIO, out: TextIO) -> bool:
    """Ask ``question`` on the terminal; True only for an answer of "y" or "yes"."""
    print(f"{question} [y/N] ", file=out, end="", flush=True)
    answer = stdin.readline()
    if not answer:
        print("", file=out)
    return answer.strip().lower() in ("y", "yes")


def confirm_command(
    options: Options, stream: TextIO | None = None, stdin: TextIO | None = None
) -> int | None:
    """Before ``rollout`` or ``rollback`` changes hosts: show what it will do and
    ask. Returns None to go on, or the exit status to end with.

    Not asked with ``--yes``, in check mode, or for other commands. Without a
    terminal on ``stdin`` the command is refused (:class:`UsageError`: pass
    ``--yes``). ``rollout`` and ``driver`` first run the plan (``driver``: with no host to
    move, 0 and nothing asked) (:func:`run_plan`, same run id:
    ``plan.json`` stays in the run's report directory) and prints it; a plan in
    which the rollout would stop at its preflight ends here (1), nothing asked.
    ``rollback`` lists the hosts it takes with their last state
    (:func:`cuda13_upgrade.fleetstate.host_states`). Declined: 1, nothing changed.
    """
    if options.command not in CONFIRMED or options.yes or options.check:
        return None
    out = stream if stream is not None else sys.stdout
    stdin = stdin if stdin is not None else sys.stdin
    if not _isatty(stdin):
        raise UsageError(
            f"{options.command} changes hosts and asks for confirmation on a terminal, and there is none: "
            f"pass --yes to {options.command} without asking (automation), or run 'cuda13-upgrade plan' first"
        )
    assert options.inventory is not None
    if options.command in _FLEET_NIGHTS:
        from cuda13_upgrade import plan

        status, the_plan = run_plan(options, out)
        if the_plan is None:
            return status
        print("", file=out)
        print(plan.render_text(the_plan), file=out, end="")
        summary = the_plan["summary"]
        if summary["stops"]:
            print(
                f"\nThe {_NIGHT_NAMES[options.command]} would stop at its preflight; nothing was changed.",
                file=out,
            )
            return EXIT_HOSTS
        if options.command == "driver":
            ready = summary.get("driver_ready") or []
            if not ready:
                print("\nNo host's driver needs the move; nothing was changed.", file=out)
                return EXIT_OK
            question = (
                f"Move the NVIDIA driver of {len(ready)} of {summary['hosts']} hosts "
                f"({', '.join(ready)}) now? Each is drained and its service restarts on both drivers"
            )
        else:
            question = f"Roll out the CUDA 13 stack to {summary['changes']} of {summary['hosts']} hosts now?"
    else:
        from cuda13_upgrade import fleetstate

        group = target_group(options.extra_vars)
        os.environ["ANSIBLE_CONFIG"] = str(options.home / "ansible.cfg")
        hosts = fleetstate.inventory_hosts(options.inventory, group, options.limit)
        for state in fleetstate.host_states(options.reports_dir, hosts):
            print(f"  {state['host']}: {state['decision']}", file=out)
        question = (
            f"Roll back {len(hosts)} host{'' if len(hosts) == 1 else 's'} to their pre-upgrade snapshot "
            "(each host's service restarts on its old stack)?"
        )
    if ask(question, stdin, out):
        return None
    print("Not confirmed; nothing was changed.", file=out)
    return EXIT_HOSTS
