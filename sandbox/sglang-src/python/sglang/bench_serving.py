"""Benchmark online serving with dynamic requests (stand-in of ``sglang.bench_serving``).

Usage::

    python -m sglang.bench_serving --backend sglang --base-url http://127.0.0.1:30000 \\
        --dataset-name random --random-input-len 128 --random-output-len 256 \\
        --num-prompts 8 --max-concurrency 1 --output-file out.jsonl

A real client written on the standard library (threads and ``http.client``) in place of
aiohttp/numpy/transformers: it streams from the server and measures. It keeps what SGLang's
bench_serving does and prints: the backends' endpoints (``sglang``/``sglang-native`` ->
``POST /generate``; ``sglang-oai``/``vllm``/``lmdeploy`` -> ``POST /v1/completions``), the
``random`` dataset (lengths drawn from ``[len*range_ratio, len]``, ``--random-range-ratio``
default 0.0), warm-up requests (at most 32 output tokens) then a one-second pause, requests
sent at ``--request-rate`` (inf: all at once) within ``--max-concurrency``, the metric
definitions (TTFT, ITL, TPOT, E2E latency, peak output throughput per one-second bucket), the
printed ``Serving Benchmark Result`` block and the keys of the JSON line appended to
``--output-file``. Token counts come from the server (``meta_info.completion_tokens``);
"retokenized" counts use whitespace-separated words, the stand-in server's tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
import traceback
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from http.client import HTTPConnection, HTTPSConnection

REQUEST_TIMEOUT_S = 3600.0
_WORDS = "hello world the quick brown fox jumps over a lazy dog in sandbox prompt".split()

args: argparse.Namespace


@dataclass
class DatasetRow:
    prompt: str
    prompt_len: int
    output_len: int


@dataclass
class RequestFuncInput:
    prompt: str
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    extra_request_body: dict


@dataclass
class RequestFuncOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0


def get_auth_headers() -> dict[str, str]:
    api_key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _connection(url: str) -> tuple[HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    cls = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=REQUEST_TIMEOUT_S)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return conn, path


def _http_json(method: str, url: str) -> tuple[int, object]:
    conn, path = _connection(url)
    try:
        conn.request(method, path, headers=get_auth_headers())
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw or b"null")
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def _post(url: str, payload: dict):
    conn, path = _connection(url)
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", **get_auth_headers()}
    conn.request("POST", path, body=body, headers=headers)
    return conn, conn.getresponse()


def _events(resp):
    """SSE payloads of a streamed response (the text after ``data: ``)."""
    for raw in resp:
        line = raw.strip()
        if not line:
            continue
        text = line.decode("utf-8")
        yield text[len("data:") :].strip() if text.startswith("data:") else text


def request_sglang_generate(inp: RequestFuncInput) -> RequestFuncOutput:
    """``POST /generate`` (SGLang native); streamed text is cumulative."""
    payload = {
        "text": inp.prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": inp.output_len,
            "ignore_eos": not args.disable_ignore_eos,
        },
        "stream": not args.disable_stream,
        "return_logprob": args.return_logprob,
        "logprob_start_len": -1,
        **inp.extra_request_body,
    }
    output = RequestFuncOutput(prompt_len=inp.prompt_len, output_len=inp.output_len)
    st = time.perf_counter()
    output.start_time = st
    most_recent, last_len, ttft = st, 0, 0.0
    conn = None
    try:
        conn, resp = _post(inp.api_url, payload)
        if resp.status != 200:
            output.error = resp.reason or ""
            return output
        latency = 0.0
        for chunk in _events(resp):
            latency = time.perf_counter() - st
            if chunk == "[DONE]":
                continue
            data = json.loads(chunk)
            if not data.get("text"):
                continue
            timestamp = time.perf_counter()
            output.generated_text = data["text"]
            output_len = data["meta_info"]["completion_tokens"]
            if ttft == 0.0:
                ttft = timestamp - st
                output.ttft = ttft
            else:
                new_tokens = output_len - last_len
                if new_tokens == 0:
                    continue
                output.itl.extend([(timestamp - most_recent) / new_tokens] * new_tokens)
            most_recent, last_len = timestamp, output_len
            output.output_len = output_len
        output.latency = latency
        if args.disable_stream:
            output.ttft = output.latency
        output.success = True
    except Exception:
        output.error = "".join(traceback.format_exception(*sys.exc_info()))
    finally:
        if conn is not None:
            conn.close()
    return output


def request_openai_completions(inp: RequestFuncInput) -> RequestFuncOutput:
    """``POST /v1/completions`` (OpenAI); one text piece per streamed chunk."""
    payload = {
        "model": inp.model,
        "prompt": inp.prompt,
        "temperature": 0.0,
        "best_of": 1,
        "max_tokens": inp.output_len,
        "stream": not args.disable_stream,
        "ignore_eos": not args.disable_ignore_eos,
        **inp.extra_request_body,
    }
    output = RequestFuncOutput(prompt_len=inp.prompt_len, output_len=inp.output_len)
    st = time.perf_counter()
    output.start_time = st
    most_recent, ttft, generated = st, 0.0, ""
    output_len = inp.output_len
    conn = None
    try:
        conn, resp = _post(inp.api_url, payload)
        if resp.status != 200:
            output.error = resp.reason or ""
            return output
        latency = 0.0
        for chunk in _events(resp):
            latency = time.perf_counter() - st
            if chunk == "[DONE]":
                continue
            data = json.loads(chunk)
            choices = data.get("choices") or [{}]
            text = choices[0].get("text")
            if text:
                timestamp = time.perf_counter()
                if ttft == 0.0:
                    ttft = timestamp - st
                    output.ttft = ttft
                else:
                    output.itl.append(timestamp - most_recent)
                most_recent = timestamp
                generated += text
            output_len = (data.get("usage") or {}).get("completion_tokens", output_len)
        output.generated_text = generated
        output.latency = latency
        output.output_len = output_len
        if args.disable_stream:
            output.ttft = output.latency
        output.success = True
    except Exception:
        output.error = "".join(traceback.format_exception(*sys.exc_info()))
    finally:
        if conn is not None:
            conn.close()
    return output


ASYNC_REQUEST_FUNCS = {
    "sglang": request_sglang_generate,
    "sglang-native": request_sglang_generate,
    "sglang-oai": request_openai_completions,
    "vllm": request_openai_completions,
    "lmdeploy": request_openai_completions,
}


def sample_random_requests(
    input_len: int, output_len: int, num_prompts: int, range_ratio: float, seed: int
) -> list[DatasetRow]:
    """Random prompts; lengths uniform in ``[max(int(len*ratio), 1), len]`` like SGLang's."""
    rng = random.Random(seed)
    rows = []
    for _ in range(num_prompts):
        n_in = rng.randint(max(int(input_len * range_ratio), 1), input_len)
        n_out = rng.randint(max(int(output_len * range_ratio), 1), output_len)
        prompt = " ".join(rng.choice(_WORDS) for _ in range(n_in))
        rows.append(DatasetRow(prompt, n_in, n_out))
    print(f"#Input tokens: {sum(r.prompt_len for r in rows)}")
    print(f"#Output tokens: {sum(r.output_len for r in rows)}")
    return rows


