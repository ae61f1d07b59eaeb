"""The simulated SGLang HTTP server (standard library ``ThreadingHTTPServer``).

Start-up, as the real server: parse arguments, load the stack (``sglang.srt.stack`` -- an
inconsistent stack ends the process here with the real traceback), load the weights (here:
sleep ``startup_s`` of the scenario; each rank logs, in SGLang's words, the paths the
scenario's ``disabled_paths`` turns off, ``simulation.DISABLED_PATHS``), open the port, and
log ``The server is fired up and ready to roll!``. Endpoints, in the shapes SGLang serves them:

* ``GET /health`` -- 200 with an empty body once the port is open (as SGLang's ``/health``
  without generation); ``GET /health_generate`` -- 200 once a one-token generation finishes,
  503 when none finished within ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s), as SGLang's
  ``health_generate``. A scenario's ``warmup_window_s`` makes generation block for that long
  after start while ``/health`` is already 200 (sgl-project/sglang#33719); generation requests
  that arrive in the window are counted in ``simulation.requests_in_warmup``;
* ``GET /get_server_info`` -- the server arguments as top-level keys (as SGLang returns
  ``{**dataclasses.asdict(server_args), **scheduler_info, "internal_states": [...],
  "version": __version__}``, python/sglang/srt/entrypoints/http_server.py,
  sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d; the sandbox has no
  scheduler, so no scheduler_info keys), ``version``, ``internal_states`` (with
  ``avg_spec_accept_length`` for speculative decoding), plus ``stack`` (torch version and
  CUDA, sgl-kernel and flashinfer versions, this tree's build info) and ``simulation``
  (scenario, rate key and rate), two objects only the sandbox has;
* ``GET /get_model_info``, ``GET /v1/models`` (OpenAI list shape);
* ``POST /v1/completions`` (OpenAI: ``prompt``, ``max_tokens``, ``ignore_eos``, ``stream``
  with one SSE ``data: {...}`` chunk per token and ``data: [DONE]``, ``usage`` counts);
* ``POST /generate`` (SGLang native: ``text``, ``sampling_params.max_new_tokens``, ``stream``
  with cumulative ``text`` and ``meta_info.completion_tokens``), what ``bench_serving
  --backend sglang`` uses;
* ``POST /flush_cache``.

A scenario's ``crash_on_request`` ends the process with SIGFPE at its n-th generation request
(sgl-project/sglang PR #40485), and its ``stall_after_completions`` makes every generation
request after that many finished ones hang while ``/health`` stays 200
(sgl-project/sglang#22779): ``simulation``'s module doc.

Tokens leave at the times ``sglang.srt.simulation.DecodeModel`` gives; requests run
concurrently without slowing each other. Logs go to stdout in SGLang's and uvicorn's formats.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang.srt import simulation
from sglang.srt.server_args import ServerArgs
from sglang.srt.stack import check_stack
from sglang.version import __version__


def log(message: str, prefix: str = "") -> None:
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{now}{prefix}] {message}", flush=True)


@dataclasses.dataclass
class SimState:
    """Everything a request handler needs, shared by all handler threads."""

    server_args: ServerArgs
    stack: dict
    scenario: dict
    scenario_source: str
    tag: str
    profile: str
    model: simulation.DecodeModel
    created: int
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    running: int = 0
    last_gen_throughput: float = 0.0
    ready_at: float = 0.0
    requests_in_warmup: int = 0
    token_mode: tuple = ("same", 0)
    zeros_from_batch: int = 0
    accept_length: float | None = None
    prefix_cache: simulation.PrefixCache = dataclasses.field(default_factory=simulation.PrefixCache)
    spec_tokens: int = 0
    spec_verify_ct: int = 0
    crash_on_request: int = 0
    stall_after_completions: int = 0
    generation_requests: int = 0
    completed: int = 0

    def stalled(self) -> bool:
        """True once the scenario's ``stall_after_completions`` requests have finished."""
        return bool(self.stall_after_completions) and self.completed >= self.stall_after_completions

    def verify_steps(self, completion_tokens: int) -> int:
        """Verify steps a speculative request of ``completion_tokens`` takes."""
        import math

        return max(1, math.ceil(completion_tokens / (self.accept_length or 1.0)))

    def count_speculative(self, completion_tokens: int) -> None:
        """Add a finished request to the server's cumulative speculative counters."""
        if self.server_args.speculative_algorithm and self.accept_length and completion_tokens:
            with self.lock:
                self.spec_tokens += completion_tokens
                self.spec_verify_ct += self.verify_steps(completion_tokens)

    def wait_until_ready(self, limit: float | None = None) -> bool:
        """Block while the warm-up window lasts (at most ``limit`` s); True when it is over."""
        remaining = self.ready_at - time.monotonic()
        if remaining > 0:
            time.sleep(remaining if limit is None else min(remaining, limit))
        return time.monotonic() >= self.ready_at

    def server_info(self) -> dict:
        args = dataclasses.asdict(self.server_args)
        args.pop("ignored_args", None)
        internal: dict = {"last_gen_throughput": round(self.last_gen_throughput, 2)}
        if self.server_args.speculative_algorithm:
            # Cumulative over the server's life, as SGLang's: the scenario's value until a
            # speculative request has finished.
            internal["avg_spec_accept_length"] = (
                round(self.spec_tokens / self.spec_verify_ct, 4)
                if self.spec_verify_ct
                else self.accept_length
            )
        return {
            **args,
            "version": __version__,
            "internal_states": [internal],
            "stack": self.stack,
            "simulation": {
                "scenario": self.scenario_source,
                "rate_key": f"{self.tag}/{self.profile}",
                "rate_tok_s": self.model.rate_tok_s,
                "ttft_ms": self.model.ttft_s * 1000.0,
                "noise_pct": self.model.noise * 100.0,
                "token_mode": self.token_mode[0],
                "warmup_left_s": round(max(self.ready_at - time.monotonic(), 0.0), 3),
                "requests_in_warmup": self.requests_in_warmup,
            },
        }


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: SimState


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SimHTTPServer

    # -- plumbing ---------------------------------------------------------------------
    def version_string(self) -> str:
        return "uvicorn"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        pass

    def _access_log(self, status: int) -> None:
        host, port = self.client_address[:2]
        phrase = HTTPStatus(status).phrase
        print(
            f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}',
            flush=True,
        )

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._access_log(status)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str) -> None:
        self._json(
            status,
            {
                "object": "error",
                "message": message,
                "type": "BadRequestError",
                "param": None,
                "code": status,
            },
        )

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        data = json.loads(raw or b"{}")
        if not isinstance(data, dict):
            raise ValueError("request body must be a JSON object")
        return data

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._access_log(200)

    def _event(self, payload: str) -> None:
        data = f"data: {payload}\n\n".encode()
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _unauthorized(self) -> bool:
        """SGLang's ``--api-key`` check (python/sglang/srt/utils.py ``add_api_key_middleware``,
        sgl-project/sglang 0.4/0.5): with a key, every request but OPTIONS and the paths that
        start with ``/health`` or ``/metrics`` must carry ``Authorization: Bearer <key>``
        exactly, else 401 ``{"error": "Unauthorized"}``. True when it answered 401."""
        key = self.server.state.server_args.api_key
        path = self.path.split("?", 1)[0]
        if not key or path.startswith(("/health", "/metrics")):
            return False
        if self.headers.get("Authorization") == "Bearer " + key:
            return False
        length = int(self.headers.get("Content-Length") or 0)
        if length:  # the refused request's body, read so that the connection stays usable
            self.rfile.read(length)
        self._json(401, {"error": "Unauthorized"})
        return True

    # -- routes -----------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        state = self.server.state
        path = self.path.split("?", 1)[0]
        if self._unauthorized():
            return
        if path == "/health":
            self._send(200, b"", "text/plain; charset=utf-8")
        elif path == "/health_generate":
            limit = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
            if state.stalled():
                # Its one-token generation never finishes: SGLang answers 503 at the timeout.
                time.sleep(limit)
                self._send(503, b"", "text/plain; charset=utf-8")
                return
            ready = state.wait_until_ready(limit)
            self._send(200 if ready else 503, b"", "text/plain; charset=utf-8")
        elif path in ("/get_server_info", "/server_info"):
            self._json(200, state.server_info())
        elif path == "/get_model_info":
            args = state.server_args
            self._json(
                200,
                {
                    "model_path": args.model_path,
                    "tokenizer_path": args.tokenizer_path,
                    "is_generation": True,
                    "preferred_sampling_params": None,
                },
            )
        elif path == "/v1/models":
            args = state.server_args
            model = {
                "id": args.served_model_name,
                "object": "model",
                "created": state.created,
                "owned_by": "sglang",
                "root": args.model_path,
                "parent": None,
                "max_model_len": args.context_length or 262144,
            }
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        path = self.path.split("?", 1)[0]
        if self._unauthorized():
            return
        if path not in ("/v1/completions", "/generate", "/flush_cache"):
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = self._body()
        except ValueError as exc:
            self._error(400, f"invalid request body: {exc}")
            return
        if path == "/flush_cache":
            with self.server.state.lock:
                self.server.state.prefix_cache.flush()
            self._send(200, b"Cache flushed.\n", "text/plain; charset=utf-8")
        elif path == "/v1/completions":
            self._completions(body)
        else:
            self._generate(body)

    # -- generation -------------------------------------------------------------------
    def _prompt_tokens(self, prompt) -> int:
        if isinstance(prompt, list):
            if prompt and all(isinstance(t, int) for t in prompt):
                return len(prompt)
            prompt = prompt[0] if prompt else ""
        return simulation.count_tokens(str(prompt))

    def _tokens(self, n_tokens: int, prompt_tokens: int, prompt: str = ""):
        """Yield (index, token id, text) at the scheduled times; update the shared counters."""
        state = self.server.state
        with state.lock:
            state.generation_requests += 1
            number = state.generation_requests
            stalled = state.stalled()
        if state.crash_on_request and number >= state.crash_on_request:
            # The scheduler dies of SIGFPE and the server process with it (the default action,
            # set at start: terminate with a core, which systemd reports as status=8/FPE).
            os.kill(os.getpid(), signal.SIGFPE)
            time.sleep(60)
        if stalled:
            threading.Event().wait()
        if time.monotonic() < state.ready_at:
            with state.lock:
                state.requests_in_warmup += 1
            log("A generation request arrived in the warm-up window; it waits until the server generates")
            state.wait_until_ready()
        rate = state.model.request_rate()
        with state.lock:
            cached = min(state.prefix_cache.match(prompt.split()), prompt_tokens)
        prefill_tok_s = float(state.scenario.get("prefill_tok_s") or 0)
        prefill_s = (prompt_tokens - cached) / prefill_tok_s if prefill_tok_s else 0.0
        start = time.monotonic()
        with state.lock:
            state.running += 1
            running = state.running
        if state.zeros_from_batch and running >= state.zeros_from_batch:
            ids = [0] * n_tokens
        else:
            ids = simulation.greedy_token_ids(prompt, n_tokens, *state.token_mode)
        log(
            f"Prefill batch. #new-seq: 1, #new-token: {prompt_tokens - cached}, #cached-token: {cached}, "
            f"token usage: 0.00, #running-req: {running - 1}, #queue-req: 0, "
        )
        try:
            window_start, window_tokens = start, 0
            for index, offset in enumerate(state.model.schedule(n_tokens, rate, prefill_s)):
                delay = start + offset - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                yield index, ids[index], simulation.token_text(ids[index])
                window_tokens += 1
                if window_tokens == 40:
                    now = time.monotonic()
                    throughput = window_tokens / max(now - window_start, 1e-9)
                    state.last_gen_throughput = throughput
                    log(
                        f"Decode batch. #running-req: {state.running}, #token: "
                        f"{prompt_tokens + index + 1}, token usage: 0.00, cuda graph: True, "
                        f"gen throughput (token/s): {throughput:.2f}, #queue-req: 0, "
                    )
                    window_start, window_tokens = now, 0
            state.count_speculative(n_tokens)
            with state.lock:
                state.completed += 1
        finally:
            with state.lock:
                state.running -= 1

    def _completions(self, body: dict) -> None:
        state = self.server.state
        try:
            n_tokens = int(body.get("max_tokens", 16))
        except (TypeError, ValueError):
            self._error(400, "max_tokens must be an integer")
            return
        prompt = body.get("prompt", "")
        prompt_tokens = self._prompt_tokens(prompt)
        prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
        rid = f"cmpl-{uuid.uuid4().hex}"
        model = body.get("model") or state.server_args.served_model_name
        created = int(time.time())

        def chunk(text: str, finish: str | None, usage: dict | None) -> dict:
            return {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": finish,
                        "matched_stop": None,
                    }
                ],
                "usage": usage,
            }

        def usage(completion: int) -> dict:
            return {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            }

        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._start_stream()
            try:
                for index, _, text in self._tokens(n_tokens, prompt_tokens, prompt):
                    finish = "length" if index == n_tokens - 1 else None
                    self._event(json.dumps(chunk(text, finish, None)))
                if include_usage:
                    final = chunk("", None, usage(n_tokens))
                    final["choices"] = []
                    self._event(json.dumps(final))
                self._event("[DONE]")
                self._end_stream()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        text = "".join(t for _, _, t in self._tokens(n_tokens, prompt_tokens, prompt))
        self._json(200, chunk(text, "length", usage(n_tokens)))

    def _generate(self, body: dict) -> None:
        params = body.get("sampling_params") or {}
        try:
            n_tokens = int(params.get("max_new_tokens", 128))
        except (TypeError, ValueError):
            self._error(400, "max_new_tokens must be an integer")
            return
        prompt = body.get("text", body.get("input_ids", ""))
        prompt_tokens = self._prompt_tokens(prompt)
        prompt = prompt if isinstance(prompt, str) else json.dumps(prompt)
        rid = uuid.uuid4().hex
        started = time.monotonic()

        # Speculative counters only where the scenario gives an accept length.
        speculative = bool(
            self.server.state.server_args.speculative_algorithm and self.server.state.accept_length
        )

        def meta(completion: int, done: bool) -> dict:
            spec = {}
            if speculative and done:
                # SGLang's meta_info: spec_verify_ct, and spec_accept_length =
                # completion_tokens / spec_verify_ct (tokenizer_manager).
                steps = self.server.state.verify_steps(completion)
                spec = {"spec_verify_ct": steps, "spec_accept_length": completion / steps}
            return {
                **spec,
                "id": rid,
                "finish_reason": {"type": "length", "length": completion} if done else None,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "cached_tokens": 0,
                "e2e_latency": time.monotonic() - started,
            }

        if body.get("stream"):
            self._start_stream()
            text, output_ids = "", []
            try:
                for index, token_id, piece in self._tokens(n_tokens, prompt_tokens, prompt):
                    text += piece
                    output_ids.append(token_id)
                    done = index == n_tokens - 1
                    event = {
                        "text": text,
                        "output_ids": output_ids,
                        "meta_info": meta(index + 1, done),
                        "index": 0,
                    }
                    self._event(json.dumps(event))
                self._event("[DONE]")
                self._end_stream()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        tokens = list(self._tokens(n_tokens, prompt_tokens, prompt))
        text = "".join(t for _, _, t in tokens)
        output_ids = [token_id for _, token_id, _ in tokens]
        self._json(
            200, {"text": text, "output_ids": output_ids, "meta_info": meta(n_tokens, True), "index": 0}
        )


