"""The simulated engine: which decode rate applies and when each token leaves the server.

Scenario file: ``$SGLANG_SIM_SCENARIO``, default ``/etc/sglang-sim/scenario.json``; the
built-in ``DEFAULT_SCENARIO`` when the file does not exist. Schema::

    {
      "rates_tok_s": {"cu128": {"plain": 89.5, "eagle3": 54.1},
                      "cu130": {"plain": 92.6, "eagle3": 96.1}},
      "noise_pct": 1.0,          # per-request gaussian multiplicative noise (sigma, %)
      "ttft_ms": 150,            # time to first token
      "startup_s": 1.0,          # simulated weight loading before the port opens
      "spec_accept_length": {"eagle3": 2.687},  # accept length of speculative profiles, or
                                                # per CUDA tag {"cu130": {"eagle3": 1.0}};
                                                # {} for none (no speculative counters)
      "warmup_window_s": {"cu130": 20},       # optional: after the port opens, /health is 200
                                              # but generation blocks this long (per CUDA tag)
      "tokens": {"cu130": {"mode": "drift", "after": 24}},  # optional, per CUDA tag
      "prefill_tok_s": 4000,     # optional: TTFT grows by uncached prompt tokens / this
      "gpu_memory_mib": 81234,   # optional: GPU memory each of the server's --tp GPUs holds
                                 # once loaded (nvidia-smi's compute processes, while it runs)
      "leftover_s": 0,           # optional: a scheduler child process that outlives the
                                 # server this long, holding its GPU memory (with a unit's
                                 # KillMode=process systemd leaves it: sgl-project/sglang#23627)
      "disabled_paths": {"cu130": ["torch_symm_mem"]},  # optional, per CUDA tag: paths the
                                 # server turns off at start-up when asked for, with SGLang's
                                 # own log line per rank (DISABLED_PATHS)
      "kernel_log": {"cu130": ["xid79"]},  # optional, per CUDA tag: the driver's lines each
                                 # start of the server adds to the kernel log double's file
                                 # (KERNEL_LOG_LINES; sandbox/host/kernel-log prints them)
      "crash_on_request": {"cu130": 1},  # optional, per CUDA tag: the n-th generation request
                                 # since the start (1: the first real one) kills the server
                                 # process with SIGFPE (sgl-project/sglang PR #40485: symmetric
                                 # memory on PCIe GPUs without P2P "ends in SIGFPE (exit code
                                 # -8) ... the first real inference request kills the scheduler")
      "driver_rate_factor": {"580": 0.9},  # optional, per driver branch: the decode rate on a
                                 # driver of that branch times this factor (a driver change
                                 # that slows the same stack; the branch is read from
                                 # nvidia-smi at start-up)
      "stall_after_completions": {"cu130": 30}  # optional, per CUDA tag: once this many
                                 # generation requests finished, every later one hangs (the
                                 # stream's headers, then nothing) while /health stays 200 and
                                 # /health_generate answers 503 after its timeout
                                 # (sgl-project/sglang#22779: "appears healthy (returns HTTP 200
                                 # on /health) but silently stops processing requests")
    }

With ``prefill_tok_s`` the TTFT of a request is ``ttft_ms`` plus its prompt tokens that are
not in the prefix cache divided by ``prefill_tok_s``: a long prompt takes longer to its
first token, and a prompt that repeats an earlier one's prefix is faster (the radix cache
keeps every prompt until ``/flush_cache``).

Greedy tokens are deterministic: token ``i`` of a completion is a function of the prompt and
the tokens before it (a hash chain, ``greedy_token_ids``), the same on every stack unless
``tokens`` says otherwise for the stack's CUDA tag: ``same`` (default), ``garbage`` (other
tokens from the first one on: a broken kernel) or ``drift`` (the same first ``after`` tokens,
then another continuation: the small numeric divergence of two correct stacks, which changes
a near-tie's argmax and everything after it). With ``"zeros_from_batch": N`` in the tag's
``tokens`` a request that starts while at least ``N`` requests run (itself included) gets
token id 0 for every token: the argmax of all-zero logits, what a GEMM that "Returns **all
zeros** (silent failure)" for some batch sizes gives (flashinfer-ai/flashinfer#2577, NVFP4
``mm_fp4``, cutlass backend, 8x RTX PRO 6000 Blackwell Server Edition); alone it is right.

The rate key is the CUDA tag of the torch really imported (``torch.version.cuda`` "13.0" ->
``cu130``) and the profile ``eagle3`` for ``--speculative-algorithm EAGLE3`` or ``EAGLE``,
``plain`` without speculative decoding (another algorithm: its lower-case name).

A rate is the output token throughput one stream sees, what ``bench_serving
--max-concurrency 1`` reports: a request for ``n`` tokens lasts ``n / rate`` seconds (at least
the TTFT); its first token leaves after ``ttft_ms`` and the others are evenly spaced over the
rest. Each request draws its own rate ``rate * N(1, noise_pct/100)``.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

SCENARIO_ENV = "SGLANG_SIM_SCENARIO"
DEFAULT_SCENARIO_PATH = "/etc/sglang-sim/scenario.json"
DEFAULT_SCENARIO: dict = {
    "rates_tok_s": {
        "cu128": {"plain": 89.5, "eagle3": 54.1},
        "cu130": {"plain": 92.6, "eagle3": 96.1},
    },
    "noise_pct": 1.0,
    "ttft_ms": 150,
    "startup_s": 1.0,
    # As sandbox/mirror/scenarios/default.json (the source is named there): Kimi-K2.5 with
    # the EAGLE-3 draft lightseekorg/kimi-k2.5-eagle3, topk=1, num_steps=3,
    # num_draft_tokens=4, MTBench (https://huggingface.co/lightseekorg/kimi-k2.5-eagle3).
    "spec_accept_length": {"eagle3": 2.687},
}

_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which "
    "model token speed decode kernel stream batch graph cache layer"
).split()


def load_scenario() -> tuple[dict, str]:
    """The scenario in force and where it came from (a path, or ``built-in``)."""
    path = os.environ.get(SCENARIO_ENV, DEFAULT_SCENARIO_PATH)
    if Path(path).is_file():
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        merged = {**DEFAULT_SCENARIO, **data}
        return merged, path
    if SCENARIO_ENV in os.environ:
        raise FileNotFoundError(f"{SCENARIO_ENV}={path}: no such scenario file")
    return dict(DEFAULT_SCENARIO), "built-in"


def driver_rate_factor(scenario: dict, driver_version: str | None) -> float:
    """The scenario's ``driver_rate_factor`` for the branch of ``driver_version`` (``"580.142"``
    -> ``"580"``), 1.0 when it names none or the version is unknown."""
    factors = scenario.get("driver_rate_factor") or {}
    if not factors or not driver_version:
        return 1.0
    return float(factors.get(driver_version.strip().split(".")[0], 1.0))


def cuda_tag(torch_cuda: str | None) -> str:
    """``"13.0"`` -> ``"cu130"``; ``None`` (a CPU build) -> ``"cpu"``."""
    if not torch_cuda:
        return "cpu"
    major, minor = torch_cuda.split(".")[:2]
    return f"cu{major}{minor}"


def profile_for(speculative_algorithm: str | None) -> str:
    """``plain``, ``eagle3`` (for EAGLE3 and EAGLE), or the algorithm's lower-case name."""
    if not speculative_algorithm:
        return "plain"
    name = speculative_algorithm.upper()
    return "eagle3" if name in ("EAGLE3", "EAGLE") else name.lower()


