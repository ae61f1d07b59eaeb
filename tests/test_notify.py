"""Notifications of the rollout (cuda13_upgrade.notify, and the gates that send them in
cuda13_upgrade.steps.fleet): the option, the bodies of both formats for each event, the URLs kept
out of every record, and sends that fail recorded, never raised.

Slack's side, as its documentation gives it: the body ``{"text": "..."}`` posted with
``Content-type: application/json`` (docs.slack.dev, Java SDK guide "Incoming webhooks": ``curl -X
POST -H 'Content-type: application/json' -d '{"text":"Hello, World!"}'
https://hooks.slack.com/services/T1234567/AAAAAAAA/ZZZZZZ``), answered ``200 OK`` with the body
``ok``, and an invalid or removed URL answered ``404 Not Found`` with the body ``no_team`` (the same
guide, Japanese edition: ``WebhookResponse(code=404, message=Not Found, body=no_team)``); ``&``,
``<`` and ``>`` escaped as ``&amp;``, ``&lt;``, ``&gt;`` (api.slack.com/reference/surfaces/formatting,
"Escaping text"). Real webhook servers on 127.0.0.1 are tests/webhooks.py's.
"""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
from pathlib import Path

import pytest
from webhooks import Webhooks

from cuda13_upgrade import budget, notify, options
from cuda13_upgrade.steps import fleet
from cuda13_upgrade.summary import fleet_summary

HOSTS = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
SLACK = "https://hooks.slack.com/services/T1234567/AAAAAAAA/ZZZZZZ"  # Slack's documented example
HOOK = "https://ops.example:8443/hooks/cuda13?token=PLANTEDsecret42"
OPTION = {"targets": [{"url": SLACK, "format": "slack"}, {"url": HOOK, "format": "json"}], "timeout_s": 2}
RUN = "20261205T220000Z"
# The throughput gate's reason of a slower profile (tests/test_throughput_verdict.py).
SLOWER = (
    "plain: median 80.0 tok/s on the new stack vs 89.5 tok/s (-10.6 % ± 0.6 %, tolerance -3 %, "
    "5 vs 5 trials): regressed"
)
FIXTURES = Path(__file__).parent / "fixtures" / "prometheus"


def _secrets_in(text: str) -> list[str]:
    return [s for s in ("T1234567/AAAAAAAA/ZZZZZZ", "PLANTEDsecret42", "/hooks/cuda13") if s in text]


def _gate(plan: dict, reports_dir: Path, batch: list[str], statuses: dict, **more) -> dict:
    """The batch gate (cuda13_upgrade.steps.fleet.batch_gate) before ``batch`` in the run RUN of
    HOSTS, every host in the play and active; ``more``: its other keywords."""
    return fleet.batch_gate(
        plan,
        hosts=HOSTS,
        batch=batch,
        active=HOSTS,
        statuses=statuses,
        run_id=RUN,
        reports_dir=reports_dir,
        run_hosts=HOSTS,
        **more,
    )


# --- the option --------------------------------------------------------------------------------


def test_the_option_takes_targets_with_a_format_and_a_timeout():
    assert notify.parse(None) is None and notify.parse({}) is None and notify.parse([]) is None
    assert notify.parse({"targets": []}) is None
    told = notify.parse(OPTION)
    assert [(t.url, t.format) for t in told.targets] == [(SLACK, "slack"), (HOOK, "json")]
    assert told.timeout_s == 2.0
    assert notify.parse([{"url": SLACK, "format": "slack"}]).timeout_s == notify.DEFAULT_TIMEOUT_S == 5
    assert notify.parse({"targets": {"url": HOOK, "format": "json"}, "timeout_s": "3"}).timeout_s == 3.0
    assert told.as_record() == {
        "targets": [
            {"url": "https://hooks.slack.com/***", "format": "slack"},
            {"url": "https://ops.example:8443/***", "format": "json"},
        ],
        "timeout_s": 2.0,
    }
    assert notify.describe(told) == (
        "notifications go to https://hooks.slack.com/*** (slack), https://ops.example:8443/*** (json); each "
        "send waits at most 2 s (cuda13_notify timeout_s)"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"targets": [{"url": SLACK, "format": "teams"}]},
            "cuda13_notify targets[0] format 'teams' is not slack or json: {'targets': [{'url': "
            "'https://hooks.slack.com/***', 'format': 'teams'}]}. Option: cuda13_notify. Fix: give format: slack "
            "(Slack's incoming webhook) or format: json (the event's record).",
        ),
        (
            {"targets": [{"url": SLACK, "format": "slack"}, {"format": "json"}]},
            "cuda13_notify targets[1] has no url: {'targets': [{'url': 'https://hooks.slack.com/***', 'format': "
            "'slack'}, {'format': 'json'}]}. Option: cuda13_notify. Fix: give targets[1] url: the webhook's URL.",
        ),
        (
            [{"url": "ftp://hooks.example/x", "format": "json"}],
            "cuda13_notify targets[0] url 'ftp://hooks.example/***' is not an http:// or https:// URL: "
            "{'targets': [{'url': 'ftp://hooks.example/***', 'format': 'json'}]}. Option: cuda13_notify. Fix: "
            "give the "
            "webhook's http:// or https:// URL.",
        ),
        (
            [SLACK],
            "cuda13_notify targets[0] is a URL without a format: {'targets': ['https://hooks.slack.com/***']}. "
            "Option: cuda13_notify. Fix: give targets[0] as {url: ..., format: slack} or {url: ..., format: "
            "json}.",
        ),
        (
            {"targets": [{"url": HOOK, "format": "json"}], "timeout_s": 600},
            "cuda13_notify timeout_s 600 is not a number of seconds >= 1 and <= 60: {'targets': [{'url': "
            "'https://ops.example:8443/***', 'format': 'json'}], 'timeout_s': 600}. Option: cuda13_notify. "
            "Fix: give timeout_s: a number from 1 to 60.",
        ),
        (
            {"urls": [SLACK]},
            "cuda13_notify has unknown keys ['urls']: {'urls': ['https://hooks.slack.com/***']}. Option: "
            "cuda13_notify. Fix: give only targets, timeout_s.",
        ),
    ],
)
def test_a_bad_option_names_the_key_and_the_value_with_the_urls_masked(value, message):
    with pytest.raises(ValueError) as caught:
        notify.parse(value)
    assert str(caught.value) == message
    assert _secrets_in(message) == []


