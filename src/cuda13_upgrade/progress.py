"""Live progress of a run, driven by ansible-runner events.

:class:`RunProgress` is an ansible-runner ``event_handler``. It follows each
host's step and draws, on a terminal, a live view (``rich``): the rollout on
top (batch k of n, hosts kept / rolled back / failed / running / waiting /
not reached, elapsed time), then one row per host of the current batch (its
step, how long the step has run, the task, the last trial's tok/s while it
measures). Without a terminal (CI, a log file, AWX) it prints timestamped
lines instead: one when a step starts, one when it ends with its duration,
and a heartbeat line every :data:`HEARTBEAT_S` seconds of a step that runs
longer. Failed tasks are printed at once with their message in both modes
(:class:`Progress`, which this class extends).

Where the steps come from: each step of a host's upgrade is one task calling
an action plugin (``roles/upgrade_host/tasks/main.yml``), so a task of
:data:`STEP_ACTIONS` starting on a host starts its step, unless the task is
skipped (ansible-runner's ``runner_on_start`` comes before the task's ``when``;
the step begins at the start's time once another event of the task, or
:data:`STARTING_S`, has passed without a skip); the drain and undrain
steps begin with ``cuda13_step`` and end with the operator's hooks, so the host's
run record (the fact ``cuda13_host_run``, in each step's result) names them.
Plays without steps (preflight, verify) take the role, task file or task as the
step. The last trial's tok/s comes from the line the measuring steps print for
each run of trials (:func:`trial_of_line`). A host's final state comes from the
``cuda13_result`` fact (action ``cuda13_result``) or the run's final stats. The
batches of a serial play are its repeated ``playbook_on_play_start`` events, and
their number is the run's printed batch plan (the ``cuda13_fleet`` fact of
``playbooks/start.yml``; before it, :func:`cuda13_upgrade.batches.batch_sizes`).

Times are the events' ``created`` stamps (UTC, as ansible-runner writes
them), so a recorded run renders exactly as it did live.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from cuda13_upgrade import batches
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.hostresult import NOT_REACHED
from cuda13_upgrade.redact import redact_text
from cuda13_upgrade.steps.host import RUN_FACT, STEPS
from cuda13_upgrade.summary import format_duration

#: The role that walks a host through its upgrade (roles/upgrade_host/tasks/main.yml).
HOST_ROLE = "upgrade_host"

#: The step of a host's upgrade each action plugin runs (action_plugins/cuda13_*.py).
STEP_ACTIONS = STEPS


_TRIAL_LINE = re.compile(
    r"^(?P<host>\S+): (?P<profile>\S+) \((?P<phase>\w+)\) trial (?P<n>\d+): (?P<tok_s>[0-9.]+) tok/s$"
)


#: The batch gate's lines while it waits for Prometheus's alerts (cuda13_upgrade.steps.fleet,
#: ``_hold_for_alerts``): said at once, before the batch's hosts begin.
_ALERT_GATE_LINE = re.compile(
    r"^(the batch .+ waits: \d+ active alerts? \("
    r"|the alerts cleared after \d+ s: the batch "
    r"|Prometheus cannot be asked for its alerts \(.*on_unreachable is proceed: the batch )"
)


def alert_gate_line(line: str) -> bool:
    """Whether ``line`` is the batch gate's word on Prometheus's alerts (``"the batch gpu-node-02
    waits: 1 active alert (Prometheus http://127.0.0.1:9090, cuda13_block_on_alerts): ..."``)."""
    return bool(_ALERT_GATE_LINE.match(line.strip()))


def trial_of_line(line: str) -> tuple[str, float] | None:
    """``(host, tok/s)`` of a measuring step's trial line (``"gpu-node-01: plain (candidate) trial 7:
    96.1 tok/s"``, cuda13_upgrade.actionbase.trial_line), else None."""
    match = _TRIAL_LINE.match(line.strip())
    return (match["host"], float(match["tok_s"])) if match else None


def run_step(facts: Mapping[str, Any]) -> str | None:
    """The step the host's run record in a result's facts says the host is in, or None."""
    record = facts.get(RUN_FACT)
    steps = record.get("steps") if isinstance(record, Mapping) else None
    if isinstance(steps, list) and steps and isinstance(steps[-1], Mapping):
        return str(steps[-1].get("step") or "") or None
    return None


_HOST_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")

#: Task actions that do not change or check anything a user follows: a step of
#: only these is not printed (a failure of one always is).
_QUIET_ACTIONS = {
    "set_fact",
    "debug",
    "assert",
    "meta",
    "include_tasks",
    "import_tasks",
    "include_role",
    "import_role",
    "include_vars",
    "set_stats",
    # A role's arguments checked (meta/argument_specs.yml), and the rollout's gates on the
    # control node (action cuda13_fleet, delegated from the batch's first host).
    "validate_argument_spec",
    "cuda13_fleet",
}

# --- per-step lines --------------------------------------------------------------------------


@dataclass
class _Step:
    key: tuple[str, str]
    label: str
    state: str = "skipped"  # skipped < ok < changed; "failed" once printed
    loud: bool = False  # something other than set_fact/debug/... ran


@dataclass
class HostOutcome:
    """What the runner saw of one host: ``failed``/``unreachable`` from the
    final stats, with the last failed task (play, role, task, message)."""

    failed: bool = False
    unreachable: bool = False
    play: str | None = None
    role: str | None = None
    task: str | None = None
    message: str | None = None
    #: The upgrade step the host was in (its run record's), if any.
    step: str | None = None


def _action(event_data: Mapping[str, Any]) -> str:
    return str(event_data.get("task_action") or "").rsplit(".", 1)[-1]


#: The prefix ansible-core 2.19 puts before every task error ("Task failed: Failed to
#: connect to the host via ssh: ..."); the message after it is the one that says what failed.
_TASK_FAILED = "Task failed: "


def _message(res: Any) -> str:
    """A failed or unreachable task's message, on one line.

    A looped task's own ``msg`` says only "All items completed" (an item
    unreachable; ansible-core's ``TaskExecutor._run_loop``) or "One or more
    items failed": the message is then the first such item's, which for an
    unreachable host is the connection's own error, e.g. "Failed to connect
    to the host via ssh: ssh: connect to host 10.0.0.5 port 22: Connection
    refused" (ansible/ansible#32859; tests/fixtures/runner-events/unreachable.jsonl)."""
    if not isinstance(res, Mapping):
        return str(res or "")
    items = [i for i in res.get("results") or [] if isinstance(i, Mapping)]
    for key in ("unreachable", "failed"):
        if res.get(key):
            item = next((i for i in items if i.get(key) and i.get("msg")), None)
            if item is not None:
                res = item
                break
    msg = str(res.get("msg") or "").strip()
    if msg.startswith(_TASK_FAILED):
        msg = msg[len(_TASK_FAILED) :]
    parts = [msg]
    stderr = str(res.get("stderr") or res.get("module_stderr") or "").strip()
    if stderr:
        parts.append(stderr.splitlines()[-1])
    # Whole: a refusal's remedy is at its end (the terminal wraps a long line).
    return " ".join(" ".join(p.split()) for p in parts if p)


class Progress:
    """An ansible-runner ``event_handler`` that prints one line per host and step.

    A step is a role (labelled with the ``include_role`` task that started it,
    when there is one), a task file included from a playbook, or a playbook
    task. A step's line comes when the host moves on to its next step:
    ``<host>: <step> ... ok`` or ``changed``; steps that only set facts or
    were skipped are not printed. A failed or unreachable task is printed at
    once with its message. Plays print a header. Hosts of plays that target
    only ``localhost`` are not hosts of the run (:attr:`hosts`).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.hosts: list[str] = []
        self.outcomes: dict[str, HostOutcome] = {}
        self.stats: dict[str, Any] = {}
        self._steps: dict[str, _Step] = {}
        self._included: dict[str, str] = {}
        #: ansible-playbook's pid, from the events (None until the first one).
        self.pid: int | None = None
        #: Per host, the step of its last event (what an interrupted run was doing).
        self.last_step: dict[str, str] = {}
        #: Per host, the upgrade step it was in (its run record's).
        self.upgrade_step: dict[str, str] = {}
        #: Per host, the step of a step action that has started on it (runner_on_start comes before
        #: the task's ``when`` is evaluated): its step once the task's next event is not a skip.
        self._starting: dict[str, str] = {}

    def __call__(self, event: Mapping[str, Any]) -> bool:
        """Handle one runner event; returns True (keep the event in the artifacts)."""
        kind = event.get("event")
        data = event.get("event_data") or {}
        if isinstance(event.get("pid"), int):
            self.pid = event["pid"]
        if kind == "playbook_on_play_start":
            self.flush()
            self._print(f"== {data.get('play') or data.get('play_pattern')}")
        elif kind == "playbook_on_stats":
            self.flush()
            self.stats = {k: data.get(k) or {} for k in ("ok", "failures", "dark", "processed")}
            for host in self.stats["failures"]:
                self._outcome(host).failed = True
            for host in self.stats["dark"]:
                self._outcome(host).unreachable = True
                self._outcome(host).step = self.upgrade_step.get(host)
        elif kind == "runner_on_start":
            self._started(data)
        elif kind in _HOST_EVENTS:
            self._host_event(kind, data)
        return True

    def _started(self, data: Mapping[str, Any]) -> None:
        """A task started on a host: remember its step (printed only when it ends)."""
        host = str(data.get("host") or "")
        if (
            not host
            or data.get("play_pattern") == "localhost"
            or _action(data) in ("include_role", "include_tasks")
        ):
            return
        if _action(data) in STEP_ACTIONS:
            self._starting[host] = STEP_ACTIONS[_action(data)]
        role = _role(data)
        if role:
            included = self._included.get(host)
            self.last_step[host] = f"{role} ({included})" if included else str(role)
        else:
            self.last_step[host] = self._step_of(host, data)[1]
        task = str(data.get("task") or "")
        if task and task != self.last_step[host]:
            self.last_step[host] += f" › {task}"

    def _outcome(self, host: str) -> HostOutcome:
        return self.outcomes.setdefault(host, HostOutcome())

    def _host_event(self, kind: str, data: Mapping[str, Any]) -> None:
        host = str(data.get("host") or "")
        if not host:
            return
        if data.get("play_pattern") != "localhost" and host not in self.hosts:
            self.hosts.append(host)
        action = _action(data)
        role = _role(data)
        task = str(data.get("task") or "")
        if action == "include_role" and kind == "runner_on_ok":
            self._included[host] = task
            return
        res = data.get("res")
        facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
        starting = self._starting.pop(host, None)
        if starting and kind != "runner_on_skipped":
            # The step action ran (an unreachable host returns no run record): the host is in its step.
            self.upgrade_step[host] = starting
        if kind in ("runner_on_ok", "runner_on_failed") and isinstance(facts, Mapping) and run_step(facts):
            self.upgrade_step[host] = str(run_step(facts))
        key, label = self._step_of(host, data)
        if data.get("play_pattern") != "localhost":
            task_name = str(data.get("task") or "")
            self.last_step[host] = f"{label} › {task_name}" if task_name and task_name != label else label
        step = self._steps.get(host)
        if step is None or step.key != key:
            self._flush_host(host)
            step = self._steps[host] = _Step(key=key, label=label)
        failed = kind == "runner_on_failed" and not data.get("ignore_errors")
        if kind == "runner_on_unreachable" or failed:
            outcome = self._outcome(host)
            outcome.play, outcome.role, outcome.task = data.get("play"), role, task
            outcome.message = _message(data.get("res"))
            where = f"{label} › {task}" if task and task != label else label
            state = "UNREACHABLE" if kind == "runner_on_unreachable" else "FAILED"
            self._print(f"{host}: {where} ... {state}: {outcome.message}")
            step.state = "failed"
            return
        if kind == "runner_on_skipped" or step.state == "failed":
            return
        notice = _notice(data.get("res"))
        if notice:
            self._print(notice)
        if action not in _QUIET_ACTIONS:
            step.loud = True
        res = data.get("res") or {}
        changed = isinstance(res, Mapping) and bool(res.get("changed"))
        step.state = "changed" if changed or step.state == "changed" else "ok"

    def _step_of(self, host: str, data: Mapping[str, Any]) -> tuple[tuple[str, str], str]:
        if _action(data) in STEP_ACTIONS:
            step = STEP_ACTIONS[_action(data)]
            return ("step", step), step
        role = _role(data)
        if role:
            included = self._included.get(host)
            label = f"{role} ({included})" if included else str(role)
            return ("role", label), label
        self._included.pop(host, None)
        task_file = Path(str(data.get("task_path") or "").rsplit(":", 1)[0])
        if task_file.parent.name == "tasks":  # roles/upgrade_host/tasks/<step>.yml
            return ("file", str(task_file)), HOST_ROLE if task_file.stem == "main" else task_file.stem
        task = str(data.get("task") or "")
        return ("task", task), task

    def _flush_host(self, host: str) -> None:
        step = self._steps.pop(host, None)
        if step and step.loud and step.state in ("ok", "changed"):
            self._print(f"{host}: {step.label} ... {step.state}")

    def flush(self) -> None:
        """Print the pending step of every host."""
        for host in list(self._steps):
            self._flush_host(host)

    def _print(self, line: str) -> None:
        # Whole lines: the terminal wraps a long one; a remedy is never cut off. No secret
        # (a unit's Environment=, an index URL's user:token@, --api-key) is printed.
        print(redact_text(line), file=self.stream, flush=True)


def _role(data: Mapping[str, Any]) -> str | None:
    """The role a task event belongs to, for the display: None for the tasks of
    :data:`HOST_ROLE` itself (each of its task files is a step of its own)."""
    role = data.get("role")
    return None if not role or role == HOST_ROLE else str(role)


def _notice(res: Any) -> str:
    """What a task tells the operator: the ``cuda13_notice`` fact it sets
    (e.g. the action cuda13_lock taking over a dead run's lock)."""
    if not isinstance(res, Mapping):
        return ""
    facts = res.get("ansible_facts")
    if not isinstance(facts, Mapping):
        return ""
    return " ".join(str(facts.get("cuda13_notice") or "").split())


def natural_key(name: str) -> list[Any]:
    """Sort key that orders the digits of host names as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


#: Seconds between two heartbeat lines of a step that is still running (plain mode).
HEARTBEAT_S = 60.0

#: Seconds a step action's start waits for its skip (runner_on_start comes before the task's
#: ``when`` is evaluated; a skipped step is no step): a step still running after that has begun,
#: at its start's time, also without another event of its host.
STARTING_S = 1.0

#: Final states, as ``result.json`` writes them, and how the view names them.
STATE_TEXT = {
    "kept": "kept",
    "rolled_back": "rolled back",
    "failed": "failed",
    "unreachable": "unreachable",
    "running": "running",
    "waiting": "waiting",
    NOT_REACHED: "not reached",
    "done": "done",  # ran to the end without a result of its own (preflight, verify)
}

_TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


def extra_var(extra_vars: Iterable[str], name: str, default: Any = None) -> Any:
    """The value the command line's ``-e`` values give ``name`` (the last wins).

    Each value is ``key=value ...``, JSON/YAML, or ``@file`` (YAML or JSON),
    as ``ansible-playbook -e`` takes them. Returns ``default`` when none sets
    it, or a value cannot be read.
    """
    found: Any = default
    for value in extra_vars:
        data: Any = None
        try:
            if value.startswith("@"):
                data = yaml.safe_load(Path(value[1:]).read_text(encoding="utf-8"))
            elif value.lstrip().startswith(("{", "[")):
                data = yaml.safe_load(value)
            else:
                data = {}
                for pair in value.split():
                    key, sep, raw = pair.partition("=")
                    if sep:
                        data[key] = yaml.safe_load(raw)
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and name in data:
            found = data[name]
    return found


def serial_from_extra_vars(extra_vars: Iterable[str], default: Any = None) -> Any:
    """``cuda13_serial`` as the command line's ``-e`` values set it (:func:`extra_var`)."""
    return extra_var(extra_vars, "cuda13_serial", default)


def _event_time(event: Mapping[str, Any], clock: Callable[[], float]) -> float:
    created = event.get("created")
    if created:
        try:
            stamp = datetime.fromisoformat(str(created))
        except ValueError:
            return clock()
        if stamp.tzinfo is None:  # ansible-runner writes UTC without an offset
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp()
    return clock()


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime(_TIMESTAMP)


@dataclass
class HostView:
    """What the view knows of one host. Times are epoch seconds (UTC)."""

    host: str
    state: str = "waiting"
    batch: int | None = None
    step: str | None = None
    step_started: float | None = None
    task: str | None = None
    last_tok_s: float | None = None
    heartbeat_at: float | None = None
    explicit_steps: bool = False  # the play's tasks are steps (STEP_ACTIONS, the run record)
    recorded_step: str | None = None  # the last step of the host's run record begun


class RunProgress(Progress):
    """The live view (``live=True``) or the timestamped lines (``live=False``)
    of a run, fed with ansible-runner events.

    ``stream``: where lines go (default stdout). ``live``: None decides by
    whether ``stream`` is a terminal. ``serial``: the rollout's
    ``cuda13_serial`` as ``-e`` gives it (for "batch k of n" until the run
    prints its batch plan, ``cuda13_fleet``, which then counts; None: the
    default ramp, :func:`cuda13_upgrade.batches.batch_sizes`). ``clock``: epoch seconds now
    (tests). Use it as a context manager around the run (``with progress:``)
    so the live view and the heartbeat thread stop also when the run is
    interrupted; :meth:`interrupted_lines` then says what each host was doing.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        serial: Any = None,
        clock: Callable[[], float] = time.time,
        heartbeat_s: float = HEARTBEAT_S,
        title: str = "cuda13-upgrade",
    ) -> None:
        super().__init__(stream)
        if live is None:
            live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live = live
        self.serial = serial
        self.batch_sizes: list[int] | None = None  # the run's printed batch plan
        self.clock = clock
        self.heartbeat_s = heartbeat_s
        self.title = title
        self.views: dict[str, HostView] = {}
        self.started: float | None = None
        self.batch = 0
        self.batches_total: int | None = None
        # The rollout's estimated end (ISO 8601), as the last batch gate updated it (cuda13_fleet's
        # "estimate", cuda13_upgrade.estimate), or None.
        self.estimated_end: str | None = None
        # The batch gate's last word on Prometheus's alerts while it holds a batch (live view).
        self.gate_notice: str | None = None
        self.finished = False
        self._play: str | None = None
        self._at: float | None = None  # the time of the event being handled
        self._batch_line = False  # a batch started: say so with its first host event
        # The batch line held back until the batch gate (cuda13_fleet) starts the batch: (time, text).
        self._gated_batch_line: tuple[float, str] | None = None
        self._play_starts: dict[str, int] = {}
        self._batch_pool: list[str] | None = None  # the hosts the batched play takes
        # Per host, a step action that started and has not been skipped: (step, start time, task).
        self._pending: dict[str, tuple[str, float, str]] = {}
        self._lock = threading.RLock()
        self._live: Any = None
        self._console: Any = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    # --- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> RunProgress:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Start the live view (terminal) or the heartbeat thread (plain lines)."""
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(file=self.stream)
            self._live = Live(
                console=self._console,
                get_renderable=self.renderable,
                refresh_per_second=2,
                transient=False,
            )
            self._live.start()
            return
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick_loop, name="cuda13-progress", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        """Stop the live view (drawn one last time) or the heartbeat thread."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join(timeout=5)
            self._ticker = None

    def _tick_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    # --- events ---------------------------------------------------------------------

    def __call__(self, event: Mapping[str, Any]) -> bool:
        with self._lock:
            at = self._at = _event_time(event, self.clock)
            if self.started is None:
                self.started = at
            kind = event.get("event")
            data = event.get("event_data") or {}
            if kind == "playbook_on_play_start":
                self._commit_pending()
                self._play_start(data, at)
            elif kind == "playbook_on_stats":
                self._commit_pending()
            elif kind == "runner_on_skipped":
                self._pending.pop(str(data.get("host") or ""), None)
            elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable") and data.get("host"):
                # The step begins before what its task says (a failure is printed at once).
                self._commit_pending(str(data["host"]))
            super().__call__(event)
            if self._batch_line and kind != "playbook_on_play_start":
                self._batch_line = False  # once the batch's hosts are known
                if not self.live:
                    text = f"{self.batch_text()} ({self.counts_text()})"
                    if _action_of(data) == "cuda13_fleet":
                        # The batch gate may start no batch (budget, window): said once it does.
                        self._gated_batch_line = (at, text)
                    else:
                        self._line(at, text)
            if kind == "verbose":
                for line in str(event.get("stdout") or "").splitlines():
                    if alert_gate_line(line):
                        # A batch held for alerts: said now, not once the batch starts.
                        self.gate_notice = line.strip()
                        if not self.live:
                            self._line(at, line.strip())
                        continue
                    found = trial_of_line(line)
                    if found and found[0] in self.views:
                        self._commit_pending(found[0])
                        self.views[found[0]].last_tok_s = found[1]
            if kind == "playbook_on_stats":
                self._finish(at)
            elif kind in ("runner_on_start", "runner_on_ok", "runner_on_failed", "runner_retry"):
                self._task_event(kind, data, at)
            elif kind == "runner_on_unreachable":
                self._final(str(data.get("host") or ""), "unreachable", at)
            self.tick(at)
        return True

    def _play_start(self, data: Mapping[str, Any], at: float) -> None:
        name = str(data.get("play") or data.get("play_pattern") or "")
        for view in self.views.values():  # a new play: every host's step ends
            self._end_step(view, at)
            view.explicit_steps = False
        self._play = name
        count = self._play_starts[name] = self._play_starts.get(name, 0) + 1
        if count > 1 or self._batched(name):
            if count == 1:
                # Hosts already kept left the run before the preflight (roles/upgrade_host/tasks/early.yml):
                # the upgrade play's batches are of the others alone.
                self._batch_pool = [
                    h for h in self._all_hosts() if (self.views.get(h) or HostView(host=h)).state != "kept"
                ]
            self.batch = count
            self._batch_line = True
            for view in self.views.values():  # hosts not (yet) in a batch wait for theirs
                outcome = self.outcomes.get(view.host)
                if view.state == "running" and outcome and (outcome.failed or outcome.unreachable):
                    view.state = "unreachable" if outcome.unreachable else "failed"
                elif view.state == "running" and view.batch is None:
                    view.state = "waiting"

    def _batched(self, play: str) -> bool:
        return play.startswith("Upgrade")  # playbooks/upgrade.yml's serial play

    def _task_event(self, kind: str, data: Mapping[str, Any], at: float) -> None:
        host = str(data.get("host") or "")
        if not host or data.get("play_pattern") == "localhost":
            return
        view = self.views.get(host)
        if view is None:
            view = self.views[host] = HostView(host=host)
        if view.state == "waiting" and (not self.batch or self._batched(self._play or "")):
            # After the batched play, a play on every host (the report's, the failing of hosts
            # rolled back) starts no host: one no batch took stays waiting, then not reached.
            view.state = "running"
            view.batch = self.batch or None
        res = data.get("res") if isinstance(data.get("res"), Mapping) else {}
        facts = res.get("ansible_facts") if isinstance(res.get("ansible_facts"), Mapping) else {}
        plan = facts.get("cuda13_fleet")
        if kind == "runner_on_ok" and isinstance(plan, Mapping) and isinstance(plan.get("sizes"), list):
            # playbooks/start.yml's batch plan (and upgrade.yml's, without the hosts already kept)
            self.batch_sizes = [int(size) for size in plan["sizes"]]
        action = _action_of(data)
        self._commit_pending(host)
        task = str(data.get("task") or "")
        if kind == "runner_on_start" and action in STEP_ACTIONS:
            # The step begins once the task is not skipped (_commit_pending).
            view.explicit_steps = True
            self._pending[host] = (STEP_ACTIONS[action], at, task)
            return
        recorded = run_step(facts) if kind == "runner_on_ok" else None
        if recorded and recorded != view.recorded_step:
            # A step the run record names that no step action's start began (cuda13_step's drain).
            view.explicit_steps = True
            self._begin_step(view, recorded, at)
        elif not view.explicit_steps and not recorded:
            _, label = self._step_of(host, data)
            if label and label != view.step and action not in _QUIET_ACTIONS:
                if kind == "runner_on_start":
                    self._pending[host] = (label, at, task)
                    return
                self._begin_step(view, label, at)
        if kind == "runner_on_start":
            view.task = task or view.task
        gate = res.get("not_started") if action == "cuda13_fleet" else None
        if kind in ("runner_on_ok", "runner_on_failed") and action == "cuda13_fleet":
            self.gate_notice = None  # the gate has decided
            held, self._gated_batch_line = self._gated_batch_line, None
            if isinstance(gate, Mapping) or kind == "runner_on_failed":
                self.batch = max(0, self.batch - 1)  # this batch never started
                self._play_starts[self._play or ""] = self.batch
            elif held is not None:
                self._line(held[0], held[1])
        guess = res.get("estimate") if action == "cuda13_fleet" else None
        if kind == "runner_on_ok" and isinstance(guess, Mapping) and guess.get("line"):
            # The batch gate's estimate of the run's end, from what the batches before really took.
            self.estimated_end = str(guess.get("estimated_end") or "") or None
            if not self.live:
                self._line(at, str(guess["line"]))
        if kind == "runner_on_ok" and isinstance(gate, Mapping):
            # The batch gate (failure budget, window) starts neither this batch nor any later one.
            for name in gate.get("hosts") or []:
                self._final(str(name), NOT_REACHED, at)
        result = facts.get("cuda13_result")
        if kind == "runner_on_ok" and isinstance(result, Mapping) and result.get("status"):
            self._begin_step(view, "done", at)
            self._final(host, str(result["status"]), at)

    def _commit_pending(self, host: str | None = None, before: float | None = None) -> None:
        """Begin the pending step of ``host`` (None: every host's), at its start's time; with
        ``before``, only those that started before it."""
        for name in [host] if host is not None else list(self._pending):
            pending = self._pending.get(name)
            if pending is None or (before is not None and pending[1] > before):
                continue
            del self._pending[name]
            step, started, task = pending
            view = self.views.get(name)
            if view is None:
                view = self.views[name] = HostView(host=name)
            self._begin_step(view, step, started)
            view.task = task or view.task

    def _begin_step(self, view: HostView, step: str, at: float) -> None:
        if step == view.step:
            return
        self._end_step(view, at)
        if step == "done":  # the host's result is recorded
            return
        if step in STEP_ACTIONS.values() or step in ("drain", "undrain"):
            view.recorded_step = step
        view.step, view.step_started, view.heartbeat_at = step, at, at
        view.task = None
        if not self.live:
            self._line(at, f"{view.host}: {step} started")

    def _end_step(self, view: HostView, at: float) -> None:
        if view.step is None or view.step_started is None:
            return
        if not self.live:
            took = format_duration(max(0.0, at - view.step_started))
            self._line(at, f"{view.host}: {view.step} done in {took}")
        view.step, view.step_started, view.task = None, None, None

    def _final(self, host: str, state: str, at: float) -> None:
        view = self.views.get(host)
        if view is None:
            view = self.views[host] = HostView(host=host)
        if view.state == state:
            return
        view.state = state
        if not self.live:
            self._line(at, f"{host}: {STATE_TEXT.get(state, state)} ({self.counts_text()})")

    def _finish(self, at: float) -> None:
        for host in self.hosts:
            self.views.setdefault(host, HostView(host=host))
        for view in self.views.values():
            self._end_step(view, at)
            outcome = self.outcomes.get(view.host)
            if view.state == "waiting":
                view.state = NOT_REACHED
            elif view.state == "running":
                if outcome and outcome.unreachable:
                    view.state = "unreachable"
                elif outcome and outcome.failed:
                    view.state = "failed"
                else:
                    view.state = "done"
        self.finished = True
        if not self.live:
            elapsed = format_duration(at - (self.started or at))
            self._line(at, f"run finished after {elapsed}: {self.counts_text()}")

    def batch_text(self) -> str:
        """``"batch 2 of 3"`` (``"batch 2"`` while the number of batches is unknown)."""
        total = None
        try:
            pool = self._batch_pool if self._batch_pool is not None else self._all_hosts()
            sizes = self.batch_sizes if self.batch_sizes else batches.batch_sizes(len(pool), self.serial)
            total = len(sizes) or None
        except ValueError:
            total = None
        self.batches_total = total
        return f"batch {self.batch}" + (f" of {total}" if total and total >= self.batch else "")

    # --- heartbeat ------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        """Print the heartbeat of every step running for :attr:`heartbeat_s`
        since its start or its last heartbeat (plain mode; the live view
        redraws itself)."""
        with self._lock:
            at = self.clock() if now is None else now
            self._commit_pending(before=at - STARTING_S)
            if self.live:
                return
            for view in self.views.values():
                if view.step is None or view.step_started is None or view.heartbeat_at is None:
                    continue
                if at - view.heartbeat_at >= self.heartbeat_s:
                    view.heartbeat_at = at
                    task = f" (task: {view.task})" if view.task else ""
                    took = format_duration(at - view.step_started)
                    self._line(at, f"{view.host}: {view.step} still running after {took}{task}")

    # --- what the view shows --------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Hosts per state (keys of :data:`STATE_TEXT`), every host of the run counted once."""
        counts = dict.fromkeys(STATE_TEXT, 0)
        for host in self._all_hosts():
            state = self.views[host].state if host in self.views else "waiting"
            counts[state] = counts.get(state, 0) + 1
        return counts

    def counts_text(self) -> str:
        """``"1 kept, 0 rolled back, 0 failed, 1 running, 2 waiting"`` (not reached
        and unreachable only when there are some). "kept" and "rolled back" are the
        rollout's words: shown at 0 only in a run with batches (rollout, stage) or
        beside the other's count; a preflight or a plan says ``"3 done, 0 failed"``."""
        counts = self.counts()
        always = ("failed", "running", "waiting")
        if self.batch or self._batch_pool is not None or counts.get("kept") or counts.get("rolled_back"):
            always = ("kept", "rolled_back", *always)
        parts = []
        for state, text in STATE_TEXT.items():
            if counts.get(state) or state in always:
                if state == "waiting" and self.finished:
                    continue
                parts.append(f"{counts.get(state, 0)} {text}")
        return ", ".join(parts)

    def _all_hosts(self) -> list[str]:
        return sorted(dict.fromkeys([*self.hosts, *self.views]), key=natural_key)

    def current_rows(self, now: float | None = None) -> list[dict[str, Any]]:
        """Rows of the hosts of the current batch (all hosts seen outside a
        batched play): ``{"host", "state", "step", "elapsed_s", "task",
        "last_tok_s"}``."""
        at = self.clock() if now is None else now
        self._commit_pending(before=at - STARTING_S)
        rows = []
        for host in self._all_hosts():
            view = self.views.get(host) or HostView(host=host)
            if self.batch and view.batch != self.batch:
                continue
            if not self.batch and view.state == "waiting" and view.step is None:
                continue
            elapsed = at - view.step_started if view.step_started is not None else None
            rows.append(
                {
                    "host": host,
                    "state": STATE_TEXT.get(view.state, view.state),
                    "step": view.step or "-",
                    "elapsed_s": elapsed,
                    "task": view.task or "",
                    "last_tok_s": view.last_tok_s,
                }
            )
        return rows

    def header(self, now: float | None = None) -> str:
        """The rollout line above the rows: title, batch k of n, counts, elapsed, and the
        estimated end the last batch gate gave (:mod:`cuda13_upgrade.estimate`)."""
        at = self.clock() if now is None else now
        parts = [self.title]
        if self.batch:
            parts.append(self.batch_text())
        parts.append(self.counts_text())
        if self.started is not None:
            parts.append(f"elapsed {format_duration(max(0.0, at - self.started))}")
        if self.estimated_end and not self.finished:
            parts.append(f"estimated end {self.estimated_end[11:16]} UTC")
        if self.gate_notice and not self.finished:
            parts.append(self.gate_notice)
        return " · ".join(parts)

    def renderable(self) -> Any:
        """The live view: the rollout line, then a table of the current batch."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        with self._lock:
            now = self.clock()
            table = Table(expand=False, box=None, pad_edge=False, header_style="bold")
            for column, justify in (
                ("host", "left"),
                ("state", "left"),
                ("step", "left"),
                ("elapsed", "right"),
                ("last trial", "right"),
                ("task", "left"),
            ):
                table.add_column(column, justify=justify, no_wrap=column != "task", overflow="ellipsis")
            for row in self.current_rows(now):
                tok_s = f"{row['last_tok_s']:.1f} tok/s" if row["last_tok_s"] is not None else "-"
                elapsed = format_duration(row["elapsed_s"]) if row["elapsed_s"] is not None else "-"
                table.add_row(row["host"], row["state"], row["step"], elapsed, tok_s, row["task"])
            return Group(Text(self.header(now), style="bold"), table)

    def interrupted_lines(self, now: float | None = None) -> list[str]:
        """One line per host of the run saying what it was doing when the run
        stopped: ``"gpu-node-1: in step wheels for 3 min 10 s (task: ...)"``,
        ``"gpu-node-2: kept"``, ``"gpu-node-3: waiting, not started"``."""
        with self._lock:
            at = self.clock() if now is None else now
            self._commit_pending()
            lines = []
            for host in self._all_hosts():
                view = self.views.get(host) or HostView(host=host)
                if view.step is not None and view.step_started is not None:
                    took = format_duration(max(0.0, at - view.step_started))
                    task = f" (task: {view.task})" if view.task else ""
                    lines.append(f"{host}: in step {view.step} for {took}{task}")
                elif view.state == "waiting":
                    lines.append(f"{host}: waiting, not started")
                elif view.state == "running" and view.task:
                    lines.append(f"{host}: running (task: {view.task})")
                else:
                    lines.append(f"{host}: {STATE_TEXT.get(view.state, view.state)}")
            return lines

    # --- output ---------------------------------------------------------------------

    def _flush_host(self, host: str) -> None:
        # The steps' own start/end lines (plain) or rows (live) replace the
        # base class's "<host>: <step> ... ok" lines; failures still print.
        self._steps.pop(host, None)

    def _print(self, line: str) -> None:
        line = redact_text(line)
        if self.live:
            if self._console is not None:
                self._console.print(line, markup=False, highlight=False, soft_wrap=True)
            else:
                print(line, file=self.stream, flush=True)
            return
        at = self._at if self._at is not None else self.clock()
        print(f"{_stamp(at)} {line}", file=self.stream, flush=True)

    def _line(self, at: float, text: str) -> None:
        print(f"{_stamp(at)} {redact_text(text)}", file=self.stream, flush=True)


def _action_of(data: Mapping[str, Any]) -> str:
    return str(data.get("task_action") or "").rsplit(".", 1)[-1]


def progress_mode(stream: TextIO | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to draw the live view (True) or print timestamped lines (False).

    ``$CUDA13_UPGRADE_PROGRESS``: ``live`` or ``plain`` decide; unset or
    ``auto``: live when ``stream`` (default stdout) is a terminal and
    ``$TERM`` is not ``dumb``. Raises :class:`cuda13_upgrade.errors.UsageError`
    (exit status 2) for another value, naming the variable.
    """
    import os

    env = os.environ if environ is None else environ
    mode = env.get("CUDA13_UPGRADE_PROGRESS", "auto").strip().lower() or "auto"
    if mode not in ("auto", "live", "plain"):
        raise UsageError(f"CUDA13_UPGRADE_PROGRESS={mode!r}: expected auto, live or plain")
    if mode != "auto":
        return mode == "live"
    out = stream if stream is not None else sys.stdout
    return bool(getattr(out, "isatty", lambda: False)()) and env.get("TERM") != "dumb"
