"""The gate's correctness probe and readiness, on a drifting-but-correct and a garbage stack."""

import json
import os
from pathlib import Path

RUN = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / "molecule-gate"


def _result(host):
    return json.loads(host.file("/var/lib/cuda13-upgrade/result.json").content_string)


def _serving_venv(host):
    pid = host.check_output("systemctl show -p MainPID --value sglang.service")
    return host.file(f"/proc/{pid}/cmdline").content_string.split("\0")[0]


def test_numeric_drift_is_kept(drift):
    result = _result(drift)
    assert result["status"] == "kept", result["reason"]
    assert _serving_venv(drift) == "/opt/ml-env-cu130/bin/python"
    for profile in ("plain", "eagle3"):
        probe = result["probe"][profile]
        assert probe["passed"] is True
        # The scenario's stacks agree on the first 12 tokens of every prompt, then drift.
        assert {p["common_prefix"] for p in probe["per_prompt"]} == {12}
        assert probe["prompts"] == 8


def test_no_request_is_measured_before_the_server_generates(drift):
    journal = drift.check_output("journalctl --unit sglang.service --no-pager --output cat")
    # Every start of the new stack (the switch's and the candidate's restarts of the
    # restart plan) had a window where /health was 200 and generation blocked...
    starts = _result(drift)["restart_plan"]["candidate"]["restarts"]
    assert starts == 2
    assert journal.count("Simulated warm-up: generation blocks for 8.0 s") == starts
    # ...and no probe, warm-up or measured request was sent into it.
    assert "arrived in the warm-up window" not in journal
    for profile in ("plain", "eagle3"):
        trials = _result(drift)["throughput"]["candidate"][profile]["trials"]
        assert max(t["ttft_ms"] for t in trials) < 2000


def test_trials_vary_their_prompts_and_flush_the_cache(drift):
    trials = _result(drift)["throughput"]["candidate"]["plain"]["trials"]
    assert [t["prompt_index"] for t in trials] == list(range(len(trials)))
    assert all(t["cache_flushed"] is True for t in trials)


def test_faster_garbage_rolls_back_with_the_output_reason(garbage):
    result = _result(garbage)
    assert result["status"] == "rolled_back"
    assert _serving_venv(garbage) == "/opt/ml-env/bin/python"
    assert "output differs from the old stack" in result["reason"]
    # It was not slower: the output alone decided.
    assert {d["verdict"] for d in result["decisions"].values()} == {"keep"}
    probe = result["probe"]["plain"]
    assert probe["passed"] is False and probe["agreeing"] == 0
    example = probe["example"]
    assert example["prompt"] and example["old"] and example["new"]
    assert example["old"] != example["new"]
    assert result["rollback"]["performed"] is True


def test_new_stack_only_arguments_are_kept_and_both_command_lines_reported(drift):
    result = _result(drift)
    eagle3 = result["throughput"]
    flags = ["--enable-flashinfer-allreduce-fusion", "--enable-torch-symm-mem"]
    old, new = eagle3["baseline"]["eagle3"]["command"], eagle3["candidate"]["eagle3"]["command"]
    assert old.startswith("/opt/ml-env/bin/python -m sglang.launch_server")
    assert new.startswith("/opt/ml-env-cu130/bin/python -m sglang.launch_server")
    assert all(flag not in old for flag in flags)
    assert new.endswith(" ".join(flags))
    assert result["decisions"]["eagle3"]["verdict"] == "keep"
    summary = (RUN / "summary.md").read_text()
    assert "## Command lines" in summary
    assert f"old stack: `{old}`" in summary and f"new stack: `{new}`" in summary


def test_a_new_stack_only_argument_the_new_server_turned_off_is_reported_not_rolled_back(drift):
    result = _result(drift)
    line = "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported."
    eagle3 = result["effective"]["eagle3"]
    assert [f["flag"] for f in eagle3["unused_flags"]] == ["--enable-torch-symm-mem"]
    assert line in eagle3["unused_flags"][0]["why"]
    assert eagle3["compared"]["read"] is True
    # Both switches are reported as asked: only the log says one path is off.
    assert {"arg": "enable_torch_symm_mem", "old": False, "new": True} in eagle3["compared"]["args"]
    assert eagle3["compared"]["disabled"] == [
        {"path": "torch symmetric memory allreduce", "old": False, "new": True}
    ]
    assert result["effective"]["plain"]["unused_flags"] == []
    assert result["status"] == "kept"
    summary = (RUN / "summary.md").read_text()
    assert "## Effective server arguments (old -> new stack)" in summary
    assert "**not used on the new stack: `--enable-torch-symm-mem`**" in summary