def test_the_options_step_refuses_a_bad_value_before_any_change_and_keeps_the_urls_masked():
    bad = options.validate({"cuda13_notify": {"targets": [{"url": SLACK, "format": "teams"}]}}, {})
    assert bad["ok"] is False
    assert bad["failures"][0]["message"].startswith(
        "cuda13_notify is not a notification setting (targets[0] format 'teams' is not slack or json): "
        "{'targets': [{'url': 'https://hooks.slack.com/***', 'format': 'teams'}]}. Option: cuda13_notify."
    )
    assert _secrets_in(json.dumps(bad, default=str)) == []
    good = options.validate({"cuda13_notify": OPTION}, {})
    assert good["ok"] is True
    # The record every step reads (the fact cuda13_options, which -v prints) holds the URLs masked.
    assert good["values"]["cuda13_notify"]["targets"][0]["url"] == "https://hooks.slack.com/***"
    assert _secrets_in(json.dumps(good["values"], default=str)) == []


def test_the_start_gate_checks_the_option_shows_it_masked_and_needs_one_value(tmp_path):
    given = {h: {"cuda13_notify": OPTION} for h in HOSTS}
    gate = fleet.start(HOSTS, given, run_id=RUN, reports_dir=tmp_path, use_breaker=False)
    assert gate["failures"] == []
    assert gate["fleet"]["notify"]["targets"][1] == {"url": "https://ops.example:8443/***", "format": "json"}
    assert gate["fleet"]["notify_text"] in gate["lines"]
    assert _secrets_in(json.dumps(gate, default=str)) == []
    assert gate["notified"] == [] and not (tmp_path / RUN).exists()  # tell=False: the plan tells nothing
    differing = {**given, "gpu-node-04": {"cuda13_notify": {"targets": [{"url": SLACK, "format": "slack"}]}}}
    refused = fleet.start(HOSTS, differing, run_id=RUN, reports_dir=tmp_path, use_breaker=False, tell=True)
    assert refused["failures"][0].startswith("cuda13_notify differs between the hosts of the rollout")
    assert _secrets_in("\n".join(refused["failures"])) == []
    bad = {h: {"cuda13_notify": [{"url": HOOK, "format": "xml"}]} for h in HOSTS}
    refused = fleet.start(HOSTS, bad, run_id=RUN, reports_dir=tmp_path, use_breaker=False, tell=True)
    assert refused["failures"] == [
        "cuda13_notify targets[0] format 'xml' is not slack or json: {'targets': [{'url': "
        "'https://ops.example:8443/***', 'format': 'xml'}]}. Option: cuda13_notify. Fix: give format: slack "
        "(Slack's incoming webhook) or format: json (the event's record)."
    ]
    assert refused["notified"] == []


# --- the bodies --------------------------------------------------------------------------------


def _plan():
    return fleet.plan(
        HOSTS,
        {
            "cuda13_serial": [1, 2, "100%"],
            "cuda13_window": {"start": "22:00", "end": "06:00", "timezone": "Europe/Berlin"},
            "cuda13_max_failed_hosts": 1,
            "cuda13_notify": OPTION,
        },
        "2026-12-05T22:00:00Z",
    )


STATUSES = {"gpu-node-01": "kept", "gpu-node-02": "kept", "gpu-node-03": "rolled_back", "gpu-node-04": None}


def test_the_start_body_is_the_plans_one_line_summary():
    event = notify.start_event(RUN, _plan(), at="2026-12-05T22:00:00Z")
    text = (
        "cuda13-upgrade run 20261205T220000Z started: 4 hosts in 3 batches, cuda13_serial [1, 2, '100%']; window "
        "22:00-06:00 Europe/Berlin, every day; failure budget 1 host(s)"
    )
    assert notify.slack_body(event) == {"text": text}
    assert notify.json_body(event) == {
        "event": "start",
        "run_id": RUN,
        "at": "2026-12-05T22:00:00Z",
        "text": text,
        "hosts": HOSTS,
        "batches": [1, 2, 1],
        "window": "22:00-06:00 Europe/Berlin, every day",
        "until": "",
        "max_failed_hosts": 1,
        "summary": {"hosts": 4, "pending": 4},
    }
    # The estimated end has its place, told only when the plan has one.
    later = notify.start_event(RUN, _plan(), at="2026-12-05T22:00:00Z", estimated_end="2026-12-06T01:40:00Z")
    assert later["text"] == text + "; estimated end 2026-12-06T01:40:00Z"
    assert later["estimated_end"] == "2026-12-06T01:40:00Z"


