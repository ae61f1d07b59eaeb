"""A preflight's or a plan's progress speaks of what it does, not of a rollout's outcomes.

The recorded rollout's events (tests/fixtures/runner-events/rollout.jsonl) up to the end of its
preflight play are what ``cuda13-upgrade preflight`` sees: its lines said "0 kept, 0 rolled
back" for a run that keeps and rolls back nothing.
"""

from __future__ import annotations

import io
from datetime import datetime

from test_progress import EVENTS, STAMP

from cuda13_upgrade import progress

PLAY_STARTS = [i for i, e in enumerate(EVENTS) if e["event"] == "playbook_on_play_start"]


def _at(event) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def _run(events, **kwargs):
    out = io.StringIO()
    view = progress.RunProgress(out, live=False, clock=lambda: _at(events[-1]), **kwargs)
    for event in events:
        view(event)
    return view, [STAMP.sub("", line) for line in out.getvalue().splitlines()]


def test_a_preflight_counts_hosts_without_the_rollouts_words():
    # The start play and the preflight play, then the run's end.
    events = EVENTS[: PLAY_STARTS[2]] + [e for e in EVENTS if e["event"] == "playbook_on_stats"]
    view, lines = _run(events)
    assert view.counts_text() == "1 failed, 0 running, 2 done"
    assert lines[-1] == "run finished after 31 s: 1 failed, 0 running, 2 done"
    assert not [line for line in lines if "kept (" in line or "rolled back" in line], lines


def test_a_rollout_batch_still_counts_kept_and_rolled_back():
    _, lines = _run(EVENTS, serial=1)
    assert "batch 1 of 3 (0 kept, 0 rolled back, 0 failed, 0 running, 3 waiting)" in lines
