"""The simulated engine: which decode rate applies and when each token leaves the server.

Scenario file: ``$SGLANG_SIM_SCENARIO``, default ``/etc/sglang-sim/scenario.json``; the
built-in ``DEFAULT_SCENARIO`` when the file does not exist. Schema::

    {
      "rates_tok_s": {"cu128": {"plain": 89.5, "eagle3": 54.1},
                      "cu130": {"plain": 92.6, "eagle3": 96.1}},
      "noise_pct": 1.0,          # per-request gaussian multiplicative noise (sigma, %)
      "ttft_ms": 150,            # time to first token
      "startup_s": 1.0,          # simulated weight loading before the port opens
      "spec_accept_length": {"eagle3": 3.2}   # optional, reported for speculative profiles
    }

The rate key is the CUDA tag of the torch really imported (``torch.version.cuda`` "13.0" ->
``cu130``) and the profile ``eagle3`` for ``--speculative-algorithm EAGLE3`` or ``EAGLE``,
``plain`` without speculative decoding (another algorithm: its lower-case name).

A rate is the output token throughput one stream sees, what ``bench_serving
--max-concurrency 1`` reports: a request for ``n`` tokens lasts ``n / rate`` seconds (at least
the TTFT); its first token leaves after ``ttft_ms`` and the others are evenly spaced over the
rest. Each request draws its own rate ``rate * N(1, noise_pct/100)``.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

SCENARIO_ENV = "SGLANG_SIM_SCENARIO"
DEFAULT_SCENARIO_PATH = "/etc/sglang-sim/scenario.json"
DEFAULT_SCENARIO: dict = {
    "rates_tok_s": {
        "cu128": {"plain": 89.5, "eagle3": 54.1},
        "cu130": {"plain": 92.6, "eagle3": 96.1},
    },
    "noise_pct": 1.0,
    "ttft_ms": 150,
    "startup_s": 1.0,
}

_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which "
    "model token speed decode kernel stream batch graph cache layer"
).split()


def load_scenario() -> tuple[dict, str]:
    """The scenario in force and where it came from (a path, or ``built-in``)."""
    path = os.environ.get(SCENARIO_ENV, DEFAULT_SCENARIO_PATH)
    if Path(path).is_file():
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        merged = {**DEFAULT_SCENARIO, **data}
        return merged, path
    if SCENARIO_ENV in os.environ:
        raise FileNotFoundError(f"{SCENARIO_ENV}={path}: no such scenario file")
    return dict(DEFAULT_SCENARIO), "built-in"


def cuda_tag(torch_cuda: str | None) -> str:
    """``"13.0"`` -> ``"cu130"``; ``None`` (a CPU build) -> ``"cpu"``."""
    if not torch_cuda:
        return "cpu"
    major, minor = torch_cuda.split(".")[:2]
    return f"cu{major}{minor}"


def profile_for(speculative_algorithm: str | None) -> str:
    """``plain``, ``eagle3`` (for EAGLE3 and EAGLE), or the algorithm's lower-case name."""
    if not speculative_algorithm:
        return "plain"
    name = speculative_algorithm.upper()
    return "eagle3" if name in ("EAGLE3", "EAGLE") else name.lower()


@dataclass(frozen=True)
class DecodeModel:
    """Timing of one server: base rate (tok/s), TTFT (s), noise (fraction)."""

    rate_tok_s: float
    ttft_s: float
    noise: float
    rng: random.Random

    @classmethod
    def from_scenario(cls, scenario: dict, tag: str, profile: str) -> DecodeModel:
        rates = scenario.get("rates_tok_s", {})
        try:
            rate = float(rates[tag][profile])
        except KeyError:
            raise ValueError(
                f"sandbox scenario has no rate for {tag}/{profile} (rates_tok_s: {rates})"
            ) from None
        seed = os.environ.get("SGLANG_SIM_SEED")
        rng = random.Random(int(seed)) if seed is not None else random.Random()
        return cls(
            rate,
            float(scenario.get("ttft_ms", 150)) / 1000.0,
            float(scenario.get("noise_pct", 0.0)) / 100.0,
            rng,
        )

    def request_rate(self) -> float:
        """This request's rate: the base rate times a gaussian factor (at least 5%)."""
        factor = self.rng.gauss(1.0, self.noise) if self.noise > 0 else 1.0
        return self.rate_tok_s * max(factor, 0.05)

    def schedule(self, n_tokens: int, rate: float) -> list[float]:
        """Offsets (s from the request's arrival) at which each of ``n_tokens`` is emitted."""
        if n_tokens <= 0:
            return []
        duration = max(n_tokens / rate, self.ttft_s)
        if n_tokens == 1:
            return [duration]
        step = (duration - self.ttft_s) / (n_tokens - 1)
        return [self.ttft_s + i * step for i in range(n_tokens)]


def token_text(request_seed: int, index: int) -> str:
    """The text of one generated token: a leading space and a word."""
    return " " + _WORDS[(request_seed * 7 + index * 13) % len(_WORDS)]


def count_tokens(text: str) -> int:
    """The stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())
