#!/usr/bin/python
"""Module cuda13_bench: measure the SGLang server the host runs (trials, probe, load, soak, watch)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: cuda13_bench
short_description: Measure the SGLang server on the host - decode trials, the correctness probe, load, soak, watch
description:
  - Runs on the host against the server's local URL, so nothing but the host's own loopback
    carries the load. One mode per call, as O(mode) says.
  - C(trials) - streamed completions with C(ignore_eos), each decoding O(max_tokens) tokens;
    per trial TTFT (ms), ITL (ms), decode throughput (tok/s, the first token excluded) and
    output throughput (tok/s). With O(append) the trials of one O(series) accumulate in a file
    on the host, so a retry adds one trial to those before (O(min_trials) the first time).
  - C(probe) - the correctness probe - SGLang's native C(POST /generate), greedy, for the first
    O(probe) prompts; the generated token ids, text and speculative verify counts.
  - C(load) - the gated load metrics (TTFT of a long prompt, throughput at a concurrency) and,
    with O(soak_requests), the soak - requests at O(soak_concurrency) at once that must each end
    within O(soak_deadline_s).
  - C(watch) - a server in service watched for O(watch_seconds) - a greedy C(/generate) every
    O(watch_interval_s) and the unit's main process.
  - The logic is C(src/cuda13_upgrade/hostscripts/completion_bench.py) (standard library);
    the decisions on what it measures are the control node's (cuda13_upgrade.throughput,
    .probe, .soak, .batch_soak).
options:
  mode: {description: What to measure., type: str, choices: [trials, probe, load, watch], required: true}
  url: {description: The server's local base URL., type: str, default: "http://127.0.0.1:30000"}
  workload:
    description: "The prompt set, C({seed: int, prompts: [str]}) (C(roles/verify_throughput/files/prompts.json))."
    type: dict
  max_tokens: {description: Tokens per trial or load request., type: int, default: 256}
  prompt_len: {description: Words per trial prompt., type: int, default: 128}
  trials: {description: Trials to run this time., type: int, default: 5}
  min_trials: {description: With O(append), run enough trials to reach this many., type: int, default: 0}
  warmup: {description: Unmeasured requests first (not when O(append) holds trials)., type: int, default: 1}
  append: {description: The file on the host that accumulates the trials., type: path}
  series: {description: The trials' series (the run id); a file of another series starts afresh., type: str}
  method: {description: C(builtin) or SGLang's C(bench_serving) run by O(python)., type: str, choices: [builtin, bench_serving], default: builtin}
  python: {description: The venv's Python for C(bench_serving)., type: str}
  prompts: {description: Requests per C(bench_serving) trial., type: int, default: 4}
  flush_cache: {description: C(POST /flush_cache) before each trial., type: bool, default: false}
  ttft_prompt_len: {description: Words of the long prompt of the load metrics (0 - off)., type: int, default: 0}
  ttft_requests: {description: Requests of the TTFT metric., type: int, default: 3}
  concurrency: {description: Streams at once of the load metric (0 - off)., type: int, default: 0}
  soak_requests: {description: Soak requests after the load metrics (0 - off)., type: int, default: 0}
  soak_concurrency: {description: Soak requests at once., type: int, default: 8}
  soak_deadline_s: {description: Seconds each soak request may take., type: float, default: 60}
  unit: {description: The server's systemd unit, read after a failed soak or watch., type: str}
  probe: {description: Prompts of the correctness probe., type: int, default: 0}
  max_new_tokens: {description: Tokens per probe or watch answer., type: int, default: 32}
  probe_batch_sizes:
    description:
      - After the probe, its prompts sent together, one round per size - that many requests at once,
        request i with prompt i modulo O(probe) (answers under C(batched)).
    type: list
    elements: int
    default: []
  watch_seconds: {description: How long to watch., type: float, default: 0}
  watch_interval_s: {description: Seconds between watch checks., type: float, default: 15}
  watch_deadline_s: {description: Seconds each watch check may take., type: float, default: 60}
  timeout: {description: Seconds one request may take., type: float, default: 300}
  auth_unit:
    description:
      - The server's systemd unit whose running server's C(--api-key) every request sends as
        C(Authorization - Bearer <key>) (SGLang answers 401 to any other request but C(/health*) and
        C(/metrics)); the key is read from the command line of the unit's processes on the host, and
        is in nothing the module returns. Unset - no header.
    type: str
attributes:
  check_mode: {support: none, description: It sends load to the server; the steps do not call it in check mode.}
author: cuda13-upgrade
"""

EXAMPLES = r"""
- name: Run the correctness probe
  cuda13_bench:
    mode: probe
    probe: 8
    max_new_tokens: 32
    workload: "{{ lookup('ansible.builtin.file', 'prompts.json') | from_json }}"
"""

RETURN = r"""
bench:
  description: >-
    trials - {url, method, trials: [{ttft_ms, itl_ms, decode_tok_s, output_tok_s, ...}], series};
    probe - {url, max_new_tokens, outputs: [{prompt, output_ids, text, completion_tokens,
    spec_verify_ct}], batched?: [{batch_size, outputs: [{prompt_index, prompt, output_ids, ...}]}]}; load - {url, load: {...}, soak?: {...}}; watch - {url, watch: {...}}.
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda13_hostscripts.completion_bench import BENCH_SPEC, bench_module


def main() -> None:
    module = AnsibleModule(argument_spec=BENCH_SPEC, supports_check_mode=False)
    result = bench_module(module.params, module.check_mode)
    if result.get("failed"):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
