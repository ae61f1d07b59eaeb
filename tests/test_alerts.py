"""The alert gate (cuda13_upgrade.alerts, and the batch gate's wait in cuda13_upgrade.steps.fleet).

Inputs are Prometheus's own answers (tests/fixtures/prometheus/README.md): the rules API's
example of its documentation (prometheus/prometheus docs/querying/api.md, "Rules") and answers
of Debian's prometheus 2.42. The batch gate runs on a fake clock: ``sleep`` moves it on. A real
Prometheus holds and lets go a batch in tests/test_alerts_prometheus.py.
"""

from __future__ import annotations

import io
import json
import re
import urllib.error
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cuda13_upgrade import alerts, metrics, options
from cuda13_upgrade.steps import fleet

FIXTURES = Path(__file__).parent / "fixtures" / "prometheus"
HOSTS = ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
URL = "http://prometheus.example:9090"


def _answer(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _recorded() -> dict:
    return json.loads(_answer("rules-2.42-active.json"))


def _without(answer: dict, *names: str) -> dict:
    """``answer`` with the alerts of the rules ``names`` resolved (their ``alerts`` emptied)."""
    answer = json.loads(json.dumps(answer))
    for group in answer["data"]["groups"]:
        for rule in group["rules"]:
            if rule["name"] in names:
                rule["alerts"], rule["state"] = [], "inactive"
    return answer


# --- the rules API's answer -----------------------------------------------------------------


def test_the_documented_example_gives_its_one_firing_alert_and_skips_the_recording_rule():
    found = alerts.active_alerts(json.loads(_answer("rules-docs-example.json")))
    assert found == [
        {
            "alertname": "HighRequestLatency",
            "labels": {"alertname": "HighRequestLatency", "severity": "page"},
            "state": "firing",
            "active_at": "2018-07-04T18:27:12Z",  # 20:27:12.60602144+02:00, nanoseconds and offset
            "rule": "HighRequestLatency",
            "query": 'job:request_latency_seconds:mean5m{job="myjob"} > 0.5',
            "group": "example",
        }
    ]
    assert (
        alerts.describe_alert(found[0])
        == 'HighRequestLatency{severity="page"} firing since 2018-07-04T18:27:12Z'
    )


def test_a_recorded_answer_sorts_into_blocking_own_and_pending():
    gate = alerts.parse(URL)
    found = alerts.active_alerts(_recorded())
    assert [(a["alertname"], a["state"]) for a in found] == [
        ("GpuNodeHot", "firing"),
        ("Cuda13UpgradeRolledBack", "firing"),
        ("SlowPending", "pending"),
    ]
    sorted_out = alerts.sort_out(found, gate)
    assert [a["alertname"] for a in sorted_out["blocking"]] == ["GpuNodeHot"]
    assert [a["alertname"] for a in sorted_out["own"]] == ["Cuda13UpgradeRolledBack"]
    assert [a["alertname"] for a in sorted_out["pending"]] == ["SlowPending"]
    assert sorted_out["left_out"] == []
    # Pending alerts count too with firing_only false; the project's own alert still never does.
    pending_too = alerts.sort_out(found, alerts.parse({"url": URL, "firing_only": False}))
    assert [a["alertname"] for a in pending_too["blocking"]] == ["GpuNodeHot", "SlowPending"]
    assert [a["alertname"] for a in pending_too["own"]] == ["Cuda13UpgradeRolledBack"]


@pytest.mark.parametrize(
    ("given", "blocking", "left_out"),
    [
        # match-only: a regular expression on alertname, matching the whole name (PromQL's =~).
        ({"match": "Gpu.*"}, ["GpuNodeHot"], []),
        ({"match": "Gpu"}, [], ["GpuNodeHot"]),
        ({"match": {"severity": "page|critical"}}, ["GpuNodeHot"], []),
        ({"match": {"severity": "page", "team": "gpu"}}, [], ["GpuNodeHot"]),  # team is "" here
        # ignore: kured's --alert-filter-regexp, with its README's own example.
        ({"ignore": "^RebootRequired$"}, ["GpuNodeHot"], []),
        ({"ignore": ["^RebootRequired$", {"severity": "page"}]}, [], ["GpuNodeHot"]),
        ({"match": "Gpu.*", "ignore": {"severity": "page"}}, [], ["GpuNodeHot"]),
    ],
)
def test_match_and_ignore(given, blocking, left_out):
    sorted_out = alerts.sort_out(alerts.active_alerts(_recorded()), alerts.parse({"url": URL, **given}))
    assert [a["alertname"] for a in sorted_out["blocking"]] == blocking
    assert [a["alertname"] for a in sorted_out["left_out"]] == left_out


def test_the_projects_own_alert_never_counts_even_when_the_filter_names_it():
    gate = alerts.parse({"url": URL, "match": "Cuda13Upgrade.*", "firing_only": False})
    sorted_out = alerts.sort_out(alerts.active_alerts(_recorded()), gate)
    assert sorted_out["blocking"] == []
    assert [a["alertname"] for a in sorted_out["own"]] == ["Cuda13UpgradeRolledBack"]


@pytest.mark.parametrize(
    ("query", "own"),
    [
        ('absent(cuda13_upgrade_hosts{state="rolled_back"})', True),  # as Prometheus 2.42 prints it
        ('cuda13_upgrade_hosts{state="rolled_back"} > 0', True),
        ("time() - cuda13_upgrade_last_run_timestamp_seconds > 86400", True),
        ("max by (host) (cuda13_upgrade_host_out_of_service_seconds) > 600", True),
        ("job:cuda13_upgrade_hosts:sum > 1", True),  # a recording rule named after one
        ('{__name__=~"cuda13_upgrade_.+"} == 1', True),
        ("node_load1 > 4 and on(instance) cuda13_upgrade_state == 1", True),
        ('up{job="cuda13_upgrade_textfile"} == 0', False),  # a label value, not a metric read
        ("my_cuda13_upgrade_hosts > 0", False),
        ('job:request_latency_seconds:mean5m{job="myjob"} > 0.5', False),
        ("vector(time()) < 1.796542618e+09", False),
    ],
)
def test_reads_own_metrics(query, own):
    assert alerts.reads_own_metrics(query) is own


def test_every_metric_the_project_writes_is_its_own():
    texts = metrics.fleet_metrics([], "r1") + metrics.host_metrics(
        {"host": "h", "status": "kept", "run_id": "r1"}
    )
    names = re.findall(r"^# TYPE (\S+) ", texts, re.MULTILINE)
    assert len(names) >= 8
    assert all(alerts.reads_own_metrics(f"max({name}) > 0") for name in names), names


# --- the option --------------------------------------------------------------------------------


def test_a_url_alone_is_the_gate_with_its_defaults():
    gate = alerts.parse(URL)
    assert (gate.firing_only, gate.interval_s, gate.timeout_s, gate.max_wait_s, gate.on_unreachable) == (
        True,
        60,
        10,
        None,
        "refuse",
    )
    assert gate.match is None and gate.ignore is None
    assert gate.rules_url == "http://prometheus.example:9090/api/v1/rules?type=alert"
    assert alerts.parse(None) is None and alerts.parse({}) is None and alerts.parse("") is None


def test_credentials_go_into_a_header_and_are_masked_everywhere_else():
    gate = alerts.parse({"url": "https://ops:s3cr%40t@ops.example/prometheus/", "max_wait_s": 600})
    assert gate.rules_url == "https://ops.example/prometheus/api/v1/rules?type=alert"
    assert gate.display_rules_url == "https://***@ops.example/prometheus/api/v1/rules?type=alert"
    assert gate.headers()["Authorization"] == "Basic b3BzOnMzY3JAdA=="  # ops:s3cr@t
    assert gate.as_record()["url"] == "https://***@ops.example/prometheus/"
    assert "s3cr" not in alerts.describe(gate)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"url": "prometheus:9090"},
            "cuda13_block_on_alerts url is not an http:// or https:// URL: {'url': 'prometheus:9090'}. "
            "Option: cuda13_block_on_alerts. Fix: give the Prometheus server's URL, e.g. "
            "http://prometheus.example:9090.",
        ),
        (
            ["http://x"],
            "cuda13_block_on_alerts is not a mapping: ['http://x']. Option: cuda13_block_on_alerts. Fix: give "
            "{url: http://prometheus.example:9090, ignore: ..., match: ...}, or {} for no alert gate.",
        ),
        ({"match": "A"}, "cuda13_block_on_alerts has no url: {'match': 'A'}."),
        (
            {"url": URL, "firing": True},
            "cuda13_block_on_alerts has unknown keys ['firing']: {'url': 'http://prometheus.example:9090', "
            "'firing': True}. Option: cuda13_block_on_alerts. Fix: give only url, match, ignore, firing_only, "
            "interval_s, timeout_s, max_wait_s, on_unreachable.",
        ),
        ({"url": URL + "/api/v1/rules"}, "cuda13_block_on_alerts url is not the server's base URL"),
        ({"url": URL + "?x=1"}, "cuda13_block_on_alerts url is not the server's base URL"),
        ({"url": "http://prom:99999"}, "cuda13_block_on_alerts url has a bad port"),
        (
            {"url": "http://ops:p@ss@prom:9090"},
            "cuda13_block_on_alerts url has an @ in its user or password: {'url': 'http://***@prom:9090'}. "
            "Option: cuda13_block_on_alerts. Fix: give each @ of the user or password as %40 (percent-encoded).",
        ),
        (
            {"url": URL, "ignore": "Reboot("},
            "cuda13_block_on_alerts ignore alertname is not a regular expression (missing ), unterminated "
            "subpattern at position 6)",
        ),
        ({"url": URL, "match": {"severity": 1}}, "cuda13_block_on_alerts match severity is not a string"),
        (
            {"url": URL, "match": {"bad-label": "x"}},
            "cuda13_block_on_alerts match names 'bad-label', which is",
        ),
        ({"url": URL, "match": [3]}, "cuda13_block_on_alerts match holds 3, which is not a filter"),
        ({"url": URL, "firing_only": "maybe"}, "cuda13_block_on_alerts firing_only is not true or false"),
        (
            {"url": URL, "interval_s": 0},
            "cuda13_block_on_alerts interval_s is not a number of seconds >= 1 and <= 3600: "
            "{'url': 'http://prometheus.example:9090', 'interval_s': 0}. Option: cuda13_block_on_alerts. "
            "Fix: give interval_s: a number >= 1 and <= 3600.",
        ),
        ({"url": URL, "timeout_s": "ten"}, "cuda13_block_on_alerts timeout_s is not a number of seconds"),
        ({"url": URL, "max_wait_s": -1}, "cuda13_block_on_alerts max_wait_s is not a number of seconds >= 0"),
        (
            {"url": URL, "on_unreachable": "wait"},
            "cuda13_block_on_alerts on_unreachable is not refuse or proceed: {'url': "
            "'http://prometheus.example:9090', 'on_unreachable': 'wait'}. Option: cuda13_block_on_alerts. "
            "Fix: give on_unreachable: refuse (no batch starts while Prometheus does not answer) or proceed.",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_option_and_key(value, message):
    with pytest.raises(ValueError) as error:
        alerts.parse(value)
    assert str(error.value).startswith(message)
    assert "Option: cuda13_block_on_alerts." in str(error.value)


def test_the_option_check_refuses_a_bad_gate_before_any_change_with_the_password_masked():
    """Through cuda13_upgrade.options.validate, as the action cuda13_options runs it."""
    checked = options.validate(
        {"cuda13_block_on_alerts": {"url": "http://ops:s3cret@prom:9090", "ignore": "("}}, {}
    )
    assert checked["ok"] is False
    assert checked["failures"][0]["message"].startswith(
        "cuda13_block_on_alerts is not an alert gate (ignore alertname is not a regular expression (missing ), "
        "unterminated subpattern at position 0)): {'url': 'http://***@prom:9090', 'ignore': '('}. "
        "Option: cuda13_block_on_alerts. Fix: give a valid regular expression"
    )
    assert "s3cret" not in repr(checked["failures"])
    assert options.validate({"cuda13_block_on_alerts": {"url": URL, "ignore": "^RebootRequired$"}}, {})["ok"]
    assert options.validate({"cuda13_block_on_alerts": {}}, {})["ok"]


def test_the_start_gate_lists_a_bad_gate_and_prints_a_good_one(tmp_path):
    bad = {h: {"cuda13_block_on_alerts": {"url": URL, "interval_s": 0}} for h in HOSTS}
    refused = fleet.start(HOSTS, bad, run_id="r1", reports_dir=tmp_path, use_breaker=False)
    assert [f for f in refused["failures"] if f.startswith("cuda13_block_on_alerts interval_s")]
    good = {
        h: {"cuda13_block_on_alerts": {"url": "http://ops:s3cret@prom:9090", "ignore": "^Reboot.*"}}
        for h in HOSTS
    }
    gate = fleet.start(HOSTS, good, run_id="r1", reports_dir=tmp_path, use_breaker=False)
    assert gate["failures"] == []
    assert (
        "batches wait while Prometheus at http://***@prom:9090 has firing alerts (cuda13_block_on_alerts: not "
        'those matching {alertname=~"^Reboot.*"}; never those whose rule reads a cuda13_upgrade_* metric; asked '
        "every 60 s; a batch waits at most 3600 s (no window, no cuda13_until); no batch starts while it does "
        "not answer)"
    ) in gate["lines"]
    assert gate["fleet"]["alerts"]["url"] == "http://***@prom:9090"
    assert "s3cret" not in "\n".join(gate["lines"])


# --- asking ------------------------------------------------------------------------------------


def _fetch_of(*bodies):
    """A fetch that answers ``bodies`` in turn (bytes, or an exception to raise), the last again."""
    calls = []

    def fetch(url, headers, timeout_s):
        calls.append((url, dict(headers), timeout_s))
        body = bodies[min(len(calls), len(bodies)) - 1]
        if isinstance(body, BaseException):
            raise body
        return body if isinstance(body, bytes) else json.dumps(body).encode()

    fetch.calls = calls
    return fetch


def test_ask_names_what_failed():
    gate = alerts.parse({"url": URL, "timeout_s": 5})
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    assert alerts.ask(gate, _fetch_of(refused))["error"] == "[Errno 111] Connection refused"
    assert (
        alerts.ask(gate, _fetch_of(TimeoutError("timed out")))["error"] == "no answer within 5 s (timeout_s)"
    )
    bad_type = urllib.error.HTTPError(
        gate.rules_url, 400, "Bad Request", {}, io.BytesIO(_answer("rules-2.42-bad-type.json"))
    )
    assert alerts.ask(gate, _fetch_of(bad_type))["error"] == (
        'HTTP 400 Bad Request (bad_data: invalid parameter "type": not supported value "bogus")'
    )
    # Prometheus 2.42's answer under a path it does not serve (a wrong --web.route-prefix).
    not_found = urllib.error.HTTPError(
        gate.rules_url, 404, "Not Found", {}, io.BytesIO(b"404 page not found\n")
    )
    assert alerts.ask(gate, _fetch_of(not_found))["error"] == "HTTP 404 Not Found"
    html = alerts.ask(gate, _fetch_of(b"<html>Grafana</html>"))
    assert html["reachable"] is False and html["error"] == "the answer is not JSON (is the URL Prometheus's?)"
    other = alerts.ask(gate, _fetch_of({"status": "success", "data": {"alerts": []}}))
    assert other["error"] == "the answer has no data.groups list (is the URL Prometheus's?)"
    fine = alerts.ask(gate, fetch := _fetch_of(_answer("rules-2.42-active.json")))
    assert fine["reachable"] is True and fine["error"] == "" and len(fine["blocking"]) == 1
    assert fetch.calls == [(gate.rules_url, {"Accept": "application/json"}, 5.0)]


# --- the batch gate's wait ---------------------------------------------------------------------


class Clock:
    def __init__(self, at: str) -> None:
        self.at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += timedelta(seconds=seconds)


def _gate(tmp_path, plan, clock, fetch, batch=("gpu-node-02",), statuses=None):
    said: list[str] = []
    result = fleet.batch_gate(
        plan,
        hosts=HOSTS,
        batch=list(batch),
        active=HOSTS,
        statuses=statuses or {"gpu-node-01": "kept"},
        run_id="r1",
        reports_dir=tmp_path,
        run_hosts=HOSTS,
        now=clock,
        sleep=clock.sleep,
        fetch=fetch,
        say=said.append,
    )
    return result, said


def _plan(gate_option, **more):
    return fleet.plan(
        HOSTS, {"cuda13_serial": 1, "cuda13_block_on_alerts": gate_option, **more}, "2026-12-01T00:00:00Z"
    )


FIRING = _recorded()
QUIET = _without(FIRING, "GpuNodeHot")


def test_a_batch_waits_while_an_alert_fires_and_starts_once_it_resolves(tmp_path):
    clock = Clock("2026-12-01T01:00:00Z")
    fetch = _fetch_of(FIRING, FIRING, QUIET)
    result, said = _gate(tmp_path, _plan({"url": URL, "interval_s": 30}), clock, fetch)
    assert result == {"start": True, "not_started": None}
    assert clock.slept == [30, 30] and len(fetch.calls) == 3
    assert said == [
        "the batch gpu-node-02 waits: 1 active alert (Prometheus http://prometheus.example:9090, "
        'cuda13_block_on_alerts): GpuNodeHot{severity="page"} firing since 2026-12-06T07:36:53Z; asking again '
        "in 30 s, waiting until 2026-12-01T02:00:00Z at most",
    ] * 2 + [
        "the alerts cleared after 60 s: the batch gpu-node-02 starts (Prometheus http://prometheus.example:9090, "
        "cuda13_block_on_alerts)"
    ]
    assert not (tmp_path / "r1").exists()


def test_the_window_closes_on_a_held_batch_and_the_report_names_the_alerts(tmp_path):
    window = {"start": "01:00", "end": "02:00", "timezone": "UTC"}
    clock = Clock("2026-12-01T01:58:30Z")
    result, said = _gate(tmp_path, _plan(URL, cuda13_window=window), clock, _fetch_of(FIRING))
    assert clock.slept == [60, 30]  # the last pause ends when the window closes
    assert said[-1].endswith("asking again in 30 s, waiting until 2026-12-01T02:00:00Z at most")
    held = result["not_started"]
    assert result["start"] is False and held["said"] == "not started"
    assert held["reason"] == (
        "held by active alerts until the window closed (cuda13_window 01:00-02:00 UTC, every day): "
        'GpuNodeHot{severity="page"} firing since 2026-12-06T07:36:53Z (Prometheus '
        "http://prometheus.example:9090, cuda13_block_on_alerts)"
    )
    assert held["hosts"] == ["gpu-node-02", "gpu-node-03"]
    assert [a["alertname"] for a in held["alerts"]] == ["GpuNodeHot"]
    written = json.loads((tmp_path / "r1" / "not_started.json").read_text())
    assert written["reason"] == held["reason"] and written["alerts"][0]["labels"]["severity"] == "page"
    summary = (tmp_path / "r1" / "summary.md").read_text()
    assert (
        "| gpu-node-02 | not started" in summary
        and "held by active alerts until the window closed" in summary
    )


def test_until_and_max_wait_end_a_wait_too(tmp_path):
    until = _plan(URL, cuda13_until="2026-12-01T01:01:00+00:00")
    result, _ = _gate(tmp_path, until, Clock("2026-12-01T01:00:00Z"), _fetch_of(FIRING))
    assert result["not_started"]["reason"].startswith(
        "held by active alerts until cuda13_until passed (2026-12-01T01:01:00Z): GpuNodeHot"
    )
    never = _plan({"url": URL, "max_wait_s": 0})
    clock = Clock("2026-12-01T01:00:00Z")
    result, said = _gate(tmp_path, never, clock, _fetch_of(FIRING))
    assert clock.slept == [0] and len(said) == 1
    assert result["not_started"]["reason"].startswith(
        "held by active alerts for 0 s (max_wait_s): GpuNodeHot"
    )
    # Neither a window nor cuda13_until: an hour at most.
    clock = Clock("2026-12-01T01:00:00Z")
    result, said = _gate(tmp_path, _plan(URL), clock, _fetch_of(FIRING))
    assert sum(clock.slept) == 3600 and len(said) == 60
    assert result["not_started"]["reason"].startswith(
        "held by active alerts for 3600 s (without a window or cuda13_until): GpuNodeHot"
    )


def test_the_projects_own_and_pending_alerts_hold_no_batch(tmp_path):
    clock = Clock("2026-12-01T01:00:00Z")
    fetch = _fetch_of(QUIET)  # Cuda13UpgradeRolledBack fires, SlowPending is pending
    assert _gate(tmp_path, _plan(URL), clock, fetch) == ({"start": True, "not_started": None}, [])
    assert clock.slept == []


def test_an_unreachable_prometheus_refuses_the_batch_or_lets_it_start_when_told(tmp_path):
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    result, said = _gate(
        tmp_path, _plan("http://ops:s3cret@127.0.0.1:1"), Clock("2026-12-01T01:00:00Z"), _fetch_of(refused)
    )
    assert result["start"] is False and said == []
    assert result["not_started"]["reason"] == (
        "Prometheus cannot be asked for its alerts (GET http://***@127.0.0.1:1/api/v1/rules?type=alert: "
        "[Errno 111] Connection refused); cuda13_block_on_alerts on_unreachable is refuse"
    )
    assert result["not_started"]["hosts"] == ["gpu-node-02", "gpu-node-03"]
    assert "s3cret" not in (tmp_path / "r1" / "not_started.json").read_text()
    proceed = _plan({"url": "http://127.0.0.1:1", "on_unreachable": "proceed"})
    result, said = _gate(tmp_path, proceed, Clock("2026-12-01T01:00:00Z"), _fetch_of(refused))
    assert result == {"start": True, "not_started": None}
    assert said == [
        "Prometheus cannot be asked for its alerts (GET http://127.0.0.1:1/api/v1/rules?type=alert: [Errno 111] "
        "Connection refused); cuda13_block_on_alerts on_unreachable is proceed: the batch gpu-node-02 starts"
    ]


def test_a_spent_budget_or_a_closed_window_stops_before_prometheus_is_asked(tmp_path):
    fetch = _fetch_of(FIRING)
    spent, _ = _gate(
        tmp_path, _plan(URL), Clock("2026-12-01T01:00:00Z"), fetch, statuses={"gpu-node-01": "rolled_back"}
    )
    assert spent["not_started"]["said"] == "not reached"
    window = {"start": "01:00", "end": "02:00", "timezone": "UTC"}
    closed, _ = _gate(tmp_path, _plan(URL, cuda13_window=window), Clock("2026-12-01T03:00:00Z"), fetch)
    assert closed["not_started"]["reason"].startswith("outside the window cuda13_window")
    assert fetch.calls == []


def test_without_the_option_the_gate_is_as_before(tmp_path):
    plan = fleet.plan(HOSTS, {"cuda13_serial": 1}, "2026-12-01T00:00:00Z")
    assert plan["alerts"] == {} and plan["alerts_text"] == ""
    fetch = _fetch_of(FIRING)
    assert _gate(tmp_path, plan, Clock("2026-12-01T01:00:00Z"), fetch) == (
        {"start": True, "not_started": None},
        [],
    )
    assert fetch.calls == []


def test_the_canary_waits_too(tmp_path):
    """The first batch (the canary) passes the same gate: it is held like any other."""
    clock = Clock("2026-12-01T01:00:00Z")
    result, said = _gate(
        tmp_path,
        _plan({"url": URL, "max_wait_s": 0}),
        clock,
        _fetch_of(FIRING),
        batch=["gpu-node-01"],
        statuses={},
    )
    assert result["not_started"]["hosts"] == HOSTS and said[0].startswith("the batch gpu-node-01 waits")


def test_now_given_as_a_value_still_works(tmp_path):
    assert fleet._clock("2026-12-01T01:00:00Z")() == datetime(2026, 12, 1, 1, tzinfo=UTC)


def test_the_plan_command_says_the_gate_too():
    """``cuda13-upgrade plan`` (cuda13_upgrade.steps.planning.rollout) prints the start gate's line."""
    from test_planning_step import _host

    from cuda13_upgrade.steps import planning

    the_fleet = fleet.plan(
        HOSTS[:2], {"cuda13_serial": 1, "cuda13_block_on_alerts": URL}, "2026-12-01T00:00:00Z"
    )
    lines = planning.rollout([_host("gpu-node-01"), _host("gpu-node-02")], the_fleet, "r1")["summary"][
        "lines"
    ]
    assert the_fleet["alerts_text"] in lines
    assert the_fleet["alerts_text"].startswith(f"batches wait while Prometheus at {URL} has firing alerts")


# --- secrets, odd answers, bounds ----------------------------------------------------------------


def test_the_prometheus_password_is_in_no_fact_and_the_gate_still_authenticates(tmp_path):
    """The facts cuda13_options (options.validate's values) and cuda13_fleet (the start gate's
    plan) are printed by ``ansible-playbook -v`` and AWX: the URL's user:password@ is masked in
    both; the batch gate takes the option from the inventory (action cuda13_fleet's
    ``alerts_value``) and sends the password as basic authentication."""
    given = {"cuda13_block_on_alerts": {"url": "http://u:s3cret@prom:9090"}}
    values = options.validate(given, {})["values"]
    assert values["cuda13_block_on_alerts"] == {"url": "http://***@prom:9090"}
    assert "s3cret" not in json.dumps(values)
    gate = fleet.start(
        HOSTS,
        {h: {"cuda13_serial": 1, **given} for h in HOSTS},
        run_id="r1",
        reports_dir=tmp_path,
        use_breaker=False,
        started="2026-12-01T00:00:00Z",
    )
    assert gate["failures"] == []
    assert gate["fleet"]["options"]["cuda13_block_on_alerts"] == {"url": "http://***@prom:9090"}
    assert "s3cret" not in json.dumps(gate, default=str)
    fetch = _fetch_of(QUIET)
    result = fleet.batch_gate(
        gate["fleet"],
        hosts=HOSTS,
        batch=["gpu-node-01"],
        active=HOSTS,
        statuses={},
        run_id="r1",
        reports_dir=tmp_path,
        run_hosts=HOSTS,
        now="2026-12-01T01:00:00Z",
        fetch=fetch,
        alerts_value=given["cuda13_block_on_alerts"],
    )
    assert result["start"] is True
    assert fetch.calls == [
        (
            "http://prom:9090/api/v1/rules?type=alert",
            {"Accept": "application/json", "Authorization": "Basic dTpzM2NyZXQ="},  # u:s3cret
            10.0,
        )
    ]
    assert "s3cret" not in json.dumps(result)


def test_the_action_reads_the_gate_from_the_inventory():
    """action_plugins/cuda13_fleet.py: the first host of the play that has the option gives it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cuda13_fleet_action", Path(__file__).parents[1] / "action_plugins" / "cuda13_fleet.py"
    )
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    hostvars = {
        "localhost": {},
        "gpu-node-01": {"cuda13_block_on_alerts": {"url": "http://u:s3cret@prom:9090"}},
    }
    assert action.inventory_value(hostvars, ["gpu-node-01"], "cuda13_block_on_alerts") == {
        "url": "http://u:s3cret@prom:9090"
    }
    assert action.inventory_value(hostvars, ["gpu-node-02"], "cuda13_block_on_alerts") is None


def _serve_once(payload: bytes) -> int:
    """A TCP port on 127.0.0.1 that answers one connection with ``payload`` and closes."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def answer():
        with server:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(payload)

    threading.Thread(target=answer, daemon=True).start()
    return server.getsockname()[1]


def test_an_answer_that_is_not_http_refuses_the_batch(tmp_path, monkeypatch):
    """A URL that points at an ssh port: sshd greets with its identification string
    ("SSH-protoversion-softwareversion" CR LF, RFC 4253 section 4.2), which urllib's
    http.client reads as a BadStatusLine; too many header lines is another HTTPException."""
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")
    port = _serve_once(b"SSH-2.0-OpenSSH_9.2\r\n")
    asked = alerts.ask(alerts.parse(f"http://u:s3cret@127.0.0.1:{port}"))
    assert asked["reachable"] is False
    assert asked["error"] == "the answer is not HTTP (it begins 'SSH-2.0-OpenSSH_9.2\\r\\n')"
    port = _serve_once(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n")
    asked = alerts.ask(alerts.parse(f"http://127.0.0.1:{port}"))
    assert asked["error"] == "the answer is not valid HTTP (HTTPException: got more than 100 headers)"
    port = _serve_once(b"SSH-2.0-OpenSSH_9.2\r\n")
    result, said = _gate(
        tmp_path, _plan(f"http://127.0.0.1:{port}"), Clock("2026-12-01T01:00:00Z"), alerts.http_get
    )
    assert result["start"] is False and said == []
    assert result["not_started"]["reason"] == (
        f"Prometheus cannot be asked for its alerts (GET http://127.0.0.1:{port}/api/v1/rules?type=alert: "
        "the answer is not HTTP (it begins 'SSH-2.0-OpenSSH_9.2\\r\\n')); cuda13_block_on_alerts "
        "on_unreachable is refuse"
    )


def _odd(**alert_or_rule) -> dict:
    """The recorded answer with GpuNodeHot's rule (``rule=``) or its alert's keys changed."""
    answer = json.loads(json.dumps(FIRING))
    for group in answer["data"]["groups"]:
        for rule in group["rules"]:
            if rule["name"] == "GpuNodeHot":
                rule.update(alert_or_rule.pop("rule", {}))
                if isinstance(rule.get("alerts"), list):
                    for alert in rule["alerts"]:
                        alert.update(alert_or_rule)
                        for key in [k for k, v in alert_or_rule.items() if v is _GONE]:
                            del alert[key]
    return answer


_GONE = object()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            _odd(labels=["x"]),
            "the answer's rule GpuNodeHot has an alert whose labels are not an object but list",
        ),
        (
            _odd(labels="sev=page"),
            "the answer's rule GpuNodeHot has an alert whose labels are not an object but str",
        ),
        (b"[" * 100000, "the answer is nested too deeply to be the rules API's"),
        (
            _odd(rule={"alerts": {"state": "firing"}}),
            "the answer's rule GpuNodeHot has alerts that are not a list but dict",
        ),
        (
            {"status": "success", "data": {"groups": [{"name": "fleet", "rules": "abc"}]}},
            "the answer's group fleet has rules that are not a list but str",
        ),
        (
            _odd(state="FIRING"),
            "the answer's rule GpuNodeHot has an alert whose state is 'FIRING', not pending, firing or inactive",
        ),
        (
            _odd(state=_GONE),
            "the answer's rule GpuNodeHot has an alert whose state is None, not pending, firing or inactive",
        ),
        (
            {"status": "success", "data": {"groups": ["fleet"]}},
            "the answer's group 1 is not an object but str",
        ),
    ],
)
def test_a_malformed_answer_is_an_error_never_no_alert(tmp_path, body, error):
    asked = alerts.ask(alerts.parse(URL), _fetch_of(body))
    assert (asked["reachable"], asked["error"], asked["blocking"]) == (False, error, [])
    result, _ = _gate(tmp_path, _plan(URL), Clock("2026-12-01T01:00:00Z"), _fetch_of(body))
    assert result["start"] is False
    assert result["not_started"]["reason"] == (
        f"Prometheus cannot be asked for its alerts (GET {URL}/api/v1/rules?type=alert: {error}); "
        "cuda13_block_on_alerts on_unreachable is refuse"
    )
    proceed = _plan({"url": URL, "on_unreachable": "proceed"})
    assert _gate(tmp_path, proceed, Clock("2026-12-01T01:00:00Z"), _fetch_of(body))[0]["start"] is True


