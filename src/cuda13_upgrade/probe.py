"""The correctness probe: do the new stack's greedy outputs match the old stack's?

A stack that decodes faster but wrongly must not pass the gate (sgl-project/sglang#18874:
completely incorrect output on RTX PRO 6000, sm_120, with the flashinfer backend;
vllm-project/vllm#41871: a stale Triton cache gives garbled output). The probe sends the
same fixed prompts (``roles/verify_throughput/files/prompts.json``) to both stacks with greedy
decoding (temperature 0) and compares the token ids.

The comparison rule (``compare_outputs``). Two correct stacks do not produce identical
greedy continuations forever: another kernel or reduction order changes the logits in the
last bits, and where two candidate tokens are nearly tied the argmax flips; from there on
the continuations differ (each token is conditioned on the previous ones), so positional
agreement after the first divergence says nothing. What a correct stack keeps is the
beginning: the *common prefix* of the two token sequences. A broken stack differs from the
first tokens on nearly every prompt. So, per prompt:

* ``common_prefix`` = the number of leading token ids that are equal;
* the prompt *agrees* when ``common_prefix >= min(min_prefix_tokens, len(old), len(new))``;

and the probe passes when the share of agreeing prompts is at least ``min_agreeing_share``.
Defaults (``verify_throughput_probe_min_prefix_tokens: 4``,
``verify_throughput_probe_min_agreeing_share: 0.75``): garbage differs at token 0, or after
a common first token or two (a space, "The"), on every prompt; a correct stack meets a
near-tie within the first 4 tokens on few prompts, and a quarter of them may. With a flip
probability of 1 % per token, 8 prompts give 0.3 % false rollbacks with these values and
2.2 % with 8 tokens (``benchmarks/gate_error_rates.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_MIN_PREFIX_TOKENS = 4
DEFAULT_MIN_AGREEING_SHARE = 0.75
REASON = "output differs from the old stack"


def common_prefix(old: Sequence[int], new: Sequence[int]) -> int:
    """Number of leading tokens two sequences share (0 when the first tokens differ)."""
    count = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        count += 1
    return count


def _ids(output: Mapping[str, Any], side: str, index: int) -> list[int]:
    ids = output.get("output_ids")
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise ValueError(
            f"probe output {index} of the {side} stack has no list of integer output_ids (got {ids!r})"
        )
    return ids


def compare_outputs(
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    *,
    min_prefix_tokens: int = DEFAULT_MIN_PREFIX_TOKENS,
    min_agreeing_share: float = DEFAULT_MIN_AGREEING_SHARE,
    profile: str = "plain",
) -> dict[str, Any]:
    """Compare the probe outputs of the old and the new stack (rule in the module doc).

    ``old`` and ``new``: one output per prompt, in the same order, each
    ``{"prompt": str, "output_ids": [int, ...], "text": str}`` (what the probe script writes).
    ``profile`` names the server profile in the reason. Returns ``{"profile": str,
    "passed": bool, "agreeing": int, "prompts": int, "share": float,
    "min_prefix_tokens": int, "min_agreeing_share": float, "per_prompt": [{"prompt",
    "common_prefix", "tokens"}], "example": {"prompt", "old", "new", "common_prefix"} | None,
    "reason": str}``; ``example`` is the prompt with the shortest common prefix, with both
    outputs' texts. Raises ``ValueError`` when the lists are empty, of different lengths, for
    different prompts, or an output has no integer ``output_ids``, or a threshold is out of
    range (``min_prefix_tokens >= 1``, ``0 < min_agreeing_share <= 1``).
    """
    if isinstance(min_prefix_tokens, bool) or not isinstance(min_prefix_tokens, int) or min_prefix_tokens < 1:
        raise ValueError(
            f"verify_throughput_probe_min_prefix_tokens must be an integer >= 1 (got {min_prefix_tokens!r})"
        )
    if not isinstance(min_agreeing_share, int | float) or not 0 < float(min_agreeing_share) <= 1:
        raise ValueError(
            "verify_throughput_probe_min_agreeing_share must be a number in (0, 1] "
            f"(got {min_agreeing_share!r})"
        )
    if not old or len(old) != len(new):
        raise ValueError(
            "the probe needs the same non-empty prompt list on both stacks "
            f"(old: {len(old)} outputs, new: {len(new)})"
        )
    per_prompt = []
    for index, (a, b) in enumerate(zip(old, new, strict=True)):
        if a.get("prompt") != b.get("prompt"):
            raise ValueError(f"probe output {index} is for different prompts on the two stacks")
        old_ids, new_ids = _ids(a, "old", index), _ids(b, "new", index)
        prefix = common_prefix(old_ids, new_ids)
        needed = min(min_prefix_tokens, len(old_ids), len(new_ids))
        per_prompt.append(
            {
                "prompt": a.get("prompt", ""),
                "common_prefix": prefix,
                "tokens": min(len(old_ids), len(new_ids)),
                "agrees": prefix >= needed,
                "old": a.get("text", ""),
                "new": b.get("text", ""),
            }
        )
    agreeing = sum(p["agrees"] for p in per_prompt)
    share = agreeing / len(per_prompt)
    passed = share >= float(min_agreeing_share)
    worst = min(per_prompt, key=lambda p: p["common_prefix"])
    example = {
        "prompt": worst["prompt"],
        "old": worst["old"],
        "new": worst["new"],
        "common_prefix": worst["common_prefix"],
    }
    summary = (
        f"{agreeing} of {len(per_prompt)} probe prompts agree for at least {min_prefix_tokens} tokens "
        f"(needed {min_agreeing_share:.0%})"
    )
    if passed:
        reason = f"{profile}: output matches the old stack: {summary}"
    else:
        reason = (
            f"{profile}: {REASON}: {summary}; e.g. prompt {_clip(example['prompt'])!r}: "
            f"old {_clip(example['old'])!r}, "
            f"new {_clip(example['new'])!r} (first {example['common_prefix']} tokens equal)"
        )
    return {
        "profile": profile,
        "passed": passed,
        "agreeing": agreeing,
        "prompts": len(per_prompt),
        "share": round(share, 4),
        "min_prefix_tokens": min_prefix_tokens,
        "min_agreeing_share": float(min_agreeing_share),
        "per_prompt": [
            {k: p[k] for k in ("prompt", "common_prefix", "tokens", "agrees")} for p in per_prompt
        ],
        "example": example,
        "reason": reason,
    }


BATCH_REASON = "output changes when the prompts share a batch"


def batch_sizes(concurrency: int, server_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """The batch sizes of the batched probe (:func:`compare_batched`) for one profile.

    A kernel can be wrong for some batch sizes only: flashinfer-ai/flashinfer#2577 (8x RTX
    PRO 6000 Blackwell Server Edition, driver 580.126.09, FlashInfer 0.6.3, PyTorch 2.9.1):
    NVFP4 ``mm_fp4`` with the cutlass backend "Returns **all zeros** (silent failure)",
    depending on the batch size. So the probe's prompts are also sent together at the
    profile's serving ``concurrency`` (requests at once), and in a batch one larger than the
    largest CUDA graph the server captures (``cuda_graph_max_bs`` of its ``/get_server_info``,
    ``server_args``): SGLang captures graphs up to that batch size, and "Larger batches fall
    back to normal execution" (SGLang's CUDA Graph Capture docs), another set of kernels.
    No size past the graphs when the server reports no ``cuda_graph_max_bs`` (an integer
    >= 1) or runs with ``disable_cuda_graph``.

    Returns ``{"sizes": [int, ...] (ascending, each >= 2, no size twice), "cuda_graph_max_bs":
    int | None}``. Raises ``ValueError`` for a concurrency that is not an integer >= 0.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 0:
        raise ValueError(f"the probe's batch needs a serving concurrency >= 0 (got {concurrency!r})")
    args = server_args or {}
    graphs = args.get("cuda_graph_max_bs")
    if isinstance(graphs, bool) or not isinstance(graphs, int) or graphs < 1:
        graphs = None
    if args.get("disable_cuda_graph"):
        graphs = None
    sizes = {concurrency} if concurrency >= 2 else set()
    if graphs is not None:
        sizes.add(graphs + 1)
    return {"sizes": sorted(sizes), "cuda_graph_max_bs": graphs}


