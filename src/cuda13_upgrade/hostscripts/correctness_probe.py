#!/usr/bin/env python3
"""Greedy completions of the probe prompts, with their token ids, from an SGLang server.

Runs on the managed host with the standard library only (shipped by
``ansible.builtin.script``). For each of the first ``--count`` prompts of ``--prompts``
(``{"prompts": [str, ...]}``) it sends SGLang's native ``POST /generate`` with
``sampling_params`` ``{"temperature": 0, "max_new_tokens": N}`` and records the answer's
``output_ids`` (the generated token ids) and ``text``, and with speculative decoding its
``meta_info`` counters ``completion_tokens`` and ``spec_verify_ct`` (verify steps: the
request's accept length is ``completion_tokens / spec_verify_ct``, as SGLang computes
``spec_accept_length``).

Prints ``{"url": ..., "max_new_tokens": N, "outputs": [{"prompt", "output_ids", "text"}]}``.
Exit status 2 with a message on stderr when the server cannot be reached or an answer has
no ``output_ids``.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request


def generate(url: str, prompt: str, max_new_tokens: int, timeout: float) -> dict:
    """One greedy ``/generate`` request; returns ``{"prompt", "output_ids", "text",
    "completion_tokens", "spec_verify_ct"}`` (the last two None when the server omits them).

    Raises ``ValueError`` when the answer carries no list of ``output_ids``.
    """
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    request = urllib.request.Request(
        url.rstrip("/") + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read().decode("utf-8"))
    if isinstance(answer, list):
        answer = answer[0] if answer else {}
    ids = answer.get("output_ids")
    if not isinstance(ids, list):
        raise ValueError(f"/generate answered without output_ids: {json.dumps(answer)[:200]}")
    meta = answer.get("meta_info") or {}
    return {
        "prompt": prompt,
        "output_ids": ids,
        "text": answer.get("text", ""),
        "completion_tokens": meta.get("completion_tokens"),
        "spec_verify_ct": meta.get("spec_verify_ct"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--prompts", required=True, help="JSON file {'prompts': [...]}")
    parser.add_argument("--count", type=int, default=8, help="how many of the prompts (the first ones)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    with open(args.prompts, encoding="utf-8") as handle:
        prompts = json.load(handle)["prompts"][: args.count]
    try:
        outputs = [generate(args.url, p, args.max_new_tokens, args.timeout) for p in prompts]
    except (urllib.error.URLError, OSError) as exc:
        print(f"cannot reach the server at {args.url}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"unexpected answer from {args.url}: {exc}", file=sys.stderr)
        return 2
    json.dump({"url": args.url, "max_new_tokens": args.max_new_tokens, "outputs": outputs}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