def test_a_batch_end_and_its_rollback_with_the_reason():
    end = notify.batch_end_event(
        RUN, 2, 3, {"gpu-node-02": "kept", "gpu-node-03": "rolled_back"}, STATUSES, at="2026-12-05T22:41:09Z"
    )
    said = (
        "cuda13-upgrade run 20261205T220000Z: batch 2 of 3 ended: gpu-node-02 kept, gpu-node-03 rolled back; "
        "so far 2 kept, 1 rolled back, 1 to go"
    )
    assert notify.slack_body(end) == {"text": said}
    assert notify.json_body(end) == {
        "event": "batch_end",
        "run_id": RUN,
        "at": "2026-12-05T22:41:09Z",
        "text": said,
        "batch": 2,
        "of": 3,
        "hosts": ["gpu-node-02", "gpu-node-03"],
        "outcomes": {"gpu-node-02": "kept", "gpu-node-03": "rolled_back"},
        "kept": 1,
        "rolled_back": 1,
        "failed": 0,
        "summary": {"hosts": 4, "kept": 2, "rolled_back": 1, "pending": 1},
    }
    result = {
        "host": "gpu-node-03",
        "status": "rolled_back",
        "failed_step": "verify",
        "reason": SLOWER,
    }
    rollback = notify.rollback_event(RUN, result, STATUSES, at="2026-12-05T22:41:09Z")
    assert (
        rollback["text"]
        == f"cuda13-upgrade run 20261205T220000Z: gpu-node-03: rolled back at step 'verify': {SLOWER}"
    )
    assert {k: rollback[k] for k in ("event", "host", "status", "step", "reason")} == {
        "event": "rollback",
        "host": "gpu-node-03",
        "status": "rolled_back",
        "step": "verify",
        "reason": SLOWER,
    }
    assert notify.slack_body(rollback) == {"text": rollback["text"]}
    # A host without a recorded reason still says so.
    bare = notify.rollback_event(RUN, {"host": "gpu-node-04", "status": "failed"}, STATUSES, at="x")
    assert bare["text"] == "cuda13-upgrade run 20261205T220000Z: gpu-node-04: failed: no reason recorded"


def test_the_stops_name_why_and_the_hosts_left(tmp_path):
    spent = budget.decide(HOSTS, ["gpu-node-04"], HOSTS, {**STATUSES, "gpu-node-02": "failed"}, 1)
    record = {
        "said": "not reached",
        "reason": spent["reason"],
        "failed": spent["failed"],
        "hosts": spent["hosts"],
    }
    event = notify.stop_event(RUN, "budget_spent", record, STATUSES, at="2026-12-05T23:10:00Z")
    assert event["text"] == (
        "cuda13-upgrade run 20261205T220000Z stopped: failure budget spent (hosts gpu-node-02 failed, gpu-node-03 "
        "rolled back; cuda13_max_failed_hosts 1); 1 host(s) not reached: gpu-node-04"
    )
    assert event["event"] == "budget_spent" and event["hosts_left"] == ["gpu-node-04"]
    assert event["failed"] == spent["failed"]
    # The window closed: the batch gate's own record.
    closed = fleet.plan(
        HOSTS, {"cuda13_serial": 1, "cuda13_window": {"start": "00:00", "end": "00:01", "timezone": "UTC"}}
    )
    statuses = {"gpu-node-01": "kept", "gpu-node-02": "kept"}
    gate = _gate(closed, tmp_path, ["gpu-node-03"], statuses, now="2026-12-05T12:00:00Z")
    window = notify.stop_event(RUN, "window_closed", gate["not_started"], STATUSES, at="2026-12-05T12:00:00Z")
    assert window["text"] == (
        "cuda13-upgrade run 20261205T220000Z stopped: outside the window cuda13_window (00:00-00:01 UTC, every "
        "day); it opens next at 2026-12-06T00:00:00Z; 2 host(s) not started: gpu-node-03, gpu-node-04"
    )
    assert window["opens_at"] == "2026-12-06T00:00:00Z"
    assert notify.slack_body(window) == {"text": window["text"]}


