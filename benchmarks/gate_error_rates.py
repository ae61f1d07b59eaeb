#!/usr/bin/env python3
"""Error rates of the throughput gate's decision rule, by simulation.

For each noise level, many simulated upgrades: the old stack is measured with
``DEFAULT_MIN_TRIALS`` trials, the new one likewise and then one more trial at
a time while the rule asks for more (up to the cap), exactly as the
``verify_throughput`` role drives ``cuda13_upgrade.throughput.decide``. Each
trial is ``rate * N(1, noise)``. Prints, per noise level:

* false rollbacks: how often a new stack that is exactly as fast is rolled back;
* missed regressions: how often a new stack 5 % slower is kept;
* the mean number of new-stack trials the rule used.

Then the correctness probe (``cuda13_upgrade.probe.compare_outputs`` with its defaults, 8
prompts of 32 greedy tokens), on token sequences where a correct new stack diverges from
the old one at a near-tie: at each token the argmax flips with probability ``p`` (numeric
drift; 1 % and 3 % per token), so each prompt's first divergence is geometric; a broken
stack (garbage) differs at token 0, or with probability 0.2 at token 1 or 2 (a common first
token such as a space or "The"). Prints the garbage caught, the false rollbacks of the
probe alone and of the whole gate (throughput at 2 % noise and the probe), and the time
the probe adds per profile and phase, as a ratio to the throughput trials, from the
simulated server's timing (TTFT 150 ms, 89.5 tok/s; 7 trials of 256 tokens, 1 warm-up).

Last, speculative health (``cuda13_upgrade.probe.compare_accept_length``): each probe
request's accept length is ``3.2 * N(1, 0.10)`` tokens per verify step on both stacks (a
correct new stack), or exactly 1.0 (acceptance collapsed); prints the collapses caught and
the false rollbacks of correct stacks per allowed drop.

Usage: benchmarks/gate_error_rates.py [--runs N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import statistics

from cuda13_upgrade import probe, throughput

PROBE_PROMPTS, PROBE_TOKENS = 8, 32


def simulate(rng: random.Random, true_change: float, noise: float) -> tuple[str, int]:
    n = throughput.DEFAULT_MIN_TRIALS
    base = [89.5 * rng.gauss(1.0, noise) for _ in range(n)]
    new = [89.5 * (1.0 + true_change) * rng.gauss(1.0, noise) for _ in range(n)]
    while True:
        decision = throughput.decide(base, new)
        if decision.final:
            return decision.verdict, len(new)
        new.append(89.5 * (1.0 + true_change) * rng.gauss(1.0, noise))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(
        f"decision rule: tolerance {throughput.DEFAULT_TOLERANCE_PCT} %, z {throughput.DEFAULT_Z}, "
        f"trials {throughput.DEFAULT_MIN_TRIALS}..{throughput.DEFAULT_MAX_TRIALS}, {args.runs} runs each"
    )
    print(f"{'noise':>6}  {'false rollbacks':>16}  {'missed 5% regr.':>16}  {'trials (same/5%)':>17}")
    for noise in (0.01, 0.02, 0.03):
        same = [simulate(rng, 0.0, noise) for _ in range(args.runs)]
        slow = [simulate(rng, -0.05, noise) for _ in range(args.runs)]
        false_rate = sum(v == "regressed" for v, _ in same) / args.runs
        missed = sum(v == "keep" for v, _ in slow) / args.runs
        trials = (statistics.fmean(n for _, n in same), statistics.fmean(n for _, n in slow))
        print(
            f"{noise * 100:>5.0f}%  {false_rate * 100:>15.2f}%  {missed * 100:>15.2f}%  "
            f"{trials[0]:>8.1f}/{trials[1]:.1f}"
        )
    probe_report(rng, args.runs)
    accept_report(rng, args.runs)


def probe_outputs(rng: random.Random, flip_per_token: float | None) -> tuple[list[dict], list[dict]]:
    """Old and new token sequences of the probe's prompts; ``None``: a garbage new stack."""
    old, new = [], []
    for index in range(PROBE_PROMPTS):
        ids = [rng.randrange(32000) for _ in range(PROBE_TOKENS)]
        if flip_per_token is None:
            diverge = 0 if rng.random() >= 0.2 else rng.choice((1, 2))
        else:
            diverge = 0
            while diverge < PROBE_TOKENS and rng.random() >= flip_per_token:
                diverge += 1
        other = ids[:diverge] + [(t + 1 + rng.randrange(31999)) % 32000 for t in ids[diverge:]]
        old.append({"prompt": str(index), "output_ids": ids})
        new.append({"prompt": str(index), "output_ids": other})
    return old, new