@dataclass(frozen=True)
class DecodeModel:
    """Timing of one server: base rate (tok/s), TTFT (s), noise (fraction)."""

    rate_tok_s: float
    ttft_s: float
    noise: float
    rng: random.Random

    @classmethod
    def from_scenario(cls, scenario: dict, tag: str, profile: str) -> DecodeModel:
        rates = scenario.get("rates_tok_s", {})
        try:
            rate = float(rates[tag][profile])
        except KeyError:
            raise ValueError(
                f"sandbox scenario has no rate for {tag}/{profile} (rates_tok_s: {rates})"
            ) from None
        seed = os.environ.get("SGLANG_SIM_SEED")
        rng = random.Random(int(seed)) if seed is not None else random.Random()
        return cls(
            rate,
            float(scenario.get("ttft_ms", 150)) / 1000.0,
            float(scenario.get("noise_pct", 0.0)) / 100.0,
            rng,
        )

    def request_rate(self) -> float:
        """This request's rate: the base rate times a gaussian factor (at least 5%)."""
        factor = self.rng.gauss(1.0, self.noise) if self.noise > 0 else 1.0
        return self.rate_tok_s * max(factor, 0.05)

    def schedule(self, n_tokens: int, rate: float, prefill_s: float = 0.0) -> list[float]:
        """Offsets (s from the request's arrival) at which each of ``n_tokens`` is emitted;
        ``prefill_s`` (the uncached prompt's prefill) is added to the TTFT."""
        if n_tokens <= 0:
            return []
        ttft = self.ttft_s + prefill_s
        duration = max(n_tokens / rate + prefill_s, ttft)
        if n_tokens == 1:
            return [duration]
        step = (duration - ttft) / (n_tokens - 1)
        return [ttft + i * step for i in range(n_tokens)]


