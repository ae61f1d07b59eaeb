"""The correctness probe's comparison rule (cuda13_upgrade.probe).

Inputs: the answers quoted in public bug reports (tests/fixtures/probe, a correct stack's and
a garbage-producing Blackwell host's), and token ids of the simulated server's greedy
decoding (sandbox/sglang-src: ``same``, ``garbage`` and ``drift`` stacks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cuda13_upgrade import probe

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "probe"
sys.path.insert(0, str(ROOT / "sandbox" / "sglang-src" / "python"))
from sglang.srt import simulation  # noqa: E402

PROMPTS = json.loads((ROOT / "roles" / "verify_throughput" / "files" / "prompts.json").read_text())["prompts"]


def _word_ids(text: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.setdefault(word, len(vocab)) for word in text.split()]


def _outputs(mode: str, after: int = 0, prompts=PROMPTS[:8], tokens: int = 32) -> list[dict]:
    return [
        {"prompt": p, "output_ids": simulation.greedy_token_ids(p, tokens, mode, after), "text": ""}
        for p in prompts
    ]


def test_common_prefix_counts_leading_equal_tokens():
    assert probe.common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert probe.common_prefix([5, 6], [7, 6]) == 0
    assert probe.common_prefix([1, 2], [1, 2, 3]) == 2


def test_the_garbage_answer_of_a_blackwell_report_fails_the_probe():
    case = json.loads((FIXTURES / "garbage-outputs.json").read_text())
    vocab: dict[str, int] = {}
    old = [
        {"prompt": case["prompt"], "output_ids": _word_ids(case["correct"], vocab), "text": case["correct"]}
    ]
    new = [
        {"prompt": case["prompt"], "output_ids": _word_ids(case["garbage"], vocab), "text": case["garbage"]}
    ]
    result = probe.compare_outputs(old, new)
    assert not result["passed"]
    assert result["per_prompt"][0]["common_prefix"] == 0
    assert result["reason"].startswith("plain: output differs from the old stack: 0 of 1 probe prompts agree")
    assert "MethodInfoyageegebensatunya" in result["reason"]
    assert "The capital of France is Paris." in result["reason"]
    assert result["example"]["new"] == case["garbage"]


def test_the_same_correct_answer_passes():
    case = json.loads((FIXTURES / "garbage-outputs.json").read_text())
    vocab: dict[str, int] = {}
    out = [
        {"prompt": case["prompt"], "output_ids": _word_ids(case["correct"], vocab), "text": case["correct"]}
    ]
    result = probe.compare_outputs(out, [dict(out[0])])
    # The answer has 6 words, fewer than min_prefix_tokens: the whole answer must match.
    assert result["passed"] and result["per_prompt"][0]["common_prefix"] == 6


def test_garbage_from_the_first_token_fails_on_every_prompt():
    result = probe.compare_outputs(_outputs("same"), _outputs("garbage"), profile="eagle3")
    assert not result["passed"]
    assert result["agreeing"] == 0 and result["prompts"] == 8
    assert max(p["common_prefix"] for p in result["per_prompt"]) < 2
    assert result["reason"].startswith("eagle3: output differs from the old stack")


def test_numeric_drift_after_the_first_tokens_passes():
    result = probe.compare_outputs(_outputs("same"), _outputs("drift", after=12))
    assert result["passed"], result["reason"]
    assert [p["common_prefix"] for p in result["per_prompt"]] == [12] * 8
    assert result["reason"].startswith("plain: output matches the old stack: 8 of 8")


def test_early_drift_on_a_quarter_of_the_prompts_is_tolerated_and_on_more_is_not():
    old = _outputs("same")
    early = _outputs("drift", after=3)
    late = _outputs("drift", after=20)
    two_early = late[:6] + early[6:]
    three_early = late[:5] + early[5:]
    assert probe.compare_outputs(old, two_early)["passed"]
    failed = probe.compare_outputs(old, three_early)
    assert not failed["passed"] and failed["agreeing"] == 5
    # The threshold is an option: a stricter share refuses the tolerated case.
    assert not probe.compare_outputs(old, two_early, min_agreeing_share=1.0)["passed"]
    # and a shorter prefix accepts the drift at token 3.
    assert probe.compare_outputs(old, three_early, min_prefix_tokens=3)["passed"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"min_prefix_tokens": 0},
            "verify_throughput_probe_min_prefix_tokens must be an integer >= 1 (got 0)",
        ),
        (
            {"min_agreeing_share": 1.5},
            "verify_throughput_probe_min_agreeing_share must be a number in (0, 1] (got 1.5)",
        ),
    ],
)
def test_bad_thresholds_name_the_option(kwargs, message):
    with pytest.raises(ValueError) as err:
        probe.compare_outputs(_outputs("same"), _outputs("same"), **kwargs)
    assert str(err.value) == message


def test_mismatched_prompt_lists_are_refused():
    with pytest.raises(ValueError, match="old: 8 outputs, new: 7"):
        probe.compare_outputs(_outputs("same"), _outputs("same")[:7])
    other = _outputs("same", prompts=PROMPTS[1:9])
    with pytest.raises(ValueError, match="probe output 0 is for different prompts"):
        probe.compare_outputs(_outputs("same"), other)


def test_garbage_fails_the_rule_and_an_output_without_token_ids_is_refused():
    result = probe.compare_outputs(_outputs("same"), _outputs("garbage"), profile="plain")
    assert not result["passed"]
    with pytest.raises(ValueError, match="has no list of integer output_ids"):
        probe.compare_outputs(
            [{"prompt": PROMPTS[0], "output_ids": [1]}], [{"prompt": PROMPTS[0], "text": "x"}]
        )


def test_the_shipped_prompt_set_is_fixed_and_varied():
    data = json.loads((ROOT / "roles" / "verify_throughput" / "files" / "prompts.json").read_text())
    assert isinstance(data["seed"], int)
    assert len(set(data["prompts"])) == len(data["prompts"]) == 16
    lengths = sorted(len(p.split()) for p in data["prompts"])
    assert lengths[0] <= 6 and lengths[-1] >= 40


def test_the_summary_shows_a_failed_probe_with_both_outputs_and_both_command_lines(tmp_path):
    from cuda13_upgrade import summary

    failed = probe.compare_outputs(_outputs("same"), _outputs("garbage"))
    result = {
        "host": "gpu-node-02",
        "status": "rolled_back",
        "reason": failed["reason"],
        "probe": {"plain": failed},
        "throughput": {
            "baseline": {"eagle3": {"command": "/opt/ml-env/bin/python -m sglang.launch_server --x 1"}},
            "candidate": {
                "eagle3": {
                    "command": "/opt/ml-env-cu130/bin/python -m sglang.launch_server --x 1 --enable-torch-symm-mem",
                    "new_stack_args": ["--enable-torch-symm-mem"],
                }
            },
        },
    }
    result["accept_length"] = {
        "eagle3": probe.compare_accept_length(_spec([(32, 10)] * 8), _spec([(32, 32)] * 8)),
        "plain": probe.compare_accept_length(_outputs("same"), _outputs("same"), profile="plain"),
        "eagle3-long": probe.compare_accept_length(
            _spec([(32, 10)] * 8), _outputs("same"), profile="eagle3-long"
        ),
    }
    rows = summary.summary_rows([result])
    assert rows[0]["probe"]["plain"]["passed"] is False
    text = summary.render_markdown("run-1", rows)
    assert (
        "- gpu-node-02 plain: output differs from the old stack (0 of 8 prompts agree for at least 4 tokens)"
        in text
    )
    assert f"  - prompt: `{failed['example']['prompt']}`" in text
    assert "- gpu-node-02 eagle3: 3.20 -> 1.00 tokens per verify step (-68.8 %, rolled back)" in text
    assert (
        "- gpu-node-02 eagle3-long: 3.20 -> none: the new stack's server reported no "
        "speculative counters (rolled back)" in text
    )
    assert "gpu-node-02 plain: " not in text.split("## Speculative accept length")[1]
    assert "  - old stack: `/opt/ml-env/bin/python -m sglang.launch_server --x 1`" in text
    assert (
        "  - new stack: `/opt/ml-env-cu130/bin/python -m sglang.launch_server --x 1 --enable-torch-symm-mem`"
        in text
    )


def test_workload_prompts_differ_per_trial_and_have_the_asked_length():
    from cuda13_upgrade.hostscripts import completion_bench

    prompts = [completion_bench.workload_prompt(PROMPTS, 20261201, i, 128) for i in range(21)]
    assert len(set(prompts)) == 21
    assert all(len(p.split()) == 128 for p in prompts)
    # No two trials start alike (a shared prefix would be a prefix-cache hit).
    assert len({p.split()[0:3].__repr__() for p in prompts[:16]}) == 16
    assert completion_bench.workload_prompt(PROMPTS, 20261201, 3, 128) == prompts[3]


def _spec(tokens_steps: list[tuple[int, int]]) -> list[dict]:
    return [
        {"prompt": str(i), "output_ids": [], "completion_tokens": n, "spec_verify_ct": ct}
        for i, (n, ct) in enumerate(tokens_steps)
    ]


def test_accept_length_is_tokens_per_verify_step_over_the_probe():
    # SGLang: spec_accept_length = completion_tokens / spec_verify_ct per request.
    assert probe.accept_length(_spec([(32, 10), (32, 11)])) == 64 / 21
    assert probe.accept_length([{"prompt": "x", "output_ids": [1]}]) is None


def test_accept_length_collapsing_to_one_fails_and_a_small_drop_passes():
    old = _spec([(32, 10)] * 8)
    collapsed = probe.compare_accept_length(old, _spec([(32, 32)] * 8))
    assert collapsed["passed"] is False and collapsed["new"] == 1.0
    assert collapsed["reason"].startswith(
        "eagle3: speculative accept length collapsed to 1.00 on the new stack"
    )
    dropped = probe.compare_accept_length(old, _spec([(32, 12)] * 8))
    assert dropped["passed"] is False and "dropped beyond 15 %" in dropped["reason"]
    assert probe.compare_accept_length(old, _spec([(32, 12)] * 8), max_drop_pct=20)["passed"] is True
    assert probe.compare_accept_length(old, _spec([(32, 10)] * 8))["passed"] is True
    none = probe.compare_accept_length(_outputs("same"), _outputs("same"), profile="plain")
    assert none["passed"] is None
    # No old accept length: nothing to compare, whatever the new stack reports.
    assert probe.compare_accept_length(_outputs("same"), _spec([(32, 10)] * 8))["passed"] is None
    with pytest.raises(
        ValueError, match=r"verify_throughput_accept_length_drop_pct must be a number >= 0 \(got -1\)"
    ):
        probe.compare_accept_length(old, old, max_drop_pct=-1)


def test_accept_length_missing_on_the_new_stack_only_fails():
    # The old stack's server answered with spec_verify_ct, the new one without: a server
    # that decodes without speculation (or a probe of another profile) must not pass.
    gone = probe.compare_accept_length(_spec([(32, 10)] * 8), _outputs("same"))
    assert gone["passed"] is False
    assert gone["old"] == 3.2 and gone["new"] is None and gone["change_pct"] is None
    assert gone["reason"].startswith(
        "eagle3: the new stack's probe answers carry no speculative counters (no spec_verify_ct"
    )
    assert "accept length 3.20" in gone["reason"] and "--speculative-algorithm" in gone["reason"]


def test_load_checks_each_have_their_own_tolerance():
    from cuda13_upgrade import load

    old = {
        "ttft_prompt_len": 2000,
        "ttft_long_ms": [300.0, 310.0, 305.0],
        "concurrency": 4,
        "concurrent_output_tok_s": 350.0,
    }
    same = load.compare_load(old, dict(old))
    assert same["passed"] and same["ttft"]["change_pct"] == 0.0
    # sgl-project/sglang#5396: prefill 652 -> 198 tok/s with decode unchanged.
    slow_prefill = {**old, "ttft_long_ms": [t * 652 / 198 for t in old["ttft_long_ms"]]}
    result = load.compare_load(old, slow_prefill)
    assert not result["passed"] and result["concurrency"]["passed"]
    assert result["reasons"][0].startswith(
        "plain: median TTFT at a 2000-word prompt 305 -> 1004 ms (+229.3 %"
    )
    under_load = {**old, "concurrent_output_tok_s": 330.0}
    assert not load.compare_load(old, under_load)["passed"]  # -5.7 % beyond 5 %
    assert load.compare_load(old, under_load, concurrency_tolerance_pct=6)["passed"]
    with pytest.raises(
        ValueError, match=r"verify_throughput_ttft_tolerance_pct must be a number >= 0 \(got -1\)"
    ):
        load.compare_load(old, old, ttft_tolerance_pct=-1)
    with pytest.raises(ValueError, match="measured on one stack only"):
        load.compare_load(old, {**old, "ttft_long_ms": None})
    off = {"ttft_long_ms": None, "concurrent_output_tok_s": None}
    assert load.compare_load(off, off) == {
        "profile": "plain",
        "ttft": None,
        "concurrency": None,
        "reasons": [],
        "passed": True,
    }
