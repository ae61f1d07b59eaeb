"""The soak between batches: its plan, the watch (hostscripts/completion_bench.py
--watch-seconds, run against the simulated SGLang server as the host runs it), its verdict
(cuda13_upgrade.batch_soak) and its place in the host's result and the summary.

Kernel log lines are the real ones of tests/test_xid.py (each with its source there); the
simulated server's crash (SIGFPE at a request, sgl-project/sglang PR #40485) and stall
(requests hang while /health answers 200, sgl-project/sglang#22779) are its recorded
scenarios (sandbox/sglang-src/python/sglang/srt/simulation.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_mirror import testkit
from test_sim_server import FAST, _probe, _scenario_file, server_env
from test_xid import LOADING, XID45, XID79

from cuda13_upgrade import batch_soak, hostresult, summary
from cuda13_upgrade.hostscripts import completion_bench

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "roles" / "verify_throughput" / "files" / "prompts.json"
BATCHES = [["a"], ["b", "c"], ["d"]]


# --- the plan -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "host", "status", "measured", "watch", "why"),
    [
        (300, "a", "kept", True, True, "watched 300 s in service before the next batch starts"),
        (300, "c", "kept", True, True, "watched 300 s in service before the next batch starts"),
        (300, "d", "kept", True, False, "the last batch: no batch starts after it"),
        (0, "a", "kept", True, False, "no soak between batches (cuda13_soak_seconds 0)"),
        (300, "a", "failed", True, False, "not kept (failed)"),
        (300, "a", "kept", False, False, "not measured this run"),
        ("60", "b", "kept", True, True, "watched 60 s in service before the next batch starts"),
    ],
)
def test_plan_watches_kept_measured_hosts_of_every_batch_but_the_last(
    seconds, host, status, measured, watch, why
):
    planned = batch_soak.plan(seconds, host=host, batches=BATCHES, status=status, measured=measured)
    assert planned == {"watch": watch, "seconds": int(seconds), "why": why}


def test_plan_of_a_single_batch_watches_nothing():
    for batches in (None, [], [["a"]]):
        assert batch_soak.plan(300, host="a", batches=batches, status="kept", measured=True)["watch"] is False


@pytest.mark.parametrize("bad", [-1, "soon", [300]])
def test_plan_refuses_a_bad_value_naming_the_option(bad):
    with pytest.raises(ValueError, match="cuda13_soak_seconds"):
        batch_soak.plan(bad, host="a", batches=BATCHES, status="kept", measured=True)


# --- the verdict ----------------------------------------------------------------------

REFERENCE = [791, 6864, 315, 9822, 374, 12366, 13]
UNIT = {
    "ActiveState": "active",
    "SubState": "running",
    "MainPID": "4242",
    "ExecMainCode": "0",
    "ExecMainStatus": "0",
}


def _record(
    *checks: dict, watched: float = 10.0, after: dict | None = None, tail: list[str] | None = None
) -> dict:
    return {
        "seconds": 10,
        "interval_s": 5,
        "deadline_s": 60.0,
        "max_new_tokens": 32,
        "watched_s": watched,
        "checks": list(checks),
        "unit_before": UNIT,
        "unit_after": UNIT if after is None else after,
        "journal_tail": tail or [],
    }


def _served(at: float, ids: list[int] = REFERENCE) -> dict:
    return {"at_s": at, "outcome": "served", "detail": "", "output_ids": list(ids)}


def _script_result(doc: dict) -> dict:
    """What the steps pass on of the host module cuda13_kernel_log that found ``doc``: its
    ``log`` record itself."""
    return doc


def test_a_host_that_answers_every_check_alike_is_healthy():
    judged = batch_soak.verdict(_record(_served(0), _served(5), _served(10)), reference_ids=[REFERENCE])
    assert judged["healthy"] is True and judged["outcome"] == "healthy" and judged["reason"] is None
    assert (judged["checks"], judged["served"], judged["output_compared"]) == (3, 3, True)


def test_a_stalled_check_degrades_the_host_with_when_and_the_deadline():
    stalled = {"at_s": 5.1, "outcome": "stall", "detail": "no answer: timed out", "output_ids": []}
    judged = batch_soak.verdict(
        _record(_served(0), stalled, watched=65.2, tail=["line 1", "line 2"]), reference_ids=[REFERENCE]
    )
    assert judged["healthy"] is False and judged["outcome"] == "stall"
    assert judged["reason"] == (
        "degraded in service 65 s into the 10 s soak between batches (cuda13_soak_seconds): "
        "check 2 at 5 s got no answer within 60 s"
    )
    assert judged["journal_tail"] == ["line 1", "line 2"]


def test_a_server_killed_by_sigfpe_is_a_crash_named_by_its_signal():
    lost = {"at_s": 5.0, "outcome": "crash", "detail": "[Errno 111] Connection refused", "output_ids": []}
    after = {
        **UNIT,
        "ActiveState": "failed",
        "SubState": "failed",
        "MainPID": "0",
        "ExecMainCode": "2",
        "ExecMainStatus": "8",
    }
    judged = batch_soak.verdict(_record(_served(0), lost, after=after), reference_ids=[REFERENCE])
    assert judged["outcome"] == "crash"
    assert judged["reason"].endswith(
        "check 2 at 5 s lost the server ([Errno 111] Connection refused); "
        "the unit's main process 4242 killed by SIGFPE (unit failed/failed, no main process)"
    )


def test_a_main_process_systemd_restarted_between_checks_is_a_crash():
    restarted = {**UNIT, "MainPID": "5151", "ExecMainCode": "2", "ExecMainStatus": "8"}
    judged = batch_soak.verdict(_record(_served(0), _served(5), after=restarted), reference_ids=[REFERENCE])
    assert judged["healthy"] is False and judged["outcome"] == "crash"
    assert "main process 4242 killed by SIGFPE (unit active/running, main PID now 5151)" in judged["reason"]


def test_a_watch_that_started_after_the_server_died_names_its_last_pid_not_0():
    # The undrain sent the host real traffic before the watch's first reading: the server had
    # died of it already. The reason names its last PID, never "main process 0".
    dead = {
        **UNIT,
        "ActiveState": "failed",
        "SubState": "failed",
        "MainPID": "0",
        "ExecMainPID": "4242",
        "ExecMainCode": "2",
        "ExecMainStatus": "8",
    }
    lost = {"at_s": 0.0, "outcome": "crash", "detail": "[Errno 111] Connection refused", "output_ids": []}
    record = {**_record(lost, watched=0.1, after=dead), "unit_before": dead}
    judged = batch_soak.verdict(record, reference_ids=[REFERENCE])
    assert judged["outcome"] == "crash"
    assert judged["reason"] == (
        "degraded in service 0 s into the 10 s soak between batches (cuda13_soak_seconds): "
        "check 1 at 0 s lost the server ([Errno 111] Connection refused); "
        "the unit's main process 4242 had already ended when the soak started "
        "(killed by SIGFPE; unit failed/failed, no main process)"
    )


def test_an_answer_unlike_the_gate_s_degrades_the_host():
    garbled = _served(5, [0, 0, 0, 0, 0, 0, 0])
    judged = batch_soak.verdict(_record(_served(0), garbled), reference_ids=[REFERENCE, REFERENCE[:3] + [1]])
    assert judged["outcome"] == "output"
    assert judged["reason"].endswith(
        "check 2 at 5 s answered the probe's first prompt differently from the gate's answers "
        "(first 0 tokens equal, 4 needed)"
    )


def test_an_answer_like_either_stack_s_passes_and_without_references_output_is_not_compared():
    old_like = _served(5, REFERENCE[:4] + [1, 2, 3])
    assert batch_soak.verdict(_record(old_like), reference_ids=[[9] * 7, REFERENCE])["healthy"] is True
    judged = batch_soak.verdict(_record(_served(0, [0, 0])), reference_ids=[])
    assert judged["healthy"] is True and judged["output_compared"] is False


def test_a_gating_xid_after_the_switch_degrades_the_host_and_an_application_xid_does_not():
    mark = _script_result({"cursor": None, "last_line": LOADING, "error": None})
    read = _script_result(
        {"lines": [LOADING, XID45, XID79], "since": LOADING, "marker_found": None, "error": None}
    )
    judged = batch_soak.verdict(
        _record(_served(0)), reference_ids=[REFERENCE], kernel_log_mark=mark, kernel_log_read=read
    )
    assert judged["outcome"] == "xid"
    assert "the kernel log shows Xid 79 after the switch" in judged["reason"]
    shown = _script_result({"lines": [LOADING, XID45], "since": LOADING, "marker_found": None, "error": None})
    quiet = batch_soak.verdict(
        _record(_served(0)), reference_ids=[REFERENCE], kernel_log_mark=mark, kernel_log_read=shown
    )
    assert quiet["healthy"] is True and [e["xid"] for e in quiet["kernel_log"]["xid"]] == [45]


@pytest.mark.parametrize("bad", [None, {}, {"checks": "none"}, []])
def test_a_record_that_is_not_a_watch_is_refused(bad):
    with pytest.raises(ValueError, match="not a watch record"):
        batch_soak.verdict(bad)


def test_references_are_each_profile_s_first_probe_answer_on_both_stacks():
    candidate = {
        "plain": {"probe": [{"output_ids": [1, 2]}, {"output_ids": [3]}]},
        "eagle3": {"probe": [{"output_ids": [1, 2]}]},
    }
    baseline = {
        "plain": {"probe": [{"output_ids": [4, 5]}]},
        "eagle3": {"probe": []},
        "x": {"probe": [{"text": "no ids"}]},
    }
    assert batch_soak.references(candidate, baseline) == [[1, 2], [4, 5]]
    assert batch_soak.references(None, None) == []


# --- the watch against the simulated server ------------------------------------------


def _watch(url: str, *extra: str, timeout: float = 120) -> dict:
    """Run completion_bench.py --watch-seconds as batch_soak.yml runs it."""
    out = subprocess.run(
        [sys.executable, completion_bench.__file__, "--url", url, "--prompt-file", str(PROMPTS), *extra],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    return json.loads(out.stdout)["watch"]


def test_the_watch_of_a_healthy_server_checks_every_interval_and_passes(venv_cu130, no_ld_conf, tmp_path):
    scenario = tmp_path / "default.json"
    scenario.write_text(json.dumps(FAST))
    server = testkit.SimServer(venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path)
    try:
        reference = _probe(server.url, tmp_path)[0]["output_ids"]
        record = _watch(
            server.url, "--watch-seconds", "2", "--watch-interval-s", "1", "--max-new-tokens", "32"
        )
    finally:
        server.close()
    assert [c["outcome"] for c in record["checks"]] == ["served"] * 3
    assert [round(c["at_s"]) for c in record["checks"]] == [0, 1, 2]
    assert 2 <= record["watched_s"] < 10
    judged = batch_soak.verdict(record, reference_ids=[reference])
    assert judged["healthy"] is True and judged["served"] == 3


def test_the_watch_of_a_server_that_stops_answering_ends_at_the_stalled_check(
    venv_cu130, no_ld_conf, tmp_path
):
    scenario = _scenario_file(tmp_path, stall_after_completions={"cu130": 2})
    env = server_env(venv_cu130, scenario, no_ld_conf, SGLANG_HEALTH_CHECK_TIMEOUT="1")
    server = testkit.SimServer(venv_cu130.python, env, tmp_path)
    try:
        record = _watch(
            server.url,
            *("--watch-seconds", "30", "--watch-interval-s", "0.5", "--watch-deadline-s", "2"),
        )
        assert testkit.http_get(server.url + "/health")[0] == 200
    finally:
        server.close()
    assert [c["outcome"] for c in record["checks"]] == ["served", "served", "stall"]
    assert record["watched_s"] < 10  # ended at the stall, not after 30 s
    judged = batch_soak.verdict(record)
    assert judged["outcome"] == "stall"
    assert "check 3 at 1 s got no answer within 2 s" in judged["reason"]


def test_the_watch_of_a_server_that_crashes_ends_at_the_lost_check(venv_cu130, no_ld_conf, tmp_path):
    scenario = _scenario_file(tmp_path, crash_on_request={"cu130": 2})
    server = testkit.SimServer(venv_cu130.python, server_env(venv_cu130, scenario, no_ld_conf), tmp_path)
    try:
        record = _watch(server.url, "--watch-seconds", "30", "--watch-interval-s", "0.5")
        server.proc.wait(timeout=10)
        code = server.proc.returncode
    finally:
        server.close()
    assert [c["outcome"] for c in record["checks"]] == ["served", "crash"]
    assert code == -8  # SIGFPE
    assert batch_soak.verdict(record)["outcome"] == "crash"


def test_the_watch_needs_a_prompt_file_and_a_positive_interval():
    script = completion_bench.__file__
    proc = subprocess.run([sys.executable, script, "--watch-seconds", "5"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--prompt-file" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            script,
            "--watch-seconds",
            "5",
            "--prompt-file",
            str(PROMPTS),
            "--watch-interval-s",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--watch-interval-s must be > 0 (got 0.0)" in proc.stderr


# --- the result and the summary -------------------------------------------------------


def test_a_host_degraded_in_the_soak_between_batches_reports_its_reason_and_journal(tmp_path):
    stalled = {"at_s": 5.1, "outcome": "stall", "detail": "", "output_ids": []}
    degraded = batch_soak.verdict(
        _record(_served(0), stalled, tail=["scheduler: no progress"]), reference_ids=[REFERENCE]
    )
    healthy = batch_soak.verdict(_record(_served(0), _served(5), _served(10)), reference_ids=[REFERENCE])
    base = {"finished_at": "2026-12-03T01:00:00+00:00", "run_id": "r1", "measure": True}
    rolled = hostresult.host_result(
        {**base, "host": "b", "status": "rolled_back", "reason": "plain: +3.9 %", "batch_soak": degraded}
    )
    kept = hostresult.host_result(
        {**base, "host": "a", "status": "kept", "reason": "plain: +3.9 %", "batch_soak": healthy}
    )
    assert rolled["reason"] == degraded["reason"]
    assert rolled["batch_soak"]["outcome"] == "stall" and kept["batch_soak"]["healthy"] is True
    assert hostresult.host_result({**base, "host": "c", "status": "kept"})["batch_soak"] is None
    run = tmp_path / "r1"
    for record in (kept, rolled):
        (run / record["host"]).mkdir(parents=True)
        (run / record["host"] / "result.json").write_text(json.dumps(record))
    markdown = summary.fleet_summary(run, ["a", "b"])["markdown"]
    section = markdown[markdown.index("## Soak between batches") :].split("\n## ")[0]
    assert "- a: watched 10 s in service, 3 of 3 checks answered" in section
    assert f"- b: {degraded['reason']}" in section
    assert "  scheduler: no progress" in section