def test_alerts_that_held_the_batch_go_into_the_body():
    from cuda13_upgrade import alerts

    held = alerts.active_alerts(json.loads((FIXTURES / "rules-2.42-active.json").read_text()))
    blocking = alerts.sort_out(held, alerts.parse("http://prometheus.example:9090"))["blocking"]
    record = {
        "said": "not started",
        "reason": f"held by active alerts for 600 s (max_wait_s): {alerts.describe_alerts(blocking)} "
        "(Prometheus http://prometheus.example:9090, cuda13_block_on_alerts)",
        "alerts": blocking,
        "hosts": ["gpu-node-03", "gpu-node-04"],
    }
    event = notify.stop_event(RUN, "alerts_held", record, STATUSES, at="2026-12-05T23:00:00Z")
    assert event["alerts"] == [
        {
            "alertname": "GpuNodeHot",
            "labels": {"alertname": "GpuNodeHot", "severity": "page"},
            "state": "firing",
            "active_at": "2026-12-06T07:36:53Z",
        }
    ]
    assert event["text"].startswith(
        'cuda13-upgrade run 20261205T220000Z stopped: held by active alerts for 600 s (max_wait_s): GpuNodeHot{severity="page"} '
        "firing since 2026-12-06T07:36:53Z"
    )
    assert event["text"].endswith("; 2 host(s) not started: gpu-node-03, gpu-node-04")


def test_the_breaker_and_the_end():
    record = {
        "said": "not started",
        "reason": "breaker tripped (2 rollbacks or failures of rollouts in the last 7 days: gpu-node-02 in run "
        "20261201T220000Z, gpu-node-03 in run 20261203T220000Z; cuda13_breaker_rollbacks 2; acknowledge with "
        "--ack-breaker 20261203T220000Z)",
        "hosts": HOSTS,
        "before_any_change": True,
    }
    event = notify.breaker_event(RUN, record, at="2026-12-05T22:00:00Z")
    assert event["text"] == (
        f"cuda13-upgrade run 20261205T220000Z refused, no host was changed: {record['reason']} (4 host(s) not "
        "started: gpu-node-01, gpu-node-02, gpu-node-03, gpu-node-04)"
    )
    assert event["summary"] == {"hosts": 4, "not_started": 4}
    statuses = {
        "gpu-node-01": "kept",
        "gpu-node-02": "kept",
        "gpu-node-03": "rolled_back",
        "gpu-node-04": "not reached",
    }
    end = notify.end_event(
        RUN, statuses, "/srv/cuda13/reports/20261205T220000Z/summary.md", at="2026-12-06T01:02:03Z"
    )
    text = (
        "cuda13-upgrade run 20261205T220000Z ended: 2 kept, 1 rolled back, 1 not reached (4 host(s)); report: "
        "/srv/cuda13/reports/20261205T220000Z/summary.md"
    )
    assert notify.slack_body(end) == {"text": text}
    assert notify.json_body(end) == {
        "event": "end",
        "run_id": RUN,
        "at": "2026-12-06T01:02:03Z",
        "text": text,
        "report": "/srv/cuda13/reports/20261205T220000Z/summary.md",
        "summary": {"hosts": 4, "kept": 2, "rolled_back": 1, "not_reached": 1},
    }


def test_slack_text_escapes_its_three_control_characters_only():
    assert notify.slack_escape("a < b & c > d 'e' \"f\"") == "a &lt; b &amp; c &gt; d 'e' \"f\""
    event = {"event": "rollback", "text": "gpu-node-03: failed: torch<2.10 & >=2.9"}
    assert json.loads(notify.body(event, "slack")) == {
        "text": "gpu-node-03: failed: torch&lt;2.10 &amp; &gt;=2.9"
    }
    assert json.loads(notify.body(event, "json")) == event


# --- sending -----------------------------------------------------------------------------------


