"""The optional gated metrics beyond single-stream decode: prefill and load.

An upgrade can keep single-stream decode and still lose elsewhere: sgl-project/sglang#5396
saw input (prefill) throughput fall from 652 to 198 tok/s after an upgrade with decode
unchanged. Two optional checks, each with its own tolerance (``compare_load``):

* the median TTFT at a long prompt (prefill): the new stack's may be at most
  ``ttft_tolerance_pct`` percent longer (default 10 %: a single prefill per request, with
  few requests, is noisier than a 256-token decode);
* the output throughput at a configured concurrency: the new stack's may be at most
  ``concurrency_tolerance_pct`` percent lower (default 5 %: aggregated over C streams it is
  steadier than one stream, but measured once).

Inputs are what ``hostscripts/completion_bench.py --load-metrics`` prints under ``load``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

DEFAULT_TTFT_TOLERANCE_PCT = 10.0
DEFAULT_CONCURRENCY_TOLERANCE_PCT = 5.0


def _pct(value: Any, option: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{option} must be a number >= 0 (got {value!r})")
    return float(value)


def compare_load(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    ttft_tolerance_pct: float = DEFAULT_TTFT_TOLERANCE_PCT,
    concurrency_tolerance_pct: float = DEFAULT_CONCURRENCY_TOLERANCE_PCT,
    profile: str = "plain",
) -> dict[str, Any]:
    """Compare the load metrics of the old and the new stack (rule in the module doc).

    ``old``/``new``: ``{"ttft_prompt_len", "ttft_long_ms": [ms] | None, "concurrency",
    "concurrent_output_tok_s": tok/s | None}``. Returns ``{"profile", "ttft": {"old_ms",
    "new_ms", "change_pct", "passed"} | None, "concurrency": {"old_tok_s", "new_tok_s",
    "change_pct", "passed"} | None, "passed": bool, "reasons": [str]}``; a metric measured on
    neither stack is None. Raises ``ValueError`` for a negative tolerance (naming the option)
    or a metric measured on one stack only.
    """
    ttft_tol = _pct(ttft_tolerance_pct, "verify_throughput_ttft_tolerance_pct")
    conc_tol = _pct(concurrency_tolerance_pct, "verify_throughput_concurrency_tolerance_pct")
    out: dict[str, Any] = {"profile": profile, "ttft": None, "concurrency": None, "reasons": []}
    old_ttft, new_ttft = old.get("ttft_long_ms"), new.get("ttft_long_ms")
    if old_ttft or new_ttft:
        if not (old_ttft and new_ttft):
            raise ValueError(f"{profile}: the long-prompt TTFT was measured on one stack only")
        before, after = statistics.median(old_ttft), statistics.median(new_ttft)
        change = (after / before - 1.0) * 100.0
        passed = change <= ttft_tol
        out["ttft"] = {"old_ms": before, "new_ms": after, "change_pct": round(change, 2), "passed": passed}
        if not passed:
            out["reasons"].append(
                f"{profile}: median TTFT at a {new.get('ttft_prompt_len')}-word prompt {before:.0f} -> "
                f"{after:.0f} ms ({change:+.1f} %, allowed +{ttft_tol:g} %): prefill regressed"
            )
    old_conc, new_conc = old.get("concurrent_output_tok_s"), new.get("concurrent_output_tok_s")
    if old_conc or new_conc:
        if not (old_conc and new_conc):
            raise ValueError(f"{profile}: the concurrent throughput was measured on one stack only")
        change = (new_conc / old_conc - 1.0) * 100.0
        passed = change >= -conc_tol
        out["concurrency"] = {
            "old_tok_s": old_conc,
            "new_tok_s": new_conc,
            "change_pct": round(change, 2),
            "passed": passed,
        }
        if not passed:
            out["reasons"].append(
                f"{profile}: output throughput at concurrency {new.get('concurrency')} {old_conc:.1f} -> "
                f"{new_conc:.1f} tok/s ({change:+.1f} %, allowed -{conc_tol:g} %): regressed under load"
            )
    out["passed"] = not out["reasons"]
    return out