def _terminate(signum, frame) -> None:
    raise SystemExit(0)


# The nvidia-smi double's live compute processes (sandbox/host/nvidia-smi).
PROCESSES_DIR = os.environ.get("NVIDIA_SMI_DOUBLE_PROCESSES") or "/run/nvidia-smi-double/processes"

# The kernel log double's file (sandbox/host/kernel-log): what the driver logged since boot.
KERNEL_LOG_FILE = os.environ.get("KERNEL_LOG_DOUBLE_FILE") or "/run/kernel-log-double/kmsg"


def _log_kernel_lines(lines: list[str]) -> None:
    """Append the driver's lines the scenario has this stack cause to the kernel log double."""
    if not lines or not os.path.isdir(os.path.dirname(KERNEL_LOG_FILE)):  # not a sandbox host
        return
    try:
        with open(KERNEL_LOG_FILE, "a", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in lines)
    except OSError:
        pass


# A scheduler child: holds the GPU memory while its parent lives, then LEFTOVER s more.
_SCHEDULER = """
import os, sys, time
parent, leftover, directory = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
while os.path.exists(f"/proc/{parent}"):
    time.sleep(0.2)
time.sleep(leftover)
try:
    os.unlink(os.path.join(directory, f"{os.getpid()}.json"))
except OSError:
    pass
"""