class Poster:
    """A post that answers per URL: an int status, an exception to raise, or seconds to hang."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, url, data, headers, timeout_s):
        self.calls.append((url, json.loads(data), dict(headers), timeout_s))
        answer = self.answers[url]
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, float):
            time.sleep(answer)
            raise TimeoutError("timed out")
        return answer


def test_a_target_that_errors_is_recorded_not_raised():
    told = notify.parse(OPTION)
    no_team = urllib.error.HTTPError(SLACK, 404, "Not Found", {}, io.BytesIO(b"no_team"))
    poster = Poster({SLACK: no_team, HOOK: 200})
    event = notify.end_event(RUN, STATUSES, "/r/summary.md", at="x")
    records = notify.send_all(told.targets, event, told.timeout_s, poster)
    assert [{k: r[k] for k in ("event", "url", "format", "status", "code", "error")} for r in records] == [
        {
            "event": "end",
            "url": "https://hooks.slack.com/***",
            "format": "slack",
            "status": "failed",
            "code": 404,
            "error": "HTTP 404 Not Found: no_team",
        },
        {
            "event": "end",
            "url": "https://ops.example:8443/***",
            "format": "json",
            "status": "sent",
            "code": 200,
            "error": "",
        },
    ]
    assert all(r["elapsed_s"] >= 0 for r in records)
    assert poster.calls[0][2] == {"Content-Type": "application/json", "User-Agent": "cuda13-upgrade"}
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    odd = RuntimeError(f"proxy refused {HOOK}")  # anything a post raises, the URL in it masked
    records = notify.send_all(told.targets, event, 1, Poster({SLACK: refused, HOOK: odd}))
    assert [r["error"] for r in records] == [
        "[Errno 111] Connection refused",
        "proxy refused https://ops.example:8443/***",
    ]
    assert _secrets_in(json.dumps(records)) == []
    assert notify.failure_lines(records) == [
        "notification end not sent to https://hooks.slack.com/*** (slack): [Errno 111] Connection refused",
        "notification end not sent to https://ops.example:8443/*** (json): proxy refused https://ops.example:8443/***",
    ]


def test_a_hung_target_costs_at_most_the_timeout_and_keeps_the_others_order():
    told = notify.parse({**OPTION, "timeout_s": 1})
    poster = Poster({SLACK: 200, HOOK: 3.0})  # the second never answers within the timeout
    events = [
        notify.batch_end_event(RUN, 1, 3, {"gpu-node-01": "kept"}, STATUSES, at="x"),
        notify.rollback_event(
            RUN, {"host": "gpu-node-03", "status": "rolled_back", "reason": SLOWER}, STATUSES, at="x"
        ),
    ]
    began = time.monotonic()
    records = notify.send_all(told.targets, events, told.timeout_s, poster)
    took = time.monotonic() - began
    assert took < 1 + 0.5, took  # a bound, not a benchmark
    assert [(r["event"], r["format"], r["status"]) for r in records] == [
        ("batch_end", "slack", "sent"),
        ("rollback", "slack", "sent"),
        ("batch_end", "json", "failed"),
        ("rollback", "json", "not sent"),
    ]
    assert records[2]["error"] == "no answer within 1 s (timeout_s)" and records[2]["elapsed_s"] <= 1.5
    assert records[3]["error"] == "the send's 1 s (timeout_s) were spent before it"
    slack_texts = [call[1]["text"] for call in poster.calls if call[0] == SLACK]
    assert slack_texts == [events[0]["text"], events[1]["text"]]
    assert all(call[3] <= 1.0 for call in poster.calls)  # each post gets what is left of the timeout


# --- the run's record, through the real gates ------------------------------------------------------


def _results(reports: Path, results: dict) -> None:
    for host, result in results.items():
        path = reports / RUN / host / "result.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"host": host, "run_id": RUN, **result}))


def test_the_gates_tell_each_batch_once_and_the_end_once(tmp_path):
    plan = fleet.plan(
        HOSTS, {"cuda13_serial": [1, 2, 1], "cuda13_max_failed_hosts": 1}, "2026-12-05T22:00:00Z"
    )
    poster = Poster({SLACK: 200, HOOK: 200})
    given = {
        h: {"cuda13_serial": [1, 2, 1], "cuda13_max_failed_hosts": 1, "cuda13_notify": OPTION} for h in HOSTS
    }
    start = fleet.start(
        HOSTS,
        given,
        run_id=RUN,
        reports_dir=tmp_path,
        use_breaker=False,
        started="2026-12-05T22:00:00Z",
        tell=True,
        post=poster,
    )
    assert [r["status"] for r in start["notified"]] == ["sent", "sent"]

    def gate(batch, statuses):
        return _gate(
            plan, tmp_path, batch, statuses, now="2026-12-05T22:30:00Z", notify_value=OPTION, post=poster
        )

    assert gate(["gpu-node-01"], {})["notified"] == []  # the canary: nothing has ended yet
    _results(tmp_path, {"gpu-node-01": {"status": "kept"}})
    assert [
        r["event"] for r in gate(["gpu-node-02", "gpu-node-03"], {"gpu-node-01": "kept"})["notified"]
    ] == ["batch_end"] * 2
    _results(
        tmp_path,
        {
            "gpu-node-02": {"status": "kept"},
            "gpu-node-03": {"status": "rolled_back", "failed_step": "verify", "reason": SLOWER},
        },
    )
    last = gate(["gpu-node-04"], {"gpu-node-01": "kept", "gpu-node-02": "kept", "gpu-node-03": "rolled_back"})
    assert last["start"] is True
    assert [(r["event"], r["format"]) for r in last["notified"]] == [
        ("batch_end", "slack"),
        ("rollback", "slack"),
        ("batch_end", "json"),
        ("rollback", "json"),
    ]
    _results(tmp_path, {"gpu-node-04": {"status": "kept"}})
    statuses = {
        "gpu-node-01": "kept",
        "gpu-node-02": "kept",
        "gpu-node-03": "rolled_back",
        "gpu-node-04": "kept",
    }
    report = str(tmp_path / RUN / "summary.md")
    told = fleet.end(
        tmp_path / RUN, run_id=RUN, statuses=statuses, report=report, notify_value=OPTION, post=poster
    )
    assert [r["event"] for r in told] == ["batch_end", "end"] * 2  # the last batch, which no gate followed
    again = fleet.end(
        tmp_path / RUN, run_id=RUN, statuses=statuses, report=report, notify_value=OPTION, post=poster
    )
    assert again == []  # once per run
    sent = [call[1] for call in poster.calls if call[0] == HOOK]
    assert [(b["event"], b.get("batch")) for b in sent] == [
        ("start", None),
        ("batch_end", 1),
        ("batch_end", 2),
        ("rollback", None),
        ("batch_end", 3),
        ("end", None),
    ]
    assert sent[3]["reason"] == SLOWER and sent[4]["of"] == 3
    state = json.loads((tmp_path / RUN / "notifications.json").read_text())
    assert [e["event"] for e in state["sent"]] == [b["event"] for b in sent]
    assert state["ended"] is True and state["announced"] == HOSTS
    # summary.md and run.json's record say what went where, the URLs masked
    summary = fleet_summary(tmp_path / RUN, HOSTS)["markdown"]
    assert "## Notifications" in summary
    assert (
        "cuda13_notify: https://hooks.slack.com/*** (slack), https://ops.example:8443/*** (json); each send waits "
        "at most 2 s (timeout_s)." in summary
    )
    assert "- 2026-12-05T22:00:00Z start: sent to 2 of 2" in summary
    assert notify.run_record(tmp_path / RUN)[0] == {
        "event": "start",
        "at": "2026-12-05T22:00:00Z",
        "sent": 2,
        "targets": 2,
        "errors": [],
    }
    every = "\n".join(
        p.read_text() for p in (tmp_path / RUN).rglob("*") if p.is_file() and p.suffix != ".png"
    )
    assert _secrets_in(every) == []


def test_a_tripped_breaker_is_told_as_the_runs_refusal(tmp_path):
    for run, host in (("20261201T220000Z", "gpu-node-02"), ("20261203T220000Z", "gpu-node-03")):
        path = tmp_path / run / host / "result.json"
        path.parent.mkdir(parents=True)
        path.write_text(
            json.dumps(
                {
                    "host": host,
                    "run_id": run,
                    "status": "rolled_back",
                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "reason": "slower",
                }
            )
        )
    poster = Poster({SLACK: 200, HOOK: 200})
    given = {h: {"cuda13_breaker_rollbacks": 2, "cuda13_notify": OPTION} for h in HOSTS}
    gate = fleet.start(
        HOSTS, given, run_id=RUN, reports_dir=tmp_path, use_breaker=True, tell=True, post=poster
    )
    assert gate["not_started"] is not None
    body = poster.calls[1][1]
    assert body["event"] == "breaker" and body["reason"].startswith(
        "breaker tripped (2 rollbacks or failures"
    )
    assert poster.calls[0][1] == {"text": notify.slack_escape(body["text"])}
    # the refused run's end: nothing more is told
    statuses = dict.fromkeys(HOSTS, "not reached")
    assert (
        fleet.end(tmp_path / RUN, run_id=RUN, statuses=statuses, report="r", notify_value=OPTION, post=poster)
        == []
    )
    assert "breaker: sent to 2 of 2" in (tmp_path / RUN / "summary.md").read_text()


def test_a_send_in_flight_does_not_hold_the_gate(tmp_path):
    """The gate returns within the timeout although the webhook's thread is still waiting."""
    plan = fleet.plan(HOSTS, {"cuda13_serial": 1}, "2026-12-05T22:00:00Z")
    option = {"targets": [{"url": HOOK, "format": "json"}], "timeout_s": 1}
    given = {h: {"cuda13_serial": 1, "cuda13_notify": option} for h in HOSTS}
    gate_event = threading.Event()

    def post(url, data, headers, timeout_s):
        gate_event.wait(5)
        return 200

    began = time.monotonic()
    fleet.start(HOSTS, given, run_id=RUN, reports_dir=tmp_path, use_breaker=False, tell=True, post=post)
    _results(tmp_path, {"gpu-node-01": {"status": "kept"}})
    result = _gate(plan, tmp_path, ["gpu-node-02"], {"gpu-node-01": "kept"}, notify_value=option, post=post)
    took = time.monotonic() - began
    gate_event.set()
    assert result["start"] is True and took < 2 * 1 + 1, took  # two sends, each at most 1 s
    assert [r["error"] for r in result["notified"]] == ["no answer within 1 s (timeout_s)"]