def test_the_report_shows_the_probe(garbage):
    summary = (RUN / "summary.md").read_text()
    assert "## Correctness probe" in summary
    assert "cuda13-gate-2 plain: output differs from the old stack (0 of 8" in summary
    assert "cuda13-gate-1 plain: output matches the old stack (8 of 8" in summary


def test_accept_length_collapsing_to_one_rolls_back(collapse):
    result = _result(collapse)
    assert result["status"] == "rolled_back"
    assert _serving_venv(collapse) == "/opt/ml-env/bin/python"
    eagle3 = result["accept_length"]["eagle3"]
    assert eagle3["passed"] is False
    # The old stack's scenario accept length is 2.687: 32 probe tokens take 12 verify steps.
    assert round(eagle3["old"], 2) == 2.67 and eagle3["new"] == 1.0
    assert "eagle3: speculative accept length collapsed to 1.00 on the new stack" in result["reason"]
    # Output was correct and decode not slower: the accept length alone decided.
    assert "output differs" not in result["reason"]
    assert {d["verdict"] for d in result["decisions"].values()} == {"keep"}
    # Plain decode has no speculative counters: no verdict there.
    assert result["accept_length"]["plain"]["passed"] is None
    # Each profile was measured on a server running it: the scenario's CUDA 13 EAGLE-3
    # decodes at 58.0 tok/s and plain at 92.6 (a plain server measured as eagle3 gave 91).
    candidate = result["throughput"]["candidate"]
    assert candidate["eagle3"]["summary"]["median"] < 0.75 * candidate["plain"]["summary"]["median"]
    assert all(o["spec_verify_ct"] for o in candidate["eagle3"]["probe"])


def test_long_prompt_ttft_and_concurrent_throughput_are_gated(drift):
    result = _result(drift)
    for profile in ("plain", "eagle3"):
        checks = result["load"][profile]
        assert checks["passed"] is True
        assert checks["ttft"]["passed"] and checks["concurrency"]["passed"]
        new = result["throughput"]["candidate"][profile]["load"]
        assert new["ttft_prompt_len"] == 512 and len(new["ttft_long_ms"]) == 2
        # Four streams at once give about four times one stream's output rate.
        single = result["throughput"]["candidate"][profile]["summary"]["median"]
        assert new["concurrent_output_tok_s"] > 3 * single


def test_the_report_shows_the_accept_length(collapse):
    summary = (RUN / "summary.md").read_text()
    assert "## Speculative accept length" in summary
    assert "- cuda13-gate-3 eagle3: 2.67 -> 1.00 tokens per verify step (-62.5 %, rolled back)" in summary
    # The kept host's EAGLE-3 accepted as many draft tokens on both stacks.
    assert "- cuda13-gate-1 eagle3: 2.67 -> 2.67 tokens per verify step (+0.0 %, healthy)" in summary


# The lines the kernel log double printed: sglang.srt.simulation.KERNEL_LOG_LINES.
XID79 = "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
XID45 = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"


def test_a_gpu_fallen_off_the_bus_after_the_switch_rolls_back_with_its_line(garbage):
    result = _result(garbage)
    assert result["status"] == "rolled_back"
    log = result["kernel_log"]
    assert log["read"] is True and log["gated"] is True and log["marker_found"] is True
    # One Xid 79 per start of the new stack's server (the next line of the record is no Xid line).
    assert {(e["xid"], e["action"], e["gate"], e["line"]) for e in log["xid"]} == {
        (79, "RESTART_BM", True, XID79)
    }
    assert result["reason"].startswith("the kernel log shows Xid 79 after the switch")
    assert "RESTART_BM" in result["reason"] and XID79 in result["reason"]
    # The throughput gate's own reason follows.
    assert "output differs from the old stack" in result["reason"]
    summary = (RUN / "summary.md").read_text()
    assert "## Kernel log" in summary
    assert f"- cuda13-gate-2: Xid 79 (RESTART_BM, rolled back): `{XID79}`" in summary