def _register_gpu_memory(pid: int, gpus: int, memory_mib: int) -> None:
    """Write a process's compute-process entries (one per GPU) for the nvidia-smi double."""
    entries = [
        {"gpu": gpu, "pid": pid, "type": "C", "name": sys.executable, "used_memory_mib": memory_mib}
        for gpu in range(gpus)
    ]
    if not os.path.isdir(PROCESSES_DIR):  # not a sandbox host (roles/sandbox_host creates it)
        return
    try:
        with open(os.path.join(PROCESSES_DIR, f"{pid}.json"), "w", encoding="utf-8") as handle:
            json.dump(entries, handle)
    except OSError:
        pass


def _hold_gpu_memory(scenario: dict, tp_size: int) -> None:
    """Register the loaded model's GPU memory: the server's own, or a scheduler child's
    that outlives the server ``leftover_s`` seconds (scenario)."""
    import subprocess

    memory = int(scenario.get("gpu_memory_mib", 81234))
    gpus = max(1, min(int(tp_size), 8))
    leftover = float(scenario.get("leftover_s", 0))
    if leftover <= 0:
        _register_gpu_memory(os.getpid(), gpus, memory)
        return
    child = subprocess.Popen(
        [sys.executable, "-c", _SCHEDULER, str(os.getpid()), str(leftover), PROCESSES_DIR],
        start_new_session=True,
    )
    _register_gpu_memory(child.pid, gpus, memory)
    log(f"Scheduler process {child.pid} holds {memory} MiB on each of {gpus} GPUs")


