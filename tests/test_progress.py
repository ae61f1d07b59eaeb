"""Tests of cuda13_upgrade.progress on recorded ansible-runner events.

tests/fixtures/runner-events/rollout.jsonl: the events ``ansible_runner.run``
emitted for rollout.yml (record.py there): a start play on localhost, a
preflight of three hosts (its real role), a serial upgrade play (batches of one:
the real batch gate and roles/upgrade_host/tasks/main.yml, the steps' actions
stand-ins that keep the host's run record and print their trial lines) in which
gpu-node-01 keeps the new stack, gpu-node-02 regresses and rolls back, and
gpu-node-03 is never reached (failure budget 0), then the play that fails the
host that rolled back.
"""

from __future__ import annotations

import io
import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from cuda13_upgrade import progress

EVENTS = [
    json.loads(line)
    for line in (Path(__file__).parent / "fixtures" / "runner-events" / "rollout.jsonl")
    .read_text()
    .splitlines()
]
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def _at(event) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def _index(kind: str, host: str | None = None, task: str | None = None, nth: int = 0) -> int:
    found = [
        i
        for i, e in enumerate(EVENTS)
        if e["event"] == kind
        and (host is None or e["event_data"].get("host") == host)
        and (task is None or e["event_data"].get("task") == task)
    ]
    return found[nth]


WHEELS = "Install the cu130 wheels into the new venv, or check the staged stack"
VERIFY = "Measure the new stack and decide"
GATE_FAILED = (
    "gpu-node-02: upgrade_host › Roll back a new stack that failed the gate or degraded in service ... FAILED: "
    "The new stack fails the gate: plain -10.3 %"
)


def _plain(events, **kwargs) -> tuple[progress.RunProgress, list[str]]:
    out = io.StringIO()
    clock = kwargs.pop("clock", lambda: _at(events[-1]))
    view = progress.RunProgress(out, live=False, clock=clock, **{"serial": 1, **kwargs})
    for event in events:
        view(event)
    lines = out.getvalue().splitlines()
    assert all(STAMP.match(line) for line in lines), lines
    return view, [STAMP.sub("", line) for line in lines]


def test_plain_lines_say_when_each_step_starts_and_ends_with_its_duration():
    _, lines = _plain(EVENTS)
    assert "== Preflight (read-only)" in lines
    assert "gpu-node-01: nvidia_driver_check started" in lines
    assert "batch 1 of 3 (0 kept, 0 rolled back, 0 failed, 0 running, 3 waiting)" in lines
    upgrade = [
        line for line in lines if line.startswith("gpu-node-01: ") and "nvidia_driver_check" not in line
    ]
    steps = [re.sub(r"done in \d+ s", "done in N s", line) for line in upgrade]
    # The lock and the host's state are the role's own tasks; the artifact cache's step, skipped
    # (cuda13_artifact_cache false), is no step.
    assert steps == [
        "gpu-node-01: upgrade_host started",
        "gpu-node-01: upgrade_host done in N s",
        *[
            line
            for step in (
                "snapshot",
                "toolkit",
                "wheels",
                "sglang_build",
                "drain",
                "baseline",
                "switch",
                "verify",
            )
            for line in (f"gpu-node-01: {step} started", f"gpu-node-01: {step} done in N s")
        ],
        "gpu-node-01: result started",
        "gpu-node-01: result done in N s",
        "gpu-node-01: kept (1 kept, 0 rolled back, 0 failed, 0 running, 2 waiting)",
    ]
    # The durations are the events' own times: wheels ran `sleep 3` (plus the task's overhead),
    # from its action's start to the next step's.
    wheels = int(re.search(r"gpu-node-01: wheels done in (\d+) s", "\n".join(lines)).group(1))
    begin = _at(EVENTS[_index("runner_on_start", "gpu-node-01", WHEELS)])
    end = _at(EVENTS[_index("runner_on_start", "gpu-node-01", "Build SGLang into the new venv")])
    assert wheels == round(end - begin) and wheels >= 3
    assert "batch 2 of 3 (1 kept, 0 rolled back, 0 failed, 0 running, 2 waiting)" in lines
    assert GATE_FAILED in lines
    assert "gpu-node-02: rollback started" in lines
    assert "gpu-node-02: rolled back (1 kept, 1 rolled back, 0 failed, 0 running, 1 waiting)" in lines
    # The batch gate: the failure budget is spent, gpu-node-03 is not reached.
    assert (
        "gpu-node-03: not reached (1 kept, 1 rolled back, 0 failed, 0 running, 0 waiting, 1 not reached)"
        in lines
    )
    # The gate started no third batch: no "batch 3 of 3" line.
    assert not [line for line in lines if line.startswith("batch 3")], lines
    assert [line for line in lines if line.startswith("gpu-node-03: ")] == [
        "gpu-node-03: nvidia_driver_check started",
        *[line for line in lines if line.startswith("gpu-node-03: nvidia_driver_check done in ")],
        "gpu-node-03: not reached (1 kept, 1 rolled back, 0 failed, 0 running, 0 waiting, 1 not reached)",
    ]
    assert re.match(
        r"run finished after \d+ s: 1 kept, 1 rolled back, 0 failed, 0 running, 1 not reached", lines[-1]
    )
    assert not [line for line in lines if line.startswith("localhost")]


