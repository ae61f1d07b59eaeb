"""Each host's state across runs, from the reports on the control node (``cuda13-upgrade status``).

Read-only. The hosts come from the inventory, parsed in this process by
ansible-core's ``InventoryManager``: no connection is opened, and no host or
group variables are loaded (a vaulted ``group_vars`` file needs no password).
A host's state is its newest record among the runs under the reports
directory (``<reports>/<run id>/<host>/result.json``, see
:mod:`cuda13_upgrade.hostresult`), or, for a host that wrote no result in a run
of ``rollout``, ``stage`` or ``rollback``, what that run's ``run.json`` says
went wrong with it (failed, unreachable). A host found in none is "never run".
Results of check-mode runs change nothing on a host and are not counted, nor is a
failure whose message says that nothing on the host was changed (a refusal: an
on-demand rollback without a drain hook, a lock held by another run, a preflight that
failed): the host keeps the state of its newest record, with a note that the later run
was refused (:func:`refusal_of`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cuda13_upgrade import hostresult, ondemand, summary
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.progress import natural_key

NEVER_RUN = "never run"

#: ``result.json``'s status -> the state ``status`` shows (an already kept host: ALREADY_KEPT).
STATE_OF_STATUS = {
    "kept": "kept",
    "rolled_back": "rolled back",
    "failed": "failed",
    "staged": "staged",
    # cuda13-upgrade driver (cuda13_upgrade.steps.result.DRIVER_KEPT, DRIVER_CURRENT)
    "driver_kept": "driver kept",
    "driver_current": "driver current",
    "interrupted": "interrupted",
    "unreachable": "unreachable",
}

#: Commands whose runs change hosts; only their ``run.json`` outcomes count.
CHANGING_COMMANDS = ("rollout", "driver", "stage", "rollback")

#: run.json outcomes that say something about a host without a result file.
_OUTCOMES = ("failed", "unreachable")

#: How a failure's message says that the run changed nothing on the host (the project's own
#: words: "Nothing was changed." in a drain refusal, "Nothing on the host was changed." elsewhere).
UNCHANGED = ("nothing was changed", "nothing on the host was changed")

#: How status names a refused run of each command.
REFUSED_RUN = {
    "rollback": "an on-demand rollback",
    "rollout": "a rollout",
    "driver": "a driver window",
    "stage": "a stage run",
}


def inventory_hosts(inventory: str, pattern: str, limit: str | None = None) -> list[str]:
    """The hosts ``pattern`` (a group or an Ansible host pattern, as a play's
    ``hosts:`` takes it) matches in ``inventory`` (a path or a host list), in
    natural order; with ``limit`` (``--limit``'s pattern), only those it also matches.

    Parsed by ansible-core's ``InventoryManager`` in this process: no
    connection, no variables loaded. Raises :class:`UsageError` when
    ansible-core cannot be imported or the pattern matches no host (with the
    message the run's start play gives).
    """
    try:
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins.loader import init_plugin_loader
        from ansible.utils.collection_loader import AnsibleCollectionConfig
    except ImportError as exc:
        raise UsageError(
            f"status reads the inventory with ansible-core, which this Python cannot import ({exc}); "
            "install it with the package's dev extra (pip install '.[dev]')"
        ) from exc
    # The collection loader resolves the FQCN plugin names ansible.cfg enables (as the CLI does).
    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()
    manager = InventoryManager(loader=DataLoader(), sources=[inventory])
    if limit:
        manager.subset(limit)
    hosts = [host.name for host in manager.get_hosts(pattern)]
    if not hosts and limit:
        raise UsageError(f"--limit {limit} leaves no host of the group '{pattern}' in {inventory}")
    if not hosts:
        raise UsageError(
            f"The inventory {inventory} has no hosts in the group '{pattern}' (cuda13_target_hosts): "
            "pass -i inventory/<your fleet> with a 'blackwell' group, or set cuda13_target_hosts with -e"
        )
    return sorted(dict.fromkeys(hosts), key=natural_key)


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def state_of(result: dict[str, Any]) -> str:
    """The state a result (``result.json``, or a run.json outcome) puts a host in:
    ``"kept"``, ``"already kept"``, ``"rolled back"``, ``"failed"``, ``"staged"``,
    ``"interrupted"``, ``"unreachable"``, else its status as written."""
    status = hostresult.result_status(result)
    return STATE_OF_STATUS.get(status, status)


def refusal_of(outcome: Any, command: Any) -> str | None:
    """The note status shows for a run of ``command`` that refused a host before any change,
    or None when ``outcome`` (the host's ``run.json`` outcome) is not such a refusal.

    A refusal is a ``failed`` outcome whose message says that nothing on the host was changed
    (:data:`UNCHANGED`): the host is as the run found it, so the run says nothing of its
    state. E.g. ``"an on-demand rollback was refused: 192.0.2.2: rollback restarts
    sglang.service on the old stack, and no drain hook ... Nothing was changed. ..."``."""
    if not isinstance(outcome, dict) or outcome.get("status") != "failed":
        return None
    error = " ".join(str(outcome.get("error") or "").split())
    if not any(words in error.lower() for words in UNCHANGED):
        return None
    return f"{REFUSED_RUN.get(str(command), f'a {command} run')} was refused: {error}"


def _records(
    run: Path, hosts: Iterable[str], refusals: dict[str, tuple[float, str]] | None = None
) -> dict[str, tuple[float, dict[str, Any], str]]:
    """Per host with a record in this run directory: (time, record, source file).

    ``refusals``, when given, receives per host that this run refused before any change
    (:func:`refusal_of`) ``(time, note)``; such a host has no record here.
    Raises ``ValueError`` naming a result file that is not a JSON object."""
    found: dict[str, tuple[float, dict[str, Any], str]] = {}
    try:
        record = hostresult.load_run_record(run)
    except ValueError:
        record = {}
    outcomes = record.get("outcomes") if isinstance(record.get("outcomes"), dict) else {}
    counts = record.get("command") in CHANGING_COMMANDS and not record.get("check")
    # A run refused before any change (the breaker, summary.fleet_summary) changed no host.
    try:
        not_started = json.loads((run / "not_started.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        not_started = {}
    if isinstance(not_started, dict) and not_started.get("before_any_change"):
        counts = False
    for host in hosts:
        path = run / host / "result.json"
        if path.is_file():
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not a JSON result: {exc}") from exc
            if not isinstance(result, dict):
                raise ValueError(f"{path} is not a JSON result: not an object")
            # A check run, or a rollback that found no snapshot, changed nothing on the host.
            if result.get("check_mode") or result.get("status") == ondemand.NOTHING_TO_ROLL_BACK:
                continue
            when = _epoch(result.get("finished_at")) or path.stat().st_mtime
            found[host] = (when, {**result, "host": host}, str(path))
            continue
        outcome = outcomes.get(host)
        if counts and isinstance(outcome, dict) and outcome.get("status") in _OUTCOMES:
            when = _epoch(record.get("finished_at")) or (run / "run.json").stat().st_mtime
            note = refusal_of(outcome, record.get("command"))
            if note is not None:
                if refusals is not None:
                    refusals[host] = (when, note)
                continue
            found[host] = (when, {**outcome, "host": host}, str(run / "run.json"))
    return found


def host_states(reports_dir: str | Path, hosts: list[str]) -> list[dict[str, Any]]:
    """Each host's state from its newest record under ``reports_dir``, in the order given.

    Returns one dict per host: ``{"host", "state", "decision", "run_id",
    "finished_at", "reason", "source"}``: ``state`` one of the
    :func:`state_of` values or ``"never run"``; ``decision`` the fleet report's
    phrase for it (:func:`cuda13_upgrade.summary.decision_text`, e.g. "rolled
    back at verify", "already kept (verified in run R)"); ``run_id`` the run
    directory's name; ``finished_at`` ISO 8601 (the record's own, else the file's
    modification time, UTC); ``source`` the file read. The newest record is
    the one with the latest time (the run id breaks ties). None for a host never
    run. ``note``: a run newer than that record that refused the host before any change
    (:func:`refusal_of`), ``"<note> (run R, finished F)"``, else None: the host keeps its state.
    Raises ``ValueError`` naming a result file that is not JSON.
    """
    newest: dict[str, tuple[float, str, dict[str, Any], str]] = {}
    refused: dict[str, tuple[float, str, str]] = {}
    root = Path(reports_dir)
    runs = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for run in runs:
        refusals: dict[str, tuple[float, str]] = {}
        for host, (when, result, source) in _records(run, hosts, refusals).items():
            if host not in newest or (when, run.name) > newest[host][:2]:
                newest[host] = (when, run.name, result, source)
        for host, (when, note) in refusals.items():
            if host not in refused or (when, run.name) > refused[host][:2]:
                refused[host] = (when, run.name, note)
    states = []
    for host in hosts:
        note = None
        if host in refused and (host not in newest or refused[host][:2] > newest[host][:2]):
            when, run_id, text = refused[host]
            note = f"{text} (run {run_id}, finished {_iso(when)})"
        if host not in newest:
            states.append(
                {"host": host, "state": NEVER_RUN, "decision": NEVER_RUN, "run_id": None,
                 "finished_at": None, "reason": None, "source": None, "note": note}
            )  # fmt: skip
            continue
        when, run_id, result, source = newest[host]
        row = summary.summary_rows([result])[0]
        states.append(
            {
                "host": host,
                "state": state_of(result),
                "decision": row["decision"],
                "run_id": run_id,
                "finished_at": result.get("finished_at") or _iso(when),
                "reason": row.get("reason"),
                "source": source,
                "note": note,
            }
        )
    return states


def counts_text(states: list[dict[str, Any]]) -> str:
    """``"2 kept, 1 rolled back, 1 never run"``: hosts per state, states in first-seen order."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state["state"]] = counts.get(state["state"], 0) + 1
    return ", ".join(f"{n} {name}" for name, n in counts.items())


def render_text(states: list[dict[str, Any]], *, inventory: str, group: str, reports_dir: str | Path) -> str:
    """A Markdown table of :func:`host_states`, headed by the inventory, the
    group and the reports directory, closed by :func:`counts_text`. A host a later run
    refused before any change keeps its state, e.g. ``"kept; an on-demand rollback was
    refused (below)"``, and the refusal is listed under the table with its run and message."""
    lines = [
        f"cuda13-upgrade status: {len(states)} hosts of '{group}' in {inventory}, reports in {reports_dir}",
        "",
        "| host | state | run | finished |",
        "| --- | --- | --- | --- |",
    ]
    notes = []
    for s in states:
        refused = s.get("note", "").split(": ", 1)[0] if s.get("note") else ""
        decision = s["decision"] + (f"; {refused} (below)" if refused else "")
        cells = [s["host"], summary._cell(decision), s["run_id"] or "-", s["finished_at"] or "-"]
        lines.append("| " + " | ".join(cells) + " |")
        if s.get("note"):
            notes.append(f"- {s['host']}: {s['note']}")
    if notes:
        lines += ["", "Runs refused before any change (each host kept the state above):", *notes]
    lines += ["", counts_text(states)]
    return "\n".join(lines) + "\n"
