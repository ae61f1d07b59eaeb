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
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cuda13_upgrade import effective, load, probe
from cuda13_upgrade import soak as soak_module

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
    "Traffic request rate:": ("request_rate", str),
    "Max request concurrency:": ("max_concurrency", int),
    "Successful requests:": ("successful_requests", int),
    "Benchmark duration (s):": ("duration_s", float),
    "Total generated tokens:": ("total_output_tokens", int),
    "Request throughput (req/s):": ("request_throughput", float),
    "Output token throughput (tok/s):": ("output_tok_s", float),
    "Peak output token throughput (tok/s):": ("peak_output_tok_s", float),
    "Accept length:": ("accept_length", float),
}

_TITLE = "Serving Benchmark Result"
_FIELD_RE = re.compile(r"^(?P<label>[A-Za-z][^:]*?:)\s+(?P<value>\S+)\s*$")
_UNIT_SUFFIX = (("(tok/s)", "tok_s"), ("(req/s)", "req_s"), ("(ms)", "ms"), ("(s)", "s"))

#: Result keys whose 0, -0.0, Infinity, NaN or null mean "not measured" (a
#: speculative run reports 0.00 ITL; older versions -0.00 TPOT): timings,
#: throughputs and the accept length. Counts keep a real 0.
_MEASURED_SUFFIXES = ("_ms", "_s", "_tok_s", "_req_s", "_throughput")
_MEASURED_KEYS = {"accept_length", "output_tok_s", "decode_tok_s", "request_throughput", "concurrency"}


def _label_key(label: str) -> str:
    """``"P90 E2E Latency (ms):"`` -> ``"p90_e2e_latency_ms"``."""
    text = label.rstrip(":").strip()
    for unit, suffix in _UNIT_SUFFIX:
        if text.endswith(unit):
            text = f"{text[: -len(unit)].strip()} {suffix}"
            break
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _is_measured(key: str) -> bool:
    return key in _MEASURED_KEYS or key.endswith(_MEASURED_SUFFIXES)