class PrefixCache:
    """The prompts seen since the last flush, as word lists (the stand-in tokenizer's tokens)."""

    def __init__(self) -> None:
        self.prompts: list[list[str]] = []

    def match(self, words: list[str]) -> int:
        """Tokens of ``words`` already cached (longest common prefix); then caches ``words``."""
        best = 0
        for cached in self.prompts:
            n = 0
            for a, b in zip(cached, words, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.prompts.append(words)
        return best

    def flush(self) -> None:
        self.prompts.clear()


VOCAB_SIZE = 32000


def per_tag_count(scenario: dict, key: str, tag: str) -> int:
    """The scenario's ``key`` for this CUDA tag as a count, 0 when it has none (module doc:
    ``crash_on_request``, ``stall_after_completions``)."""
    value = (scenario.get(key) or {}).get(tag) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"sandbox scenario: {key}.{tag} must be a count >= 0 (got {value!r})")
    return value


def warmup_window_s(scenario: dict, tag: str) -> float:
    """Seconds after start during which generation blocks (0 when the scenario has none)."""
    window = scenario.get("warmup_window_s", 0)
    if isinstance(window, dict):
        window = window.get(tag, 0)
    return float(window or 0)


# The paths a scenario's ``disabled_paths`` can turn off: when the server is asked for it
# (the ServerArgs field and the value that asks) and the line each rank then logs, SGLang's
# own text: custom allreduce on more than two PCIe-only GPUs
# (python/sglang/srt/distributed/device_communicators/custom_all_reduce.py,
# sgl-project/sglang@004e6561cb8ae26d62166c15782955f99f058274, a default path: asked unless
# --disable-custom-all-reduce), torch symmetric memory without multicast
# (python/sglang/srt/distributed/device_communicators/torch_symm_mem.py,
# sgl-project/sglang@5a7255c6fb5709a643e9a0bf22dbba12d4c424a8). The argument stays as given
# in /get_server_info: the workers decide after the arguments were parsed.
DISABLED_PATHS: dict[str, tuple[str, bool, str]] = {
    "custom_all_reduce": (
        "disable_custom_all_reduce",
        False,
        "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
        "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    ),
    "torch_symm_mem": (
        "enable_torch_symm_mem",
        True,
        "TorchSymmMemCommunicator: torch symmetric memory multicast operations are not supported.",
    ),
}


def disabled_paths(scenario: dict, tag: str, server_args) -> list[str]:
    """SGLang's lines for the paths the scenario turns off on this stack and the server
    was asked for (``DISABLED_PATHS``), in the scenario's order."""
    names = (scenario.get("disabled_paths") or {}).get(tag) or []
    lines = []
    for name in names:
        if name not in DISABLED_PATHS:
            raise ValueError(
                f"sandbox scenario: disabled_paths.{tag} names {name!r}, not one of {sorted(DISABLED_PATHS)}"
            )
        field, asks, line = DISABLED_PATHS[name]
        if getattr(server_args, field) == asks:
            lines.append(line)
    return lines


def token_mode(scenario: dict, tag: str) -> tuple[str, int]:
    """``(mode, after)`` of the stack's greedy tokens: same, garbage or drift (module doc)."""
    spec = (scenario.get("tokens") or {}).get(tag) or {}
    mode = spec.get("mode", "same")
    if mode not in ("same", "garbage", "drift"):
        raise ValueError(f"sandbox scenario: tokens.{tag}.mode must be same, garbage or drift (got {mode!r})")
    return mode, int(spec.get("after", 0))


def zeros_from_batch(scenario: dict, tag: str) -> int:
    """The running batch size from which the stack's answers are all token 0 (module doc), 0
    when the scenario gives none."""
    value = ((scenario.get("tokens") or {}).get(tag) or {}).get("zeros_from_batch", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"sandbox scenario: tokens.{tag}.zeros_from_batch must be a count >= 0 (got {value!r})"
        )
    return value


def greedy_token_ids(prompt: str, n_tokens: int, mode: str = "same", after: int = 0) -> list[int]:
    """The ``n_tokens`` token ids a greedy (temperature 0) completion of ``prompt`` yields."""
    import hashlib

    state = hashlib.sha256(prompt.encode()).digest()
    ids = []
    for index in range(n_tokens):
        salt = b""
        if mode == "garbage" or (mode == "drift" and index >= after):
            salt = b"other stack"
        state = hashlib.sha256(state + salt).digest()
        ids.append(int.from_bytes(state[:4], "big") % VOCAB_SIZE)
    return ids


def accept_length(scenario: dict, tag: str, profile: str) -> float | None:
    """The accept length (tokens per verify step) of a speculative profile, or None."""
    table = scenario.get("spec_accept_length") or {}
    if isinstance(table.get(tag), dict):
        table = table[tag]
    value = table.get(profile)
    return None if value is None else float(value)


def token_text(token_id: int) -> str:
    """The text of one generated token: a leading space and a word."""
    return " " + _WORDS[token_id % len(_WORDS)]


def count_tokens(text: str) -> int:
    """The stand-in tokenizer: one token per whitespace-separated word."""
    return len(text.split())


# The NVIDIA driver's kernel log lines a scenario's ``kernel_log`` can name, each a real line
# quoted byte for byte from the public record named (tests/test_xid.py holds the same lines
# with their sources; tests/test_kernel_log.py compares them).
KERNEL_LOG_LINES: dict[str, tuple[str, str]] = {
    # RTX 5080 (Blackwell), open module 595.71.05, journalctl -k without a hostname field.
    "xid79": (
        "github.com/NVIDIA/open-gpu-kernel-modules/issues/1151",
        "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
    ),
    "xid79_next": (
        "github.com/NVIDIA/open-gpu-kernel-modules/issues/1151",
        "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
    ),
    # Driver 590.48.01: the channels of a stopped process torn down.
    "xid45": (
        "github.com/NVIDIA/open-gpu-kernel-modules/issues/1150",
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, "
        "Ch 00000001 caused by previous Xid 149",
    ),
}


def kernel_log_lines(scenario: dict, tag: str) -> list[str]:
    """The driver's lines a start of the server on this stack logs (``KERNEL_LOG_LINES``),
    in the scenario's order."""
    names = (scenario.get("kernel_log") or {}).get(tag) or []
    lines = []
    for name in names:
        if name not in KERNEL_LOG_LINES:
            raise ValueError(
                f"sandbox scenario: kernel_log.{tag} names {name!r}, not one of {sorted(KERNEL_LOG_LINES)}"
            )
        lines.append(KERNEL_LOG_LINES[name][1])
    return lines