def probe_passes(rng: random.Random, flip_per_token: float | None) -> bool:
    return probe.compare_outputs(*probe_outputs(rng, flip_per_token))["passed"]


def probe_time_ratio(rate: float = 89.5, ttft_s: float = 0.150) -> float:
    """Probe time / throughput-trial time per profile and phase, from the simulated timing."""

    def request_s(tokens: int) -> float:
        return max(tokens / rate, ttft_s)

    trials = request_s(16) + throughput.DEFAULT_MIN_TRIALS * request_s(256)
    return PROBE_PROMPTS * request_s(PROBE_TOKENS) / trials


def accept_outputs(rng: random.Random, mean: float, spread: float = 0.10) -> list[dict]:
    outputs = []
    for _ in range(PROBE_PROMPTS):
        length = max(1.0, mean * rng.gauss(1.0, spread)) if mean > 1.0 else 1.0
        outputs.append({"completion_tokens": PROBE_TOKENS, "spec_verify_ct": round(PROBE_TOKENS / length)})
    return outputs


def accept_report(rng: random.Random, runs: int) -> None:
    print()
    print(f"speculative health: accept length over {PROBE_PROMPTS} probe requests, {runs} runs each")
    caught = (
        sum(
            probe.compare_accept_length(accept_outputs(rng, 3.2), accept_outputs(rng, 1.0))["passed"] is False
            for _ in range(runs)
        )
        / runs
    )
    print(f"  collapsed acceptance (1.0) caught: {caught * 100:.2f}%")
    for drop in (10.0, 15.0, 20.0):
        false = (
            sum(
                probe.compare_accept_length(
                    accept_outputs(rng, 3.2), accept_outputs(rng, 3.2), max_drop_pct=drop
                )["passed"]
                is False
                for _ in range(runs)
            )
            / runs
        )
        print(f"  correct stacks, allowed drop {drop:.0f} %: false rollbacks {false * 100:.2f}%")


def probe_report(rng: random.Random, runs: int) -> None:
    print()
    print(
        f"correctness probe: {PROBE_PROMPTS} prompts x {PROBE_TOKENS} tokens, a prompt agrees when "
        f"its first {probe.DEFAULT_MIN_PREFIX_TOKENS} tokens are equal, "
        f"{probe.DEFAULT_MIN_AGREEING_SHARE:.0%} must agree; {runs} runs each"
    )
    caught = sum(not probe_passes(rng, None) for _ in range(runs)) / runs
    print(f"  garbage stacks caught: {caught * 100:.2f}%")
    for flip in (0.01, 0.03):
        probe_false = sum(not probe_passes(rng, flip) for _ in range(runs)) / runs
        gate_false = (
            sum(
                (not probe_passes(rng, flip)) or simulate(rng, 0.0, 0.02)[0] == "regressed"
                for _ in range(runs)
            )
            / runs
        )
        print(
            f"  numeric drift, near-tie flip {flip * 100:.0f} %/token: false rollbacks by the probe "
            f"{probe_false * 100:.2f}%, by the whole gate at 2 % noise {gate_false * 100:.2f}%"
        )
    print(f"  probe time per profile and phase: {probe_time_ratio():.3f} x the throughput trials")


if __name__ == "__main__":
    main()