def test_a_long_step_has_a_heartbeat_every_minute():
    task = _index("runner_on_start", "gpu-node-01", WHEELS)  # wheels begins
    view, _ = _plain(EVENTS[: task + 1])
    began = _at(EVENTS[task])
    out = view.stream
    # The step begins once its action has not been skipped for a moment, at its start's time.
    view.tick(began + progress.STARTING_S)
    begun = [STAMP.sub("", line) for line in out.getvalue().splitlines()]
    assert begun[-1] == "gpu-node-01: wheels started"
    assert (
        out.getvalue()
        .splitlines()[-1]
        .startswith(datetime.fromtimestamp(began, progress.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    )
    seen = len(out.getvalue().splitlines())
    view.tick(began + 59.0)
    assert len(out.getvalue().splitlines()) == seen  # not yet a minute
    view.tick(began + 61.0)
    view.tick(began + 90.0)  # half a minute after the last heartbeat: nothing
    view.tick(began + 121.5)
    beats = [STAMP.sub("", line) for line in out.getvalue().splitlines()[seen:]]
    assert beats == [
        f"gpu-node-01: wheels still running after 1 min 01 s (task: {WHEELS})",
        f"gpu-node-01: wheels still running after 2 min 02 s (task: {WHEELS})",
    ]
    assert (
        out.getvalue()
        .splitlines()[seen]
        .startswith(datetime.fromtimestamp(began + 61.0, progress.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    )


def test_heartbeats_come_from_the_thread_without_events():
    start = _index("runner_on_start", "gpu-node-01", WHEELS)
    began = _at(EVENTS[start])
    now = [began]
    view, _ = _plain(EVENTS[: start + 1], clock=lambda: now[0], heartbeat_s=0.5)
    with view:  # plain mode: a ticker thread
        now[0] = began + 1.0
        for _ in range(50):
            if "wheels still running" in view.stream.getvalue():
                break
            __import__("time").sleep(0.1)
    assert "gpu-node-01: wheels started" in view.stream.getvalue()
    assert "gpu-node-01: wheels still running after 1 s" in view.stream.getvalue()


def test_interrupted_says_what_each_host_was_doing():
    start = _index("runner_on_start", "gpu-node-02", WHEELS)
    view, _ = _plain(EVENTS[: start + 1])
    now = _at(EVENTS[start]) + 200
    assert view.interrupted_lines(now) == [
        "gpu-node-01: kept",
        f"gpu-node-02: in step wheels for 3 min 20 s (task: {WHEELS})",
        "gpu-node-03: waiting, not started",
    ]


def test_a_skipped_step_is_no_step():
    """runner_on_start comes before the task's ``when``: the artifact cache's action, skipped,
    begins no step, and the run record's step stays the one before it."""
    skipped = _index("runner_on_skipped", "gpu-node-01", "Bring the fleet's wheels to the host")
    view, lines = _plain(EVENTS[: skipped + 1])
    view.tick(_at(EVENTS[skipped]) + 10)
    assert view.views["gpu-node-01"].step == "upgrade_host"
    assert not [line for line in lines if "artifact_cache" in line]
    base = progress.Progress(io.StringIO())
    for event in EVENTS[: skipped + 1]:
        base(event)
    assert "gpu-node-01" not in base.upgrade_step


def test_terminal_view_has_the_rollout_line_and_a_row_per_host_of_the_batch():
    at = _index("runner_on_ok", "gpu-node-02", VERIFY)
    out = io.StringIO()
    events = EVENTS[: at + 1]
    now = _at(events[-1]) + 5
    view = progress.RunProgress(out, live=True, serial=1, clock=lambda: now)
    for event in events:
        view(event)
    # Live mode prints no step lines of its own, only the plays (and failures) above the view.
    assert out.getvalue().splitlines() == [
        "== Start the run",
        "== Preflight (read-only)",
        "== Upgrade, verify, keep or roll back",
        "== Upgrade, verify, keep or roll back",
    ]
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(view.renderable())
    text = console.file.getvalue().splitlines()
    elapsed = progress.format_duration(now - _at(EVENTS[0]))
    assert (
        text[0]
        == f"cuda13-upgrade · batch 2 of 3 · 1 kept, 0 rolled back, 0 failed, 1 running, 1 waiting · elapsed {elapsed}"
    )
    assert text[1].split() == ["host", "state", "step", "elapsed", "last", "trial", "task"]
    assert len(text) == 3  # only the current batch: gpu-node-02
    step_started = _at(EVENTS[_index("runner_on_start", "gpu-node-02", VERIFY)])
    row = text[2].split()
    assert row[:3] == ["gpu-node-02", "running", "verify"]
    # The last trial's tok/s: the verify step's trial line (a verbose event).
    assert " ".join(row[3:]).startswith(f"{progress.format_duration(now - step_started)} 80.3 tok/s")
    assert text[2].rstrip().endswith(VERIFY)


def test_terminal_mode_draws_with_rich_live_and_prints_failures_above_it():
    out = io.StringIO()
    view = progress.RunProgress(out, live=True, serial=1)
    with view:
        for event in EVENTS:
            view(event)
    text = out.getvalue()
    assert GATE_FAILED in " ".join(text.split())
    words = " ".join(text.split())  # the last frame, wrapped at the console's width
    assert "1 kept, 1 rolled back, 0 failed, 0 running, 1 not reached" in words
    assert not STAMP.match(text)


def test_serial_from_the_command_line(tmp_path):
    assert progress.serial_from_extra_vars([]) is None
    assert progress.serial_from_extra_vars(['{"cuda13_serial": [1, "50%"]}']) == [1, "50%"]
    assert progress.serial_from_extra_vars(["cuda13_serial=2 other=x"]) == 2
    (tmp_path / "vars.yml").write_text("cuda13_serial: ['10%']\n")
    assert progress.serial_from_extra_vars([f"@{tmp_path}/vars.yml", "x=1"]) == ["10%"]


def test_progress_mode():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert progress.progress_mode(Tty(), {"TERM": "xterm"}) is True
    assert progress.progress_mode(Tty(), {"TERM": "dumb"}) is False
    assert progress.progress_mode(io.StringIO(), {}) is False
    assert progress.progress_mode(io.StringIO(), {"CUDA13_UPGRADE_PROGRESS": "live"}) is True
    assert progress.progress_mode(Tty(), {"CUDA13_UPGRADE_PROGRESS": "plain"}) is False
    with pytest.raises(
        progress.UsageError, match="CUDA13_UPGRADE_PROGRESS='fancy': expected auto, live or plain"
    ):
        progress.progress_mode(Tty(), {"CUDA13_UPGRADE_PROGRESS": "fancy"})


def test_the_batches_are_counted_without_the_hosts_already_kept():
    """gpu-node-01 is found already kept before the preflight (roles/upgrade_host/tasks/early.yml):
    the upgrade play's batches of one are gpu-node-02's and gpu-node-03's, two of them."""

    def event(kind, second, **data):
        return {"event": kind, "created": f"2026-12-02T10:00:{second:02d}.000000", "event_data": data}

    def ok(host, second, task, facts=None):
        return event(
            "runner_on_ok",
            second,
            host=host,
            task=task,
            play_pattern="blackwell",
            res={"ansible_facts": facts or {}},
        )

    events = [
        event("playbook_on_play_start", 0, play="Find the hosts already kept", play_pattern="blackwell"),
        *[
            ok(h, 1, "Decide whether the host is already kept")
            for h in ("gpu-node-01", "gpu-node-02", "gpu-node-03")
        ],
        ok(
            "gpu-node-01",
            2,
            "Assemble the host's result",
            {"cuda13_result": {"status": "kept", "already_kept": True}},
        ),
        event("playbook_on_play_start", 3, play="Preflight (read-only)", play_pattern="blackwell"),
        ok("gpu-node-02", 4, "Query the GPUs with nvidia-smi"),
        ok("gpu-node-03", 4, "Query the GPUs with nvidia-smi"),
        event(
            "playbook_on_play_start", 5, play="Upgrade, verify, keep or roll back", play_pattern="blackwell"
        ),
        ok("gpu-node-02", 6, "Shared settings"),
    ]
    _, lines = _plain(events)
    assert "gpu-node-01: kept (1 kept, 0 rolled back, 0 failed, 2 running, 0 waiting)" in lines
    assert "batch 1 of 2 (1 kept, 0 rolled back, 0 failed, 0 running, 2 waiting)" in lines, lines


def test_the_run_s_printed_batch_plan_counts_the_batches():
    # playbooks/start.yml's "Plan the rollout's batches" sets cuda13_fleet (sizes as serial
    # takes them): "batch k of n" follows it, not a serial the view guessed.
    start = _index("playbook_on_play_start")
    plan = {
        "event": "runner_on_ok",
        "created": EVENTS[start]["created"],
        "event_data": {
            "host": "gpu-node-01",
            "play_pattern": "blackwell",
            "task": "Plan the rollout's batches",
            "res": {"ansible_facts": {"cuda13_fleet": {"sizes": [2, 1]}}},
        },
    }
    view, lines = _plain([*EVENTS[:start], plan, *EVENTS[start:]], serial=None)
    assert view.batch_sizes == [2, 1]
    assert any(line.startswith("batch 1 of 2 (") for line in lines), lines


def test_a_host_no_batch_took_is_not_reached_not_done():
    """The plays after the batched one (the report's, the failing of the
    hosts rolled back) run on every host; a host no batch took is "not reached" in the closing line."""

    def event(kind, second, **data):
        return {"event": kind, "created": f"2026-12-02T10:00:{second:02d}.000000", "event_data": data}

    def task(kind, host, second, name, play, facts=None):
        return event(
            kind, second, host=host, task=name, play_pattern=play, res={"ansible_facts": facts or {}}
        )

    upgrade = "Upgrade, verify, keep or roll back"
    events = [
        event("playbook_on_play_start", 0, play="Preflight (read-only)", play_pattern="blackwell"),
        task("runner_on_ok", "gpu-node-01", 1, "Query the GPUs with nvidia-smi", "blackwell"),
        task("runner_on_ok", "gpu-node-02", 1, "Query the GPUs with nvidia-smi", "blackwell"),
        event("playbook_on_play_start", 2, play=upgrade, play_pattern="blackwell"),
        task(
            "runner_on_ok",
            "gpu-node-01",
            3,
            "Record the host's result",
            "blackwell",
            {"cuda13_result": {"status": "kept"}},
        ),
        event(
            "playbook_on_play_start",
            4,
            play="Fail the hosts that did not keep the upgrade",
            play_pattern="blackwell",
        ),
        task("runner_on_start", "gpu-node-02", 5, "Fail each host that rolled back or failed", "blackwell"),
        event(
            "runner_on_skipped",
            5,
            host="gpu-node-02",
            task="Fail each host that rolled back or failed",
            play_pattern="blackwell",
        ),
        event("playbook_on_stats", 6, ok={"gpu-node-01": 2, "gpu-node-02": 1}, failures={}, dark={}),
    ]
    view, lines = _plain(events, serial=1)
    assert view.views["gpu-node-02"].state == progress.NOT_REACHED
    assert lines[-1] == "run finished after 6 s: 1 kept, 0 rolled back, 0 failed, 0 running, 1 not reached"


def test_a_batch_the_gate_never_started_prints_no_batch_line():
    """The batch gate refuses the second batch (the failure budget);
    "batch 2 of 2" is never said, and the header stays at the batch that ran."""

    def event(kind, second, **data):
        return {"event": kind, "created": f"2026-12-02T10:00:{second:02d}.000000", "event_data": data}

    upgrade = "Upgrade, verify, keep or roll back"
    gate = "Start the batch only within the failure budget and inside the window"
    spent = {"said": "not reached", "reason": "failure budget spent", "hosts": ["gpu-node-02"]}

    def gate_events(host, second, res):
        common = {"host": host, "task": gate, "play_pattern": "blackwell", "task_action": "cuda13_fleet"}
        return [
            event("runner_on_start", second, **common),
            event("runner_on_ok", second, **common, res=res),
        ]

    events = [
        event("playbook_on_play_start", 0, play=upgrade, play_pattern="blackwell"),
        *gate_events("gpu-node-01", 1, {"start": True, "not_started": None}),
        event(
            "runner_on_ok",
            2,
            host="gpu-node-01",
            task="Record the host's result",
            play_pattern="blackwell",
            res={"ansible_facts": {"cuda13_result": {"status": "rolled_back"}}},
        ),
        event("playbook_on_play_start", 3, play=upgrade, play_pattern="blackwell"),
        *gate_events("gpu-node-02", 4, {"start": False, "not_started": spent}),
        event("playbook_on_stats", 5, ok={}, failures={}, dark={}),
    ]
    view, lines = _plain(events, serial=1)
    batch_lines = [line for line in lines if line.startswith("batch ")]
    assert [line.split(" (")[0] for line in batch_lines] == ["batch 1"], lines
    assert view.batch == 1
    assert (
        "gpu-node-02: not reached (0 kept, 1 rolled back, 0 failed, 0 running, 0 waiting, 1 not reached)"
        in lines
    )


def test_a_batch_held_for_alerts_is_said_while_it_waits():
    """The batch gate's lines while Prometheus's alerts hold a batch (display lines: ansible-runner's
    verbose events) are printed at once, and the live view's rollout line shows the last one until
    the gate decides."""

    def event(kind, second, **data):
        return {"event": kind, "created": f"2026-12-02T10:00:{second:02d}.000000", "event_data": data}

    def verbose(second, text):
        return {"event": "verbose", "created": f"2026-12-02T10:00:{second:02d}.000000", "stdout": text}

    upgrade = "Upgrade, verify, keep or roll back"
    common = {
        "host": "gpu-node-01",
        "task": "Start the batch only within the failure budget and inside the window",
        "play_pattern": "blackwell",
        "task_action": "cuda13_fleet",
    }
    where = "Prometheus http://127.0.0.1:9090, cuda13_block_on_alerts"
    waits = (
        f"the batch gpu-node-01 waits: 1 active alert ({where}): NodeDiskPressure (firing since"
        " 2026-12-02T09:58:00Z); asking again in 30 s"
    )
    cleared = f"the alerts cleared after 31 s: the batch gpu-node-01 starts ({where})"
    events = [
        event("playbook_on_play_start", 0, play=upgrade, play_pattern="blackwell"),
        event("runner_on_start", 1, **common),
        verbose(2, waits),
        verbose(3, "an unrelated line: not said"),
    ]
    view, lines = _plain(events, serial=1)
    assert lines == [f"== {upgrade}", waits]
    live = progress.RunProgress(io.StringIO(), live=True, serial=1, clock=lambda: _at(events[-1]))
    for e in events:
        live(e)
    assert live.header().endswith(f" · {waits}")
    for e in [
        verbose(33, cleared),
        event("runner_on_ok", 33, **common, res={"start": True, "not_started": None}),
    ]:
        live(e)
        view(e)
    assert "waits" not in live.header() and "cleared" not in live.header()
    _, lines = _plain([*events, verbose(33, cleared)], serial=1)
    assert lines == [f"== {upgrade}", waits, cleared]
    assert progress.alert_gate_line(
        "Prometheus cannot be asked for its alerts (GET http://127.0.0.1:9/api/v1/alerts: connection refused);"
        " cuda13_block_on_alerts on_unreachable is proceed: the batch gpu-node-01 starts"
    )
