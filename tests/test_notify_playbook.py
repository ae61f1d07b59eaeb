"""Notifications through ansible-playbook, received by real HTTP servers on 127.0.0.1.

The test play is the rollout's: playbooks/start.yml (the start gate, told with ``start_notify`` as
playbooks/upgrade.yml tells it), the upgrade play's own ``serial``, ``vars`` and ``pre_tasks`` (the
batch gate) from playbooks/upgrade.yml with a stand-in for roles/upgrade_host that keeps or rolls
back each host and writes its ``result.json`` as the role's ``cuda13_result`` step does, then
playbooks/report.yml (the run's end) (tests/playbook.py's rollout_book). A webhook server
(tests/webhooks.py, ``http.server``) records each POST and answers as Slack does (``200``, body ``ok``: docs.slack.dev, "Incoming webhooks"); another accepts
connections and never answers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from playbook import RESULT_TASKS, fleet_inventory, rollout_book, run_playbook, stand_in_role
from test_notify import HOSTS, RUN, SLOWER, _gate, _results
from webhooks import Silent, Webhooks

from cuda13_upgrade import notify
from cuda13_upgrade.steps import fleet

SLACK_PATH = "/services/T0CUDA13/B0NIGHT/PLANTEDsecretSlack"
JSON_PATH = "/hooks/cuda13/PLANTEDsecretJson"


# The role's rescue records the failed step and the throughput gate's reason; the role's
# cuda13_result step writes the host's record on the control node.
STAND_IN = [stand_in_role(failed_step="verify", reason="{{ reason }}"), *RESULT_TASKS]


def _run(tmp_path: Path, targets: list[dict], timeout_s: float = 5, *args: str) -> tuple[str, float]:
    hosts = {h: {} for h in HOSTS}
    hosts["gpu-node-03"].update(stand_in="rolled_back", reason=SLOWER)
    option = {"targets": targets, "timeout_s": timeout_s}
    group_vars = {"cuda13_serial": [1, 2, "100%"], "cuda13_max_failed_hosts": 1, "cuda13_notify": option}
    inventory = fleet_inventory(tmp_path / "inventory", hosts, group_vars)
    book = rollout_book(
        tmp_path, STAND_IN, start={"start_batch_plan": True, "start_notify": True}, report=True
    )
    began = time.monotonic()
    done = run_playbook(book, "-v", *args, inventory=inventory, env={"CUDA13_RUN_ID": RUN}, timeout=240)
    took = time.monotonic() - began
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    return out, took


def _secrets_in(text: str) -> list[str]:
    return [s for s in ("PLANTEDsecret", "T0CUDA13", "/hooks/cuda13") if s in text]


def test_a_rollout_tells_its_start_each_batch_a_rollback_and_its_end_in_both_formats(tmp_path):
    with Webhooks() as hooks:
        targets = [
            {"url": hooks.url + SLACK_PATH, "format": "slack"},
            {"url": hooks.url + JSON_PATH, "format": "json"},
        ]
        out, _ = _run(tmp_path, targets)
    generic = hooks.bodies(JSON_PATH)
    assert [(b["event"], b.get("batch") or b.get("host")) for b in generic] == [
        ("start", None),
        ("batch_end", 1),
        ("batch_end", 2),
        ("rollback", "gpu-node-03"),
        ("batch_end", 3),  # the last batch, which no batch gate follows: told at the run's end
        ("end", None),
    ], out
    assert all(b["run_id"] == RUN for b in generic)
    start, first, second, rollback, last, end = generic
    assert start["text"] == (
        f"cuda13-upgrade run {RUN} started: 4 hosts in 3 batches, cuda13_serial [1, 2, '100%']; failure budget 1 "
        "host(s)"
    )
    assert start["hosts"] == HOSTS and start["batches"] == [1, 2, 1]
    assert first["outcomes"] == {"gpu-node-01": "kept"} and first["of"] == 3
    assert second["text"] == (
        f"cuda13-upgrade run {RUN}: batch 2 of 3 ended: gpu-node-02 kept, gpu-node-03 rolled back; so far 2 kept, "
        "1 rolled back, 1 to go"
    )
    assert (second["kept"], second["rolled_back"], second["failed"]) == (1, 1, 0)
    assert second["summary"] == {"hosts": 4, "kept": 2, "rolled_back": 1, "pending": 1}
    assert (
        rollback["text"] == f"cuda13-upgrade run {RUN}: gpu-node-03: rolled back at step 'verify': {SLOWER}"
    )
    assert (rollback["status"], rollback["step"], rollback["reason"]) == ("rolled_back", "verify", SLOWER)
    assert last["outcomes"] == {"gpu-node-04": "kept"}
    report = tmp_path / "reports" / RUN / "summary.md"
    assert end["report"] == str(report)
    assert end["summary"] == {"hosts": 4, "kept": 3, "rolled_back": 1}
    assert (
        end["text"] == f"cuda13-upgrade run {RUN} ended: 3 kept, 1 rolled back (4 host(s)); report: {report}"
    )
    # Slack's format: the same texts, one {"text"} each, in the same order.
    assert hooks.bodies(SLACK_PATH) == [{"text": notify.slack_escape(b["text"])} for b in generic]
    assert {r.headers["Content-Type"] for r in hooks.received} == {"application/json"}
    # The URLs are secrets: not in Ansible's output (-v prints each task's result), the report or the record.
    assert "notifications go to http://127.0.0.1:" in out
    assert _secrets_in(out) == []
    files = "\n".join(
        p.read_text() for p in (tmp_path / "reports" / RUN).rglob("*") if p.suffix in (".md", ".json")
    )
    assert _secrets_in(files) == []
    summary = report.read_text()
    assert "## Notifications" in summary and "end: sent to 2 of 2" in summary
    state = json.loads((tmp_path / "reports" / RUN / "notifications.json").read_text())
    assert [e["event"] for e in state["sent"]] == [b["event"] for b in generic]
    assert all(t["status"] == "sent" and t["code"] == 200 for e in state["sent"] for t in e["targets"])


def test_with_a_limit_the_first_host_reports_and_tells_the_end(tmp_path):
    """--limit leaves localhost out of the plays on it (Ansible skips them: "no hosts matched"):
    the report play's second play writes the report from the first host still in the run."""
    with Webhooks() as hooks:
        out, _ = _run(
            tmp_path,
            [{"url": hooks.url + JSON_PATH, "format": "json"}],
            5,
            "--limit",
            "gpu-node-01,gpu-node-02",
        )
    generic = hooks.bodies(JSON_PATH)
    assert [b["event"] for b in generic] == ["start", "batch_end", "batch_end", "end"], out
    end = generic[-1]
    assert end["summary"] == {"hosts": 2, "kept": 2}
    assert end["text"].startswith(f"cuda13-upgrade run {RUN} ended: 2 kept (2 host(s)); report: ")
    summary = (tmp_path / "reports" / RUN / "summary.md").read_text()
    assert "gpu-node-03" not in summary and "end: sent to 1 of 1" in summary


