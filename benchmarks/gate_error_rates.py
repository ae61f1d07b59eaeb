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

Usage: benchmarks/gate_error_rates.py [--runs N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import statistics

from cuda13_upgrade import throughput


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


if __name__ == "__main__":
    main()
