"""The batched correctness probe: the probe's prompts sent together, each answer compared
with the same prompt alone and with the old stack's (cuda13_upgrade.probe.compare_batched),
on the simulated server of the sandbox with a batch-dependent fault
(flashinfer-ai/flashinfer#2577: NVFP4 mm_fp4 "Returns **all zeros** (silent failure)"
depending on the batch size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sandbox_mirror import testkit

from cuda13_upgrade import probe, throughput
from cuda13_upgrade.hostscripts import completion_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox" / "sglang-src" / "python"))
from sglang.srt import simulation  # noqa: E402

PROMPTS = json.loads(
    (Path(__file__).resolve().parents[1] / "roles/verify_throughput/files/prompts.json").read_text()
)["prompts"][:8]


def outputs(mode: str = "same", after: int = 0, tokens: int = 32) -> list[dict]:
    return [
        {"prompt": p, "output_ids": simulation.greedy_token_ids(p, tokens, mode, after), "text": f"text {i}"}
        for i, p in enumerate(PROMPTS)
    ]


def batch(size: int, wrong_from: int | None = None, tokens: int = 32) -> dict:
    answers = []
    for request in range(size):
        index = request % len(PROMPTS)
        ids = simulation.greedy_token_ids(PROMPTS[index], tokens)
        if wrong_from is not None and request + 1 >= wrong_from:
            ids = [0] * tokens
        answers.append({"prompt_index": index, "prompt": PROMPTS[index], "output_ids": ids, "text": "x"})
    return {"batch_size": size, "outputs": answers}


def test_batch_sizes_are_the_serving_concurrency_and_one_past_the_largest_cuda_graph():
    assert probe.batch_sizes(8, {"cuda_graph_max_bs": 160}) == {"sizes": [8, 161], "cuda_graph_max_bs": 160}
    # No graphs when the server runs without them or does not say how far they go.
    assert probe.batch_sizes(8, {"cuda_graph_max_bs": 160, "disable_cuda_graph": True})["sizes"] == [8]
    assert probe.batch_sizes(8, {"cuda_graph_max_bs": None}) == {"sizes": [8], "cuda_graph_max_bs": None}
    assert probe.batch_sizes(8, None)["sizes"] == [8]
    # A concurrency of one is the probe alone; the same size is sent once.
    assert probe.batch_sizes(1, {"cuda_graph_max_bs": 7})["sizes"] == [8]
    assert probe.batch_sizes(8, {"cuda_graph_max_bs": 7})["sizes"] == [8]
    with pytest.raises(ValueError, match="serving concurrency >= 0"):
        probe.batch_sizes(-1, None)


def test_answers_that_turn_to_zeros_in_a_batch_fail_naming_prompt_batch_size_and_token():
    alone = outputs()
    record = probe.compare_batched(alone, [batch(8, wrong_from=4)], old=outputs(), profile="plain")
    assert record["passed"] is False
    first = record["batches"][0]
    assert (first["batch_size"], first["requests"], first["agreeing"]) == (8, 8, 3)
    expected_id = alone[3]["output_ids"][0]
    assert first["example"]["request"] == 4 and first["example"]["position"] == 0
    assert (first["example"]["expected_id"], first["example"]["batched_id"]) == (expected_id, 0)
    assert record["reason"].startswith(
        "plain: output changes when the prompts share a batch: in a batch of 8, 3 of 8 answers agree "
        "with the same prompt alone and with the old stack for at least 4 tokens (needed 75%); e.g. prompt "
    )
    assert (
        f"(request 4 of 8): first differing token at position 0: id {expected_id} alone, id 0 in the batch"
        in (record["reason"])
    )


def test_batched_answers_equal_to_alone_pass_and_near_tie_drift_is_tolerated():
    assert probe.compare_batched(outputs(), [batch(8), batch(161)], old=outputs())["passed"] is True
    drifted = batch(8)
    for answer in drifted["outputs"][:2]:
        answer["output_ids"] = simulation.greedy_token_ids(PROMPTS[answer["prompt_index"]], 32, "drift", 1)
    record = probe.compare_batched(outputs(), [drifted])
    assert record["passed"] is True and record["batches"][0]["agreeing"] == 6


def test_a_batch_that_agrees_with_itself_but_not_with_the_old_stack_names_the_old_stack():
    record = probe.compare_batched(outputs(), [batch(8)], old=outputs("garbage"))
    assert record["passed"] is False
    assert record["batches"][0]["example"]["reference"] == "the old stack"
    assert "on the old stack, id" in record["reason"]


def test_an_answer_for_an_unknown_prompt_is_refused():
    wrong = batch(2)
    wrong["outputs"][1]["prompt_index"] = 99
    with pytest.raises(ValueError, match="names prompt 99, which has no answer alone"):
        probe.compare_batched(outputs(), [wrong])


def test_the_gate_rolls_back_on_a_batched_disagreement_and_keeps_the_solo_probe_record():
    trials = [{"output_tok_s": 100.0}] * 3
    candidate = {
        "plain": {
            "trials": trials,
            "probe": outputs(),
            "probe_batched": {"sizes": [8], "batches": [batch(8, wrong_from=2)]},
        }
    }
    verdict = throughput.gate_verdict(
        candidate,
        {"plain": trials},
        baseline_probe={"plain": outputs()},
        max_trials=3,
    )
    assert verdict["regressed"] is True
    assert verdict["probe"]["plain"]["passed"] is True
    assert verdict["probe"]["plain"]["batched"]["passed"] is False
    assert (
        "plain: output changes when the prompts share a batch: in a batch of 8, 1 of 8" in verdict["reason"]
    )


@pytest.fixture(scope="module")
def faulty_server(venv_cu130, no_ld_conf, tmp_path_factory):
    scenario = tmp_path_factory.mktemp("scenario") / "batch.json"
    scenario.write_text(
        json.dumps(
            {
                # The default scenario's request length (92.6 tok/s, 150 ms TTFT: about 0.3 s
                # for 16 tokens), so the 8 requests released together overlap on a loaded
                # machine too: the fault depends on how many run at once.
                "rates_tok_s": {"cu130": {"plain": 92.6}},
                "noise_pct": 1.0,
                "ttft_ms": 150,
                "startup_s": 0.1,
                "tokens": {"cu130": {"zeros_from_batch": 4}},
            }
        )
    )
    env = testkit.clean_env(
        SGLANG_SIM_SCENARIO=str(scenario),
        CUDA_HOME=str(venv_cu130.cuda_home),
        SANDBOX_LD_SO_CONF_D=str(no_ld_conf),
    )
    server = testkit.SimServer(venv_cu130.python, env, tmp_path_factory.mktemp("logs"))
    yield server
    server.close()


def test_the_probe_script_finds_the_simulated_batch_fault(faulty_server):
    document = completion_bench.run(
        {
            "url": faulty_server.url,
            "workload": {"seed": 0, "prompts": PROMPTS},
            "probe": 8,
            "max_new_tokens": 16,
            "probe_batch_sizes": [8],
        }
    )
    alone = document["outputs"]
    assert [a["output_ids"] for a in alone] == [simulation.greedy_token_ids(p, 16) for p in PROMPTS]
    (together,) = document["batched"]
    assert together["batch_size"] == 8
    assert [a["prompt_index"] for a in together["outputs"]] == list(range(8))
    # Request k (1-based) of those running together gets zeros from the 4th on; 3 wrong
    # answers of 8 are more than the probe's 75% rule allows.
    zeros = [a for a in together["outputs"] if a["output_ids"] == [0] * 16]
    assert len(zeros) >= 3, together
    record = probe.compare_batched(alone, document["batched"], old=alone, profile="plain")
    assert record["passed"] is False and "in a batch of 8" in record["reason"]