def test_a_webhook_that_never_answers_delays_the_rollout_by_at_most_its_timeout(tmp_path):
    with Webhooks() as hooks, Silent() as silent:
        targets = [
            {"url": silent.url + "/hooks/cuda13/PLANTEDsecretSilent", "format": "json"},
            {"url": hooks.url + JSON_PATH, "format": "json"},
        ]
        out, _ = _run(tmp_path, targets, timeout_s=1)
    # The rollout went on: every batch ran and the other webhook heard everything.
    assert [b["event"] for b in hooks.bodies(JSON_PATH)] == [
        "start",
        "batch_end",
        "batch_end",
        "rollback",
        "batch_end",
        "end",
    ], out
    state = json.loads((tmp_path / "reports" / RUN / "notifications.json").read_text())
    silent_records = [t for e in state["sent"] for t in e["targets"] if t["url"] == silent.url + "/***"]
    assert {t["status"] for t in silent_records} <= {"failed", "not sent"}
    assert [t["error"] for t in silent_records if t["status"] == "failed"] == [
        "no answer within 1 s (timeout_s)"
    ] * 4
    # each send (start, two gates, the end) waited at most the timeout for the silent webhook
    assert all(t["elapsed_s"] < 1 + 0.5 for t in silent_records), silent_records
    assert f"notification start not sent to {silent.url}/*** (json): no answer within 1 s (timeout_s)" in out
    assert "not sent to " in (tmp_path / "reports" / RUN / "summary.md").read_text()
    assert _secrets_in(out) == []


