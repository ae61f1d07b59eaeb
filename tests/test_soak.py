"""The soak's judgement (cuda13_upgrade.soak) and its place in the gate's verdict."""

import pytest

from cuda13_upgrade import soak, throughput

ACTIVE = {"ActiveState": "active", "SubState": "running", "MainPID": "4300", "ExecMainCode": "0"}


def _record(served: int, requests: int = 64, failures=(), *, after=None, tail=()) -> dict:
    return {
        "requests": requests,
        "concurrency": 8,
        "deadline_s": 30.0,
        "max_tokens": 64,
        "served": served,
        "seconds": 12.5,
        "failures": list(failures),
        "unit_before": ACTIVE,
        "unit_after": after if after is not None else ({} if not failures else ACTIVE),
        "journal_tail": list(tail),
    }


def _fail(request: int, outcome: str, detail: str = "") -> dict:
    return {"request": request, "outcome": outcome, "detail": detail, "tokens": 0, "seconds": 30.0}


def test_a_soak_that_served_every_request_passes():
    judged = soak.judge(_record(64), profile="plain")
    assert judged["passed"] and judged["reason"] is None and judged["outcome"] == "served"
    assert (judged["served"], judged["requests"]) == (64, 64)


def test_a_stall_names_the_count_served_and_the_deadline():
    judged = soak.judge(_record(3, failures=[_fail(4, "stall")], tail=["line"]), profile="plain")
    assert not judged["passed"] and judged["outcome"] == "stall"
    assert judged["reason"] == "plain: the soak served 3 of 64 requests; request 4 got no answer within 30 s"
    assert judged["journal_tail"] == ["line"]


def test_the_first_failed_request_decides():
    judged = soak.judge(_record(9, failures=[_fail(12, "error", "HTTP 500: boom"), _fail(10, "stall")]))
    assert judged["failure"]["request"] == 10 and judged["outcome"] == "stall"


def test_an_error_carries_its_status_and_body():
    judged = soak.judge(_record(0, failures=[_fail(1, "error", "HTTP 503: overloaded")]), profile="p")
    assert (
        judged["reason"]
        == "p: the soak served 0 of 64 requests; request 1 got an error (HTTP 503: overloaded)"
    )


def test_a_stall_after_which_the_main_process_is_gone_is_a_crash():
    after = {
        "ActiveState": "failed",
        "SubState": "failed",
        "MainPID": "0",
        "ExecMainCode": "3",
        "ExecMainStatus": "8",
    }
    judged = soak.judge(_record(1, failures=[_fail(2, "stall")], after=after), profile="eagle3")
    assert judged["outcome"] == "crash"
    assert judged["reason"] == (
        "eagle3: the soak served 1 of 64 requests; request 2 lost the server; "
        "the unit's main process 4300 dumped by SIGFPE (unit failed/failed, no main process)"
    )


def test_a_refused_connection_is_a_crash_and_a_restarted_unit_names_its_new_process():
    after = {**ACTIVE, "MainPID": "4400", "ExecMainCode": "2", "ExecMainStatus": "9"}
    failure = _fail(5, "crash", "[Errno 111] Connection refused")
    judged = soak.judge(_record(4, failures=[failure], after=after), profile="plain")
    assert judged["outcome"] == "crash"
    assert judged["reason"] == (
        "plain: the soak served 4 of 64 requests; request 5 lost the server ([Errno 111] Connection refused); "
        "the unit's main process 4300 killed by SIGKILL (unit active/running, main PID now 4400)"
    )


# What systemctl show read when the server had died before the soak's first request (the
# sandbox's crash_on_request reached by earlier traffic): MainPID 0, the last process kept in
# ExecMainPID/ExecMainCode/ExecMainStatus. The reason names that last PID, never "main process 0".
DEAD_AT_START = {
    "ActiveState": "failed",
    "SubState": "failed",
    "MainPID": "0",
    "ExecMainPID": "4300",
    "ExecMainCode": "3",
    "ExecMainStatus": "8",
}


def test_a_soak_that_started_after_the_main_process_died_names_its_last_pid_not_0():
    record = {
        **_record(0, failures=[_fail(1, "crash", "[Errno 111] Connection refused")], after=DEAD_AT_START),
        "unit_before": DEAD_AT_START,
    }
    judged = soak.judge(record, profile="plain")
    assert judged["outcome"] == "crash"
    assert judged["reason"] == (
        "plain: the soak served 0 of 64 requests; request 1 lost the server ([Errno 111] Connection refused); "
        "the unit's main process 4300 had already ended when the soak started "
        "(dumped by SIGFPE; unit failed/failed, no main process)"
    )
    assert "main process 0" not in judged["reason"]


def test_a_soak_that_started_without_a_main_process_says_so_where_systemd_kept_no_pid():
    before = {k: v for k, v in DEAD_AT_START.items() if k != "ExecMainPID"}
    restarted = {**ACTIVE, "MainPID": "4400", "ExecMainPID": "4400"}
    gone = soak.process_gone(before, restarted)
    # The new process's PID (after a restart by systemd) is not the one that ended.
    assert gone == (
        "the unit had no main process when the soak started "
        "(dumped by SIGFPE; unit active/running, main PID now 4400)"
    )
    assert soak.process_gone({"ActiveState": "inactive", "MainPID": "0"}, {"ActiveState": "inactive"}) == (
        "the unit had no main process when the soak started (unit inactive/?, no main process)"
    )


