#!/usr/bin/env python3
"""Streaming decode benchmark against an OpenAI-compatible ``/v1/completions``.

Runs on the managed host with the host's Python standard library only (module
``cuda13_bench``, or as a script). One trial is one streamed
completion with ``ignore_eos`` so that every trial decodes exactly
``--max-tokens`` tokens, as the field report measures single-stream decode.

Per trial it reports, from the client's clock:

* ``ttft_ms``: time to first token, request sent to first content chunk (ms);
* ``itl_ms``: inter-token latencies, mean and median (ms);
* ``decode_tok_s``: decode throughput, ``(tokens - 1) / (t_last - t_first)``
  in tokens per second (the prefill and the first token excluded);
* ``output_tok_s``: output throughput, ``tokens / e2e`` (tok/s), the figure
  ``sglang.bench_serving`` calls "Output token throughput" at concurrency 1.

Workload: with ``--prompt-file`` (``{"seed": int, "prompts": [str, ...]}``) every trial
gets its own prompt of exactly ``--prompt-len`` words, made of the set's prompts in an
order fixed by the seed, starting at the trial's own position (``workload_prompt``); with
``--flush-cache`` the server's prefix cache is emptied (SGLang's ``POST /flush_cache``)
before each trial, so no trial is a cache hit of an earlier one. The warm-up requests use
another prompt and are not measured. Without a prompt file every trial sends the same
``hello`` prompt (a degenerate workload, kept for comparison).

With ``--load-metrics``, ``--soak-requests N`` adds a soak after the load metrics:
``N`` completions at ``--soak-concurrency`` at once, each on a prompt of the set as it is
(request ``i`` gets the set's prompt ``i`` modulo its length), every one of which must end
within ``--soak-deadline-s``; the first failure stops it (``soak``). Its record is printed
under ``"soak"`` whatever the outcome: a failed soak is the controller's to judge
(``cuda13_upgrade.soak``), not an error of this script.

With ``--probe N`` it runs the correctness probe instead: for each of the first ``N``
prompts of ``--prompt-file`` it sends SGLang's native ``POST /generate`` with
``sampling_params`` ``{"temperature": 0, "max_new_tokens": --max-new-tokens}`` and records
the answer's ``output_ids`` (the generated token ids) and ``text``, and with speculative
decoding its ``meta_info`` counters ``completion_tokens`` and ``spec_verify_ct`` (verify
steps: the request's accept length is ``completion_tokens / spec_verify_ct``, as SGLang
computes ``spec_accept_length``). It prints ``{"url", "max_new_tokens", "outputs": [{"prompt",
"output_ids", "text", "completion_tokens", "spec_verify_ct"}]}``. With ``--probe-batch-sizes``
(``8,257``) it then sends the same prompts together, one round per size ``B``: ``B`` requests at
once, request ``i`` with prompt ``i`` modulo ``N`` (:func:`generate_together`), so that they share
the server's running batch (a kernel may be wrong only for some batch sizes:
flashinfer-ai/flashinfer#2577); their answers are under ``"batched": [{"batch_size": B,
"outputs": [{"prompt_index", "prompt", "output_ids", "text", ...}]}]``.

With ``--watch-seconds S`` it watches a server in service instead (``watch``): every
``--watch-interval-s`` for ``S`` seconds, one greedy ``/generate`` of the prompt set's first
prompt, which must answer within ``--watch-deadline-s``, and the unit's main process, which
must stay the one that served at the start. It prints ``{"url", "watch": record}``; a failed
watch is the controller's to judge (``cuda13_upgrade.batch_soak``), not an error of this
script.

With ``--auth-unit UNIT`` every request carries ``Authorization: Bearer <key>``, the key
being the ``--api-key`` that UNIT's running server was started with, read from its
processes' command lines on the host (``server_auth``; SGLang answers 401 to any other
request but ``/health*`` and ``/metrics``); ``--method bench_serving`` gets it as
``OPENAI_API_KEY`` in its environment. The key is in nothing it prints.

Prints one JSON object on stdout: ``{"url": ..., "warmup": n, "trials": [...]}``.
Exit status 2 with a message on stderr when the server cannot be reached or
answers something that is not a completion stream (the probe: an answer without
``output_ids``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.error
import urllib.request

try:
    from .server_auth import bearer, unauthorized_message, unit_api_key, without_secrets
except ImportError:  # run as a script: its directory is on sys.path
    from server_auth import (  # type: ignore[no-redef]
        bearer,
        unauthorized_message,
        unit_api_key,
        without_secrets,
    )


def completion_request(url: str, prompt: str, max_tokens: int, model: str | None) -> urllib.request.Request:
    """A streaming greedy ``POST /v1/completions`` of exactly ``max_tokens`` tokens (ignore_eos)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    if model:
        body["model"] = model
    return urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )


