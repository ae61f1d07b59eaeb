"""The rollout over the fleet told its webhooks what happened (cuda13_notify, converge.yml).

``../shared/webhook_receiver.py`` served three webhooks on 127.0.0.1 for the run ``molecule-fleet``
and kept every POST in ``<ephemeral>/webhooks/received.jsonl``: a Slack one, a JSON one and one
that never answers, each send waiting at most ``timeout_s`` 2. The events follow from the run
(tests/test_fleet.py) and the gates that send them (src/cuda13_upgrade/steps/fleet.py):

- the start gate (playbooks/start.yml, over the four hosts): ``start``;
- the early pass: cuda13-fleet-1, already kept, leaves the run: the upgrade play takes hosts 2 to 4
  in three batches (one host each) and no batch tells anything of host 1;
- the gate of batch 2: the end of batch 1 (host 2 rolled back by its gate) and its ``rollback``;
  one host failed, within the budget of 1: batch 2 starts;
- the gate of batch 3: the end of batch 2 (host 3 kept by its gate, rolled back by the soak between
  batches) and its ``rollback``; two failed, over the budget: ``budget_spent``, host 4 not reached;
- the report play: no batch left to tell (host 4 has no result), then ``end``.

Each send goes to the three webhooks at once; the one that never answers holds its first event
until ``timeout_s`` and the send's later events are not sent to it.
"""

import json
import os
import re
from pathlib import Path

from cuda13_upgrade import notify

EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
RUN_ID = "molecule-fleet"
RUN = EPHEMERAL / "reports" / RUN_ID
WEBHOOKS = EPHEMERAL / "webhooks"
SLACK = "/services/T0CUDA13/B0FLEET/PLANTEDsecretSlack"
JSON = "/hooks/cuda13/PLANTEDsecretJson"
NEVER = "/never/PLANTEDsecretNever"
TIMEOUT_S = 2
HOSTS = [f"cuda13-fleet-{n}" for n in range(1, 5)]
# What the URLs' paths hold (each webhook's key): never in a report or a record.
SECRETS = ("PLANTEDsecret", "T0CUDA13", "B0FLEET", "/hooks/cuda13/")
# The events of the JSON webhook, as (event, batch or host).
SEQUENCE = [
    ("start", None),
    ("batch_end", 1),
    ("rollback", "cuda13-fleet-2"),
    ("batch_end", 2),
    ("rollback", "cuda13-fleet-3"),
    ("budget_spent", None),
    ("end", None),
]
# The never-answering webhook per event: the first of each send (the start; gate 2; gate 3; the
# end) waits the timeout and fails, the send's later ones are not sent.
NEVER_STATUS = ["failed", "failed", "not sent", "failed", "not sent", "not sent", "failed"]
NO_ANSWER = f"no answer within {TIMEOUT_S} s (timeout_s)"
SPENT = f"the send's {TIMEOUT_S} s (timeout_s) were spent before it"


def _received() -> list[dict]:
    return [json.loads(line) for line in (WEBHOOKS / "received.jsonl").read_text().splitlines()]


def _bodies(path: str) -> list:
    return [r["body"] for r in _received() if r["path"] == path]


def _shown_url() -> str:
    """Every webhook's URL as the records show it (its path masked)."""
    return f"http://127.0.0.1:{(WEBHOOKS / 'port').read_text().strip()}/***"


def _result(host: str) -> dict:
    return json.loads((RUN / host / "result.json").read_text())


def _state() -> dict:
    return json.loads((RUN / notify.FILE).read_text())