def test_the_host_script_reads_the_last_main_pid_systemd_keeps(tmp_path, monkeypatch):
    from cuda13_upgrade.hostscripts import completion_bench

    # systemctl show --property=... prints one Key=Value line per property asked for.
    fake = tmp_path / "systemctl"
    lines = "\\n".join(f"{k}={v}" for k, v in DEAD_AT_START.items())
    fake.write_text(f"#!/bin/sh\nprintf '{lines}\\nNRestarts=0\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    assert "ExecMainPID" in completion_bench._UNIT_PROPERTIES
    assert completion_bench.unit_state("sglang.service") == {**DEAD_AT_START, "NRestarts": "0"}


def test_a_record_short_of_its_count_without_failures_fails():
    assert not soak.judge(_record(10))["passed"]


def test_not_a_record_is_refused():
    with pytest.raises(ValueError, match="plain"):
        soak.judge({"served": 3}, profile="plain")


def _trials(rate: float) -> list[dict]:
    return [{"output_tok_s": rate * f} for f in (0.99, 1.0, 1.01, 1.0, 0.995)]


def test_the_gate_rolls_back_on_a_failed_soak_first_and_leaves_later_profiles_out():
    candidate = {"plain": {"trials": _trials(100.0), "soak": _record(3, failures=[_fail(4, "stall")])}}
    baseline = {"plain": _trials(90.0), "eagle3": _trials(60.0)}
    verdict = throughput.gate_verdict(
        candidate,
        baseline,
        profiles=["plain", "eagle3"],
        soak=True,
        speculative_pairs=[{"speculative": "eagle3", "plain": "plain"}],
    )
    assert verdict["regressed"]
    assert verdict["reason"] == "plain: the soak served 3 of 64 requests; request 4 got no answer within 30 s"
    assert list(verdict["decisions"]) == ["plain"] and verdict["speculative"] == {}
    assert verdict["soak"]["plain"]["outcome"] == "stall"


def test_the_gate_keeps_a_host_whose_soaks_passed_and_without_soak_reads_none():
    candidate = {"plain": {"trials": _trials(100.0), "soak": _record(64)}}
    verdict = throughput.gate_verdict(candidate, {"plain": _trials(99.0)}, soak=True)
    assert not verdict["regressed"] and verdict["soak"]["plain"]["passed"]
    assert throughput.gate_verdict(candidate, {"plain": _trials(99.0)})["soak"] == {}
    with pytest.raises(ValueError, match="no soak record"):
        throughput.gate_verdict({"plain": {"trials": _trials(100.0)}}, {"plain": _trials(99.0)}, soak=True)


def test_failed_profile_names_the_first_failed_soak():
    results = {"plain": {"soak": _record(64)}, "eagle3": {"soak": _record(1, failures=[_fail(2, "crash")])}}
    assert soak.failed_profile(results) == "eagle3"
    assert soak.failed_profile({"plain": {"soak": _record(64)}, "x": {}}) is None


def test_the_result_keeps_the_gate_s_soak_and_the_summary_shows_each_count_and_the_failure():
    from cuda13_upgrade import hostresult, summary

    stalled = _record(3, failures=[_fail(4, "stall")], tail=[f"journal line {i}" for i in range(20)])
    throughput_results = {
        "baseline": {"plain": {"trials": _trials(90.0), "soak": _record(64)}},
        "candidate": {"plain": {"trials": _trials(100.0), "soak": stalled}},
    }
    judged = {"plain": soak.judge(stalled, profile="plain")}
    result = hostresult.host_result(
        {
            "host": "gpu-1",
            "status": "rolled_back",
            "measure": True,
            "finished_at": "2026-12-03T01:00:00+00:00",
            "throughput": throughput_results,
            "soak": judged,
            "reason": judged["plain"]["reason"],
        }
    )
    assert result["soak"]["plain"]["served"] == 3 and result["soak"]["plain"]["outcome"] == "stall"
    rows = summary.summary_rows([result])
    assert set(rows[0]["soak"]) == {"baseline/plain", "candidate/plain"}
    markdown = summary.render_markdown("x", rows)
    assert "## Soak" in markdown
    assert "- gpu-1 plain (old stack): served 64 of 64 requests, 8 at once, in 12.5 s" in markdown
    assert (
        "- gpu-1 plain (new stack): the soak served 3 of 64 requests; request 4 got no answer within 30 s"
        in markdown
    )
    assert "  journal line 19" in markdown and "  journal line 7" not in markdown
    assert "## Soak" not in summary.render_markdown("x", summary.summary_rows([{**result, "throughput": {}}]))


def test_the_host_script_counts_an_http_error_as_an_error():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cuda13_upgrade.hostscripts import completion_bench

    class Failing(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (stdlib name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"object": "error", "message": "Internal server error", "code": 500}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        record = completion_bench.soak(
            f"http://127.0.0.1:{server.server_address[1]}",
            prompts=["one two three"],
            requests=5,
            concurrency=1,
            deadline_s=5,
            max_tokens=4,
        )
    finally:
        server.shutdown()
    assert record["served"] == 0 and [f["request"] for f in record["failures"]] == [1]
    judged = soak.judge(record, profile="plain")
    assert judged["outcome"] == "error"
    assert judged["reason"].startswith(
        "plain: the soak served 0 of 5 requests; request 1 got an error (HTTP 500: "
    )
