"""The servers' effective configuration: /get_server_info and the start-up lines that turn a path off.

Texts from tests/fixtures/sglang-server/ (SOURCES.md names where each comes from).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda13_upgrade import effective, hostresult, summary, throughput

FIXTURES = Path(__file__).parent / "fixtures" / "sglang-server"
INFO = json.loads((FIXTURES / "get_server_info.json").read_text())
DISABLED_LOG = (FIXTURES / "startup-disabled.log").read_text().splitlines()
OTHER_LOG = (FIXTURES / "startup-other.log").read_text().splitlines()
SYMM_LINE = (
    "[2026-11-20 09:14:32 TP0] TorchSymmMemCommunicator: torch symmetric memory multicast operations "
    "are not supported."
)


def test_every_disabled_text_of_the_fixtures_is_read_once_per_path_with_its_ranks():
    found = effective.disabled_lines(DISABLED_LOG)
    assert [(r["path"], r["ranks"], r["flags"]) for r in found] == [
        ("custom allreduce", 2, []),
        ("torch symmetric memory allreduce", 2, ["--enable-torch-symm-mem"]),
    ]
    assert found[1]["line"] == SYMM_LINE
    assert "torch_symm_mem.py" in found[1]["source"]
    other = effective.disabled_lines(OTHER_LOG)
    assert [(r["path"], r["ranks"]) for r in other] == [
        ("custom allreduce", 2),
        ("torch symmetric memory allreduce", 2),
    ]


def test_lines_that_say_nothing_is_off_and_non_text_are_skipped():
    assert (
        effective.disabled_lines(["[2026-11-20 09:15:40] The server is fired up and ready to roll!", 7]) == []
    )
    assert effective.disabled_lines(None) == []


def test_effective_config_keeps_the_arguments_and_drops_states_version_and_the_seed():
    config = effective.effective_config(INFO, DISABLED_LOG)
    assert config["read"] is True and config["version"] == "0.5.9"
    assert config["args"]["enable_torch_symm_mem"] is True
    assert config["args"]["cuda_graph_bs"] == [1, 2, 4, 8]
    assert config["args"]["max_total_num_tokens"] == 425984
    assert not {"internal_states", "version", "random_seed"} & set(config["args"])
    # Nested objects are states (the sandbox's own "stack" and "simulation"), not arguments.
    assert "stack" not in effective.effective_config({**INFO, "stack": {"torch": "x"}}, [])["args"]
    unread = effective.effective_config(None, DISABLED_LOG)
    assert unread["read"] is False and unread["args"] == {} and len(unread["disabled"]) == 2


def test_requested_args_reads_switches_values_and_equals():
    assert effective.requested_args(
        ["--enable-torch-symm-mem", "--speculative-num-steps", "3", "--cuda-graph-bs=1,2", "stray"]
    ) == [
        {"flag": "--enable-torch-symm-mem", "field": "enable_torch_symm_mem", "asked": True},
        {"flag": "--speculative-num-steps", "field": "speculative_num_steps", "asked": "3"},
        {"flag": "--cuda-graph-bs", "field": "cuda_graph_bs", "asked": "1,2"},
    ]


def test_a_flag_the_log_says_was_turned_off_is_unused_though_the_server_reports_it_on():
    config = effective.effective_config(INFO, DISABLED_LOG)
    unused = effective.unused_flags(["--enable-torch-symm-mem", "--speculative-num-steps", "3"], config)
    assert unused == [
        {
            "flag": "--enable-torch-symm-mem",
            "asked": True,
            "reported": True,
            "why": f"the server logged: {SYMM_LINE}",
        }
    ]


def test_a_flag_reported_with_another_value_is_unused():
    config = effective.effective_config({**INFO, "disable_cuda_graph": False, "speculative_num_steps": 5}, [])
    unused = effective.unused_flags(
        ["--disable-cuda-graph", "--speculative-num-steps", "3", "--tp-size", "8"], config
    )
    assert [(u["flag"], u["reported"]) for u in unused] == [
        ("--disable-cuda-graph", False),
        ("--speculative-num-steps", 5),
    ]
    assert unused[0]["why"] == "/get_server_info reports disable_cuda_graph=False"


def test_nothing_is_flagged_without_evidence_or_when_the_server_was_not_read():
    config = effective.effective_config(INFO, [])
    assert effective.unused_flags(["--enable-torch-symm-mem", "--some-new-flag"], config) == []
    assert (
        effective.unused_flags(["--enable-torch-symm-mem"], effective.effective_config(None, DISABLED_LOG))
        == []
    )
    assert effective.unused_flags(["--enable-torch-symm-mem"], None) == []


def test_compare_stacks_lists_the_differing_arguments_and_the_paths_off_on_one_stack():
    old = effective.effective_config(
        {**INFO, "enable_torch_symm_mem": False, "version": "0.5.8"}, DISABLED_LOG[:3]
    )
    new = effective.effective_config(INFO, DISABLED_LOG)
    compared = effective.compare_stacks(old, new)
    assert compared["read"] is True
    assert compared["args"] == [{"arg": "enable_torch_symm_mem", "old": False, "new": True}]
    assert compared["disabled"] == [{"path": "torch symmetric memory allreduce", "old": False, "new": True}]
    assert compared["version"] == {"old": "0.5.8", "new": "0.5.9"}
    assert effective.compare_stacks(None, new) == {"read": False, "args": [], "disabled": [], "version": {}}


def _throughput(new_log):
    old = effective.effective_config({**INFO, "enable_torch_symm_mem": False}, DISABLED_LOG[:3])
    new = effective.effective_config(INFO, new_log)
    trials = [{"output_tok_s": v} for v in (96.0, 96.2, 96.1)]
    return {
        "baseline": {
            "eagle3": {"trials": [{"output_tok_s": v} for v in (54.0, 54.2, 54.1)], "effective": old}
        },
        "candidate": {
            "eagle3": {"trials": trials, "new_stack_args": ["--enable-torch-symm-mem"], "effective": new},
        },
    }


def test_the_gate_reports_an_unused_flag_and_rolls_back_for_it_only_when_asked():
    measured = _throughput(DISABLED_LOG)
    baseline = {"eagle3": measured["baseline"]["eagle3"]["trials"]}
    reported = throughput.gate_verdict(measured["candidate"], baseline)
    assert reported["regressed"] is False
    assert [f["flag"] for f in reported["unused_flags"]["eagle3"]] == ["--enable-torch-symm-mem"]
    rolled = throughput.gate_verdict(measured["candidate"], baseline, disabled_flag_action="rollback")
    assert rolled["regressed"] is True
    assert rolled["reason"] == (
        "eagle3: the new stack's server does not use --enable-torch-symm-mem "
        f"(the server logged: {SYMM_LINE}): the gain the operator upgraded for is not there"
    )
    clean = throughput.gate_verdict(
        _throughput(DISABLED_LOG[:3])["candidate"], baseline, disabled_flag_action="rollback"
    )
    assert clean["regressed"] is False and clean["unused_flags"] == {}
    with pytest.raises(ValueError, match="disabled_flag_action must be one of report, rollback"):
        throughput.gate_verdict(measured["candidate"], baseline, disabled_flag_action="ignore")


def test_the_host_result_and_the_summary_show_the_differences_and_the_unused_flag(tmp_path):
    result = hostresult.host_result(
        {
            "host": "gpu-1",
            "run_id": "r1",
            "status": "kept",
            "measure": True,
            "finished_at": "2026-11-20T10:00:00+00:00",
            "throughput": _throughput(DISABLED_LOG),
        }
    )
    shown = result["effective"]["eagle3"]
    assert shown["compared"]["args"] == [{"arg": "enable_torch_symm_mem", "old": False, "new": True}]
    assert [f["flag"] for f in shown["unused_flags"]] == ["--enable-torch-symm-mem"]
    assert [r["path"] for r in shown["disabled"]["candidate"]] == [
        "custom allreduce",
        "torch symmetric memory allreduce",
    ]
    rows = summary.summary_rows([result])
    markdown = summary.render_markdown("r1", rows)
    assert "## Effective server arguments (old -> new stack)" in markdown
    assert (
        "  - **not used on the new stack: `--enable-torch-symm-mem`**, the gain the operator upgraded for is "
        f"not there (the server logged: {SYMM_LINE})"
    ) in markdown
    assert "  - torch symmetric memory allreduce turned off on the new stack only" in markdown
    assert "  - `enable_torch_symm_mem`: false -> true" in markdown


def test_a_summary_without_effective_records_has_no_section():
    result = hostresult.host_result(
        {"host": "gpu-1", "run_id": "r1", "status": "kept", "finished_at": "2026-11-20T10:00:00+00:00"}
    )
    assert result["effective"] == {}
    assert "Effective server arguments" not in summary.render_markdown("r1", summary.summary_rows([result]))


def test_the_summary_says_when_both_stacks_ran_with_the_same_effective_arguments():
    """A profile read on both stacks with nothing different still gets its line: the
    comparison was made (the demo's kept host)."""
    from cuda13_upgrade import summary

    same = {
        "compared": {"args": [], "disabled": [], "read": True, "version": {"old": "0.5.8", "new": "0.5.9"}},
        "disabled": {"baseline": [], "candidate": []},
        "unused_flags": [],
    }
    unread = {"compared": {"args": [], "disabled": [], "read": False}, "unused_flags": []}
    rows = summary.summary_rows(
        [{"host": "gpu-node-01", "status": "kept", "effective": {"plain": same, "eagle3": unread}}]
    )
    assert list(rows[0]["effective"]) == ["plain"]
    text = summary.render_markdown("r1", rows)
    assert (
        "- gpu-node-01 plain:\n  - the same effective arguments on both stacks (GET /get_server_info, "
        "SGLang 0.5.8 -> 0.5.9); no path turned off" in text
    )