def test_an_inactive_alert_and_a_null_alerts_list_hold_nothing():
    """Prometheus's alert states are pending, firing and inactive (rules/alerting.go)."""
    asked = alerts.ask(alerts.parse(URL), _fetch_of(_odd(state="inactive")))
    assert asked["reachable"] is True and asked["blocking"] == []
    asked = alerts.ask(alerts.parse(URL), _fetch_of(_odd(rule={"alerts": None})))
    assert asked["reachable"] is True and asked["blocking"] == []


@pytest.mark.parametrize("max_wait", [float("inf"), 1e12, ".inf", "1e12", 604801])
def test_max_wait_s_is_at_most_7_days(max_wait):
    with pytest.raises(ValueError) as error:
        alerts.parse({"url": URL, "max_wait_s": max_wait})
    assert str(error.value).startswith(
        "cuda13_block_on_alerts max_wait_s is not a number of seconds >= 0 and <= 604800: "
    )
    assert str(error.value).endswith("Fix: give max_wait_s: a number >= 0 and <= 604800.")
    checked = options.validate({"cuda13_block_on_alerts": {"url": URL, "max_wait_s": max_wait}}, {})
    assert checked["ok"] is False
    assert alerts.parse({"url": URL, "max_wait_s": 604800}).max_wait_s == 604800