def _stream_completion(url: str, model: str | None, prompt: str, max_tokens: int, timeout: float):
    request = completion_request(url, prompt, max_tokens, model)
    arrivals: list[float] = []
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[len("data:") :].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                arrivals.append(time.perf_counter())
    end = time.perf_counter()
    return start, arrivals, end


def workload_prompt(prompts: list[str], seed: int, index: int, words: int) -> str:
    """The prompt of trial ``index``: ``words`` words of the prompt set, shuffled by ``seed``.

    The set is put in one order by ``random.Random(seed)``; trial ``index`` starts at the
    ``index``-th prompt of that order (modulo its length) and takes the following ones until it
    has ``words`` words. Different indices give different prompts for up to ``len(prompts)``
    trials; beyond that a trial number is put first so that no two trials share a prefix.
    """
    import random

    order = list(prompts)
    random.Random(seed).shuffle(order)
    start = index % len(order)
    text: list[str] = [] if index < len(order) else [f"({index})"]
    position = start
    while len(text) < words:
        text.extend(order[position % len(order)].split())
        position += 1
    return " ".join(text[:words])


def flush_cache(url: str, timeout: float) -> bool:
    """``POST /flush_cache``; True when the server answered 200."""
    request = urllib.request.Request(url.rstrip("/") + "/flush_cache", data=b"{}", method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


def measure(
    url: str,
    *,
    max_tokens: int = 256,
    prompt_len: int = 128,
    trials: int = 5,
    warmup: int = 1,
    model: str | None = None,
    timeout: float = 300.0,
    prompts: list[str] | None = None,
    seed: int = 0,
    first_index: int = 0,
    flush: bool = False,
) -> dict:
    """Run ``warmup`` unmeasured and ``trials`` measured streamed completions.

    Returns ``{"url", "max_tokens", "prompt_len", "warmup", "trials": [trial]}``,
    each trial ``{"tokens", "ttft_ms", "itl_mean_ms", "itl_median_ms",
    "decode_tok_s", "output_tok_s", "e2e_s"}``. Raises ``ValueError`` when a
    completion streams fewer than two tokens (no decode rate can be measured).
    ``prompts``/``seed``/``first_index``: the workload (module doc), trial ``i`` of this call
    being trial ``first_index + i`` of the phase; ``flush``: empty the prefix cache first.
    """

    def prompt_for(index: int) -> str:
        if not prompts:
            return " ".join(["hello"] * prompt_len)
        return workload_prompt(prompts, seed, index, prompt_len)

    for number in range(warmup):
        _stream_completion(url, model, "warm-up " + prompt_for(10_000 + number), min(max_tokens, 16), timeout)
    results = []
    for number in range(trials):
        flushed = flush_cache(url, timeout) if flush else None
        start, arrivals, end = _stream_completion(
            url, model, prompt_for(first_index + number), max_tokens, timeout
        )
        if len(arrivals) < 2:
            raise ValueError(
                f"the completion streamed {len(arrivals)} token(s); need at least 2 "
                f"to measure decode throughput (max_tokens={max_tokens})"
            )
        gaps = [(b - a) * 1000.0 for a, b in zip(arrivals, arrivals[1:], strict=False)]
        decode_s = arrivals[-1] - arrivals[0]
        results.append(
            {
                "tokens": len(arrivals),
                "ttft_ms": round((arrivals[0] - start) * 1000.0, 3),
                "itl_mean_ms": round(statistics.fmean(gaps), 3),
                "itl_median_ms": round(statistics.median(gaps), 3),
                "decode_tok_s": round((len(arrivals) - 1) / decode_s, 3),
                "output_tok_s": round(len(arrivals) / (end - start), 3),
                "e2e_s": round(end - start, 4),
                "prompt_index": first_index + number if prompts else None,
                "cache_flushed": flushed,
            }
        )
    return {
        "url": url,
        "max_tokens": max_tokens,
        "prompt_len": prompt_len,
        "warmup": warmup,
        "trials": results,
    }


def load_metrics(
    url: str,
    *,
    prompts: list[str],
    seed: int,
    max_tokens: int,
    ttft_prompt_len: int = 0,
    ttft_requests: int = 3,
    concurrency: int = 0,
    model: str | None = None,
    timeout: float = 300.0,
) -> dict:
    """The optional gated metrics beyond single-stream decode.

    * ``ttft_prompt_len`` > 0: ``ttft_requests`` completions of 2 tokens, each on its own
      prompt of ``ttft_prompt_len`` words with the prefix cache flushed first; their TTFTs in
      ms (``ttft_long_ms``): the prefill of a long prompt.
    * ``concurrency`` > 0: that many streams of ``max_tokens`` at once, each its own prompt;
      ``concurrent_output_tok_s`` = all output tokens / wall time (tok/s), what bench_serving
      calls "Output token throughput" at ``--max-concurrency`` C.

    Returns ``{"ttft_prompt_len", "ttft_long_ms": [ms] | None, "concurrency",
    "concurrent_output_tok_s": float | None}``.
    """
    import threading

    out: dict = {
        "ttft_prompt_len": ttft_prompt_len,
        "ttft_long_ms": None,
        "concurrency": concurrency,
        "concurrent_output_tok_s": None,
    }
    if ttft_prompt_len > 0:
        ttfts = []
        for number in range(ttft_requests):
            flush_cache(url, timeout)
            prompt = workload_prompt(prompts, seed, 50_000 + number, ttft_prompt_len)
            start, arrivals, _ = _stream_completion(url, model, prompt, 2, timeout)
            if not arrivals:
                raise ValueError("the long-prompt completion streamed no token")
            ttfts.append(round((arrivals[0] - start) * 1000.0, 3))
        out["ttft_long_ms"] = ttfts
    if concurrency > 0:
        flush_cache(url, timeout)
        counts = [0] * concurrency
        errors: list[BaseException] = []

        def stream(index: int) -> None:
            try:
                prompt = workload_prompt(prompts, seed, 60_000 + index, 64)
                counts[index] = len(_stream_completion(url, model, prompt, max_tokens, timeout)[1])
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(concurrency)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        if errors:
            raise ValueError(f"a concurrent stream failed: {errors[0]}")
        out["concurrent_output_tok_s"] = round(sum(counts) / elapsed, 3)
    return out


def _request_failure(exc: BaseException, timed_out: str) -> tuple[str, str]:
    """A failed request's ``(outcome, detail)``: ``error`` for an HTTP error status (with
    the body), ``stall`` for a timeout (``timed_out`` says what came before it), ``crash``
    for a refused, reset or closed connection."""
    import socket

    if isinstance(exc, urllib.error.HTTPError):
        try:
            text = exc.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        return "error", f"HTTP {exc.code}: {' '.join(text.split())[:300]}"
    if isinstance(exc, urllib.error.URLError):
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            return "stall", f"no connection: {exc.reason}"
        return "crash", str(exc.reason)
    if isinstance(exc, (TimeoutError, socket.timeout)):  # noqa: UP041 (distinct before Python 3.10)
        return "stall", timed_out
    return "crash", f"{type(exc).__name__}: {exc}"


def _soak_request(url: str, model: str | None, prompt: str, max_tokens: int, deadline_s: float) -> dict:
    """One soak request: a streamed completion that must end (``[DONE]``) within ``deadline_s``.

    Returns ``{"outcome": "served" | "crash" | "stall" | "error", "detail": str, "tokens": n,
    "seconds": s}``: ``crash`` when the connection is refused, reset or closed before the
    stream ends; ``stall`` when the deadline passes (no byte for ``deadline_s``, or the
    stream still running at the deadline); ``error`` for an HTTP error status or an error
    object in the body or the stream.
    """
    import http.client

    request = completion_request(url, prompt, max_tokens, model)
    tokens = 0
    start = time.monotonic()

    def out(outcome: str, detail: str = "") -> dict:
        return {
            "outcome": outcome,
            "detail": detail,
            "tokens": tokens,
            "seconds": round(time.monotonic() - start, 3),
        }

    try:
        with urllib.request.urlopen(request, timeout=deadline_s) as response:
            done = False
            for raw in response:
                if time.monotonic() - start > deadline_s:
                    return out("stall", f"{tokens} token(s) streamed, the stream still running")
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(payload)
                except json.JSONDecodeError:
                    return out("error", f"not a completion chunk: {payload[:200]}")
                if not isinstance(chunk, dict) or "error" in chunk or chunk.get("object") == "error":
                    return out("error", payload[:300])
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    tokens += 1
            if not done:
                return out("crash", f"the stream ended without [DONE] after {tokens} token(s)")
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as exc:
        return out(*_request_failure(exc, f"{tokens} token(s) streamed, then nothing"))
    if time.monotonic() - start > deadline_s:
        return out("stall", f"{tokens} token(s) streamed, the stream still running")
    return out("served")


# What systemd says of the unit's main process (systemctl show's property names). MainPID is 0
# once the main process has exited; ExecMainPID, ExecMainCode and ExecMainStatus keep the last
# one's PID and end (org.freedesktop.systemd1(5)), what the soak names when none ran at its start.
_UNIT_PROPERTIES = (
    "ActiveState",
    "SubState",
    "MainPID",
    "ExecMainPID",
    "ExecMainCode",
    "ExecMainStatus",
    "NRestarts",
)


def unit_state(unit: str | None) -> dict:
    """``systemctl show`` of the unit (``_UNIT_PROPERTIES``); {} without a unit or systemctl."""
    import subprocess

    if not unit:
        return {}
    try:
        proc = subprocess.run(
            ["systemctl", "show", unit, *(f"--property={p}" for p in _UNIT_PROPERTIES)],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    state = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key in _UNIT_PROPERTIES:
            state[key] = value
    return state


def journal_tail(unit: str | None, lines: int) -> list[str]:
    """The unit's last journal lines (journalctl --output cat), [] when unreadable."""
    import subprocess

    if not unit or lines <= 0:
        return []
    try:
        out = subprocess.run(
            ["journalctl", "--unit", unit, "--lines", str(lines), "--no-pager", "--output", "cat"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.splitlines()


def soak(
    url: str,
    *,
    prompts: list[str],
    requests: int,
    concurrency: int,
    deadline_s: float,
    max_tokens: int,
    model: str | None = None,
    unit: str | None = None,
    journal_lines: int = 30,
) -> dict:
    """``requests`` streamed completions, ``concurrency`` at once, each within ``deadline_s``.

    Request ``i`` (numbered from 1) sends the prompt set's prompt ``i - 1`` modulo its length.
    The first request that fails stops the soak: no request starts after it; those in flight
    end (each within its own deadline). Returns ``{"requests", "concurrency", "deadline_s",
    "max_tokens", "served": n, "seconds", "failures": [{"request": i, "outcome", "detail",
    "tokens", "seconds"}, ...] (in request order), "unit_before", "unit_after",
    "journal_tail": [line, ...]}``; the unit's state and journal tail (``unit``) only
    after a failure (``unit_before`` always, when a unit is given).
    """
    import threading

    if not prompts:
        raise ValueError("the soak needs a non-empty prompt set")
    before = unit_state(unit)
    lock = threading.Lock()
    stop = threading.Event()
    state = {"next": 0, "served": 0}
    failures: list[dict] = []

    def worker() -> None:
        while not stop.is_set():
            with lock:
                index = state["next"]
                if index >= requests:
                    return
                state["next"] += 1
            outcome = _soak_request(url, model, prompts[index % len(prompts)], max_tokens, deadline_s)
            with lock:
                if outcome["outcome"] == "served":
                    state["served"] += 1
                else:
                    failures.append({"request": index + 1, **outcome})
                    stop.set()

    began = time.monotonic()
    width = max(1, min(concurrency, requests))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(width)]
    for thread in threads:
        thread.start()
    for thread in threads:
        # Each request ends within its deadline (plus one blocked read); a thread still
        # running well past that is left behind (daemon) rather than holding the run.
        thread.join(timeout=deadline_s * 2 + 30)
    record = {
        "requests": requests,
        "concurrency": concurrency,
        "deadline_s": deadline_s,
        "max_tokens": max_tokens,
        "served": state["served"],
        "seconds": round(time.monotonic() - began, 3),
        "failures": sorted(failures, key=lambda f: f["request"]),
        "unit_before": before,
        "unit_after": {},
        "journal_tail": [],
    }
    if failures and unit:
        record["unit_after"] = unit_state(unit)
        record["journal_tail"] = journal_tail(unit, journal_lines)
    return record


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


def generate_together(
    url: str, prompts: list[str], batch_size: int, max_new_tokens: int, timeout: float
) -> list:
    """``batch_size`` greedy ``/generate`` requests sent at once (one thread each, released
    together by a barrier), request ``i`` with ``prompts[i % len(prompts)]``: the server's
    continuous batching runs them in one batch. Returns one :func:`generate` record per
    request, in request order, each with its ``prompt_index``.

    Raises ``ValueError`` for a batch size < 1 or no prompts, and the first request's error
    (``urllib.error.URLError``, ``OSError``, ``ValueError``) when any request failed.
    """
    if batch_size < 1 or not prompts:
        raise ValueError(f"a batch needs a size >= 1 and prompts (got {batch_size}, {len(prompts)} prompts)")
    import threading

    barrier = threading.Barrier(batch_size)
    answers: list = [None] * batch_size
    errors: list = [None] * batch_size

    def one(index: int) -> None:
        try:
            barrier.wait(timeout)
            answers[index] = {
                "prompt_index": index % len(prompts),
                **generate(url, prompts[index % len(prompts)], max_new_tokens, timeout),
            }
        except (urllib.error.URLError, OSError, ValueError, threading.BrokenBarrierError) as exc:
            errors[index] = exc

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(batch_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    broken = threading.BrokenBarrierError
    failed = next((e for e in errors if e is not None and not isinstance(e, broken)), None)
    if failed is None and any(e is not None for e in errors):
        failed = OSError(f"the {batch_size} requests of the batch could not be sent together")
    if failed is not None:
        raise failed
    return answers


def _watch_check(url: str, prompt: str, max_new_tokens: int, deadline_s: float) -> dict:
    """One check of the watch: a greedy ``/generate`` within ``deadline_s``.

    Returns ``{"outcome": "served" | "crash" | "stall" | "error", "detail": str,
    "output_ids": [int, ...]}`` (``output_ids`` empty unless served), with the outcomes
    of ``_soak_request``: ``crash`` when the connection is refused, reset or closed,
    ``stall`` when no answer came within the deadline, ``error`` for an HTTP error status
    or an answer without ``output_ids``.
    """
    import http.client

    def out(outcome: str, detail: str = "", ids: list | None = None) -> dict:
        return {"outcome": outcome, "detail": detail, "output_ids": ids or []}

    try:
        answer = generate(url, prompt, max_new_tokens, deadline_s)
    except (ValueError, json.JSONDecodeError) as exc:
        return out("error", str(exc)[:300])
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as exc:
        return out(*_request_failure(exc, "no answer"))
    return out("served", ids=answer["output_ids"])


def watch(
    url: str,
    *,
    prompt: str,
    max_new_tokens: int,
    seconds: float,
    interval_s: float,
    deadline_s: float,
    unit: str | None = None,
    journal_lines: int = 30,
    clock=time.monotonic,
    sleep=time.sleep,
) -> dict:
    """Watch a server in service for ``seconds``: a check every ``interval_s`` seconds.

    The checks start at 0 s and repeat every ``interval_s``; the last is at ``seconds``.
    Each is a greedy ``/generate`` of ``prompt`` (``_watch_check``), then, with ``unit``, the
    unit's state (``unit_state``). The first check that is not served, or after which the
    unit's main process is no longer the one of the start (a crash that systemd restarted
    counts), ends the watch. Returns ``{"seconds", "interval_s", "deadline_s",
    "max_new_tokens", "watched_s", "checks": [{"at_s", "outcome", "detail", "output_ids"}],
    "unit_before", "unit_after", "journal_tail"}``; ``journal_tail`` only when the watch
    ended early. Times in seconds from the watch's start, by ``clock``.
    """
    before = unit_state(unit)
    began = clock()
    checks: list[dict] = []
    after: dict = {}
    due = 0.0
    ended_early = False
    while True:
        wait = due - (clock() - began)
        if wait > 0:
            sleep(wait)
        at = clock() - began
        check = {"at_s": round(at, 3), **_watch_check(url, prompt, max_new_tokens, deadline_s)}
        checks.append(check)
        after = unit_state(unit)
        moved = bool(before) and (
            after.get("MainPID") != before.get("MainPID") or after.get("ActiveState") != "active"
        )
        if check["outcome"] != "served" or moved:
            ended_early = True
            break
        if due >= seconds:
            break
        due = min(due + interval_s, float(seconds))
    return {
        "seconds": seconds,
        "interval_s": interval_s,
        "deadline_s": deadline_s,
        "max_new_tokens": max_new_tokens,
        "watched_s": round(clock() - began, 3),
        "checks": checks,
        "unit_before": before,
        "unit_after": after,
        "journal_tail": journal_tail(unit, journal_lines) if ended_early else [],
    }


def bench_serving_trial(
    python: str, url: str, *, max_tokens: int, prompt_len: int, prompts: int, api_key: str | None = None
) -> dict:
    """One trial with SGLang's own client, ``python -m sglang.bench_serving``.

    Runs it from the serving venv's ``python`` at concurrency 1 and returns
    ``{"method": "bench_serving", "record": <its --output-file JSON line>,
    "stdout_tail": <last lines it printed>}``; the controller parses both
    (``cuda13_upgrade.throughput``). Raises ``RuntimeError`` with the tail of
    its output when it fails or writes no record.
    """
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.jsonl")
        argv = [
            python,
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang",
            "--base-url",
            url,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(prompt_len),
            "--random-output-len",
            str(max_tokens),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(prompts),
            "--max-concurrency",
            "1",
            "--output-file",
            out,
        ]
        # SGLang's bench_serving sends OPENAI_API_KEY as the bearer token (its get_auth_headers);
        # the key goes through the environment, never the command line.
        env = {**os.environ, "OPENAI_API_KEY": api_key} if api_key else None
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        printed = (proc.stdout + proc.stderr).strip().splitlines()
        # The whole result block, however long, or the last 40 lines when there is none.
        title = [i for i, line in enumerate(printed) if "Serving Benchmark Result" in line]
        tail = "\n".join(printed[title[-1] :] if title else printed[-40:])
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"sglang.bench_serving exited {proc.returncode}: {tail}")
        with open(out, encoding="utf-8") as handle:
            lines = [line for line in handle if line.strip()]
        if not lines:
            raise RuntimeError(f"sglang.bench_serving wrote no result: {tail}")
        record = json.loads(lines[-1])
        if isinstance(record, dict) and isinstance(record.get("server_info"), dict):
            # its copy of /get_server_info holds the server's --api-key
            record["server_info"] = without_secrets(record["server_info"])
        return {"method": "bench_serving", "record": record, "stdout_tail": tail}


class BenchError(Exception):
    """The server cannot be reached, or answers something that is not what was asked for."""


#: The options of :func:`run` and their defaults (the command line's, with ``workload``
#: the prompt file's content instead of its path).
DEFAULTS = {
    "url": "http://127.0.0.1:30000",
    "max_tokens": 256,
    "prompt_len": 128,
    "trials": 5,
    "min_trials": 0,
    "warmup": 1,
    "model": None,
    "timeout": 300.0,
    "append": None,
    "series": None,
    "method": "builtin",
    "python": None,
    "prompts": 4,
    "workload": None,
    "flush_cache": False,
    "load_metrics": False,
    "ttft_prompt_len": 0,
    "ttft_requests": 3,
    "concurrency": 0,
    "soak_requests": 0,
    "soak_concurrency": 8,
    "soak_deadline_s": 60.0,
    "soak_max_tokens": None,
    "unit": None,
    "journal_lines": 30,
    "probe": 0,
    "max_new_tokens": 32,
    "probe_batch_sizes": [],
    "watch_seconds": 0.0,
    "watch_interval_s": 15.0,
    "watch_deadline_s": 60.0,
    "auth_unit": None,
}


def run(options: dict) -> dict:
    """One run of the benchmark: trials (default), ``probe`` > 0, ``load_metrics`` or
    ``watch_seconds`` > 0, as the module docstring describes; ``options`` as :data:`DEFAULTS`
    (``workload``: ``{"seed": int, "prompts": [str]}`` or None). Returns the JSON object the
    command prints. Raises :class:`BenchError` where the command exits with status 2.

    With ``auth_unit`` (a systemd unit), every request sends the ``--api-key`` the unit's
    running server was started with as ``Authorization: Bearer`` (SGLang's check:
    :mod:`server_auth`); the key is read on the host and is in nothing this returns. A 401
    answer is a :class:`BenchError` that says whether a key was found."""
    o = {**DEFAULTS, **{k: v for k, v in options.items() if v is not None or k not in DEFAULTS}}
    key = unit_api_key(o["auth_unit"])
    with bearer(key) as sent:
        try:
            return _run(o, key)
        except BenchError as exc:
            if "HTTP Error 401" in str(exc) or "HTTP 401" in str(exc):
                raise BenchError(f"{exc}: {unauthorized_message(o['auth_unit'], sent)}") from None
            raise


def _run(o: dict, api_key: str | None) -> dict:
    url = o["url"]
    workload = o["workload"]
    if o["probe"] > 0 or o["watch_seconds"] > 0:
        if not workload:
            raise BenchError("--probe and --watch-seconds need --prompt-file")
        prompts = workload["prompts"]
        if o["watch_seconds"] > 0:
            if o["watch_interval_s"] <= 0:
                raise BenchError(f"--watch-interval-s must be > 0 (got {o['watch_interval_s']})")
            record = watch(
                url,
                prompt=prompts[0],
                max_new_tokens=o["max_new_tokens"],
                seconds=o["watch_seconds"],
                interval_s=o["watch_interval_s"],
                deadline_s=o["watch_deadline_s"],
                unit=o["unit"],
                journal_lines=o["journal_lines"],
            )
            return {"url": url, "watch": record}
        try:
            outputs = [generate(url, p, o["max_new_tokens"], o["timeout"]) for p in prompts[: o["probe"]]]
            batched = [
                {
                    "batch_size": int(size),
                    "outputs": generate_together(
                        url, prompts[: o["probe"]], int(size), o["max_new_tokens"], o["timeout"]
                    ),
                }
                for size in o["probe_batch_sizes"] or []
            ]
        except (urllib.error.URLError, OSError) as exc:
            raise BenchError(f"cannot reach the server at {url}: {exc}") from exc
        except (ValueError, json.JSONDecodeError) as exc:
            raise BenchError(f"unexpected answer from {url}: {exc}") from exc
        document = {"url": url, "max_new_tokens": o["max_new_tokens"], "outputs": outputs}
        if o["probe_batch_sizes"]:
            document["batched"] = batched
        return document

    if o["load_metrics"]:
        if not workload:
            raise BenchError("--load-metrics needs --prompt-file")
        try:
            load = load_metrics(
                url,
                prompts=workload["prompts"],
                seed=int(workload.get("seed", 0)),
                max_tokens=o["max_tokens"],
                ttft_prompt_len=o["ttft_prompt_len"],
                ttft_requests=o["ttft_requests"],
                concurrency=o["concurrency"],
                model=o["model"],
                timeout=o["timeout"],
            )
        except (urllib.error.URLError, OSError) as exc:
            raise BenchError(f"cannot reach the server at {url}: {exc}") from exc
        except (ValueError, json.JSONDecodeError) as exc:
            raise BenchError(f"unexpected answer from {url}: {exc}") from exc
        document = {"url": url, "load": load}
        if o["soak_requests"] > 0:
            document["soak"] = soak(
                url,
                prompts=workload["prompts"],
                requests=o["soak_requests"],
                concurrency=o["soak_concurrency"],
                deadline_s=o["soak_deadline_s"],
                max_tokens=o["soak_max_tokens"] or o["max_tokens"],
                model=o["model"],
                unit=o["unit"],
                journal_lines=o["journal_lines"],
            )
        return document

    previous: list[dict] = []
    if o["append"]:
        try:
            with open(o["append"], encoding="utf-8") as handle:
                kept = json.load(handle)
        except FileNotFoundError:
            kept = {}
        if o["series"] is None or kept.get("series") == o["series"]:
            previous = kept.get("trials", [])
    count = o["trials"]
    if o["append"] and o["min_trials"]:
        count = max(1, o["min_trials"] - len(previous)) if previous else o["min_trials"]
    try:
        if o["method"] == "bench_serving":
            if not o["python"]:
                raise BenchError("--method bench_serving needs --python <venv>/bin/python")
            trials = [
                bench_serving_trial(
                    o["python"],
                    url,
                    max_tokens=o["max_tokens"],
                    prompt_len=o["prompt_len"],
                    prompts=o["prompts"],
                    api_key=api_key,
                )
                for _ in range(count)
            ]
            result = {"url": url, "method": "bench_serving", "trials": trials}
        else:
            workload = workload or {"prompts": None, "seed": 0}
            result = measure(
                url,
                max_tokens=o["max_tokens"],
                prompt_len=o["prompt_len"],
                trials=count,
                warmup=0 if previous else o["warmup"],
                model=o["model"],
                timeout=o["timeout"],
                prompts=workload.get("prompts"),
                seed=int(workload.get("seed", 0)),
                first_index=len(previous),
                flush=o["flush_cache"],
            )
            result["method"] = "builtin"
    except (urllib.error.URLError, OSError) as exc:
        raise BenchError(f"cannot reach the server at {url}: {exc}") from exc
    except (ValueError, json.JSONDecodeError, RuntimeError) as exc:
        raise BenchError(f"unexpected answer from {url}: {exc}") from exc
    result["trials"] = previous + result["trials"]
    if o["series"] is not None:
        result["series"] = o["series"]
    if o["append"]:
        import os

        directory = os.path.dirname(o["append"])
        if directory:
            os.makedirs(directory, mode=0o755, exist_ok=True)
        tmp = o["append"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        os.replace(tmp, o["append"])
    return result


#: The argument spec of the module cuda13_bench.
BENCH_SPEC = {
    "mode": {"type": "str", "choices": ["trials", "probe", "load", "watch"], "required": True},
    "url": {"type": "str", "default": "http://127.0.0.1:30000"},
    "workload": {"type": "dict"},
    "max_tokens": {"type": "int", "default": 256},
    "prompt_len": {"type": "int", "default": 128},
    "trials": {"type": "int", "default": 5},
    "min_trials": {"type": "int", "default": 0},
    "warmup": {"type": "int", "default": 1},
    "append": {"type": "path"},
    "series": {"type": "str"},
    "method": {"type": "str", "choices": ["builtin", "bench_serving"], "default": "builtin"},
    "python": {"type": "str"},
    "prompts": {"type": "int", "default": 4},
    "flush_cache": {"type": "bool", "default": False},
    "ttft_prompt_len": {"type": "int", "default": 0},
    "ttft_requests": {"type": "int", "default": 3},
    "concurrency": {"type": "int", "default": 0},
    "soak_requests": {"type": "int", "default": 0},
    "soak_concurrency": {"type": "int", "default": 8},
    "soak_deadline_s": {"type": "float", "default": 60.0},
    "unit": {"type": "str"},
    "probe": {"type": "int", "default": 0},
    "max_new_tokens": {"type": "int", "default": 32},
    "probe_batch_sizes": {"type": "list", "elements": "int", "default": []},
    "watch_seconds": {"type": "float", "default": 0.0},
    "watch_interval_s": {"type": "float", "default": 15.0},
    "watch_deadline_s": {"type": "float", "default": 60.0},
    "timeout": {"type": "float", "default": 300.0},
    "auth_unit": {"type": "str"},
}


def bench_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_bench: one :func:`run` in the mode ``params["mode"]``."""
    options = dict(params)
    mode = options.pop("mode")
    options["load_metrics"] = mode == "load"
    if mode != "probe":
        options["probe"] = 0
    if mode != "watch":
        options["watch_seconds"] = 0.0
    try:
        return {"changed": False, "bench": run(options)}
    except BenchError as exc:
        return {"failed": True, "msg": str(exc)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--trials", type=int, default=5, help="trials to run this time")
    parser.add_argument(
        "--min-trials",
        type=int,
        default=0,
        help="with --append: run enough trials to reach this many, else --trials (at least 1)",
    )
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--model", default=None)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--append", default=None, help="JSON file that accumulates the trials")
    parser.add_argument(
        "--series",
        default=None,
        help="with --append: the trials' series (e.g. the run id); a file of another series starts afresh",
    )
    parser.add_argument("--method", choices=["builtin", "bench_serving"], default="builtin")
    parser.add_argument("--python", default=None, help="venv python for --method bench_serving")
    parser.add_argument("--prompts", type=int, default=4, help="requests per bench_serving trial")
    parser.add_argument(
        "--prompt-file", default=None, help='JSON {"seed": int, "prompts": [...]} of the workload'
    )
    parser.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before each trial")
    parser.add_argument(
        "--load-metrics",
        action="store_true",
        help="measure only the gated extra metrics (needs --prompt-file), print {'load': {...}}",
    )
    parser.add_argument("--ttft-prompt-len", type=int, default=0, help="words of the long prompt (0: off)")
    parser.add_argument("--ttft-requests", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=0, help="streams at once (0: off)")
    parser.add_argument(
        "--soak-requests", type=int, default=0, help="with --load-metrics: soak requests (0: off)"
    )
    parser.add_argument("--soak-concurrency", type=int, default=8, help="soak requests at once")
    parser.add_argument(
        "--soak-deadline-s", type=float, default=60.0, help="seconds each soak request may take"
    )
    parser.add_argument(
        "--soak-max-tokens", type=int, default=None, help="tokens per soak request (--max-tokens)"
    )
    parser.add_argument("--unit", default=None, help="the server's systemd unit, read after a failed soak")
    parser.add_argument("--journal-lines", type=int, default=30)
    parser.add_argument(
        "--auth-unit",
        default=None,
        help="the systemd unit whose running server's --api-key the requests send as the bearer token",
    )
    parser.add_argument(
        "--probe", type=int, default=0, help="correctness probe of the first N prompts of --prompt-file"
    )
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per probe or watch answer")
    parser.add_argument(
        "--probe-batch-sizes",
        type=lambda text: [int(v) for v in text.split(",") if v.strip()],
        default=[],
        help="after the probe, send its prompts together in batches of these sizes (8,257)",
    )
    parser.add_argument(
        "--watch-seconds", type=float, default=0.0, help="watch the server this long (0: off)"
    )
    parser.add_argument("--watch-interval-s", type=float, default=15.0, help="seconds between watch checks")
    parser.add_argument(
        "--watch-deadline-s", type=float, default=60.0, help="seconds each watch check may take"
    )
    args = parser.parse_args(argv)
    options = {k: v for k, v in vars(args).items() if k != "prompt_file"}
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8") as handle:
            options["workload"] = json.load(handle)
    try:
        document = run(options)
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    json.dump(document, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