def write_jit_caches(tag: str) -> list[str]:
    """Write a stand-in JIT product where Triton and FlashInfer write theirs.

    Only with ``SGLANG_SIM_JIT_CACHES=1`` (the sandbox unit). The directories
    follow the libraries' own rules: ``$TRITON_CACHE_DIR``, else
    ``$TRITON_HOME`` or HOME, then ``.triton/cache`` (triton/runtime/cache.py);
    ``$FLASHINFER_WORKSPACE_BASE`` or HOME, then ``.cache/flashinfer``
    (flashinfer/jit/env.py). A directory the server's user cannot write raises
    Python's own PermissionError ("[Errno 13] Permission denied"), which fails
    the start as it does the real server's.
    """
    if os.environ.get("SGLANG_SIM_JIT_CACHES") != "1":
        return []
    home = os.path.expanduser("~")
    triton = os.environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.environ.get("TRITON_HOME") or home, ".triton", "cache"
    )
    flashinfer = os.path.join(os.environ.get("FLASHINFER_WORKSPACE_BASE") or home, ".cache", "flashinfer")
    written = []
    for directory in (triton, flashinfer):
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"sandbox-{tag}-kernel.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"stack": tag, "pid": os.getpid(), "written_at": time.time()}, handle)
        written.append(path)
    return written