def test_the_batch_gate_waits_for_a_silent_webhook_at_most_its_timeout(tmp_path):
    """The real batch gate in this process against a server that accepts and never answers: the
    gate's time, measured here, is below the timeout and a small margin (a bound, not a benchmark)."""
    with Silent() as silent:
        option = {
            "targets": [{"url": silent.url + "/hooks/PLANTEDsecret", "format": "slack"}],
            "timeout_s": 1,
        }
        given = {h: {"cuda13_serial": 1, "cuda13_notify": option} for h in HOSTS}
        began = time.monotonic()
        started = fleet.start(HOSTS, given, run_id=RUN, reports_dir=tmp_path, use_breaker=False, tell=True)
        took_start = time.monotonic() - began
        _results(tmp_path, {"gpu-node-01": {"status": "kept"}})
        began = time.monotonic()
        gate = _gate(
            started["fleet"], tmp_path, ["gpu-node-02"], {"gpu-node-01": "kept"}, notify_value=option
        )
        took_gate = time.monotonic() - began
    assert gate["start"] is True
    assert took_start < 1 + 0.5 and took_gate < 1 + 0.5, (took_start, took_gate)
    assert [r["error"] for r in started["notified"] + gate["notified"]] == [
        "no answer within 1 s (timeout_s)"
    ] * 2


@pytest.mark.parametrize("limit", [[], ["--limit", "gpu-node-09"]], ids=["no-limit", "limit"])
def test_the_command_tells_the_end_of_a_rollout_that_stopped_before_its_report(tmp_path, monkeypatch, limit):
    """The real ``cuda13-upgrade rollout`` on a host nothing can reach (127.0.0.1, port 1): the
    start gate tells the start, then the run stops before its report play (the host is lost in
    the first play that connects), and the command tells the end with the host's outcome,
    recorded in run.json; the webhook's secret path is in no file of the run."""
    from cuda13_upgrade import cli

    for name in ("CUDA13_UPGRADE_HOME", "CUDA13_REPORTS_DIR", "CUDA13_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    blackwell:\n      hosts:\n        gpu-node-09:\n"
        "          ansible_host: 127.0.0.1\n          ansible_port: 1\n          ansible_user: nobody\n"
        "          cuda13_service_name: sglang.service\n"
        '          ansible_ssh_common_args: "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'
        ' -o ConnectTimeout=3"\n'
    )
    reports = tmp_path / "r"
    with Webhooks() as hooks:
        setting = {
            "cuda13_notify": {"timeout_s": 5, "targets": [{"url": hooks.url + JSON_PATH, "format": "json"}]}
        }
        argv = [
            "rollout",
            "--yes",
            "-i",
            str(inventory),
            "--reports-dir",
            str(reports),
            "--run-id",
            "lost",
            *limit,
        ]
        assert cli.main([*argv, "-e", json.dumps(setting)]) == 1
    bodies = hooks.bodies(JSON_PATH)
    assert [b["event"] for b in bodies] == ["start", "end"]
    end = bodies[-1]
    assert end["summary"] == {"hosts": 1, "unreachable": 1}
    assert (
        end["text"]
        == f"cuda13-upgrade run lost ended: 1 unreachable (1 host(s)); report: {reports}/lost/summary.md"
    )
    run = json.loads((reports / "lost" / "run.json").read_text())
    assert [(n["event"], n["sent"], n["targets"]) for n in run["notifications"]] == [
        ("start", 1, 1),
        ("end", 1, 1),
    ]
    assert "- " in (reports / "lost" / "summary.md").read_text().split("## Notifications", 1)[1]
    for path in (reports / "lost").rglob("*"):
        if path.is_file() and path.suffix != ".png":
            assert "PLANTEDsecret" not in path.read_text(errors="replace"), path