def test_an_application_xid_after_the_switch_is_shown_not_gated(drift):
    result = _result(drift)
    assert result["status"] == "kept"
    log = result["kernel_log"]
    assert log["read"] is True and log["gated"] is False
    # One line per start of the new stack's server (the switch's and the candidate's restart).
    assert {(e["xid"], e["action"], e["gate"], e["line"]) for e in log["xid"]} == {
        (45, "WORKFLOW_XID_45", False, XID45)
    }
    assert len(log["xid"]) == result["restart_plan"]["candidate"]["restarts"]
    summary = (RUN / "summary.md").read_text()
    assert f"- cuda13-gate-1: Xid 45 (WORKFLOW_XID_45, shown, not gated): `{XID45}`" in summary


def test_a_quiet_kernel_log_is_read_and_gates_nothing(collapse):
    log = _result(collapse)["kernel_log"]
    assert log == {
        "xid": [],
        "gated": False,
        "read": True,
        "marker_found": True,
        "message": "no Xid in the kernel log after the switch",
        "reason": None,
    }


def test_a_server_that_dies_on_real_traffic_is_rolled_back_by_the_soak(crash):
    result = _result(crash)
    assert result["status"] == "rolled_back"
    assert _serving_venv(crash) == "/opt/ml-env/bin/python"
    # The switch starts the new stack into eagle3, the candidate plan's first profile.
    soak = result["soak"]["eagle3"]
    assert soak["passed"] is False and soak["outcome"] == "crash"
    # Readiness, the probe and the trials passed; the soak's real traffic ended it.
    assert 0 < soak["served"] < soak["requests"] == 64
    assert result["reason"].startswith(f"eagle3: the soak served {soak['served']} of 64 requests; request ")
    assert "lost the server" in result["reason"]
    assert soak["journal_tail"], "the unit's journal tail is kept with the failed soak"
    # The host rolls back at once: the profile left is not started on the new stack.
    assert list(result["throughput"]["candidate"]) == ["eagle3"]


def test_a_server_that_stops_answering_is_rolled_back_by_the_soak(stall):
    result = _result(stall)
    assert result["status"] == "rolled_back"
    assert _serving_venv(stall) == "/opt/ml-env/bin/python"
    soak = result["soak"]["eagle3"]
    assert soak["passed"] is False and soak["outcome"] == "stall"
    assert 0 < soak["served"] < 64
    assert f"request {soak['failure']['request']} got no answer within 10 s" in result["reason"]
    assert soak["journal_tail"]
    assert list(result["throughput"]["candidate"]) == ["eagle3"]


def test_the_report_shows_the_failed_soaks():
    summary = (RUN / "summary.md").read_text()
    section = summary[summary.index("## Soak") :].split("\n## ")[0]
    assert "- cuda13-gate-4 eagle3 (new stack): the soak served " in section
    assert "- cuda13-gate-5 eagle3 (new stack): the soak served " in section
    assert "got no answer within 10 s" in section


def test_output_wrong_only_in_a_batch_rolls_back_naming_prompt_batch_size_and_token(batch_fault):
    result = _result(batch_fault)
    assert result["status"] == "rolled_back"
    assert _serving_venv(batch_fault) == "/opt/ml-env/bin/python"
    # Alone, every prompt agrees with the old stack; together, 8 at once, the answers of the
    # requests that started with 4 or more running are all token 0.
    probe = result["probe"]["eagle3"]
    assert probe["passed"] is True and probe["agreeing"] == 8
    (together,) = probe["batched"]["batches"]
    assert together["batch_size"] == 8 and together["passed"] is False
    example = together["example"]
    assert example["batched_id"] == 0 and example["position"] == 0
    assert (
        f"eagle3: output changes when the prompts share a batch: in a batch of 8, {together['agreeing']} of 8 "
        "answers agree with the same prompt alone and with the old stack for at least 4 tokens"
    ) in result["reason"]
    assert (
        f"(request {example['request']} of 8): first differing token at position 0: "
        f"id {example['expected_id']} alone, id 0 in the batch"
    ) in result["reason"]
    summary = (RUN / "summary.md").read_text()
    assert "- cuda13-gate-6 eagle3, prompts sent together (batch sizes 8): eagle3: output changes" in summary