def test_an_unclosed_ipv6_bracket_is_refused_naming_the_key_with_the_url_masked():
    value = {"url": "http://u:s3cret@[::1"}
    with pytest.raises(ValueError) as error:
        alerts.parse(value)
    assert str(error.value) == (
        "cuda13_block_on_alerts url is not a URL (Invalid IPv6 URL): {'url': 'http://***@[::1'}. "
        "Option: cuda13_block_on_alerts. Fix: give the Prometheus server's URL, e.g. "
        "http://prometheus.example:9090 or http://[::1]:9090."
    )
    checked = options.validate({"cuda13_block_on_alerts": value}, {})
    assert checked["ok"] is False
    assert checked["failures"][0]["message"] == (
        "cuda13_block_on_alerts is not an alert gate (url is not a URL (Invalid IPv6 URL)): "
        "{'url': 'http://***@[::1'}. Option: cuda13_block_on_alerts. Fix: give the Prometheus server's "
        "URL, e.g. http://prometheus.example:9090 or http://[::1]:9090."
    )
    assert "s3cret" not in json.dumps(checked)


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (
            {"url": "http://ops:p@ss@prom:9090"},
            "Fix: give each @ of the user or password as %40 (percent-encoded).",
        ),
        ({"url": URL, "match": {"severity": 1}}, 'Fix: give match severity quoted: severity: "...".'),
    ],
)
def test_the_option_checks_remedies_read_as_sentences(value, fix):
    message = options.validate({"cuda13_block_on_alerts": value}, {})["failures"][0]["message"]
    assert message.endswith(fix), message
    assert "give give" not in message and "give write" not in message and "give quote" not in message