def _driver_version() -> str | None:
    """The driver version nvidia-smi reports (the double's, from the driver's two halves)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def launch_server(server_args: ServerArgs) -> None:
    """Load the stack, simulate loading the model, serve until SIGTERM/SIGINT."""
    log(f"server_args={server_args!r}")
    stack = check_stack()
    scenario, source = simulation.load_scenario()
    tag = simulation.cuda_tag(stack["torch"]["cuda"])
    profile = simulation.profile_for(server_args.speculative_algorithm)
    model = simulation.DecodeModel.from_scenario(scenario, tag, profile)
    if scenario.get("driver_rate_factor"):
        driver = _driver_version()
        factor = simulation.driver_rate_factor(scenario, driver)
        model = dataclasses.replace(model, rate_tok_s=model.rate_tok_s * factor)
        log(f"Simulated driver {driver}: decode rate x{factor}")
    log(
        f"Load weight begin. tp_size={server_args.tp_size}, torch {stack['torch']['version']}, "
        f"sgl-kernel {stack['sgl_kernel']}, flashinfer {stack['flashinfer_python']}"
    )
    time.sleep(float(scenario.get("startup_s", 0.0)))
    if tag == "cu128" and server_args.enable_flashinfer_allreduce_fusion:
        # FlashInfer's TRT-LLM allreduce fusion kernels of the CUDA 12.8 stack are built for
        # SM90/SM100 only; on sm_120 CUDA graph capture fails with this text
        # (sgl-project/sglang#15650). The CUDA 13 stack's FlashInfer runs them.
        raise Exception(
            "Capture cuda graph failed: No supported CUDA architectures found for major versions [9, 10]."
        )
    # --enable-torch-symm-mem is accepted on both stacks: no public record was found of how it
    # fails on sm_120 with CUDA 12.8, so there is no real text to refuse it with. (SGLang's
    # TorchSymmMemCommunicator checks the compute capability against its own table of sizes,
    # sgl-project/sglang#10571 and #24548; PyTorch's symmetric memory needs CUDA 12.3+,
    # pytorch/pytorch#151203: neither singles out 12.8.)
    # Each rank logs what it turned off with SGLang's format, "[%(asctime)s TP<rank>] %(message)s"
    # (configure_logger's prefix names the rank).
    for line in simulation.disabled_paths(scenario, tag, server_args):
        for rank in range(max(1, server_args.tp_size)):
            log(line, prefix=f" TP{rank}")
    log(f"Load weight end. Simulated decode: {tag}/{profile} at {model.rate_tok_s} tok/s ({source})")
    _log_kernel_lines(simulation.kernel_log_lines(scenario, tag))
    _hold_gpu_memory(scenario, server_args.tp_size)
    for path in write_jit_caches(tag):
        log(f"JIT cache written: {path}")

    httpd = SimHTTPServer((server_args.host, server_args.port), Handler)
    httpd.state = SimState(server_args, stack, scenario, source, tag, profile, model, int(time.time()))
    httpd.state.token_mode = simulation.token_mode(scenario, tag)
    httpd.state.zeros_from_batch = simulation.zeros_from_batch(scenario, tag)
    httpd.state.accept_length = simulation.accept_length(scenario, tag, profile)
    httpd.state.crash_on_request = simulation.per_tag_count(scenario, "crash_on_request", tag)
    httpd.state.stall_after_completions = simulation.per_tag_count(scenario, "stall_after_completions", tag)
    if httpd.state.crash_on_request:
        signal.signal(signal.SIGFPE, signal.SIG_DFL)
    window = simulation.warmup_window_s(scenario, tag)
    httpd.state.ready_at = time.monotonic() + window
    signal.signal(signal.SIGTERM, _terminate)
    host, port = httpd.server_address[:2]
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print("INFO:     Waiting for application startup.", flush=True)
    print("INFO:     Application startup complete.", flush=True)
    print(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)", flush=True)
    log("The server is fired up and ready to roll!")
    if window:
        log(f"Simulated warm-up: generation blocks for {window:.1f} s while /health answers 200")
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        print("INFO:     Shutting down", file=sys.stdout, flush=True)