def known_number(value: Any) -> float | None:
    """A measurement as a float, or None when it means "unknown".

    ``None``, ``""``, non-numbers, NaN, +-Infinity and 0 (``-0.00`` included)
    are unknown: bench_serving prints and writes 0 for a latency it did not
    measure (speculative decoding reports 0.00 ITL), and ``Infinity`` for a
    rate it could not compute.
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number == 0.0:
        return None
    return number


def _derive_decode(result: dict[str, Any]) -> None:
    itl = result.get("median_itl_ms")
    tpot = result.get("median_tpot_ms")
    if itl:
        result["decode_tok_s"] = round(1000.0 / itl, 3)
    elif tpot:
        result["decode_tok_s"] = round(1000.0 / tpot, 3)


def parse_bench_serving(text: str) -> dict[str, Any]:
    """Parse the result block ``python -m sglang.bench_serving`` prints.

    Every ``Label: value`` line of the block is read, whatever its length and
    whichever fields the version prints: the labels of :data:`_BENCH_LABELS`
    get their names (``output_tok_s``, ``accept_length``, ``max_concurrency``,
    ...), every other label its own (``"P90 E2E Latency (ms):"`` ->
    ``p90_e2e_latency_ms``, ``"Median TPOT (ms):"`` -> ``median_tpot_ms``).
    Labels are matched exactly at the start of a line (so "Peak output token
    throughput (tok/s):" never reads as the output throughput). A timing,
    throughput or accept length of 0, -0.00, inf or nan is unknown (``None``,
    :func:`known_number`); counts keep 0. ``decode_tok_s`` is ``1000 /``
    median ITL, or ``1000 /`` median TPOT when the ITL is unknown.

    The block starts at its title ("Serving Benchmark Result") or, when the
    title was cut off (a tail of the output), at its first field line, and
    ends at the closing ``=====`` rule or the end of the text.

    Raises:
        ValueError: no field lines, or no known output throughput; the text's
            tail is quoted.
    """
    lines = text.splitlines()
    title = next((i for i, line in enumerate(lines) if _TITLE in line), None)
    if title is not None:
        body = lines[title + 1 :]
    else:
        first = next(
            (i for i, line in enumerate(lines) if line.strip().startswith(tuple(_BENCH_LABELS))),
            None,
        )
        if first is None:
            raise ValueError(f"no '{_TITLE}' block in: {text.strip()[-300:]!r}")
        body = lines[first:]
    result: dict[str, Any] = {}
    for line in body:
        stripped = line.strip()
        if stripped.startswith("=====") and result:
            break
        match = _FIELD_RE.match(stripped)
        if not match:
            continue
        label, raw = match.group("label"), match.group("value")
        key, kind = _BENCH_LABELS.get(label, (_label_key(label), float))
        if kind is str:
            result[key] = raw
            continue
        try:
            number = float(raw)
        except ValueError as exc:
            raise ValueError(f"{label} {raw!r} is not a number") from exc
        if _is_measured(key):
            result[key] = known_number(number)
        elif math.isfinite(number):
            result[key] = int(number) if kind is int or number.is_integer() else number
        else:
            result[key] = None
    if not result.get("output_tok_s"):
        raise ValueError(f"no 'Output token throughput (tok/s):' value in: {text.strip()[-400:]!r}")
    _derive_decode(result)
    return result


#: JSONL fields bench_serving writes that a trial keeps, with their trial key.
_JSONL_RENAMES = {"output_throughput": "output_tok_s", "duration": "duration_s"}
_JSONL_COUNTS = ("max_concurrency", "completed", "total_input_tokens", "total_output_tokens")


def _count(value: Any) -> int | None:
    """A count (0 included) as an int; None for null, non-numbers and non-finite values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def parse_bench_serving_jsonl_line(record: dict[str, Any]) -> dict[str, Any]:
    """One ``--output-file`` JSONL record of bench_serving, as a trial.

    Keeps every measurement bench_serving writes: ``output_throughput`` (as
    ``output_tok_s``, tok/s), ``request_throughput``, ``input_throughput``,
    ``accept_length``, ``concurrency``, ``duration`` (as ``duration_s``) and
    every ``*_ms`` latency (mean/median/std/P90/P95/P99 of TTFT, TPOT, ITL,
    E2E), plus the counts ``max_concurrency``, ``completed``,
    ``total_input_tokens``, ``total_output_tokens``. A measurement of 0,
    Infinity, NaN or null is unknown (``None``); ``decode_tok_s`` comes from
    the median ITL (or TPOT), only when known.

    Raises:
        ValueError: no known (positive, finite) ``output_throughput``.
    """
    if not isinstance(record, dict):
        raise ValueError(f"bench_serving record must be a JSON object, got {record!r}")
    if known_number(record.get("output_throughput")) is None:
        raise ValueError(
            f"bench_serving record has no output_throughput (a positive number): "
            f"{record.get('output_throughput')!r} in {sorted(record)}"
        )
    trial: dict[str, Any] = {}
    for key, value in record.items():
        name = _JSONL_RENAMES.get(key, key)
        if key in _JSONL_COUNTS:
            trial[name] = _count(value)
        elif name.endswith("_ms") or name in _MEASURED_KEYS or key in ("input_throughput", "duration"):
            trial[name] = known_number(value)
    _derive_decode(trial)
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
    lacks a known throughput, ``parse_bench_serving(stdout_tail)``; a trial
    normalised before (``output_tok_s``, no ``method``) is kept as it is, so
    normalising twice gives the same trials. Raises ``ValueError`` naming the
    trial that is none of these.
    """
    out = []
    for index, trial in enumerate(trials):
        if trial.get("method") == "bench_serving":
            record = trial.get("record") or {}
            if known_number(record.get("output_throughput")) is not None:
                out.append(parse_bench_serving_jsonl_line(record))
            else:
                out.append(parse_bench_serving(trial.get("stdout_tail", "")))
        elif "decode_tok_s" in trial or "output_tok_s" in trial:
            out.append(trial)
        else:
            raise ValueError(f"trial {index} is neither a client nor a bench_serving trial: {trial!r}")
    return out


def gate_verdict(
    candidate: Mapping[str, Mapping[str, Any]],
    baseline: Mapping[str, list[dict[str, Any]]],
    *,
    profiles: Sequence[str] | None = None,
    metric: str = "output_tok_s",
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    z: float = DEFAULT_Z,
    max_trials: int = DEFAULT_MAX_TRIALS,
    baseline_probe: Mapping[str, list[dict[str, Any]]] | None = None,
    min_prefix_tokens: int = probe.DEFAULT_MIN_PREFIX_TOKENS,
    min_agreeing_share: float = probe.DEFAULT_MIN_AGREEING_SHARE,
    accept_length_drop_pct: float = probe.DEFAULT_ACCEPT_LENGTH_DROP_PCT,
    baseline_load: Mapping[str, Mapping[str, Any]] | None = None,
    ttft_tolerance_pct: float = load.DEFAULT_TTFT_TOLERANCE_PCT,
    concurrency_tolerance_pct: float = load.DEFAULT_CONCURRENCY_TOLERANCE_PCT,
    speculative_pairs: Sequence[Mapping[str, str]] = (),
    disabled_flag_action: str = "report",
    soak: bool = False,
) -> dict[str, Any]:
    """The gate's verdict over the new stack's profiles: the one record that
    both ends the measuring of a profile (``final``) and decides the host.

    ``candidate``: per profile name, in the order measured, ``{"trials": [trial, ...],
    "probe": [probe output, ...], "load": {load metrics}}`` of the new stack (``probe``
    and ``load`` read only when compared); ``baseline``: per profile name, the old
    stack's trials. ``profiles``: the names decided, in the order of the records and
    reasons; None decides every profile of ``candidate``. Trials are those of
    ``hostscripts/completion_bench.py`` (normalised here, see ``normalize_trials``);
    their ``metric`` (tok/s) is compared by ``decide`` with ``tolerance_pct``
    (percent), ``z`` and ``max_trials``.

    ``baseline_probe``: per profile, the old stack's probe outputs; given, each
    profile's outputs are compared (``probe.compare_outputs`` with
    ``min_prefix_tokens`` and ``min_agreeing_share``), its answers to the prompts sent
    together (``probe_batched``: ``{"batches": [...]}``, when measured) with its answers
    alone and the old stack's (``probe.compare_batched``, the probe record's ``batched``),
    and its accept length too
    (``probe.compare_accept_length`` with ``accept_length_drop_pct``, percent); None
    compares neither. ``baseline_load``: per profile, the old stack's load metrics
    (a profile without any compares against ``{}``); given, ``load.compare_load``
    compares them with ``ttft_tolerance_pct`` and ``concurrency_tolerance_pct``
    (percent); None compares none. ``speculative_pairs``: ``{"speculative": name,
    "plain": name}`` pairs whose speculative profile must beat the plain one on the
    new stack (``speculative_gain``).

    ``disabled_flag_action``: ``report`` or ``rollback``. Every profile's
    ``new_stack_args`` that its ``effective`` record (the new server's
    ``/get_server_info`` and start-up log, ``effective.effective_config``) shows
    off or other than asked is listed (``effective.unused_flags``); with
    ``rollback`` each is also a reason to roll back: the gain the operator
    upgraded for is not there.

    ``soak``: each profile's ``soak`` record (``hostscripts/completion_bench.py``) is judged
    (``cuda13_upgrade.soak.judge``); a failed soak is a reason to roll back, the first of
    the reasons, and the profiles after it, not measured on that server, are left out of
    the decisions (and of ``speculative_pairs``).

    Returns ``{"regressed": bool, "final": bool, "reason": str, "decisions":
    {profile: Decision.to_dict()}, "probe": {profile: compare_outputs record},
    "accept_length": {profile: compare_accept_length record}, "load": {profile:
    compare_load record}, "soak": {profile: soak.judge record}, "speculative": {speculative
    profile: speculative_gain record}, "unused_flags": {profile: [unused flag, ...]}}``; the comparisons
    not made are empty (``unused_flags`` only names profiles with some). ``final``: every profile's
    throughput decision is final. ``reason``: the failed checks' reasons joined by
    ``"; "`` (failed soak, wrong output, output changed in a batch, collapsed accept length,
    load, regressed throughput, speculative decoding that does not beat plain decode, in that
    order), or, when
    none failed, every profile's throughput reason. Raises ``ValueError`` (naming
    the profile) for a profile without baseline trials or probe outputs, or for
    inputs ``decide``, ``compare_outputs``, ``compare_accept_length``,
    ``compare_load`` or ``speculative_gain`` refuse, and for an unknown
    ``disabled_flag_action``.
    """
    if disabled_flag_action not in effective.ACTIONS:
        raise ValueError(
            f"disabled_flag_action must be one of {', '.join(effective.ACTIONS)}, "
            f"got {disabled_flag_action!r}"
        )
    unused: dict[str, list[dict[str, Any]]] = {}
    decisions: dict[str, dict[str, Any]] = {}
    probes: dict[str, dict[str, Any]] = {}
    accepts: dict[str, dict[str, Any]] = {}
    loads: dict[str, dict[str, Any]] = {}
    speculative: dict[str, dict[str, Any]] = {}
    soaks: dict[str, dict[str, Any]] = {}
    soak_failed = soak_module.failed_profile(candidate) if soak else None
    for name in candidate if profiles is None else profiles:
        if soak_failed and name not in candidate:
            continue
        if name not in candidate:
            raise ValueError(f"profile {name!r} was not measured on the new stack (has {sorted(candidate)})")
        measured = candidate[name]
        if name not in baseline:
            raise ValueError(f"profile {name!r} has no baseline trials (has {sorted(baseline)})")
        decisions[name] = decide(
            trial_metric(normalize_trials(list(baseline[name])), metric),
            trial_metric(normalize_trials(list(measured["trials"])), metric),
            profile=str(name),
            tolerance_pct=float(tolerance_pct),
            z=float(z),
            max_trials=int(max_trials),
        ).to_dict()
        if baseline_probe is not None:
            if name not in baseline_probe:
                raise ValueError(f"profile {name!r} has no probe outputs of the old stack")
            probes[name] = probe.compare_outputs(
                baseline_probe[name],
                measured["probe"],
                min_prefix_tokens=int(min_prefix_tokens),
                min_agreeing_share=float(min_agreeing_share),
                profile=str(name),
            )
            together = measured.get("probe_batched") or {}
            if together.get("batches"):
                probes[name]["batched"] = probe.compare_batched(
                    measured["probe"],
                    together["batches"],
                    old=baseline_probe[name],
                    min_prefix_tokens=int(min_prefix_tokens),
                    min_agreeing_share=float(min_agreeing_share),
                    profile=str(name),
                )
            accepts[name] = probe.compare_accept_length(
                baseline_probe[name],
                measured["probe"],
                max_drop_pct=float(accept_length_drop_pct),
                profile=str(name),
            )
        if soak:
            if not measured.get("soak"):
                raise ValueError(f"profile {name!r} has no soak record of the new stack")
            soaks[name] = soak_module.judge(measured["soak"], profile=str(name))
        flags = effective.unused_flags(measured.get("new_stack_args") or [], measured.get("effective"))
        if flags:
            unused[str(name)] = flags
        if baseline_load is not None:
            loads[name] = load.compare_load(
                baseline_load.get(name) or {},
                measured["load"],
                ttft_tolerance_pct=float(ttft_tolerance_pct),
                concurrency_tolerance_pct=float(concurrency_tolerance_pct),
                profile=str(name),
            )
    for pair in speculative_pairs:
        if soak_failed and not all(pair[k] in candidate for k in ("plain", "speculative")):
            continue
        speculative[pair["speculative"]] = speculative_gain(
            trial_metric(normalize_trials(list(candidate[pair["plain"]]["trials"])), metric),
            trial_metric(normalize_trials(list(candidate[pair["speculative"]]["trials"])), metric),
        )
    failed = (
        [r["reason"] for r in soaks.values() if not r["passed"]]
        + [r["reason"] for r in probes.values() if not r["passed"]]
        + [r["batched"]["reason"] for r in probes.values() if r.get("batched", {}).get("passed") is False]
        + [r["reason"] for r in accepts.values() if r["passed"] is False]
        + [reason for r in loads.values() for reason in r["reasons"]]
        + [d["reason"] for d in decisions.values() if d["verdict"] == "regressed"]
        + [
            f"speculative decoding ({name}) does not beat plain decode on the new stack"
            for name, gain in speculative.items()
            if not gain["beats"]
        ]
        + (
            [
                f"{name}: the new stack's server does not use {flag['flag']} ({flag['why']}): "
                "the gain the operator upgraded for is not there"
                for name, flags in unused.items()
                for flag in flags
            ]
            if disabled_flag_action == "rollback"
            else []
        )
    )
    return {
        "regressed": bool(failed),
        "final": all(d["final"] for d in decisions.values()),
        "reason": "; ".join(failed or [d["reason"] for d in decisions.values()]),
        "decisions": decisions,
        "probe": probes,
        "accept_length": accepts,
        "load": loads,
        "soak": soaks,
        "speculative": speculative,
        "unused_flags": unused,
    }