def test_an_r570_host_moves_to_the_target_driver_then_to_cuda13(r570):
    result = _result(r570)
    assert result["status"] == "kept", result["reason"]
    window = result["driver_window"]
    assert (window["from"], window["to"]) == ("570.211.01", "580.142"), window
    assert window["activation"] == "reload" and window["kept"] and window["baseline_recorded"]
    assert _serving_venv(r570) == "/opt/ml-env-cu130/bin/python"
    # The new driver answers, both halves at 580.142, and its packages are held.
    assert (
        r570.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
        == ["580.142"] * 8
    )
    held = r570.check_output("apt-mark showhold").split()
    assert "nvidia-driver-580-open" in held and "libnvidia-compute-580" in held
    assert not [name for name in held if "570" in name]
    # The old driver's packages stay on the host for a rollback, each at its version.
    cached = r570.check_output("ls /var/lib/cuda13-upgrade/driver-cache/570.211.01").split()
    assert "nvidia-driver-570-open_570.211.01-0ubuntu0.24.04.2_amd64.deb" in cached
    assert len(cached) == 5
    # The stack upgrade reused the driver window's measurement as its baseline (the old stack on
    # the new driver): its restart plan has no baseline phase of its own.
    assert result["restart_plan"]["baseline"] is None
    assert set(result["throughput"]["baseline"]) == {"plain", "eagle3"}


def test_an_r570_host_slower_on_the_new_driver_is_put_back_on_its_old_driver(r570_slower):
    result = _result(r570_slower)
    assert result["status"] == "rolled_back", result
    assert "The stack on the new driver fails the gate" in result["error"]
    window = result["driver_window"]
    assert (window["from"], window["to"], window["restored"], window["kept"]) == (
        "570.211.01",
        "580.142",
        True,
        False,
    )
    assert _serving_venv(r570_slower) == "/opt/ml-env/bin/python"
    assert (
        r570_slower.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
        == ["570.211.01"] * 8
    )
    held = r570_slower.check_output("apt-mark showhold").split()
    assert "nvidia-driver-570-open" in held and not [name for name in held if "580" in name]
    assert not r570_slower.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.142").exists


def test_the_driver_window_alone_moves_the_driver_and_the_next_rollout_the_stack(two_nights):
    night = RUN.parent / "molecule-gate-driver"
    moved = json.loads((night / "cuda13-gate-9" / "result.json").read_text())
    assert moved["status"] == "driver_kept", moved
    window = moved["driver_window"]
    assert (window["from"], window["to"], window["kept"]) == ("570.211.01", "580.142", True), window
    # The GPU client held the modules: the reload was refused, the host rebooted onto the new driver.
    assert (window["activation"], window["reboot"]) == ("reboot", True), window
    assert window["reboot_seconds"] is not None
    assert window["baseline_recorded"] and moved["stack_after"]["venv"] == "/opt/ml-env"
    record = json.loads((night / "run.json").read_text())
    assert record["command"] == "driver" and record["outcomes"] == {
        "cuda13-gate-9": {"status": "driver_kept"}
    }
    summary = (night / "summary.md").read_text()
    assert "driver kept" in summary
    assert "- cuda13-gate-9: 570.211.01 -> 580.142, kept; out of service" in summary, summary
    assert "activation by reboot" in summary
    # The rollout after it: the driver at the floor (no window), the stack walked, not "already kept",
    # and the driver night's measurement on the new driver stood for its baseline.
    result = _result(two_nights)
    assert result["status"] == "kept" and result["measured"] and not result["already_kept"], result
    assert result["driver_window"] is None
    assert result["restart_plan"]["baseline"] is None
    assert set(result["throughput"]["baseline"]) == {"plain", "eagle3"}
    assert _serving_venv(two_nights) == "/opt/ml-env-cu130/bin/python"
    assert (
        two_nights.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
        == ["580.142"] * 8
    )
