"""Tests of the fleet summary of a run directory (cuda13_upgrade.summary), its chart
(cuda13_upgrade.chart) and the hosts' result records (cuda13_upgrade.hostresult).

The result files are built with the same keys and value shapes as
roles/upgrade_host/tasks/result.yml writes them (a test checks the keys against that
file), with the throughput summaries and decisions computed by the package's
own functions, as the steps compute them in the play.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from cuda13_upgrade import chart, hostresult, throughput, timeline
from cuda13_upgrade.summary import (
    PHASES,
    apply_not_started,
    fleet_summary,
    format_duration,
    render_markdown,
    summary_rows,
)

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "20250101T120000Z"

PLAIN_BEFORE = [89.3, 89.5, 89.6]
EAGLE_BEFORE = [54.0, 54.1, 54.3]


def _phase(trials: dict[str, list[float]], server_args: dict[str, list[str]]) -> dict[str, Any]:
    """``verify_throughput_results[phase]``: per profile, the trials and their summary."""
    return {
        name: {
            "server_args": server_args[name],
            "method": "builtin",
            "trials": [
                {"tokens": 256, "ttft_ms": 41.0, "decode_tok_s": v, "output_tok_s": v * 0.95} for v in values
            ],
            "summary": throughput.summarize(values).__dict__,
        }
        for name, values in trials.items()
    }


ARGS = {"plain": [], "eagle3": ["--speculative-algorithm", "EAGLE3"]}

#: Why a rollback after the switch restarted the service (cuda13_upgrade.steps.rollback.serving_touched).
LEFT_OLD_STACK = "the step 'switch' began: the service left its old stack"


def _result(host: str, **over: Any) -> dict[str, Any]:
    """A result.json of roles/upgrade_host/tasks/result.yml, defaults of a host that kept."""
    result: dict[str, Any] = {
        "host": host,
        "run_id": RUN_ID,
        "status": "kept",
        "check_mode": False,
        "measured": True,
        "verified_in_run": RUN_ID,
        "already_kept": False,
        "rerun_reason": "",
        "recovered": None,
        "stack_digest": None,
        "failed_step": None,
        "failed_task": None,
        "error": None,
        "diagnosis": None,
        "target": {
            "toolkit_release": "13.0",
            "toolkit_package_version": "13.0.2-1",
            "requirements": ["torch==2.10.0+cu130"],
            "sglang_version": "0.5.23",
            "profiles": [{"name": n, "server_args": a} for n, a in ARGS.items()],
        },
        "started_at": "2025-01-01T12:00:05.000000+00:00",
        "finished_at": "2025-01-01T12:42:15.000000+00:00",
        "stack_before": {
            "venv": "/opt/ml-env",
            "cuda": "/usr/local/cuda-12.8",
            "nvcc": "12.8.93",
            "torch": "2.10.0+cu128",
            "sglang": "v0.5.23",
        },
        "stack_after": {
            "venv": "/opt/ml-env-cu130",
            "torch": "2.10.0+cu130",
            "torch_cuda": "13.0",
        },
        "throughput": {},
        "effective": {},
        "decisions": {},
        "speculative": {},
        "probe": {},
        "accept_length": {},
        "load": {},
        "soak": {},
        "batch_soak": None,
        "reason": None,
        "rollback": {
            "performed": False,
            "seconds": None,
            "checks": {},
            "confirmed": None,
            "alternatives_manual": [],
            "service_restarted": None,
            "serving_touched": None,
        },
        "steps": [],
        "out_of_service_s": None,
        "out_of_service_since": None,
        "resolved_target": [],
        "staged_in": None,
        "apt": {"held": [], "holds_added": [], "source": None, "installed": []},
        "restart_plan": None,
        "restarts": 0,
        "leftover_processes": [],
        "kernel_log": None,
        "driver_window": None,
    }
    result.update(over)
    return result


#: A kept host's step records as the play writes them (``__cuda13_steps``).
KEPT_STEPS = [
    ("snapshot", "12:00:05"),
    ("toolkit", "12:00:35"),
    ("wheels", "12:05:00"),
    ("sglang_build", "12:15:00"),
    ("drain", "12:25:00"),
    ("baseline", "12:25:10"),
    ("switch", "12:31:00"),
    ("verify", "12:32:00"),
    ("undrain", "12:41:50"),
    ("result", "12:42:10"),
]


def _timed(records: list[tuple[str, str]], finished_at: str) -> dict[str, Any]:
    """``steps`` and ``out_of_service_s`` as result.yml computes them (through cuda13_upgrade.timeline)."""
    steps = timeline.step_durations(
        [{"step": n, "started_at": f"2025-01-01T{t}.000000+00:00"} for n, t in records], finished_at
    )
    return {"steps": steps, "out_of_service_s": timeline.out_of_service_s(steps)}


def _decisions(candidate: dict[str, list[float]]) -> dict[str, Any]:
    before = {"plain": PLAIN_BEFORE, "eagle3": EAGLE_BEFORE}
    return {
        name: throughput.decide(before[name], values, profile=name).to_dict()
        for name, values in candidate.items()
    }


def kept(host: str) -> dict[str, Any]:
    candidate = {"plain": [91.0, 91.2, 90.8], "eagle3": [96.0, 96.1, 96.4]}
    decisions = _decisions(candidate)
    return _result(
        host,
        throughput={
            "candidate": _phase(candidate, ARGS),
            "baseline": _phase({"plain": PLAIN_BEFORE, "eagle3": EAGLE_BEFORE}, ARGS),
        },
        decisions=decisions,
        speculative={"eagle3": throughput.speculative_gain(candidate["plain"], candidate["eagle3"])},
        reason="; ".join(d["reason"] for d in decisions.values()),
        **_timed(KEPT_STEPS, "2025-01-01T12:42:15.000000+00:00"),
    )


def rolled_back_regressed(host: str) -> dict[str, Any]:
    """Verify found the new stack slower: rollback, re-measured, confirmed."""
    candidate = {"plain": [80.1, 80.2, 80.4], "eagle3": [50.0, 50.1, 49.8]}
    decisions = _decisions(candidate)
    rollback = {"plain": [89.2, 89.3, 89.5], "eagle3": [54.0, 54.0, 54.2]}
    reason = "; ".join(d["reason"] for d in decisions.values())
    return _result(
        host,
        status="rolled_back",
        failed_step="verify",
        failed_task="Roll back when the new stack is slower",
        error=f"Throughput regressed on the new stack: {reason}",
        finished_at="2025-01-01T12:55:35.000000+00:00",
        stack_after={"venv": "/opt/ml-env", "torch": "2.10.0+cu128", "torch_cuda": "12.8"},
        throughput={
            "candidate": _phase(candidate, ARGS),
            "rollback": _phase(rollback, ARGS),
            "baseline": _phase({"plain": PLAIN_BEFORE, "eagle3": EAGLE_BEFORE}, ARGS),
        },
        decisions=decisions,
        reason=reason,
        rollback={
            "performed": True,
            "seconds": 41.27,
            "checks": {
                "plain": throughput.decide(PLAIN_BEFORE, rollback["plain"], max_trials=1).to_dict(),
                "eagle3": throughput.decide(
                    EAGLE_BEFORE, rollback["eagle3"], profile="eagle3", max_trials=1
                ).to_dict(),
            },
            "confirmed": True,
            "alternatives_manual": [],
            "service_restarted": True,
            "serving_touched": LEFT_OLD_STACK,
        },
        **_timed(
            [*KEPT_STEPS[:8], ("rollback", "12:45:00"), ("undrain", "12:55:00"), ("result", "12:55:30")],
            "2025-01-01T12:55:35.000000+00:00",
        ),
    )


def rolled_back_at_switch(host: str) -> dict[str, Any]:
    """The new stack never became healthy: no "after", only the rollback re-measurement."""
    error = "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] Connection refused>"
    return _result(
        host,
        status="rolled_back",
        failed_step="switch",
        failed_task="Wait for the server's health",
        error=error,
        finished_at="2025-01-01T12:20:05.000000+00:00",
        stack_after={"venv": "/opt/ml-env", "torch": "2.10.0+cu128", "torch_cuda": "12.8"},
        throughput={
            "rollback": _phase({"plain": [89.4], "eagle3": [54.2]}, ARGS),
            "baseline": _phase({"plain": PLAIN_BEFORE, "eagle3": EAGLE_BEFORE}, ARGS),
        },
        reason=error,
        rollback={
            "performed": True,
            "seconds": 12.5,
            "checks": {},
            "confirmed": None,
            "alternatives_manual": [],
            "service_restarted": True,
            "serving_touched": LEFT_OLD_STACK,
        },
    )


def failed_at_snapshot(host: str) -> dict[str, Any]:
    """Failed before anything changed: no manifest, no measurement."""
    error = "/opt/ml-env/bin/python: No such file or directory"
    return _result(
        host,
        status="failed",
        measured=True,
        failed_step="snapshot",
        failed_task="Freeze the venv",
        error=error,
        finished_at="2025-01-01T12:00:35.000000+00:00",
        stack_before={"venv": None, "cuda": None, "nvcc": None, "torch": "?", "sglang": None},
        stack_after={"venv": "/opt/ml-env", "torch": None, "torch_cuda": None},
        reason=error,
    )


HOSTS = ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "gpu-node-05"]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "reports" / RUN_ID
    builders = [kept, rolled_back_regressed, rolled_back_at_switch, failed_at_snapshot]
    for host, build in zip(HOSTS, builders, strict=False):
        (run / host).mkdir(parents=True)
        (run / host / "result.json").write_text(json.dumps(build(host), indent=4) + "\n")
    return run  # gpu-node-05 has no result: not reached


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_fixture_results_have_the_keys_result_yml_writes():
    # result.yml writes what hostresult.host_result builds, whatever the host's facts.
    written = hostresult.host_result({"finished_at": "2026-12-03T01:00:00+00:00"})
    for build in (kept, rolled_back_regressed, rolled_back_at_switch, failed_at_snapshot):
        result = build("h")
        assert set(result) == set(written)
        for key in ("stack_before", "stack_after", "rollback"):
            assert set(result[key]) == set(written[key]), key


def test_rows(run_dir):
    rows = summary_rows(hostresult.load_results(run_dir, HOSTS))
    assert [r["host"] for r in rows] == HOSTS
    assert [r["status"] for r in rows] == [
        "kept",
        "rolled_back",
        "rolled_back",
        "failed",
        "not reached",
    ]
    assert [r["decision"] for r in rows] == [
        "kept",
        "rolled back at verify",
        "rolled back at switch",
        "failed at snapshot",
        "not reached",
    ]
    k, regressed, switch, failed, missing = rows
    assert k["profiles"]["plain"] == {
        "before": 89.5,
        "after": 91.0,
        "after_rollback": None,
        "change_pct": pytest.approx(1.676, abs=1e-3),
        "verdict": "keep",
        "tolerance_pct": 3.0,
        "spread": {
            "baseline": {"min": 89.3, "median": 89.5, "max": 89.6, "n": 3},
            "candidate": {"min": 90.8, "median": 91.0, "max": 91.2, "n": 3},
            "rollback": None,
        },
        # The trials' decode_tok_s: the field whose median is the recorded one.
        "trials": {"baseline": PLAIN_BEFORE, "candidate": [91.0, 91.2, 90.8], "rollback": []},
    }
    assert k["steps"] == {
        "snapshot": 30.0,
        "toolkit": 265.0,
        "wheels": 600.0,
        "sglang_build": 600.0,
        "drain": 10.0,
        "baseline": 350.0,
        "switch": 60.0,
        "verify": 590.0,
        "undrain": 20.0,
        "result": 5.0,
    }
    assert k["out_of_service_s"] == 1030.0  # 12:25:00 drain .. 12:42:10 undrain done
    assert regressed["steps"]["rollback"] == 600.0
    assert regressed["out_of_service_s"] == 1830.0  # 12:25:00 .. 12:55:30
    assert switch["steps"] == {} and switch["out_of_service_s"] is None
    assert k["profiles"]["eagle3"]["before"] == 54.1
    assert k["profiles"]["eagle3"]["after"] == 96.1
    assert k["duration_s"] == 2530.0
    assert k["rollback"] == {
        "performed": False,
        "seconds": None,
        "confirmed": None,
        "alternatives_manual": [],
        "service_restarted": None,
        "serving_touched": None,
    }
    assert k["stack_after"] == {
        "venv": "/opt/ml-env-cu130",
        "torch": "2.10.0+cu130",
        "torch_cuda": "13.0",
    }

    assert regressed["profiles"]["plain"]["verdict"] == "regressed"
    assert regressed["profiles"]["plain"]["after"] == 80.2
    assert regressed["profiles"]["plain"]["after_rollback"] == 89.3
    assert regressed["rollback"] == {
        "performed": True,
        "seconds": 41.27,
        "confirmed": True,
        "alternatives_manual": [],
        "service_restarted": True,
        "serving_touched": LEFT_OLD_STACK,
    }

    assert switch["profiles"]["plain"] == {
        "before": 89.5,
        "after": None,
        "after_rollback": 89.4,
        "change_pct": None,
        "verdict": None,
        "tolerance_pct": None,
        "spread": {
            "baseline": {"min": 89.3, "median": 89.5, "max": 89.6, "n": 3},
            "candidate": None,
            "rollback": {"min": 89.4, "median": 89.4, "max": 89.4, "n": 1},
        },
        "trials": {"baseline": PLAIN_BEFORE, "candidate": [], "rollback": [89.4]},
    }
    assert switch["rollback"]["seconds"] == 12.5

    assert failed["profiles"]["plain"]["before"] is None
    assert failed["rollback"]["performed"] is False
    assert failed["failed_step"] == "snapshot"
    assert failed["duration_s"] == 30.0

    assert missing["status"] == "not reached"
    assert list(missing["profiles"]) == ["plain", "eagle3"]
    for p in missing["profiles"].values():
        assert all(p[k] is None for k in ("before", "after", "after_rollback", "change_pct", "verdict"))
        assert p["spread"] == dict.fromkeys(PHASES) and p["trials"] == {k: [] for k in PHASES}
    assert missing["duration_s"] is None


def test_markdown_cells(run_dir):
    summary = fleet_summary(run_dir, HOSTS)
    lines = summary["markdown"].splitlines()
    assert lines[0] == f"# cuda13-upgrade run {RUN_ID}"
    assert lines[2] == "1 failed, 1 kept, 1 not reached, 2 rolled back"
    table = [line for line in lines[: lines.index("## Step durations")] if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == [
        "host",
        "decision",
        "stack before",
        "stack after",
        "plain before (tok/s)",
        "plain after (tok/s)",
        "eagle3 before (tok/s)",
        "eagle3 after (tok/s)",
        "rollback",
        "duration",
        "reason",
    ]
    cells = {
        row[0]: dict(zip(header, row, strict=True))
        for row in ([c.strip() for c in line.strip("|").split("|")] for line in table[2:])
    }
    assert cells["gpu-node-01"]["decision"] == "kept"
    assert cells["gpu-node-01"]["stack before"] == "torch 2.10.0+cu128, cuda-12.8, nvcc 12.8.93"
    assert cells["gpu-node-01"]["stack after"] == "torch 2.10.0+cu130, CUDA 13.0"
    # Each median with the spread of its trials: [min–max, n=trials].
    assert cells["gpu-node-01"]["plain before (tok/s)"] == "89.5 [89.3–89.6, n=3]"
    assert cells["gpu-node-01"]["plain after (tok/s)"] == "91.0 [90.8–91.2, n=3] (+1.7%, keep)"
    assert cells["gpu-node-01"]["eagle3 before (tok/s)"] == "54.1 [54.0–54.3, n=3]"
    assert cells["gpu-node-01"]["eagle3 after (tok/s)"] == "96.1 [96.0–96.4, n=3] (+77.6%, keep)"
    assert cells["gpu-node-01"]["rollback"] == "no"
    assert cells["gpu-node-01"]["duration"] == "42 min 10 s"

    assert cells["gpu-node-02"]["decision"] == "rolled back at verify"
    assert cells["gpu-node-02"]["plain after (tok/s)"] == "80.2 [80.1–80.4, n=3] (-10.4%, regressed)"
    assert cells["gpu-node-02"]["rollback"] == "yes, 41.3 s, old throughput confirmed"
    assert cells["gpu-node-02"]["stack after"] == "torch 2.10.0+cu128, CUDA 12.8"
    assert cells["gpu-node-02"]["reason"].startswith("plain: median 80.2 tok/s on the new stack vs 89.5")
    assert cells["gpu-node-02"]["reason"].endswith("…")

    assert cells["gpu-node-03"]["plain after (tok/s)"] == "89.4 [89.4–89.4, n=1] (rollback)"
    assert cells["gpu-node-03"]["eagle3 after (tok/s)"] == "54.2 [54.2–54.2, n=1] (rollback)"
    assert cells["gpu-node-03"]["rollback"] == "yes, 12.5 s"
    assert cells["gpu-node-03"]["duration"] == "20 min 00 s"

    assert cells["gpu-node-04"]["decision"] == "failed at snapshot"
    assert cells["gpu-node-04"]["stack before"] == "-"
    assert cells["gpu-node-04"]["plain before (tok/s)"] == "-"
    assert cells["gpu-node-04"]["reason"] == "/opt/ml-env/bin/python: No such file or directory"
    assert cells["gpu-node-04"]["duration"] == "30 s"

    assert cells["gpu-node-05"] == {
        **dict.fromkeys(header, "-"),
        "host": "gpu-node-05",
        "decision": "not reached",
        "rollback": "no",
    }


def test_markdown_step_durations_per_host_and_in_total(run_dir):
    lines = fleet_summary(run_dir, HOSTS)["markdown"].splitlines()
    section = lines[lines.index("## Step durations") :]
    table = [[c.strip() for c in line.strip("|").split("|")] for line in section if line.startswith("|")]
    header = table[0]
    assert header == [
        "host",
        *["snapshot", "toolkit", "wheels", "sglang_build", "drain", "baseline", "switch", "verify"],
        *["rollback", "undrain", "result", "out of service", "total"],
    ]
    rows = {row[0]: dict(zip(header, row, strict=True)) for row in table[2:]}
    assert set(rows) == {"gpu-node-01", "gpu-node-02", "**all 2 hosts**"}  # hosts with recorded steps
    assert rows["gpu-node-01"]["wheels"] == "10 min 00 s"
    assert rows["gpu-node-01"]["rollback"] == "-"
    assert rows["gpu-node-01"]["out of service"] == "17 min 10 s"
    assert rows["gpu-node-01"]["total"] == "42 min 10 s"
    assert rows["gpu-node-02"]["rollback"] == "10 min 00 s"
    assert rows["gpu-node-02"]["out of service"] == "30 min 30 s"
    total = rows["**all 2 hosts**"]
    assert total["wheels"] == "20 min 00 s"
    assert total["rollback"] == "10 min 00 s"
    assert total["out of service"] == "47 min 40 s"  # 1030 s + 1830 s
    assert total["total"] == "1 h 37 min"  # 2530 s + 3330 s


def test_summary_json_and_files(run_dir):
    summary = fleet_summary(run_dir, HOSTS)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk == {"run_id": RUN_ID, "rows": summary["rows"]}
    assert [r["host"] for r in on_disk["rows"]] == HOSTS
    assert (run_dir / "summary.md").read_text() == summary["markdown"]
    assert summary["files"] == {
        "markdown": str(run_dir / "summary.md"),
        "json": str(run_dir / "summary.json"),
        "chart": str(run_dir / "summary.png"),
        "metrics": str(run_dir / "cuda13_upgrade.prom"),
    }


def test_summary_png(run_dir):
    fleet_summary(run_dir, HOSTS)
    png = run_dir / "summary.png"
    assert png.stat().st_size > 10_000
    rows = json.loads((run_dir / "summary.json").read_text())["rows"]
    # 5 hosts x 2 profiles = 10 bar groups: 1.6 + 0.8 * 10 = 9.6 in, 4.8 in, at 100 dpi.
    assert _png_size(png) == (960, 480) == chart.chart_size_px(rows)


def test_chart_size_grows_with_groups_and_is_capped():
    def rows(n: int) -> list[dict[str, Any]]:
        return [{"host": f"h{i}", "profiles": {"plain": {}}} for i in range(n)]

    assert chart.chart_size_px(rows(1)) == (640, 480)
    assert chart.chart_size_px(rows(12)) == (1120, 480)
    assert chart.chart_size_px(rows(13)) == (1200, 600)
    assert chart.chart_size_px(rows(500)) == (4000, 600)
    assert chart.chart_size_px([{"host": "h", "profiles": {}}]) == (640, 480)


def test_render_chart_without_measurements(tmp_path):
    rows = summary_rows([{"host": "gpu-node-01", "status": "not reached"}])
    path = chart.render_chart(rows, tmp_path / "c.png")
    assert _png_size(path) == (640, 480)


def test_hosts_default_to_result_files_and_run_json(run_dir):
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "command": "rollout",
                "runner_rc": 2,
                "hosts": ["gpu-node-00", "gpu-node-05"],
                "outcomes": {
                    "gpu-node-00": {
                        "status": "failed",
                        "failed_step": "nvidia_driver_check",
                        "failed_task": "Check the driver",
                        "error": "driver 550.54.15 is too old for CUDA 13.0",
                    },
                    "gpu-node-05": {"status": "not reached"},
                },
            }
        )
    )
    rows = fleet_summary(run_dir)["rows"]
    assert [r["host"] for r in rows] == ["gpu-node-00", "gpu-node-05", *HOSTS[:4]]
    assert rows[0]["decision"] == "failed at nvidia_driver_check"
    assert rows[0]["reason"] == "driver 550.54.15 is too old for CUDA 13.0"
    assert rows[1]["status"] == "not reached"


def test_a_result_that_is_not_json_is_named(run_dir):
    (run_dir / "gpu-node-05").mkdir()
    (run_dir / "gpu-node-05" / "result.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"gpu-node-05/result.json is not a JSON result"):
        fleet_summary(run_dir, HOSTS)


def test_check_mode_and_not_remeasured_decisions():
    rows = summary_rows(
        [
            _result("a", check_mode=True, measured=False, verified_in_run=None),
            _result("b", measured=False, verified_in_run="20241231T080000Z"),
        ]
    )
    assert [r["decision"] for r in rows] == [
        "kept (check mode)",
        "kept (verified in run 20241231T080000Z)",
    ]
    assert "Check mode: nothing was changed" in render_markdown("x", rows)


def test_already_kept_and_resolved_decisions():
    """A re-run that found the kept stack unchanged says "already kept"; a run
    that resolved an earlier run's stop (a lost host, a killed run) names it
    and the step it stopped at, whatever the gate then decided."""
    stopped = {
        "run_id": "20241231T080000Z",
        "step": "switch",
        "started_at": "2024-12-31T08:40:00+00:00",
        "serving": "/opt/ml-env",
        "recorded": None,
    }
    rows = summary_rows(
        [
            _result("a", measured=False, already_kept=True, verified_in_run="20241231T080000Z"),
            _result("b", recovered=stopped),
            rolled_back_regressed("c") | {"recovered": stopped},
        ]
    )
    assert [r["decision"] for r in rows] == [
        "already kept (verified in run 20241231T080000Z)",
        "kept; resolved run 20241231T080000Z, stopped at step switch",
        "rolled back at verify; resolved run 20241231T080000Z, stopped at step switch",
    ]
    assert rows[1]["recovered"] == stopped
    markdown = render_markdown("x", rows)
    assert "| b | kept; resolved run 20241231T080000Z, stopped at step switch |" in markdown


def test_cells_escape_pipes_and_newlines():
    rows = summary_rows([_result("a", status="failed", reason="a | b\nc")])
    assert "| a \\| b c |" in render_markdown("x", rows)


def test_staged_hosts_show_how_long_staging_took_and_the_rollout_names_the_stage_run():
    staged = _result("a", status="staged", started_at="2025-01-01T12:00:00+00:00")
    staged["finished_at"] = "2025-01-01T12:04:10+00:00"
    rows = summary_rows([staged, _result("b", staged_in="20250101T110000Z")])
    assert rows[0]["decision"] == "staged in 4 min 10 s"
    assert rows[1]["decision"] == "kept (staged in run 20250101T110000Z)"
    assert "1 staged" in render_markdown("x", rows)


def test_the_summary_names_the_resolved_target_and_the_hosts_that_share_it():
    canary = ["sgl-kernel==0.3.21+cu130", "torch==2.9.1+cu130"]
    odd = ["sgl-kernel==0.3.21+cu128", "torch==2.9.1+cu130"]
    rows = summary_rows(
        [
            _result("a", resolved_target=canary),
            _result("b", resolved_target=canary),
            _result("c", resolved_target=odd),
        ]
    )
    assert rows[0]["resolved_target"] == canary
    markdown = render_markdown("x", rows)
    assert "## Resolved target" in markdown
    assert "- a, b: 2 distributions: sgl-kernel==0.3.21+cu130, torch==2.9.1+cu130" in markdown
    assert "- c: 2 distributions: sgl-kernel==0.3.21+cu128, torch==2.9.1+cu130" in markdown
    assert "## Resolved target" not in render_markdown("x", summary_rows([_result("a")]))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.4, "0 s"), (42, "42 s"), (750, "12 min 30 s"), (3725, "1 h 02 min")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_the_summary_of_a_run_directory_given_as_text(run_dir):
    summary = fleet_summary(str(run_dir), HOSTS)
    assert summary["markdown"].startswith(f"# cuda13-upgrade run {RUN_ID}")
    assert (run_dir / "summary.png").exists()


def test_a_diagnosed_failure_shows_its_cause_and_remedy():
    # The journal of a server that did not start on the new stack (real text:
    # tests/fixtures/failures/sglang-libnvrtc-12.txt), as roles/upgrade_host/tasks/rescue.yml records it.
    from cuda13_upgrade.diagnosis import diagnose

    journal = (ROOT / "tests" / "fixtures" / "failures" / "sglang-libnvrtc-12.txt").read_text()
    result = rolled_back_at_switch("h")
    result["diagnosis"] = diagnose(journal, source="switch").to_dict()
    [row] = summary_rows([result])
    assert row["diagnosis"]["kind"] == "cuda12_on_cuda13"
    markdown = render_markdown(RUN_ID, [row])
    assert "the package that failed to import is a CUDA 12 build: it links libnvrtc.so.12" in markdown
    assert (
        "Fix: install the build for the target CUDA release of the package that failed to import" in markdown
    )
    assert summary_rows([rolled_back_at_switch("h")])[0]["diagnosis"] is None


def _artists(fig) -> dict[str, Any]:
    ax = fig.axes[0]
    return {a.get_gid(): a for a in [*ax.collections, *ax.lines] if a.get_gid()}


def test_chart_shows_every_trial_the_medians_and_the_tolerance_band(run_dir):
    rows = summary_rows(hostresult.load_results(run_dir, HOSTS))
    artists = _artists(chart.draw_chart(rows))
    # Every trial of both stacks, read back from the plotted points.
    points = artists["trials:gpu-node-01:plain:before"].get_offsets()
    assert sorted(float(y) for _, y in points) == sorted(PLAIN_BEFORE)
    points = artists["trials:gpu-node-01:eagle3:after"].get_offsets()
    assert sorted(float(y) for _, y in points) == [96.0, 96.1, 96.4]
    # before left of after, inside the group of its profile (gpu-node-01 plain: group 0)
    assert all(x < 0 for x, _ in artists["trials:gpu-node-01:plain:before"].get_offsets())
    assert all(0 < x < 0.5 for x, _ in artists["trials:gpu-node-01:plain:after"].get_offsets())
    # The median marked on each column.
    assert list(artists["median:gpu-node-01:plain:after"].get_ydata()) == [91.0, 91.0]
    assert list(artists["median:gpu-node-02:plain:after"].get_ydata()) == [80.2, 80.2]
    # The tolerance band: from the baseline median down by 3 %.
    band = artists["band:gpu-node-02:plain"].get_paths()[0].vertices
    assert min(band[:, 1]) == pytest.approx(89.5 * 0.97) and max(band[:, 1]) == pytest.approx(89.5)
    # A host rolled back before the new stack was measured: its re-measurement of the old stack.
    assert [float(y) for _, y in artists["trials:gpu-node-03:plain:after"].get_offsets()] == [89.4]
    assert "band:gpu-node-03:plain" not in artists  # no decision, so no tolerance recorded
    # Hosts without measurements have no points.
    assert not [gid for gid in artists if "gpu-node-04" in gid or "gpu-node-05" in gid]


def test_a_run_that_measured_nothing_has_no_chart(tmp_path):
    """Hosts already kept (their result as roles/upgrade_host/tasks/kept.yml writes it): no
    trials to draw, so no summary.png, and the summary says why."""
    run = tmp_path / "r-again"
    for host in ("gpu-node-01", "gpu-node-02"):
        (run / host).mkdir(parents=True)
        result = {
            "host": host,
            "run_id": "r-again",
            "status": "kept",
            "measured": False,
            "already_kept": True,
            "verified_in_run": "r-first",
        }
        (run / host / "result.json").write_text(json.dumps(result))
    summary = fleet_summary(run, ["gpu-node-01", "gpu-node-02"])
    assert summary["files"]["chart"] is None
    assert summary["chart_note"] == "no chart: no host of this run was measured"
    assert not (run / "summary.png").exists()
    assert "| gpu-node-01 | already kept (verified in run r-first) |" in summary["markdown"]


def test_the_chart_is_drawn_again_only_when_its_rows_change(run_dir):
    fleet_summary(run_dir, HOSTS)
    png = run_dir / "summary.png"
    png.write_bytes(b"drawn before")
    fleet_summary(run_dir, HOSTS)
    assert png.read_bytes() == b"drawn before"
    fleet_summary(run_dir, HOSTS[:2])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# hostresult.host_result: the record result.yml writes, every choice made here.
def _facts(**extra):
    steps = [
        {"step": "snapshot", "started_at": "2026-12-03T01:00:00+00:00"},
        {"step": "drain", "started_at": "2026-12-03T01:10:00+00:00"},
        {"step": "verify", "started_at": "2026-12-03T01:12:00+00:00"},
        {"step": "undrain", "started_at": "2026-12-03T01:20:00+00:00"},
        {"step": "result", "started_at": "2026-12-03T01:20:30+00:00"},
    ]
    return {
        "host": "gpu-node-01",
        "run_id": "20261203T010000Z",
        "status": "kept",
        "measure": True,
        "finished_at": "2026-12-03T01:21:00+00:00",
        "steps": steps,
        "old_venv": "/opt/ml-env",
        "new_venv": "/opt/ml-env-cu130",
        "snapshot": {
            "venv": {"path": "/opt/ml-env", "pip_freeze": ["numpy==2.2.6", "torch==2.7.1+cu128"]},
            "cuda": {"resolved": "/usr/local/cuda-12.8", "nvcc": {"version": "12.8.93"}},
            "sglang": {"describe": "v0.4.9"},
        },
        "kept_digest": {"digest": "d1", "parts": {"driver": "x"}, "errors": {}},
        "after_probe": {"torch": {"version": "2.9.1+cu130", "cuda": "13.0"}},
        "resolved_target": [{"name": "torch", "version": "2.9.1+cu130"}],
        "restarts": "3",
        **extra,
    }


def test_a_kept_host_s_record_holds_the_new_stack_its_digest_and_its_time_out_of_service():
    record = hostresult.host_result(_facts())
    assert record["status"] == "kept" and record["measured"] is True
    assert record["verified_in_run"] == "20261203T010000Z"
    assert record["stack_digest"] == {"digest": "d1", "parts": {"driver": "x"}, "errors": {}}
    assert record["stack_before"] == {
        "venv": "/opt/ml-env",
        "cuda": "/usr/local/cuda-12.8",
        "nvcc": "12.8.93",
        "torch": "2.7.1+cu128",
        "sglang": "v0.4.9",
    }
    # The probe's record counts also when it could not import everything (cuda13_stack_probe's probe).
    assert record["stack_after"] == {
        "venv": "/opt/ml-env-cu130",
        "torch": "2.9.1+cu130",
        "torch_cuda": "13.0",
    }
    assert record["resolved_target"] == ["torch==2.9.1+cu130"]
    assert record["restarts"] == 3
    # drain at 01:10 to the end of undrain at 01:20:30
    assert record["out_of_service_s"] == 630.0
    assert [s["step"] for s in record["steps"]] == ["snapshot", "drain", "verify", "undrain", "result"]
    assert record["rollback"] == {
        "performed": False,
        "seconds": None,
        "checks": {},
        "confirmed": None,
        "alternatives_manual": [],
        "service_restarted": None,
        "serving_touched": None,
    }


def test_a_rolled_back_host_says_whether_the_old_stack_is_confirmed_and_why():
    checks = {"plain": {"verdict": "ok"}, "eagle3": {"verdict": "regressed"}}
    record = hostresult.host_result(
        _facts(
            status="rolled_back",
            kept_digest={},
            rollback_checks=checks,
            error="the new stack is slower",
            rollback_seconds=41.5,
        )
    )
    assert record["stack_after"]["venv"] == "/opt/ml-env"
    assert record["rollback"] == {
        "performed": True,
        "seconds": 41.5,
        "checks": checks,
        "confirmed": False,
        "alternatives_manual": [],
        "service_restarted": None,
        "serving_touched": None,
    }
    assert record["reason"] == "the new stack is slower"
    assert record["stack_digest"] is None


def test_an_already_kept_host_keeps_the_verifying_run_s_stacks_and_digest():
    previous = {
        "status": "kept",
        "verified_in_run": "20261202T010000Z",
        "stack_digest": {"digest": "d0"},
        "stack_before": {"torch": "2.7.1+cu128"},
        "stack_after": {"torch": "2.9.1+cu130"},
    }
    record = hostresult.host_result(
        _facts(measure=False, kept_digest={}, previous=previous, rerun={"already_kept": True, "reason": ""})
    )
    assert record["already_kept"] is True and record["measured"] is False
    assert record["verified_in_run"] == "20261202T010000Z"
    assert record["stack_digest"] == {"digest": "d0"}
    assert record["stack_before"] == {"torch": "2.7.1+cu128"} and record["stack_after"] == {
        "torch": "2.9.1+cu130"
    }
    assert record["out_of_service_s"] == 0.0


def test_a_kept_host_run_again_says_why_and_an_unknown_diagnosis_is_left_out():
    record = hostresult.host_result(
        _facts(
            previous={"status": "kept"},
            rerun={"already_kept": False, "reason": "its stack differs from the one verified (driver)"},
            diagnosis={"known": False, "kind": "unknown"},
        )
    )
    assert record["rerun_reason"] == "its stack differs from the one verified (driver)"
    assert record["diagnosis"] is None


def test_hosts_not_reached_for_the_failure_budget_say_why(tmp_path):
    not_started = {
        "said": "not reached",
        "reason": "failure budget spent (hosts gpu-node-01 rolled back; cuda13_max_failed_hosts 0)",
        "hosts": ["gpu-node-03", "gpu-node-04"],
    }
    results = [
        {"host": "gpu-node-01", "status": "rolled_back"},
        {"host": "gpu-node-03", "status": hostresult.NOT_REACHED},
        {"host": "gpu-node-05", "status": hostresult.NOT_REACHED},
    ]
    applied = apply_not_started(results, not_started)
    rows = summary_rows(applied)
    assert [r["decision"] for r in rows] == [
        "rolled back",
        "not reached: failure budget spent (hosts gpu-node-01 rolled back; cuda13_max_failed_hosts 0)",
        "not reached",
    ]
    assert apply_not_started(results, {}) == results


def test_hosts_not_started_outside_the_window_say_why():
    window = {"said": "not started", "reason": "outside the window cuda13_window", "hosts": ["gpu-node-02"]}
    rows = summary_rows(
        apply_not_started([{"host": "gpu-node-02", "status": hostresult.NOT_REACHED}], window)
    )
    assert rows[0]["decision"] == "not started: outside the window cuda13_window"


def test_the_reason_is_kept_for_a_later_summary(tmp_path):
    run = tmp_path / "20260101T000000Z"
    not_started = {"said": "not reached", "reason": "failure budget spent (hosts a failed)", "hosts": ["b"]}
    fleet_summary(run, ["b"], not_started)
    again = fleet_summary(run, ["b"])  # the command's summary after run.json
    assert again["rows"][0]["decision"] == "not reached: failure budget spent (hosts a failed)"


def test_a_run_the_breaker_refused_is_not_started_on_every_host(tmp_path):
    # The refusal fails the first host (run_once): run.json says it failed; the breaker's
    # record says no host was started, and wins. Without before_any_change run.json wins.
    run = tmp_path / "20261207T120000Z"
    run.mkdir()
    failed = {
        "status": "failed",
        "failed_step": "Start the run on the hosts",
        "error": "The breaker is tripped",
    }
    (run / "run.json").write_text(json.dumps({"command": "rollout", "outcomes": {"a": failed}}))
    refused = {"said": "not started", "reason": "breaker tripped (...)", "hosts": ["a", "b"]}
    rows = fleet_summary(run, ["a", "b"], {**refused, "before_any_change": True})["rows"]
    assert [r["decision"] for r in rows] == ["not started: breaker tripped (...)"] * 2
    (run / "not_started.json").unlink()
    rows = fleet_summary(run, ["a", "b"], refused)["rows"]
    assert [r["decision"] for r in rows] == [
        "failed at Start the run on the hosts",
        "not started: breaker tripped (...)",
    ]


def test_failure_message_names_the_host_status_step_reason_and_diagnosis():
    assert hostresult.failure_message(
        {
            "host": "gpu-node-02",
            "status": "rolled_back",
            "failed_step": "verify",
            "reason": "plain: median 80.1 tok/s on the new stack vs 88.5 tok/s (-9.5 %): slower",
            "diagnosis": None,
        }
    ) == (
        "gpu-node-02: rolled back at step 'verify': "
        "plain: median 80.1 tok/s on the new stack vs 88.5 tok/s (-9.5 %): slower"
    )
    assert hostresult.failure_message(
        {
            "host": "gpu-node-04",
            "status": "failed",
            "failed_step": "wheels",
            "reason": None,
            "error": "pip failed",
            "diagnosis": {"cause": "the index is unreachable", "remedy": "check cuda13_wheels_index_url"},
        }
    ) == (
        "gpu-node-04: failed at step 'wheels': pip failed Cause: the index is unreachable. "
        "Fix: check cuda13_wheels_index_url."
    )


DRIVER_NIGHT_STEPS = [
    ("snapshot", "12:00:00"),
    ("drain", "12:00:04"),
    ("baseline", "12:00:06"),
    ("driver", "12:00:26"),
    ("undrain", "12:00:54"),
    ("result", "12:00:56"),
]


def test_the_driver_window_section_splits_the_time_out_of_service():
    from cuda13_upgrade.hostresult import driver_window_times

    timed = _timed(DRIVER_NIGHT_STEPS, "2025-01-01T12:00:57.000000+00:00")
    moved = {
        "from": "570.211.01",
        "to": "580.142",
        "activation": "reload",
        "reboot": False,
        "kept": True,
        "restored": False,
        "reason": "",
        "activation_seconds": 0.5,
        "measure_seconds": 21.5,
    }
    window = driver_window_times(moved, timed["steps"])
    assert (window["old_driver_measure_seconds"], window["driver_seconds"]) == (20.0, 28.0)
    back = {**moved, "kept": False, "restored": True, "reason": "The stack on the new driver fails\nthe gate"}
    rows = summary_rows(
        [
            _result("a", status="driver_kept", driver_window=window, **timed),
            _result(
                "b", status="rolled_back", driver_window=driver_window_times(back, timed["steps"]), **timed
            ),
            _result("c", status="driver_current"),
        ]
    )
    text = render_markdown("x", rows)
    section = text.split("## Driver window\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section == [
        "- a: 570.211.01 -> 580.142, kept; out of service 52 s: measured on the old driver 20 s,"
        " activation by reload 0.5 s, measured on the new driver 22 s",
        "- b: 570.211.01 -> 580.142, put back (The stack on the new driver fails the gate); out of service"
        " 52 s: measured on the old driver 20 s, activation by reload 0.5 s, measured on the new driver 22 s",
    ]
    assert "1 driver current, 1 driver kept, 1 rolled back" in text
    # A reboot's time is the reboot module's elapsed.
    rebooted = {**window, "activation": "reboot", "reboot": True, "reboot_seconds": 41}
    [line] = [
        line
        for line in render_markdown(
            "x", summary_rows([_result("d", driver_window=rebooted, **timed)])
        ).splitlines()
        if line.startswith("- d:")
    ]
    assert "activation by reboot 41 s" in line
    # The step table puts the driver window where it ran.
    assert "| host | snapshot | drain | baseline | driver | undrain | result |" in text
    assert driver_window_times(None, timed["steps"]) is None