def compare_batched(
    alone: Sequence[Mapping[str, Any]],
    batched: Sequence[Mapping[str, Any]],
    *,
    old: Sequence[Mapping[str, Any]] | None = None,
    min_prefix_tokens: int = DEFAULT_MIN_PREFIX_TOKENS,
    min_agreeing_share: float = DEFAULT_MIN_AGREEING_SHARE,
    profile: str = "plain",
) -> dict[str, Any]:
    """Compare the answers the new stack gave to prompts sent together with its answers to
    the same prompts alone, and with the old stack's (:func:`batch_sizes` says why).

    ``alone``: the new stack's probe outputs, one per prompt (what :func:`compare_outputs`
    reads); ``old``: the old stack's, in the same order (None compares with ``alone`` only).
    ``batched``: ``[{"batch_size": int, "outputs": [{"prompt_index": int, "output_ids":
    [int], "text": str, ...}]}]`` (``completion_bench.generate_together``). The rule is the
    probe's (module doc): an answer agrees when its common prefix with the same prompt's
    answer alone, and with the old stack's, is at least ``min(min_prefix_tokens, lengths)``;
    a batch passes when the share of agreeing answers is at least ``min_agreeing_share``.

    Returns ``{"profile", "passed": bool, "batches": [{"batch_size", "requests", "agreeing",
    "share", "passed", "example": {"request", "prompt", "reference" ("alone" | "the old
    stack"), "position", "expected_id", "batched_id", "expected", "batched"} | None}],
    "reason": str}``: ``example`` is the batch's first answer that does not agree, with the
    first differing token (its 0-based ``position`` and both token ids, None past the end of
    the shorter output). Raises ``ValueError`` for thresholds out of range, an answer whose
    ``prompt_index`` has no output alone, or outputs without integer ``output_ids``.
    """
    compare_outputs(alone, alone, min_prefix_tokens=min_prefix_tokens, min_agreeing_share=min_agreeing_share)
    if old is not None and len(old) != len(alone):
        raise ValueError(f"the probe needs one old output per prompt (old: {len(old)}, new: {len(alone)})")
    references = [("alone", alone)] + ([("the old stack", old)] if old is not None else [])
    records = []
    for batch in batched:
        size = int(batch.get("batch_size") or 0)
        outputs = list(batch.get("outputs") or [])
        agreeing, example = 0, None
        for request, output in enumerate(outputs):
            index = output.get("prompt_index")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(alone):
                raise ValueError(
                    f"batched probe answer {request} of the batch of {size} names prompt {index!r}, "
                    f"which has no answer alone ({len(alone)} prompts)"
                )
            ids = _ids(output, f"new (batch of {size})", request)
            agrees = True
            for label, reference in references:
                expected = _ids(reference[index], "old" if label != "alone" else "new", index)
                prefix = common_prefix(expected, ids)
                if prefix >= min(min_prefix_tokens, len(expected), len(ids)):
                    continue
                agrees = False
                if example is None:
                    example = {
                        "request": request + 1,
                        "prompt": str(reference[index].get("prompt", "")),
                        "reference": label,
                        "position": prefix,
                        "expected_id": expected[prefix] if prefix < len(expected) else None,
                        "batched_id": ids[prefix] if prefix < len(ids) else None,
                        "expected": str(reference[index].get("text", "")),
                        "batched": str(output.get("text", "")),
                    }
                break
            agreeing += agrees
        share = agreeing / len(outputs) if outputs else 1.0
        records.append(
            {
                "batch_size": size,
                "requests": len(outputs),
                "agreeing": agreeing,
                "share": round(share, 4),
                "passed": share >= float(min_agreeing_share),
                "example": example,
            }
        )
    failed = [r for r in records if not r["passed"]]
    with_old = " and with the old stack" if old is not None else ""
    if not failed:
        sizes = ", ".join(str(r["batch_size"]) for r in records) or "none"
        reason = (
            f"{profile}: output in a batch matches the same prompts alone{with_old} (batch sizes {sizes})"
        )
    else:
        first = failed[0]
        ex = first["example"] or {}
        token = (
            f"first differing token at position {ex.get('position')}: id {ex.get('expected_id')} "
            f"{'alone' if ex.get('reference') == 'alone' else 'on the old stack'}, "
            f"id {ex.get('batched_id')} in the batch"
        )
        reason = (
            f"{profile}: {BATCH_REASON}: in a batch of {first['batch_size']}, {first['agreeing']} of "
            f"{first['requests']} answers agree with the same prompt alone{with_old} for at least "
            f"{min_prefix_tokens} tokens (needed {min_agreeing_share:.0%}); e.g. prompt "
            f"{_clip(ex.get('prompt', ''))!r} (request {ex.get('request')} of {first['requests']}): {token}; "
            f"{ex.get('reference')} {_clip(ex.get('expected', ''))!r}, "
            f"in the batch {_clip(ex.get('batched', ''))!r}"
        )
    return {"profile": profile, "passed": not failed, "batches": records, "reason": reason}