def test_the_json_webhook_heard_the_run_from_its_start_to_its_end():
    generic = _bodies(JSON)
    assert [(b["event"], b.get("batch") or b.get("host")) for b in generic] == SEQUENCE, [
        b["text"] for b in generic
    ]
    print(json.dumps(generic[4], indent=2))  # the soak's rollback, as the JSON webhook received it
    for body in generic:
        assert {"event", "run_id", "at", "text", "summary"} <= set(body), body
        assert body["run_id"] == RUN_ID
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["at"]), body["at"]
        assert body["text"].startswith(f"cuda13-upgrade run {RUN_ID}")
    assert [b["at"] for b in generic] == sorted(b["at"] for b in generic)
    start, first, second_host, second, third_host, spent, end = generic

    # The start gate plans the four hosts (one a batch); host 1 leaves the run after it.
    assert start["text"].startswith(f"cuda13-upgrade run {RUN_ID} started: ")
    assert "failure budget 1 host(s)" in start["text"]
    assert (start["hosts"], start["batches"], start["max_failed_hosts"]) == (HOSTS, [1, 1, 1, 1], 1)
    assert start["summary"] == {"hosts": 4, "pending": 4}

    # Batch 1 of the three the upgrade play runs: host 2, rolled back by its gate.
    assert first["text"].startswith(
        f"cuda13-upgrade run {RUN_ID}: batch 1 of 3 ended: cuda13-fleet-2 rolled back; so far 1 rolled back"
    )
    assert (first["of"], first["hosts"]) == (3, ["cuda13-fleet-2"])
    assert first["outcomes"] == {"cuda13-fleet-2": "rolled_back"}
    assert (first["kept"], first["rolled_back"], first["failed"]) == (0, 1, 0)
    assert first["summary"]["rolled_back"] == 1 and "kept" not in first["summary"]
    regressed = _result("cuda13-fleet-2")
    assert (second_host["status"], second_host["step"]) == ("rolled_back", "verify")
    assert second_host["reason"] == regressed["reason"] and "regressed" in second_host["reason"]
    assert second_host["text"].startswith(
        f"cuda13-upgrade run {RUN_ID}: cuda13-fleet-2: rolled back at step 'verify': "
    )

    # Batch 2: host 3, kept by its gate, rolled back by the soak between batches (SIGFPE).
    assert second["text"].startswith(
        f"cuda13-upgrade run {RUN_ID}: batch 2 of 3 ended: cuda13-fleet-3 rolled back; so far 2 rolled back"
    )
    assert (second["of"], second["outcomes"]) == (3, {"cuda13-fleet-3": "rolled_back"})
    assert second["summary"]["rolled_back"] == 2
    crashed = _result("cuda13-fleet-3")
    assert (third_host["status"], third_host["step"]) == ("rolled_back", "batch_soak")
    assert third_host["reason"] == crashed["reason"]
    assert third_host["reason"].startswith("degraded in service ") and "SIGFPE" in third_host["reason"]
    assert third_host["text"].startswith(
        f"cuda13-upgrade run {RUN_ID}: cuda13-fleet-3: rolled back at step 'batch_soak': degraded in service "
    )

    # The budget of one host is spent before batch 3: host 4 is not reached.
    reason = (
        "failure budget spent (hosts cuda13-fleet-2 rolled back, cuda13-fleet-3 rolled back;"
        " cuda13_max_failed_hosts 1)"
    )
    assert (spent["said"], spent["hosts_left"]) == ("not reached", ["cuda13-fleet-4"])
    assert spent["reason"] == reason
    assert spent["failed"] == [
        {"host": "cuda13-fleet-2", "why": "rolled_back"},
        {"host": "cuda13-fleet-3", "why": "rolled_back"},
    ]
    assert spent["text"] == (
        f"cuda13-upgrade run {RUN_ID} stopped: {reason}; 1 host(s) not reached: cuda13-fleet-4"
    )

    # The run's end, over the four hosts of its report.
    assert end["report"].endswith(f"/{RUN_ID}/summary.md")
    assert end["summary"] == {"hosts": 4, "kept": 1, "rolled_back": 2, "not_reached": 1}
    assert end["text"].startswith(f"cuda13-upgrade run {RUN_ID} ended: ")
    assert end["text"].endswith(f" (4 host(s)); report: {end['report']}")
    assert all(said in end["text"] for said in ("1 kept", "2 rolled back", "1 not reached"))


def test_the_slack_webhook_heard_the_same_texts_escaped():
    generic = _bodies(JSON)
    slack = _bodies(SLACK)
    assert all(list(body) == ["text"] for body in slack), slack
    assert slack == [{"text": notify.slack_escape(b["text"])} for b in generic]
    print(json.dumps(slack[-1], indent=2))  # the end, as the Slack webhook received it
    for request in _received():
        assert request["headers"]["Content-Type"] == "application/json"
        assert request["headers"]["User-Agent"] == "cuda13-upgrade"


