"""Notifications through ansible-playbook, received by real HTTP servers on 127.0.0.1.

The test play is the rollout's: playbooks/start.yml (the start gate, told with ``start_notify`` as
playbooks/upgrade.yml tells it), the upgrade play's own ``serial``, ``vars`` and ``pre_tasks`` (the
batch gate) from playbooks/upgrade.yml with a stand-in for roles/upgrade_host that keeps or rolls
back each host and writes its ``result.json`` as the role's ``cuda13_result`` step does, then
playbooks/report.yml (the run's end). A webhook server (``http.server``) records each POST and
answers as Slack does (``200``, body ``ok``: docs.slack.dev, "Incoming webhooks"); another accepts
connections and never answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from playbook import fleet_group, run_playbook

from cuda13_upgrade import notify
from cuda13_upgrade.steps import fleet

REPO = Path(__file__).resolve().parents[1]
HOSTS = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04"]
RUN = "20261205T220000Z"
SLACK_PATH = "/services/T0CUDA13/B0NIGHT/PLANTEDsecretSlack"
JSON_PATH = "/hooks/cuda13/PLANTEDsecretJson"
# The throughput gate's reason of a slower profile (tests/test_throughput_verdict.py).
SLOWER = (
    "plain: median 80.0 tok/s on the new stack vs 89.5 tok/s (-10.6 % ± 0.6 %, tolerance -3 %, "
    "5 vs 5 trials): regressed"
)


class Webhooks:
    """An HTTP server on 127.0.0.1 that records each POST ``(path, headers, body)`` and answers 200 ok."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                received.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, path: str) -> list[dict]:
        return [body for at, _, body in self.received if at == path]


class Silent:
    """A server on 127.0.0.1 that accepts each connection and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.sock.close()
        for conn in self.held:
            conn.close()


def _upgrade_play() -> dict:
    plays = yaml.safe_load((REPO / "playbooks" / "upgrade.yml").read_text())
    return next(p for p in plays if p.get("name") == "Upgrade, verify, keep or roll back")


RESULT_DIR = "{{ playbook_dir | dirname }}/reports/{{ cuda13_run_id }}/{{ inventory_hostname }}"

STAND_IN = [
    {
        "name": "Stand in for the role",
        "block": [
            {
                "name": "Fail as the role does",
                "ansible.builtin.fail": {"msg": "stand-in failure"},
                "when": "stand_in | default('kept') != 'kept'",
            },
            {"name": "Keep the host", "ansible.builtin.set_fact": {"cuda13_result": {"status": "kept"}}},
        ],
        "rescue": [
            {
                "name": "Record the result",
                "ansible.builtin.set_fact": {
                    "cuda13_result": {
                        "status": "{{ stand_in }}",
                        "failed_step": "verify",
                        "reason": "{{ reason }}",
                    }
                },
            }
        ],
    },
    # The role's cuda13_result step writes the host's record on the control node.
    {
        "name": "The host's result directory",
        "ansible.builtin.file": {"path": RESULT_DIR, "state": "directory", "mode": "0700"},
        "delegate_to": "localhost",
    },
    {
        "name": "The host's result",
        "ansible.builtin.copy": {
            "dest": RESULT_DIR + "/result.json",
            "mode": "0600",
            "content": "{{ cuda13_result | combine({'host': inventory_hostname, 'run_id': cuda13_run_id}) | to_json }}",
        },
        "delegate_to": "localhost",
    },
]


def _run(tmp_path: Path, targets: list[dict], timeout_s: float = 5) -> tuple[str, float]:
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    hosts = {h: {"ansible_connection": "local"} for h in HOSTS}
    hosts["gpu-node-03"].update(stand_in="rolled_back", reason=SLOWER)
    (inventory / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"localhost": {"ansible_connection": "local"}},
                    "children": {"blackwell": fleet_group(hosts)},
                }
            }
        )
    )
    (inventory / "group_vars" / "blackwell.yml").write_text(
        yaml.safe_dump(
            {
                "cuda13_serial": [1, 2, "100%"],
                "cuda13_max_failed_hosts": 1,
                "cuda13_notify": {"targets": targets, "timeout_s": timeout_s},
            }
        )
    )
    upgrade = _upgrade_play()
    book = tmp_path / "playbooks" / "book.yml"
    book.parent.mkdir()
    for name in ("start.yml", "report.yml"):
        (tmp_path / "playbooks" / name).symlink_to(REPO / "playbooks" / name)
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Start the run",
                    "ansible.builtin.import_playbook": "start.yml",
                    "vars": {"start_batch_plan": True, "start_notify": True},
                },
                {
                    "name": "Upgrade, verify, keep or roll back",
                    "hosts": "blackwell",
                    "gather_facts": False,
                    "serial": upgrade["serial"],
                    "max_fail_percentage": upgrade["max_fail_percentage"],
                    "vars": upgrade["vars"],
                    "pre_tasks": upgrade["pre_tasks"],
                    "tasks": STAND_IN,
                },
                {"name": "Report", "ansible.builtin.import_playbook": "report.yml"},
            ],
            sort_keys=False,
        )
    )
    began = time.monotonic()
    done = run_playbook(book, "-v", inventory=inventory, env={"CUDA13_RUN_ID": RUN}, timeout=240)
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
    assert {h["Content-Type"] for _, h, _ in hooks.received} == {"application/json"}
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
        result = tmp_path / RUN / "gpu-node-01" / "result.json"
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text(json.dumps({"host": "gpu-node-01", "status": "kept"}))
        began = time.monotonic()
        gate = fleet.batch_gate(
            started["fleet"],
            hosts=HOSTS,
            batch=["gpu-node-02"],
            active=HOSTS,
            statuses={"gpu-node-01": "kept"},
            run_id=RUN,
            reports_dir=tmp_path,
            run_hosts=HOSTS,
            notify_value=option,
        )
        took_gate = time.monotonic() - began
    assert gate["start"] is True
    assert took_start < 1 + 0.5 and took_gate < 1 + 0.5, (took_start, took_gate)
    assert [r["error"] for r in started["notified"] + gate["notified"]] == [
        "no answer within 1 s (timeout_s)"
    ] * 2


def test_the_command_tells_the_end_of_a_rollout_that_stopped_before_its_report(tmp_path, monkeypatch):
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
        argv = ["rollout", "--yes", "-i", str(inventory), "--reports-dir", str(reports), "--run-id", "lost"]
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