DEFAULT_ACCEPT_LENGTH_DROP_PCT = 15.0


def accept_length(outputs: Sequence[Mapping[str, Any]]) -> float | None:
    """Accept length of speculative decoding over the probe's requests, tokens per verify step.

    ``sum(completion_tokens) / sum(spec_verify_ct)`` over the outputs that carry both (SGLang's
    per-request ``meta_info``; its ``spec_accept_length`` is the same ratio per request). A
    per-request count, unlike ``/get_server_info``'s ``avg_spec_accept_length``, which is
    cumulative over the server's life (warm-up included). None when no output has the counters
    (no speculative decoding).
    """
    tokens = steps = 0
    for output in outputs:
        n, ct = output.get("completion_tokens"), output.get("spec_verify_ct")
        if isinstance(n, int) and isinstance(ct, int) and ct > 0:
            tokens, steps = tokens + n, steps + ct
    return tokens / steps if steps else None


def compare_accept_length(
    old: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    *,
    max_drop_pct: float = DEFAULT_ACCEPT_LENGTH_DROP_PCT,
    profile: str = "eagle3",
) -> dict[str, Any]:
    """Speculative health: the new stack's accept length against the old stack's.

    Fails when the new accept length is 1.0 or less (no draft token accepted: speculative
    decoding silently off, as sgl-project/sglang PR #21272 describes with a wrong algorithm
    flag), or lower than the old one by more than ``max_drop_pct`` percent, or missing on the
    new stack while the old stack had one (SGLang's tokenizer manager puts ``spec_verify_ct``
    in every ``meta_info`` of a server run with ``--speculative-algorithm``: without it the
    new server decodes without speculation, or the probe measured another profile). Returns
    ``{"profile", "old", "new", "change_pct", "passed", "reason"}``; ``passed`` is None (no
    verdict) when the old stack has no speculative counters (a profile without speculative
    decoding). Raises ``ValueError`` for a negative ``max_drop_pct``.
    """
    if isinstance(max_drop_pct, bool) or not isinstance(max_drop_pct, int | float) or max_drop_pct < 0:
        raise ValueError(
            f"verify_throughput_accept_length_drop_pct must be a number >= 0 (got {max_drop_pct!r})"
        )
    before, after = accept_length(old), accept_length(new)
    out: dict[str, Any] = {"profile": profile, "old": before, "new": after, "change_pct": None}
    if before is None:
        return {**out, "passed": None, "reason": f"{profile}: no speculative accept length to compare"}
    if after is None:
        return {
            **out,
            "passed": False,
            "reason": f"{profile}: the new stack's probe answers carry no speculative counters "
            f"(no spec_verify_ct in meta_info) where the old stack's had accept length {before:.2f}: "
            "speculative decoding is off on the new stack; check the profile's server_args "
            "(--speculative-algorithm) and the service's command in the report",
        }
    change = (after / before - 1.0) * 100.0
    out["change_pct"] = round(change, 2)
    figures = f"accept length {before:.2f} -> {after:.2f} tokens per step ({change:+.1f} %)"
    if after <= 1.0 + 1e-9:
        return {
            **out,
            "passed": False,
            "reason": f"{profile}: speculative accept length collapsed to {after:.2f} on the new stack "
            f"(no draft token accepted; {figures})",
        }
    if change < -max_drop_pct:
        return {
            **out,
            "passed": False,
            "reason": f"{profile}: speculative accept length dropped beyond {max_drop_pct:g} % ({figures})",
        }
    return {**out, "passed": True, "reason": f"{profile}: {figures}"}


def _clip(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