@pytest.mark.parametrize("kind", ["budget_spent", "window_closed", "alerts_held", "prometheus_unreachable"])
def test_a_gate_that_starts_no_batch_tells_why_after_the_batch_before_it(tmp_path, kind):
    options_given = {"cuda13_serial": 1, "cuda13_max_failed_hosts": 0 if kind == "budget_spent" else 1}
    if kind == "window_closed":
        options_given["cuda13_window"] = {"start": "00:00", "end": "00:01", "timezone": "UTC"}
    if kind in ("alerts_held", "prometheus_unreachable"):
        options_given["cuda13_block_on_alerts"] = {"url": "http://prometheus.example:9090", "max_wait_s": 0}
    given = {h: {**options_given, "cuda13_notify": OPTION} for h in HOSTS}
    poster = Poster({SLACK: 200, HOOK: 200})
    start = fleet.start(
        HOSTS, given, run_id=RUN, reports_dir=tmp_path, use_breaker=False, tell=True, post=poster
    )
    _results(tmp_path, {"gpu-node-01": {"status": "rolled_back", "failed_step": "verify", "reason": SLOWER}})

    def fetch(url, headers, timeout_s):
        if kind == "prometheus_unreachable":
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return (FIXTURES / "rules-2.42-active.json").read_bytes()

    gate = _gate(
        start["fleet"],
        tmp_path,
        ["gpu-node-02"],
        {"gpu-node-01": "rolled_back"},
        now="2026-12-05T12:00:00Z",
        sleep=lambda seconds: None,
        fetch=fetch,
        notify_value=OPTION,
        post=poster,
    )
    assert gate["start"] is False
    sent = [call[1] for call in poster.calls if call[0] == HOOK]
    assert [b["event"] for b in sent] == ["start", "batch_end", "rollback", kind]
    stop = sent[-1]
    assert (
        stop["reason"] == gate["not_started"]["reason"] and stop["hosts_left"] == gate["not_started"]["hosts"]
    )
    assert stop["text"].startswith(f"cuda13-upgrade run {RUN} stopped: {gate['not_started']['reason']}; ")
    if kind == "alerts_held":
        assert [a["alertname"] for a in stop["alerts"]] == ["GpuNodeHot"]
    if kind == "prometheus_unreachable":
        assert stop["error"] == "[Errno 111] Connection refused"
    if kind == "window_closed":
        assert stop["opens_at"] == "2026-12-06T00:00:00Z"
    # The run's end tells only the end: the batch before was told by the gate.
    statuses = {"gpu-node-01": "rolled_back", **dict.fromkeys(HOSTS[1:], "not reached")}
    told = fleet.end(
        tmp_path / RUN, run_id=RUN, statuses=statuses, report="r", notify_value=OPTION, post=poster
    )
    assert [r["event"] for r in told] == ["end", "end"]