# --- hostile values and servers -------------------------------------------------------------


@pytest.mark.parametrize("key", ["interval_s", "timeout_s", "max_wait_s"])
def test_a_number_too_large_for_a_float_is_refused_naming_the_key(key):
    """YAML reads an unquoted 1 followed by 400 zeros as an int that no float can hold."""
    with pytest.raises(ValueError) as error:
        alerts.parse({"url": URL, key: 10**400})
    assert str(error.value).startswith(f"cuda13_block_on_alerts {key} is not a number of seconds >= ")
    assert options.validate({"cuda13_block_on_alerts": {"url": URL, key: 10**400}}, {})["ok"] is False
    assert fleet.plan(HOSTS, {"cuda13_block_on_alerts": {"url": URL, key: 10**400}})["ok"] is False


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://ops:PL/ANTED@prom:9090", "url has an @ after its host (a /, ? or # in its user or password"),
        ("http://ops:PL#ANTED@prom:9090", "url has an @ after its host (a /, ? or # in its user or password"),
        ("http://ops:PL ANTED@prom:9090", "url has whitespace or a control character"),
        ("http://ops:PL\nANTED@prom:9090", "url has whitespace or a control character"),
        ("http://ops:PLANTED@prom\x00:9090", "url has whitespace or a control character"),
        ("http://ops:PLANTED@prom:9090/\x7f", "url has whitespace or a control character"),
        ("http://ops:PLANTED@prom:9090/prométhée", "url has a character that is not ASCII in its path"),
        ("http://ops:PLANTED@prom:0", "url has a bad port"),
    ],
)
def test_a_url_no_request_can_use_is_refused_and_its_password_never_shown(url, problem):
    with pytest.raises(ValueError) as error:
        alerts.parse({"url": url})
    message = str(error.value)
    assert message.startswith(f"cuda13_block_on_alerts {problem}"), message
    assert "'url': 'http://***@prom" in message
    assert "PL" not in message and "ANTED" not in message
    checked = options.validate({"cuda13_block_on_alerts": {"url": url}}, {})
    assert checked["ok"] is False and "ops:" not in json.dumps(checked)
    planned = fleet.plan(HOSTS, {"cuda13_block_on_alerts": {"url": url}})
    assert planned["ok"] is False and "ops:" not in json.dumps(planned)


