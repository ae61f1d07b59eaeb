"""Server arguments of ``python -m sglang.launch_server`` (the subset the sandbox uses).

Flag names and defaults follow SGLang's ``ServerArgs``: ``--model-path``, ``--host``
(127.0.0.1), ``--port`` (30000), ``--tp-size``/``--tp``, ``--speculative-algorithm`` (EAGLE,
EAGLE3, ...), ``--speculative-draft-model-path``, ``--speculative-num-steps``,
``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``, ``--served-model-name``,
and the switches ``--disable-cuda-graph``, ``--disable-custom-all-reduce``,
``--enable-torch-symm-mem``, ``--enable-flashinfer-allreduce-fusion``, and ``--api-key``
(ServerArgs fields of python/sglang/srt/server_args.py; a field's flag is its name with ``-``
for ``_``).
Other arguments are accepted and ignored (with a log line), so a real unit's command line
runs unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys


@dataclasses.dataclass
class ServerArgs:
    """Parsed arguments; ``dataclasses.asdict`` of it is part of ``/get_server_info``."""

    model_path: str
    tokenizer_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    dp_size: int = 1
    served_model_name: str | None = None
    context_length: int | None = None
    mem_fraction_static: float | None = None
    trust_remote_code: bool = False
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    log_level: str = "info"
    api_key: str | None = None
    disable_cuda_graph: bool = False
    disable_custom_all_reduce: bool = False
    enable_torch_symm_mem: bool = False
    enable_flashinfer_allreduce_fusion: bool = False
    ignored_args: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang.launch_server")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", dest="tokenizer_path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    p.add_argument("--served-model-name", dest="served_model_name")
    p.add_argument("--context-length", dest="context_length", type=int)
    p.add_argument("--mem-fraction-static", dest="mem_fraction_static", type=float)
    p.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true")
    p.add_argument("--speculative-algorithm", dest="speculative_algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--log-level", default="info")
    p.add_argument("--api-key", dest="api_key")
    for switch in (
        "--disable-cuda-graph",
        "--disable-custom-all-reduce",
        "--enable-torch-symm-mem",
        "--enable-flashinfer-allreduce-fusion",
    ):
        p.add_argument(switch, action="store_true")
    return p


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse ``argv``; unknown options are kept in ``ignored_args``."""
    ns, unknown = _parser().parse_known_args(argv)
    args = ServerArgs(**vars(ns))
    args.ignored_args = list(unknown)
    if unknown:
        print(f"sandbox sglang: ignoring arguments {unknown}", file=sys.stderr, flush=True)
    return args
