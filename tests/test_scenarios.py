"""The sandbox's scenario files: every EAGLE-3 accept length is sourced and fits the rates.

A real SGLang server run with ``--speculative-algorithm`` counts verify steps for every
request (``meta_info.spec_verify_ct``), so every scenario that serves EAGLE-3 states its
accept length, with the source named in its description. The accept length and the decode
rates together fix the time of one draft-and-verify cycle (accept length / rate, as the
simulated server spaces the tokens); that time must fit the field report's verify pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "sandbox" / "mirror" / "scenarios"
sys.path.insert(0, str(ROOT / "sandbox" / "sglang-src" / "python"))
from sglang.srt import simulation  # noqa: E402

# https://huggingface.co/lightseekorg/kimi-k2.5-eagle3 (model card, Performance): Kimi-K2.5,
# topk=1, num_steps=3, num_draft_tokens=4, MTBench, Phase 2 (40k steps).
SOURCED_ACCEPT_LENGTH = 2.687
SOURCE = "https://huggingface.co/lightseekorg/kimi-k2.5-eagle3"
# The field report (shared/seed): the EAGLE-3 verify pass took ~30 ms per cycle on CUDA 12.8,
# dominated by 122 allreduces (two per layer, 61 layers) of ~200 us each.
VERIFY_PASS_S = 0.030
ALLREDUCE_S = 122 * 200e-6


def _scenarios() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(SCENARIOS.glob("*.json"))}


def _speculative(scenario: dict) -> list[str]:
    """The speculative profiles the scenario serves (a rate on either stack)."""
    return sorted({p for rates in scenario["rates_tok_s"].values() for p in rates if p != "plain"})


@pytest.mark.parametrize("name", sorted(_scenarios()))
def test_every_eagle3_scenario_states_a_sourced_accept_length_per_stack(name):
    scenario = _scenarios()[name]
    assert _speculative(scenario) == ["eagle3"]
    # The file's own value (not the built-in default it would inherit).
    assert "spec_accept_length" in scenario, name
    for tag in scenario["rates_tok_s"]:
        length = simulation.accept_length(scenario, tag, "eagle3")
        assert length is not None and 1.0 <= length <= 4.0, (name, tag, length)
    assert SOURCE in scenario["description"], name
    assert str(SOURCED_ACCEPT_LENGTH) in scenario["description"], name


def test_the_default_scenario_uses_the_sourced_figure_on_both_stacks():
    default = _scenarios()["default"]
    assert {tag: simulation.accept_length(default, tag, "eagle3") for tag in ("cu128", "cu130")} == {
        "cu128": SOURCED_ACCEPT_LENGTH,
        "cu130": SOURCED_ACCEPT_LENGTH,
    }
    # The built-in scenario (no file on the host) is the default scenario's.
    assert simulation.DEFAULT_SCENARIO["spec_accept_length"] == default["spec_accept_length"]
    assert simulation.DEFAULT_SCENARIO["rates_tok_s"] == default["rates_tok_s"]


@pytest.mark.parametrize("name", sorted(_scenarios()))
def test_the_accept_length_fits_the_field_reports_verify_pass(name):
    scenario = _scenarios()[name]
    old = simulation.accept_length(scenario, "cu128", "eagle3")
    new = simulation.accept_length(scenario, "cu130", "eagle3")
    rates = scenario["rates_tok_s"]
    cycle_old = old / rates["cu128"]["eagle3"]
    # One cycle on CUDA 12.8 holds the ~30 ms verify pass and the draft steps.
    assert cycle_old >= VERIFY_PASS_S, (name, cycle_old)
    if new != old:
        return  # acceptance changed (accept-collapse): the cycle is not comparable
    cycle_new = new / rates["cu130"]["eagle3"]
    # With the same acceptance, CUDA 13 can save at most the allreduce time of the verify pass.
    assert cycle_old - cycle_new <= ALLREDUCE_S, (name, cycle_old, cycle_new)
