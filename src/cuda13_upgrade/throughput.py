"""Decode throughput: parse benchmark output, summarise trials, decide.

The decision is whether the new stack regressed against the old one for one
server profile (plain decode, EAGLE-3 speculative decoding, ...), from the
per-trial decode throughput in tok/s measured on each.

The rule (documented in the README, "The throughput gate"):

* Each side is summarised by its median; the relative change is
  ``d = median(new) / median(old) - 1``.
* Its standard error is ``1.2533 * sigma * sqrt(1/n_old + 1/n_new)`` (the
  asymptotic standard error of a median of normal noise), with the relative
  noise ``sigma`` estimated robustly as ``1.4826 * MAD`` (median absolute
  deviation) of both sides' relative deviations from their own medians,
  pooled: both stacks run the same workload on the same host.
* With ``t`` the tolerance (a fraction, e.g. 0.025 for 2.5 %) and ``z`` the
  confidence factor: keep when ``d - z*se >= -t``; roll back when
  ``d + z*se < -t``; otherwise the trials cannot decide yet and, below the cap,
  more trials of the new stack are measured. At the cap the point estimate
  decides: roll back when ``d < -t``.

Noise must not cause rollbacks: the spread of every side is reported, and a
sample whose spread is too wide to decide at the cap is still decided by its
median, which one outlier cannot move.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)  # 1.2533: asymptotic SE of a normal sample's median
MAD_TO_SIGMA = 1.4826  # consistency constant of the MAD for normal data

# Defaults chosen by simulation (benchmarks/gate_error_rates.py) for 2 % noise
# per trial: about 0.2 % false rollbacks and 2-3 % missed 5 % regressions.
DEFAULT_MIN_TRIALS = 7
DEFAULT_MAX_TRIALS = 21
DEFAULT_TOLERANCE_PCT = 3.0
DEFAULT_Z = 1.5


@dataclass(frozen=True)
class Summary:
    """Trials of one side: ``n``, ``median``/``mean``/``min``/``max`` (tok/s),
    ``spread_pct`` ((max - min) / median * 100) and ``mad`` (tok/s)."""

    n: int
    median: float
    mean: float
    min: float
    max: float
    spread_pct: float
    mad: float

    def median_se(self) -> float:
        """Standard error of the median (tok/s); 0 for a single trial."""
        if self.n < 2:
            return 0.0
        return MEDIAN_SE_FACTOR * MAD_TO_SIGMA * self.mad / math.sqrt(self.n)


def summarize(values: list[float]) -> Summary:
    """Summarise per-trial throughputs (tok/s). Raises ``ValueError`` on an
    empty list or a value that is not a positive finite number."""
    if not values:
        raise ValueError("no trials to summarise")
    clean = []
    for value in values:
        number = float(value)
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"throughput {value!r} is not a positive number of tok/s")
        clean.append(number)
    med = statistics.median(clean)
    mad = statistics.median(abs(v - med) for v in clean)
    return Summary(
        n=len(clean),
        median=round(med, 4),
        mean=round(statistics.fmean(clean), 4),
        min=min(clean),
        max=max(clean),
        spread_pct=round((max(clean) - min(clean)) / med * 100.0, 3),
        mad=round(mad, 4),
    )


@dataclass(frozen=True)
class Decision:
    """Outcome for one profile.

    ``verdict``: ``"keep"``, ``"regressed"`` or ``"undecided"`` (more trials
    wanted); ``final``: whether the caller should stop measuring;
    ``change_pct``: relative change of the medians in percent; ``se_pct`` its
    standard error in percent; ``reason``: one sentence for the report.
    """

    profile: str
    verdict: str
    final: bool
    change_pct: float
    se_pct: float
    tolerance_pct: float
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    reason: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _change_se(baseline: list[float], candidate: list[float], old: Summary, new: Summary) -> float:
    """Standard error of ``median(new) / median(old) - 1``.

    Both stacks run the same workload on the same host, so their relative
    noise is taken as common: sigma (relative) is estimated once from the
    pooled relative deviations of both sides from their own medians
    (1.4826 * MAD), which is steadier than two small-sample estimates.
    """
    deviations = [v / old.median - 1.0 for v in baseline] + [v / new.median - 1.0 for v in candidate]
    sigma = MAD_TO_SIGMA * statistics.median(abs(d) for d in deviations)
    return MEDIAN_SE_FACTOR * sigma * math.sqrt(1.0 / old.n + 1.0 / new.n)


def decide(
    baseline: list[float],
    candidate: list[float],
    *,
    profile: str = "plain",
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    z: float = DEFAULT_Z,
    max_trials: int = DEFAULT_MAX_TRIALS,
) -> Decision:
    """Decide whether ``candidate`` (new stack) regressed against ``baseline``.

    ``baseline``/``candidate``: decode throughput per trial in tok/s.
    ``tolerance_pct``: how much slower the new median may be, in percent.
    ``z``: confidence factor of the early decisions. ``max_trials``: the cap
    on candidate trials; at the cap the decision is final. Raises
    ``ValueError`` for an empty side, a non-positive value, a negative
    tolerance, or ``max_trials`` < 1.
    """
    if tolerance_pct < 0:
        raise ValueError(f"tolerance_pct must be >= 0, got {tolerance_pct!r}")
    if max_trials < 1:
        raise ValueError(f"max_trials must be >= 1, got {max_trials!r}")
    old = summarize(baseline)
    new = summarize(candidate)
    change = new.median / old.median - 1.0
    se = _change_se(baseline, candidate, old, new)
    tol = tolerance_pct / 100.0
    at_cap = new.n >= max_trials
    common = {
        "profile": profile,
        "change_pct": round(change * 100.0, 3),
        "se_pct": round(se * 100.0, 3),
        "tolerance_pct": tolerance_pct,
        "baseline": asdict(old),
        "candidate": asdict(new),
    }
    figures = (
        f"{profile}: median {new.median:.1f} tok/s on the new stack vs {old.median:.1f} tok/s "
        f"({change * 100:+.1f} % ± {se * 100:.1f} %, tolerance -{tolerance_pct:g} %, "
        f"{new.n} vs {old.n} trials)"
    )
    if change - z * se >= -tol:
        return Decision(verdict="keep", final=True, reason=f"{figures}: not slower", **common)
    if change + z * se < -tol:
        return Decision(verdict="regressed", final=True, reason=f"{figures}: regressed", **common)
    if not at_cap:
        return Decision(
            verdict="undecided",
            final=False,
            reason=f"{figures}: too noisy to decide, measuring more trials",
            **common,
        )
    verdict = "regressed" if change < -tol else "keep"
    return Decision(
        verdict=verdict,
        final=True,
        reason=f"{figures}: decided by the medians at the trial cap ({verdict})",
        **common,
    )


def speculative_gain(plain: list[float], speculative: list[float]) -> dict[str, Any]:
    """Whether speculative decoding beats plain decode on one stack.

    Returns ``{"plain_median", "speculative_median", "gain_pct", "beats"}``
    (tok/s and percent); the field report's CUDA 12.8 stack had 54.1 tok/s
    with EAGLE-3 against 89.5 tok/s plain (-39.6 %), CUDA 13 96.1 tok/s.
    """
    p = summarize(plain).median
    s = summarize(speculative).median
    gain = s / p - 1.0
    return {
        "plain_median": p,
        "speculative_median": s,
        "gain_pct": round(gain * 100.0, 3),
        "beats": gain > 0,
    }


_BENCH_LABELS = {
    "Backend:": ("backend", str),
    "Successful requests:": ("successful_requests", int),
    "Benchmark duration (s):": ("duration_s", float),
    "Total generated tokens:": ("total_output_tokens", int),
    "Request throughput (req/s):": ("request_throughput", float),
    "Output token throughput (tok/s):": ("output_tok_s", float),
    "Peak output token throughput (tok/s):": ("peak_output_tok_s", float),
    "Mean TTFT (ms):": ("mean_ttft_ms", float),
    "Median TTFT (ms):": ("median_ttft_ms", float),
    "Mean ITL (ms):": ("mean_itl_ms", float),
    "Median ITL (ms):": ("median_itl_ms", float),
    "Mean TPOT (ms):": ("mean_tpot_ms", float),
}


def parse_bench_serving(text: str) -> dict[str, Any]:
    """Parse the result block ``python -m sglang.bench_serving`` prints.

    Anchors on each exact label at the start of a line (so "Peak output token
    throughput (tok/s):", which newer versions print, never reads as the
    output throughput). Returns ``{"output_tok_s", "median_itl_ms", ...}`` for
    the labels present; ``decode_tok_s`` is derived as ``1000 / median ITL``.
    Raises ``ValueError`` when the block is absent or has no output
    throughput, quoting the text's tail.
    """
    start = text.find("Serving Benchmark Result")
    if start < 0:
        raise ValueError(f"no 'Serving Benchmark Result' block in: {text.strip()[-300:]!r}")
    result: dict[str, Any] = {}
    for line in text[start:].splitlines():
        stripped = line.strip()
        for label, (key, kind) in _BENCH_LABELS.items():
            if stripped.startswith(label):
                raw = stripped[len(label) :].strip()
                try:
                    result[key] = kind(raw) if kind is str else kind(float(raw))
                except ValueError as exc:
                    raise ValueError(f"{label} {raw!r} is not a number") from exc
                break
        if stripped.startswith("=====") and result:
            break
    if "output_tok_s" not in result:
        raise ValueError(f"no 'Output token throughput (tok/s):' line in: {text[start:][:400]!r}")
    if result.get("median_itl_ms"):
        result["decode_tok_s"] = round(1000.0 / result["median_itl_ms"], 3)
    return result


_JSONL_KEYS = ("output_throughput", "median_itl_ms", "mean_ttft_ms", "median_ttft_ms")


def parse_bench_serving_jsonl_line(record: dict[str, Any]) -> dict[str, Any]:
    """One ``--output-file`` JSONL record of bench_serving, as a trial.

    Needs ``output_throughput`` (tok/s); keeps TTFT/ITL when present; derives
    ``decode_tok_s`` from ``median_itl_ms``. Raises ``ValueError`` when
    ``output_throughput`` is missing or not a number.
    """
    if "output_throughput" not in record:
        raise ValueError(f"bench_serving record has no output_throughput: {sorted(record)}")
    trial = {k: float(record[k]) for k in _JSONL_KEYS if record.get(k) is not None}
    trial["output_tok_s"] = trial.pop("output_throughput")
    if trial.get("median_itl_ms"):
        trial["decode_tok_s"] = round(1000.0 / trial["median_itl_ms"], 3)
    return trial


def trial_metric(trials: list[dict[str, Any]], metric: str = "output_tok_s") -> list[float]:
    """The ``metric`` of each trial; raises ``ValueError`` naming a trial without it."""
    values = []
    for index, trial in enumerate(trials):
        if metric not in trial:
            raise ValueError(f"trial {index} has no {metric!r}: {sorted(trial)}")
        values.append(float(trial[metric]))
    return values


def normalize_trials(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials as ``hostscripts/completion_bench.py`` accumulates them, as one shape.

    A built-in client trial (``decode_tok_s``, ``ttft_ms``, ...) is kept; a
    ``{"method": "bench_serving", "record": ..., "stdout_tail": ...}`` trial
    becomes ``parse_bench_serving_jsonl_line(record)``, or, when the record
    lacks the throughput, ``parse_bench_serving(stdout_tail)``. Raises
    ``ValueError`` naming the trial that is neither.
    """
    out = []
    for index, trial in enumerate(trials):
        if trial.get("method") == "bench_serving":
            record = trial.get("record") or {}
            if "output_throughput" in record:
                out.append(parse_bench_serving_jsonl_line(record))
            else:
                out.append(parse_bench_serving(trial.get("stdout_tail", "")))
        elif "decode_tok_s" in trial:
            out.append(trial)
        else:
            raise ValueError(f"trial {index} is neither a client nor a bench_serving trial: {trial!r}")
    return out