@pytest.mark.parametrize("password", ['pa"ss', "it's", "pa\\ss", "pa%zz"])
def test_a_password_with_a_quote_or_a_backslash_is_masked_everywhere(password):
    """RFC 3986 gives userinfo sub-delims (') and a client sends "\\" and '"' as they are;
    text patterns stop at quotes, so the URL's own parts decide what is masked."""
    gate = alerts.parse({"url": f"http://ops:{password}@prom:9090", "ignore": "Watchdog"})
    said = [
        gate.display_url,
        gate.display_rules_url,
        json.dumps(gate.as_record()),
        alerts.describe(gate),
        json.dumps(fleet.plan(HOSTS, {"cuda13_block_on_alerts": {"url": gate.url}})),
        json.dumps(options.validate({"cuda13_block_on_alerts": {"url": gate.url, "bogus": 1}}, {})),
    ]
    assert gate.display_url == "http://***@prom:9090"
    for text in said:
        assert "ops:" not in text and password not in text and json.dumps(password)[1:-1] not in text, text


def test_what_the_server_says_back_never_quotes_the_password(tmp_path):
    """A proxy before Prometheus that echoes the request in its error (the JSON error shape of
    Prometheus's HTTP API, docs/querying/api.md: status, errorType, error)."""
    import base64

    gate = alerts.parse("http://ops:s3cretpw@prom:9090")
    token = base64.b64encode(b"ops:s3cretpw").decode()
    echo = json.dumps(
        {
            "status": "error",
            "errorType": "internal",
            "error": f"upstream refused Authorization: Basic {token} (ops:s3cretpw, s3cretpw)",
        }
    ).encode()

    def fetch(url, headers, timeout_s):
        raise urllib.error.HTTPError(url, 502, "Bad Gateway", {}, io.BytesIO(echo))

    asked = alerts.ask(gate, fetch)
    assert asked["error"] == (
        "HTTP 502 Bad Gateway (internal: upstream refused Authorization: Basic *** (***, ***))"
    )

    def fails(url, headers, timeout_s):
        raise OSError(f"proxy said: {token} for http://ops:s3cretpw@prom:9090")

    assert alerts.ask(gate, fails)["error"] == "proxy said: *** for http://***@prom:9090"