def test_webhook_urls_are_masked_wherever_the_project_redacts():
    from cuda13_upgrade.redact import redact, redact_text, redact_url

    assert redact_text(f"posting to {SLACK} now") == "posting to https://hooks.slack.com/*** now"
    assert redact_text(json.dumps({"url": SLACK})) == '{"url": "https://hooks.slack.com/***"}'
    assert redact({"cuda13_notify": OPTION, "url": "https://ops.example/x"}) == {
        "cuda13_notify": {
            "targets": [
                {"url": "https://hooks.slack.com/***", "format": "slack"},
                {"url": "https://ops.example:8443/***", "format": "json"},
            ],
            "timeout_s": 2,
        },
        "url": "https://ops.example/x",  # an ordinary URL elsewhere is kept
    }
    assert redact_url("https://user:pw@ops.example/") == "https://ops.example/***"
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert redact_url(redact_url(HOOK)) == redact_url(HOOK) == "https://ops.example:8443/***"


# A webhook URL with a user and password (sent as HTTP basic authentication by http_post).
WITH_USER = "https://ops:PLANTEDsecret42@ops.example:8443/hooks/cuda13?token=PLANTEDsecret42"


def test_a_text_is_redacted_before_it_is_cut_so_a_cut_url_leaks_nothing():
    url = "https://ops:PLANTEDsecret42@ops.example/hook"
    head = f"cuda13-upgrade run {RUN} refused, no host was changed: "
    # the cut (MAX_TEXT - 1 characters) falls inside the password: "https://ops:PLANTEDsec"
    reason = "x" * (notify.MAX_TEXT - 1 - len(head) - len("https://ops:PLANTEDsec")) + url
    event = notify.breaker_event(RUN, {"reason": reason, "hosts": ["gpu-node-01"]}, at="x")
    assert len(event["text"]) == notify.MAX_TEXT and event["text"].endswith("…")
    assert "PLANTED" not in event["text"] and "ops:" not in event["text"]
    assert "PLANTED" not in json.dumps(notify.json_body(event))
    assert "PLANTED" not in json.dumps(notify.slack_body(event))


def test_every_field_of_the_json_body_is_redacted():
    leaked = "pip could not reach https://ops:PLANTEDsecret42@pypi.example/simple"
    masked = "pip could not reach https://***@pypi.example/simple"
    stop = notify.stop_event(
        RUN,
        "prometheus_unreachable",
        {"said": "not started", "reason": leaked, "hosts": [leaked], "error": leaked},
        {h: None for h in HOSTS},
        at="x",
    )
    rollback = notify.rollback_event(
        RUN, {"host": "gpu-node-01", "status": "failed", "reason": leaked}, {"gpu-node-01": "failed"}, at="x"
    )
    sent = json.loads(notify.body(stop, "json"))
    assert (sent["reason"], sent["error"], sent["hosts_left"]) == (masked, masked, [masked])
    assert json.loads(notify.body(rollback, "json"))["reason"] == masked
    for event in (stop, rollback):
        assert "PLANTED" not in json.dumps(notify.json_body(event))
        assert "PLANTED" not in notify.body(event, "slack").decode()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com:99999/hook/SECRETPATH", "https://hooks.example.com/***"),
        ("https://u:p/w@h.example/SECRETPATH", "https://***"),
        ("htps://hooks.example.com/hook/SECRETPATH", "htps://hooks.example.com/***"),
        ("hooks.example.com/hook/SECRETPATH", "hooks.example.com/***"),
        ("https://hooks.example.com/hook/SECRET\x07PATH", "https://***"),
        ("https://hooks.example.com/hook/SECRET PATH", "https://***"),
        ("https://hooks.example.com/hook/SECRET\nPATH", "https://***"),
    ],
)
def test_a_url_that_cannot_be_read_is_refused_and_never_shown_in_full(url, shown):
    with pytest.raises(ValueError) as caught:
        notify.parse([{"url": url, "format": "json"}])
    message = str(caught.value)
    assert "SECRET" not in message and "PATH" not in message
    assert f"url {shown!r}" in message and f"'url': {shown!r}" in message
    assert "u:p" not in message and "/w@" not in message