def _percentile(values: list[float], q: float) -> float:
    """numpy.percentile's default (linear) method; 0 for no values, like ``np.x(v or 0)``."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: list[float]) -> float:
    if not values:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def calculate_metrics(
    input_requests: list[DatasetRow], outputs: list[RequestFuncOutput], dur_s: float
) -> tuple[dict, list[int]]:
    output_lens: list[int] = []
    retokenized: list[int] = []
    total_input = completed = 0
    itls: list[float] = []
    tpots: list[float] = []
    ttfts: list[float] = []
    e2e: list[float] = []
    for req, out in zip(input_requests, outputs, strict=True):
        if not out.success:
            output_lens.append(0)
            retokenized.append(0)
            continue
        output_lens.append(out.output_len)
        retokenized.append(len(out.generated_text.split()))
        total_input += req.prompt_len
        if out.output_len > 1:
            tpots.append((out.latency - out.ttft) / (out.output_len - 1))
        itls += out.itl
        ttfts.append(out.ttft)
        e2e.append(out.latency)
        completed += 1
    if completed == 0:
        print(
            "warning: All requests failed. This is likely due to a misconfiguration "
            "on the benchmark arguments.",
            file=sys.stderr,
        )
    max_tok_s, max_conc = 0.0, 0
    ok = [o for o in outputs if o.success]
    if ok:
        t0 = min(o.start_time for o in ok)
        t1 = max(o.start_time + o.latency for o in ok)
        buckets = int(math.ceil(t1 - t0)) + 1
        tokens, conc = [0] * buckets, [0] * buckets
        for o in ok:
            t = o.start_time + o.ttft
            times = [t]
            for gap in o.itl:
                t += gap
                times.append(t)
            for ts in times:
                b = int(ts - t0)
                if 0 <= b < buckets:
                    tokens[b] += 1
            first, last = int(o.start_time - t0), int(o.start_time + o.latency - t0)
            for b in range(first, min(last + 1, buckets)):
                conc[b] += 1
        max_tok_s, max_conc = float(max(tokens)), int(max(conc))
    total_output = sum(output_lens)
    metrics = {
        "completed": completed,
        "total_input": total_input,
        "total_input_text": total_input,
        "total_input_vision": 0,
        "total_output": total_output,
        "total_output_retokenized": sum(retokenized),
        "request_throughput": completed / dur_s,
        "input_throughput": total_input / dur_s,
        "output_throughput": total_output / dur_s,
        "total_throughput": (total_input + total_output) / dur_s,
        "mean_ttft_ms": _mean(ttfts) * 1000,
        "median_ttft_ms": _percentile(ttfts, 50) * 1000,
        "std_ttft_ms": _std(ttfts) * 1000,
        "p99_ttft_ms": _percentile(ttfts, 99) * 1000,
        "mean_tpot_ms": _mean(tpots) * 1000,
        "median_tpot_ms": _percentile(tpots, 50) * 1000,
        "std_tpot_ms": _std(tpots) * 1000,
        "p99_tpot_ms": _percentile(tpots, 99) * 1000,
        "mean_itl_ms": _mean(itls) * 1000,
        "median_itl_ms": _percentile(itls, 50) * 1000,
        "std_itl_ms": _std(itls) * 1000,
        "p95_itl_ms": _percentile(itls, 95) * 1000,
        "p99_itl_ms": _percentile(itls, 99) * 1000,
        "max_itl_ms": (max(itls) if itls else 0.0) * 1000,
        "mean_e2e_latency_ms": _mean(e2e) * 1000,
        "median_e2e_latency_ms": _percentile(e2e, 50) * 1000,
        "std_e2e_latency_ms": _std(e2e) * 1000,
        "p90_e2e_latency_ms": _percentile(e2e, 90) * 1000,
        "p99_e2e_latency_ms": _percentile(e2e, 99) * 1000,
        "concurrency": sum(e2e) / dur_s,
        "max_output_tokens_per_s": max_tok_s,
        "max_concurrent_requests": max_conc,
    }
    return metrics, output_lens


def _line(label: str, value, fmt: str = "") -> None:
    print("{:<40} {:<10{}}".format(label, value, fmt))


def print_result(
    backend: str, request_rate, max_concurrency, m: dict, duration: float, accept_length
) -> None:
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    _line("Backend:", backend)
    _line("Traffic request rate:", request_rate)
    _line("Max request concurrency:", max_concurrency if max_concurrency else "not set")
    _line("Successful requests:", m["completed"])
    _line("Benchmark duration (s):", duration, ".2f")
    _line("Total input tokens:", m["total_input"])
    _line("Total input text tokens:", m["total_input_text"])
    _line("Total generated tokens:", m["total_output"])
    _line("Total generated tokens (retokenized):", m["total_output_retokenized"])
    _line("Request throughput (req/s):", m["request_throughput"], ".2f")
    _line("Input token throughput (tok/s):", m["input_throughput"], ".2f")
    _line("Output token throughput (tok/s):", m["output_throughput"], ".2f")
    _line("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"], ".2f")
    _line("Peak concurrent requests:", m["max_concurrent_requests"])
    _line("Total token throughput (tok/s):", m["total_throughput"], ".2f")
    _line("Concurrency:", m["concurrency"], ".2f")
    if accept_length:
        _line("Accept length:", accept_length, ".2f")
    print("{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"))
    _line("Mean E2E Latency (ms):", m["mean_e2e_latency_ms"], ".2f")
    _line("Median E2E Latency (ms):", m["median_e2e_latency_ms"], ".2f")
    _line("P90 E2E Latency (ms):", m["p90_e2e_latency_ms"], ".2f")
    _line("P99 E2E Latency (ms):", m["p99_e2e_latency_ms"], ".2f")
    print("{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"))
    _line("Mean TTFT (ms):", m["mean_ttft_ms"], ".2f")
    _line("Median TTFT (ms):", m["median_ttft_ms"], ".2f")
    _line("P99 TTFT (ms):", m["p99_ttft_ms"], ".2f")
    print("{s:{c}^{n}}".format(s="Time per Output Token (excl. 1st token)", n=50, c="-"))
    _line("Mean TPOT (ms):", m["mean_tpot_ms"], ".2f")
    _line("Median TPOT (ms):", m["median_tpot_ms"], ".2f")
    _line("P99 TPOT (ms):", m["p99_tpot_ms"], ".2f")
    print("{s:{c}^{n}}".format(s="Inter-Token Latency", n=50, c="-"))
    _line("Mean ITL (ms):", m["mean_itl_ms"], ".2f")
    _line("Median ITL (ms):", m["median_itl_ms"], ".2f")
    _line("P95 ITL (ms):", m["p95_itl_ms"], ".2f")
    _line("P99 ITL (ms):", m["p99_itl_ms"], ".2f")
    _line("Max ITL (ms):", m["max_itl_ms"], ".2f")
    print("=" * 50)


def _run_all(func, inputs: list[RequestFuncInput], request_rate: float, max_concurrency):
    workers = max(1, min(max_concurrency or len(inputs), len(inputs)))
    rng = random.Random(args.seed)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = []
        for inp in inputs:
            futures.append(pool.submit(func, inp))
            if request_rate != float("inf"):
                time.sleep(rng.expovariate(request_rate))
        return [f.result() for f in futures]


def benchmark(
    backend,
    api_url,
    base_url,
    model_id,
    input_requests,
    request_rate,
    max_concurrency,
    extra_request_body,
    warmup_requests,
):
    func = ASYNC_REQUEST_FUNCS[backend]
    print(f"Starting warmup with {warmup_requests} sequences...")
    first = input_requests[0]
    test_input = RequestFuncInput(
        first.prompt,
        api_url,
        first.prompt_len,
        min(first.output_len, 32),
        model_id,
        extra_request_body,
    )
    if warmup_requests > 0:
        threads_out: list[RequestFuncOutput] = []
        lock = threading.Lock()

        def warm() -> None:
            out = func(test_input)
            with lock:
                threads_out.append(out)

        threads = [threading.Thread(target=warm) for _ in range(warmup_requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not any(o.success for o in threads_out):
            raise ValueError(
                "Warmup failed - Please make sure benchmark arguments "
                f"are correctly specified. Error: {threads_out[0].error}"
            )
    print(f"Warmup completed with {warmup_requests} sequences. Starting main benchmark run...")
    if args.flush_cache:
        _post(base_url + "/flush_cache", {})[0].close()
    time.sleep(1.0)

    start = time.perf_counter()
    inputs = [
        RequestFuncInput(r.prompt, api_url, r.prompt_len, r.output_len, model_id, extra_request_body)
        for r in input_requests
    ]
    outputs = _run_all(func, inputs, request_rate, max_concurrency)

    accept_length = None
    server_info = None
    if "sglang" in backend:
        status, info = _http_json("GET", base_url + "/get_server_info")
        if status == 200 and isinstance(info, dict):
            server_info = info
            states = info.get("internal_states") or []
            if states:
                accept_length = states[0].get("avg_spec_accept_length")
    duration = time.perf_counter() - start
    metrics, output_lens = calculate_metrics(input_requests, outputs, duration)
    print_result(backend, request_rate, max_concurrency, metrics, duration, accept_length)

    result = {
        "tag": args.tag,
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": request_rate,
        "max_concurrency": max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "server_info": server_info,
        "duration": duration,
        "completed": metrics["completed"],
        "total_input_tokens": metrics["total_input"],
        "total_input_text_tokens": metrics["total_input_text"],
        "total_input_vision_tokens": metrics["total_input_vision"],
        "total_output_tokens": metrics["total_output"],
        "total_output_tokens_retokenized": metrics["total_output_retokenized"],
    }
    for key in (
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "mean_e2e_latency_ms",
        "median_e2e_latency_ms",
        "std_e2e_latency_ms",
        "p90_e2e_latency_ms",
        "p99_e2e_latency_ms",
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "std_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "std_itl_ms",
        "p95_itl_ms",
        "p99_itl_ms",
        "concurrency",
    ):
        result[key] = metrics[key]
    result["accept_length"] = accept_length
    result["max_output_tokens_per_s"] = metrics["max_output_tokens_per_s"]
    result["max_concurrent_requests"] = metrics["max_concurrent_requests"]

    if args.output_file:
        output_file_name = args.output_file
    else:
        now = datetime.now().strftime("%m%d")
        output_file_name = (
            f"{args.backend}_{now}_{args.num_prompts}_{args.random_input_len}_{args.random_output_len}.jsonl"
        )
    details = {
        "input_lens": [o.prompt_len for o in outputs],
        "output_lens": output_lens,
        "ttfts": [o.ttft for o in outputs],
        "itls": [o.itl for o in outputs],
        "generated_texts": [o.generated_text for o in outputs],
        "errors": [o.error for o in outputs],
    }
    with open(output_file_name, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(result | details if args.output_details else result) + "\n")
    return result | details


def run_benchmark(args_: argparse.Namespace) -> dict:
    global args
    args = args_
    print(f"benchmark_args={args}")
    if args.dataset_name not in ("random", "random-ids"):
        print("sandbox bench_serving: only --dataset-name random/random-ids are simulated.")
        sys.exit(2)
    random.seed(args.seed)
    extra_request_body = json.loads(args.extra_request_body) if args.extra_request_body else {}
    if args.port is None:
        args.port = {
            "sglang": 30000,
            "sglang-native": 30000,
            "sglang-oai": 30000,
            "lmdeploy": 23333,
            "vllm": 8000,
        }.get(args.backend, 30000)
    base_url = args.base_url or f"http://{args.host}:{args.port}"
    model_url = f"{base_url}/v1/models"
    if args.backend in ("sglang", "sglang-native"):
        api_url = f"{base_url}/generate"
    else:
        api_url = f"{base_url}/v1/completions"
    if args.model is None:
        try:
            status, data = _http_json("GET", model_url)
            models = data.get("data", []) if isinstance(data, dict) else []
            args.model = models[0]["id"] if models else None
        except Exception as e:
            print(f"Failed to fetch model from {model_url}. Error: {e}")
            print("Please specify the correct host and port using `--host` and `--port`.")
            sys.exit(1)
    if args.model is None:
        print("No model specified or found. Please provide a model using `--model`.")
        sys.exit(1)
    print(f"{args}\n")
    model_id = args.served_model_name or args.model
    input_requests = sample_random_requests(
        args.random_input_len,
        args.random_output_len,
        args.num_prompts,
        args.random_range_ratio,
        args.seed,
    )
    return benchmark(
        args.backend,
        api_url,
        base_url,
        model_id,
        input_requests,
        args.request_rate,
        args.max_concurrency,
        extra_request_body,
        args.warmup_requests,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    p.add_argument("--backend", choices=list(ASYNC_REQUEST_FUNCS), default="sglang")
    p.add_argument("--base-url", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int)
    p.add_argument("--dataset-name", default="sharegpt")
    p.add_argument("--dataset-path", default="")
    p.add_argument("--model")
    p.add_argument("--served-model-name")
    p.add_argument("--tokenizer")
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--sharegpt-output-len", type=int, default=None)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--output-file")
    p.add_argument("--output-details", action="store_true")
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--disable-stream", action="store_true")
    p.add_argument("--return-logprob", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--disable-ignore-eos", action="store_true")
    p.add_argument("--extra-request-body")
    p.add_argument("--apply-chat-template", action="store_true")
    p.add_argument("--flush-cache", action="store_true")
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--tag", default=None)
    return p


if __name__ == "__main__":
    run_benchmark(_parser().parse_args())