def _redirecting_server(location: str):
    """An HTTP server on 127.0.0.1 that answers each GET with a 302 to ``location`` and records
    each request's path and Authorization header."""
    import http.server
    import threading

    seen: list[tuple[str, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            if self.path.startswith("/prometheus/api"):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(json.dumps(QUIET).encode())
                return
            self.send_response(302)
            self.send_header("Location", location.format(port=self.server.server_port))
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_redirect_to_another_host_is_not_sent_the_password(monkeypatch):
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")
    other, elsewhere = _redirecting_server("unused")
    other_port = other.server_port
    first, here = _redirecting_server(f"http://localhost:{other_port}/prometheus/api/v1/rules?type=alert")
    try:
        asked = alerts.ask(alerts.parse(f"http://ops:s3cretpw@127.0.0.1:{first.server_port}"))
        assert asked["reachable"] is True and asked["blocking"] == []
        assert here[0][1] is not None and elsewhere == [("/prometheus/api/v1/rules?type=alert", None)]
        # the same host, port and scheme (a route prefix added by a proxy): the password goes along
        same, seen = _redirecting_server("http://127.0.0.1:{port}/prometheus/api/v1/rules?type=alert")
        alerts.ask(alerts.parse(f"http://ops:s3cretpw@127.0.0.1:{same.server_port}"))
        assert [auth for _, auth in seen] == [here[0][1], here[0][1]]
        same.shutdown()
    finally:
        other.shutdown()
        first.shutdown()


def test_one_question_takes_at_most_timeout_s_even_when_the_answer_trickles(monkeypatch):
    """A server (or a proxy) that sends its answer a byte at a time: each read of the socket ends
    within its timeout, but the answer as a whole must too."""
    import http.server
    import threading
    import time

    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")

    class Trickle(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(60):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        began = time.monotonic()
        asked = alerts.ask(alerts.parse({"url": f"http://127.0.0.1:{server.server_port}", "timeout_s": 1}))
        took = time.monotonic() - began
    finally:
        server.shutdown()
    assert (asked["reachable"], asked["error"]) == (False, "no answer within 1 s (timeout_s)")
    assert took < 2.5


def test_an_answer_larger_than_the_limit_says_so(monkeypatch):
    monkeypatch.setattr(alerts, "MAX_ANSWER_BYTES", 1000)
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")
    body = json.dumps(FIRING).encode()
    port = _serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    asked = alerts.ask(alerts.parse(f"http://127.0.0.1:{port}"))
    assert (asked["reachable"], asked["error"]) == (False, "the answer is larger than 0 MiB")


def test_a_label_value_with_a_line_break_or_a_quote_stays_on_its_line():
    """A label value is any string (Prometheus's data model); PromQL writes it quoted and escaped."""
    answer = _odd(labels={"alertname": "GpuNodeHot", "summary": 'fan "3"\nkept: gpu-node-09', "n": 7})
    found = alerts.active_alerts(answer)
    held = [a for a in found if a["rule"] == "GpuNodeHot"]
    text = alerts.describe_alerts(held)
    assert "\n" not in text
    assert text.startswith('GpuNodeHot{n="7", summary="fan \\"3\\"\\nkept: gpu-node-09"} firing since ')


def test_thousands_of_alerts_and_alerts_on_the_project_s_own_metrics(tmp_path):
    """5,000 firing alerts name five and count the rest; an alert on a cuda13_upgrade_* metric
    named like a real one never holds a batch."""
    many = [
        {"labels": {"alertname": f"DiskFull{k}"}, "state": "firing", "activeAt": "2026-12-05T23:41:07Z"}
        for k in range(5000)
    ]
    answer = {
        "status": "success",
        "data": {
            "groups": [
                {
                    "name": "g",
                    "rules": [
                        {"name": "DiskFull", "query": "node_filesystem_avail_bytes == 0", "alerts": many},
                        {
                            "name": "StorageDegraded",
                            "query": f'{metrics.PREFIX}_hosts{{state="rolled_back"}} > 0',
                            "alerts": [{**many[0], "labels": {"alertname": "StorageDegraded"}}],
                        },
                    ],
                }
            ]
        },
    }
    asked = alerts.ask(alerts.parse(URL), _fetch_of(answer))
    assert len(asked["blocking"]) == 5000 and [a["alertname"] for a in asked["own"]] == ["StorageDegraded"]
    assert alerts.describe_alerts(asked["blocking"]).endswith("; and 4995 more")