def test_a_send_error_that_quotes_the_cleaned_url_is_masked():
    # urllib.request.Request._parse: raise ValueError("unknown url type: %r" % self.full_url)
    # (CPython Lib/urllib/request.py); full_url is the URL http_post requests, its user left out.
    told = notify.parse(
        {"targets": [{"url": WITH_USER, "format": "json"}, {"url": SLACK, "format": "slack"}]}
    )
    clean = "https://ops.example:8443/hooks/cuda13?token=PLANTEDsecret42"
    selector = "/services/T1234567/AAAAAAAA/ZZZZZZ"

    def post(url, data, headers, timeout_s):
        if url == WITH_USER:
            raise ValueError(f"unknown url type: {clean!r}")
        raise OSError(f"proxy refused {selector} (first target {WITH_USER})")

    records = notify.send_all(told.targets, notify.end_event(RUN, STATUSES, "/r", at="x"), 2, post)
    assert [r["error"] for r in records] == [
        "unknown url type: 'https://ops.example:8443/***'",
        "proxy refused *** (first target https://ops.example:8443/***)",
    ]
    assert _secrets_in(json.dumps(records)) == [] and "PLANTED" not in json.dumps(records)


# --- hostile values and webhooks ---------------------------------------------------------------


def test_a_timeout_too_large_for_a_float_is_refused_naming_the_key():
    """YAML reads an unquoted 1 followed by 400 zeros as an int that no float can hold."""
    with pytest.raises(ValueError) as caught:
        notify.parse({"targets": [{"url": HOOK, "format": "json"}], "timeout_s": 10**400})
    assert str(caught.value).startswith("cuda13_notify timeout_s 1000")
    assert "is not a number of seconds >= 1 and <= 60: " in str(caught.value)
    assert _secrets_in(str(caught.value)) == []
    value = {"targets": [{"url": HOOK, "format": "json"}], "timeout_s": 10**400}
    assert options.validate({"cuda13_notify": value}, {})["ok"] is False


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "https://ops.example:8443/hooks/cuda13/été?token=PLANTEDsecret42",
            "url 'https://ops.example:8443/***' has a character that is not ASCII in its path or query",
        ),
        (
            "https://ops.example:8443/hooks/cuda13?token=PLANTEDsecret42é",
            "url 'https://ops.example:8443/***' has a character that is not ASCII in its path or query",
        ),
        (
            "https://ops.example:0/hooks/cuda13?token=PLANTEDsecret42",
            "url 'https://ops.example:0/***' cannot be read (its port, or an @ or / in its user or password)",
        ),
    ],
)
def test_a_url_no_request_can_use_is_refused_before_any_send(url, problem):
    """http.client writes the request line in ASCII ('ascii' codec can't encode ...): every send of
    the night would fail; no server listens on port 0."""
    with pytest.raises(ValueError) as caught:
        notify.parse({"targets": [{"url": url, "format": "json"}]})
    assert str(caught.value).startswith(f"cuda13_notify targets[0] {problem}: ")
    assert _secrets_in(str(caught.value)) == []


def _reply(status, headers=(), body=b""):
    def answer(handler, _body):
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_webhook_that_redirects_is_a_send_that_failed_and_nothing_follows_it(monkeypatch, status):
    """urllib follows a 301/302/303 to a POST as a GET without the body (CPython
    Lib/urllib/request.py, HTTPRedirectHandler.redirect_request), to any host, with the
    Authorization header: the message never arrived, and the record said sent."""
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")
    with Webhooks(_reply(200, body=b"ok")) as elsewhere:
        target = f"http://localhost:{elsewhere.port}/hooks/next/PLANTEDsecret42"
        with Webhooks(_reply(status, [("Location", target)])) as hook:
            told = notify.parse(
                [{"url": f"http://ops:PLANTEDsecret42@127.0.0.1:{hook.port}/hooks/cuda13", "format": "json"}]
            )
            records = notify.send_all(told.targets, notify.end_event(RUN, STATUSES, "/r", at="x"), 5)
    assert [(r["status"], r["code"]) for r in records] == [("failed", status)]
    assert records[0]["error"].endswith(
        f"(a redirect to http://localhost:{elsewhere.port}/***, not followed: give the URL it redirects to)"
    )
    assert elsewhere.received == [] and [r.method for r in hook.received] == ["POST"]
    assert _secrets_in(json.dumps(records)) == []


def test_a_webhook_that_echoes_the_request_s_credentials_has_them_masked(monkeypatch):
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")

    def echo(handler, _body):
        said = f"denied {handler.headers.get('Authorization')} for ops:PLANTEDsecret42".encode()
        _reply(403, body=said)(handler, _body)

    with Webhooks(echo) as hook:
        told = notify.parse(
            [{"url": f"http://ops:PLANTEDsecret42@127.0.0.1:{hook.port}/h", "format": "json"}]
        )
        records = notify.send_all(told.targets, notify.end_event(RUN, STATUSES, "/r", at="x"), 5)
    assert records[0]["error"] == "HTTP 403 Forbidden: denied Basic *** for ***"
    assert _secrets_in(json.dumps(records)) == []