def test_the_webhook_that_never_answers_held_each_send_at_most_its_timeout():
    # It was asked the first event of each send, and answered none.
    assert [b["event"] for b in _bodies(NEVER)] == ["start", "batch_end", "batch_end", "end"]
    state = _state()
    assert state["run_id"] == RUN_ID and state["started"] is True and state["ended"] is True
    shown = _shown_url()
    assert state["targets"] == [
        {"url": shown, "format": "slack"},
        {"url": shown, "format": "json"},
        {"url": shown, "format": "json"},
    ]
    assert state["timeout_s"] == TIMEOUT_S
    sent = state["sent"]
    assert [e["event"] for e in sent] == [event for event, _ in SEQUENCE]
    assert [e["text"] for e in sent] == [b["text"] for b in _bodies(JSON)]
    for entry in sent:
        slack, generic, never = entry["targets"]
        assert (slack["format"], slack["status"], slack["code"]) == ("slack", "sent", 200), entry
        assert (generic["format"], generic["status"], generic["code"]) == ("json", "sent", 200), entry
        assert never["url"] == shown and never["code"] is None, entry
        assert never["elapsed_s"] <= TIMEOUT_S + 1.5, entry  # the timeout, and a loaded machine's slack
        assert f"{TIMEOUT_S} s (timeout_s)" in never["error"], entry
    nevers = [e["targets"][2] for e in sent]
    assert [t["status"] for t in nevers] == NEVER_STATUS, nevers
    assert {t["error"] for t in nevers if t["status"] == "failed"} == {NO_ANSWER}
    assert {(t["error"], t["elapsed_s"]) for t in nevers if t["status"] == "not sent"} == {(SPENT, 0.0)}
    # The command's record and the operator's lines say the same.
    record = json.loads((RUN / "run.json").read_text())["notifications"]
    assert [(r["event"], r["sent"], r["targets"]) for r in record] == [(e, 2, 3) for e, _ in SEQUENCE]
    log = (RUN / "ansible-rollout.log").read_text()
    assert f"notifications go to {shown} (slack), {shown} (json), {shown} (json)" in log
    assert f"notification start not sent to {shown} (json): {NO_ANSWER}" in log


def test_the_summary_says_what_was_sent_and_what_was_not():
    summary = (RUN / "summary.md").read_text()
    shown = _shown_url()
    section = summary[summary.index("## Notifications") :]
    print(section)
    assert (
        f"cuda13_notify: {shown} (slack), {shown} (json), {shown} (json); each send waits at most"
        f" {TIMEOUT_S} s (timeout_s)." in section
    )
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert [line.split()[2] for line in lines[: len(SEQUENCE)]] == [f"{e}:" for e, _ in SEQUENCE]
    assert f"end: sent to 2 of 3; not sent to {shown} (json): {NO_ANSWER}" in section
    assert f"budget_spent: sent to 2 of 3; not sent to {shown} (json): {SPENT}" in section


def _text_files(top: Path, leave_out: set[Path]) -> list[Path]:
    """The regular files under ``top`` (symbolic links not followed) that hold text: a NUL in the
    first 8 KiB marks a binary file (summary.png), left out with ``leave_out``."""
    found = []
    for where, _, names in os.walk(top):
        for name in names:
            path = Path(where) / name
            if path in leave_out or path.is_symlink() or not path.is_file():
                continue
            with path.open("rb") as handle:
                if b"\0" in handle.read(8192):
                    continue
            found.append(path)
    return found


def test_no_webhook_secret_is_in_the_reports_or_the_scenario_files():
    reports = _text_files(RUN, set())
    assert {RUN / "summary.md", RUN / notify.FILE, RUN / "run.json", RUN / "ansible-rollout.log"} <= set(
        reports
    )
    # The receiver's own files hold the paths it was asked (and its port): nothing else may.
    files = _text_files(EPHEMERAL, {WEBHOOKS / "received.jsonl", WEBHOOKS / "port"})
    assert set(reports) <= set(files)
    leaked = {
        str(path): [s for s in SECRETS if s in text]
        for path in files
        for text in [path.read_text(encoding="utf-8", errors="replace")]
        if any(s in text for s in SECRETS)
    }
    assert leaked == {}
    assert "PLANTEDsecret" in (WEBHOOKS / "received.jsonl").read_text()  # the scan would find it
