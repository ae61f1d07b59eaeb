#!/usr/bin/env python3
"""Error rates of the throughput gate's decision rule, by simulation.

For each noise level, many simulated upgrades: the old stack is measured with
``DEFAULT_MIN_TRIALS`` trials, the new one likewise and then one more trial at
a time while the rule asks for more (up to the cap), exactly as the
``verify_throughput`` role drives ``cuda13_upgrade.throughput.decide``. Each
trial is ``rate * N(1, noise)``. Prints, per noise level:

* false rollbacks: how often a new stack that is exactly as fast is rolled back;
* missed regressions: how often a new stack 5 % slower is kept;
* the mean number of new-stack trials the rule used.

Then the correctness probe (``cuda13_upgrade.probe.compare_outputs`` with its defaults, 8
prompts of 32 greedy tokens), on token sequences where a correct new stack diverges from
the old one at a near-tie: at each token the argmax flips with probability ``p`` (numeric
drift; 1 % and 3 % per token), so each prompt's first divergence is geometric; a broken
stack (garbage) differs at token 0, or with probability 0.2 at token 1 or 2 (a common first
token such as a space or "The"). Prints the garbage caught, the false rollbacks of the
probe alone and of the whole gate (throughput at 2 % noise and the probe), and the time
the probe adds per profile and phase, as a ratio to the throughput trials, from the
simulated server's timing (TTFT 150 ms, 89.5 tok/s; 7 trials of 256 tokens, 1 warm-up).

Then speculative health (``cuda13_upgrade.probe.compare_accept_length``): each probe
request's accept length is ``L * N(1, 0.10)`` tokens per verify step on both stacks (a
correct new stack), or exactly 1.0 (acceptance collapsed), ``L`` the default scenario's
EAGLE-3 accept length (2.687, sourced in ``sandbox/mirror/scenarios/default.json``); prints
the collapses caught and the false rollbacks of correct stacks per allowed drop.

Last, measured (``--no-measure`` skips it): the time per host that the correctness probe,
its accept-length reads and the optional load metrics add to today's gate, measured side by
side in this run. The simulated SGLang server (``sandbox/sglang-src``, from a package mirror
built into a temporary directory, or ``--mirror DIR``) runs the default scenario at its real
rates, CUDA 12.8 stack for the baseline phase and CUDA 13 for the candidate phase, each
profile of ``inventory/blackwell`` (plain, and EAGLE-3 with its new-stack-only arguments on
the new stack). Per profile and phase the host scripts run as the ``verify_throughput``
role runs them, with the role's defaults: ``completion_bench.py`` for the trials (the
minimum, then one more per call while ``cuda13_upgrade.throughput.decide`` is not final, up to the
cap), ``completion_bench.py --probe`` (its answers carry the accept-length counters), and
``completion_bench.py --load-metrics`` (a long-prompt TTFT and a concurrency, the gate
molecule scenario's settings by default). The control node's comparisons (probe, accept
length, load) are timed too. Prints each one's seconds and their ratio to the trials, and
per host (both phases, every profile) the added seconds and the ratio to the trials, beside
the modelled figure above. Not counted: restarts and readiness waits (the same with or
without the probe; minutes on a real host, which makes the real ratio smaller) and
Ansible's own cost per extra module run (one ``cuda13_bench`` per profile and phase).

Usage: benchmarks/gate_error_rates.py [--runs N] [--seed S] [--no-measure] [--mirror DIR]
       [--load-prompt-len WORDS] [--load-concurrency STREAMS]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuda13_upgrade import probe, throughput
from cuda13_upgrade.load import compare_load

PROBE_PROMPTS, PROBE_TOKENS = 8, 32
REPO = Path(__file__).resolve().parents[1]
DEFAULT_SCENARIO = REPO / "sandbox" / "mirror" / "scenarios" / "default.json"
HOSTSCRIPTS = REPO / "src" / "cuda13_upgrade" / "hostscripts"
PROMPT_FILE = REPO / "roles" / "verify_throughput" / "files" / "prompts.json"
ROLE_DEFAULTS = REPO / "roles" / "verify_throughput" / "defaults" / "main.yml"
FLEET_SERVING = REPO / "inventory" / "blackwell" / "group_vars" / "blackwell" / "serving.yml"


def default_accept_length() -> float:
    """The default scenario's EAGLE-3 accept length (tokens per verify step; its source is
    named in the scenario's description)."""
    scenario = json.loads(DEFAULT_SCENARIO.read_text(encoding="utf-8"))
    return float(scenario["spec_accept_length"]["eagle3"])


def simulate(rng: random.Random, true_change: float, noise: float) -> tuple[str, int]:
    n = throughput.DEFAULT_MIN_TRIALS
    base = [89.5 * rng.gauss(1.0, noise) for _ in range(n)]
    new = [89.5 * (1.0 + true_change) * rng.gauss(1.0, noise) for _ in range(n)]
    while True:
        decision = throughput.decide(base, new)
        if decision.final:
            return decision.verdict, len(new)
        new.append(89.5 * (1.0 + true_change) * rng.gauss(1.0, noise))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-measure", dest="measure", action="store_false", help="skip the measured time of the probe"
    )
    parser.add_argument(
        "--mirror", type=Path, default=None, help="a built mirror (make mirror: .sandbox/mirror)"
    )
    parser.add_argument("--load-prompt-len", type=int, default=512, help="long-prompt TTFT, words (0: off)")
    parser.add_argument("--load-concurrency", type=int, default=4, help="streams at once (0: off)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(
        f"decision rule: tolerance {throughput.DEFAULT_TOLERANCE_PCT} %, z {throughput.DEFAULT_Z}, "
        f"trials {throughput.DEFAULT_MIN_TRIALS}..{throughput.DEFAULT_MAX_TRIALS}, {args.runs} runs each"
    )
    print(f"{'noise':>6}  {'false rollbacks':>16}  {'missed 5% regr.':>16}  {'trials (same/5%)':>17}")
    for noise in (0.01, 0.02, 0.03):
        same = [simulate(rng, 0.0, noise) for _ in range(args.runs)]
        slow = [simulate(rng, -0.05, noise) for _ in range(args.runs)]
        false_rate = sum(v == "regressed" for v, _ in same) / args.runs
        missed = sum(v == "keep" for v, _ in slow) / args.runs
        trials = (statistics.fmean(n for _, n in same), statistics.fmean(n for _, n in slow))
        print(
            f"{noise * 100:>5.0f}%  {false_rate * 100:>15.2f}%  {missed * 100:>15.2f}%  "
            f"{trials[0]:>8.1f}/{trials[1]:.1f}"
        )
    probe_report(rng, args.runs)
    accept_report(rng, args.runs)
    if args.measure:
        measured_report(args)


def probe_outputs(rng: random.Random, flip_per_token: float | None) -> tuple[list[dict], list[dict]]:
    """Old and new token sequences of the probe's prompts; ``None``: a garbage new stack."""
    old, new = [], []
    for index in range(PROBE_PROMPTS):
        ids = [rng.randrange(32000) for _ in range(PROBE_TOKENS)]
        if flip_per_token is None:
            diverge = 0 if rng.random() >= 0.2 else rng.choice((1, 2))
        else:
            diverge = 0
            while diverge < PROBE_TOKENS and rng.random() >= flip_per_token:
                diverge += 1
        other = ids[:diverge] + [(t + 1 + rng.randrange(31999)) % 32000 for t in ids[diverge:]]
        old.append({"prompt": str(index), "output_ids": ids})
        new.append({"prompt": str(index), "output_ids": other})
    return old, new


def probe_passes(rng: random.Random, flip_per_token: float | None) -> bool:
    return probe.compare_outputs(*probe_outputs(rng, flip_per_token))["passed"]


def probe_time_ratio(rate: float = 89.5, ttft_s: float = 0.150) -> float:
    """Probe time / throughput-trial time per profile and phase, from the simulated timing."""

    def request_s(tokens: int) -> float:
        return max(tokens / rate, ttft_s)

    trials = request_s(16) + throughput.DEFAULT_MIN_TRIALS * request_s(256)
    return PROBE_PROMPTS * request_s(PROBE_TOKENS) / trials


def accept_outputs(rng: random.Random, mean: float, spread: float = 0.10) -> list[dict]:
    outputs = []
    for _ in range(PROBE_PROMPTS):
        length = max(1.0, mean * rng.gauss(1.0, spread)) if mean > 1.0 else 1.0
        outputs.append({"completion_tokens": PROBE_TOKENS, "spec_verify_ct": round(PROBE_TOKENS / length)})
    return outputs


def accept_report(rng: random.Random, runs: int) -> None:
    length = default_accept_length()
    print()
    print(
        f"speculative health: accept length {length} x N(1, 0.10) over {PROBE_PROMPTS} probe requests, "
        f"{runs} runs each"
    )
    caught = (
        sum(
            probe.compare_accept_length(accept_outputs(rng, length), accept_outputs(rng, 1.0))["passed"]
            is False
            for _ in range(runs)
        )
        / runs
    )
    print(f"  collapsed acceptance (1.0) caught: {caught * 100:.2f}%")
    for drop in (10.0, 15.0, 20.0):
        false = (
            sum(
                probe.compare_accept_length(
                    accept_outputs(rng, length), accept_outputs(rng, length), max_drop_pct=drop
                )["passed"]
                is False
                for _ in range(runs)
            )
            / runs
        )
        print(f"  correct stacks, allowed drop {drop:.0f} %: false rollbacks {false * 100:.2f}%")


def probe_report(rng: random.Random, runs: int) -> None:
    print()
    print(
        f"correctness probe: {PROBE_PROMPTS} prompts x {PROBE_TOKENS} tokens, a prompt agrees when "
        f"its first {probe.DEFAULT_MIN_PREFIX_TOKENS} tokens are equal, "
        f"{probe.DEFAULT_MIN_AGREEING_SHARE:.0%} must agree; {runs} runs each"
    )
    caught = sum(not probe_passes(rng, None) for _ in range(runs)) / runs
    print(f"  garbage stacks caught: {caught * 100:.2f}%")
    for flip in (0.01, 0.03):
        probe_false = sum(not probe_passes(rng, flip) for _ in range(runs)) / runs
        gate_false = (
            sum(
                (not probe_passes(rng, flip)) or simulate(rng, 0.0, 0.02)[0] == "regressed"
                for _ in range(runs)
            )
            / runs
        )
        print(
            f"  numeric drift, near-tie flip {flip * 100:.0f} %/token: false rollbacks by the probe "
            f"{probe_false * 100:.2f}%, by the whole gate at 2 % noise {gate_false * 100:.2f}%"
        )
    print(f"  probe time per profile and phase, modelled: {probe_time_ratio():.3f} x the throughput trials")


# --- measured: the probe's and the load metrics' time against the trials' ---------------


@dataclass
class ProfileTiming:
    """What one profile costs in one phase, wall seconds on this machine.

    ``trials_s``: every ``completion_bench.py`` call of the trial loop (warm-up included),
    ``calls`` of them for ``n_trials`` trials; ``probe_s``: ``completion_bench.py --probe``;
    ``load_s``: ``completion_bench.py --load-metrics`` (0 when off). ``trials``, ``probe`` and
    ``load`` are what the scripts printed (the role keeps them in the host's result).
    """

    profile: str
    phase: str
    trials_s: float
    calls: int
    n_trials: int
    probe_s: float
    load_s: float
    trials: list = field(default_factory=list)
    probe: list = field(default_factory=list)
    load: dict = field(default_factory=dict)


def _run_hostscript(script: str, *args: str) -> tuple[dict, float]:
    """Run a host script with this Python (standard library only, as on a host); returns
    its JSON and the wall seconds. Raises ``RuntimeError`` with its stderr when it fails."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(HOSTSCRIPTS / script), *args], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{script} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout), seconds


def measure_profile(
    url: str,
    phase: str,
    profile: str,
    role: dict,
    workdir: Path,
    baseline_trials: list | None,
    load_prompt_len: int,
    load_concurrency: int,
) -> ProfileTiming:
    """One profile in one phase against a running server, as cuda13_upgrade.steps.measure.phase
    measures each: the probe, the trial loop (candidate phase: one more trial per call
    while ``throughput.decide`` against ``baseline_trials`` is not final), the load
    metrics. Each part is timed on its own."""
    probe_out, probe_s = _run_hostscript(
        "completion_bench.py",
        *("--url", url, "--prompt-file", str(PROMPT_FILE)),
        *("--probe", str(role["verify_throughput_probe_prompts"])),
        *("--max-new-tokens", str(role["verify_throughput_probe_tokens"])),
    )
    trial_file = workdir / f"{phase}-{profile}.json"
    bench = [
        *("--url", url, "--append", str(trial_file)),
        *("--min-trials", str(role["verify_throughput_min_trials"]), "--trials", "1"),
        *("--warmup", str(role["verify_throughput_warmup"])),
        *("--max-tokens", str(role["verify_throughput_output_len"])),
        *("--prompt-len", str(role["verify_throughput_prompt_len"])),
        *("--method", "builtin", "--python", sys.executable),
        *("--prompts", str(role["verify_throughput_bench_prompts"])),
        *("--prompt-file", str(PROMPT_FILE), "--flush-cache"),
    ]
    trials_s, calls = 0.0, 0
    while True:
        out, seconds = _run_hostscript("completion_bench.py", *bench)
        trials_s, calls = trials_s + seconds, calls + 1
        if baseline_trials is None:
            break
        decision = throughput.decide(
            throughput.trial_metric(throughput.normalize_trials(baseline_trials), "output_tok_s"),
            throughput.trial_metric(throughput.normalize_trials(out["trials"]), "output_tok_s"),
            profile=profile,
            tolerance_pct=float(role["verify_throughput_tolerance_pct"]),
            z=float(role["verify_throughput_z"]),
            max_trials=int(role["verify_throughput_max_trials"]),
        )
        if decision.final:
            break
    load_out, load_s = {}, 0.0
    if load_prompt_len > 0 or load_concurrency > 0:
        out_load, load_s = _run_hostscript(
            "completion_bench.py",
            *("--url", url, "--load-metrics", "--prompt-file", str(PROMPT_FILE)),
            *("--max-tokens", str(role["verify_throughput_output_len"])),
            *("--ttft-prompt-len", str(load_prompt_len)),
            *("--ttft-requests", str(role["verify_throughput_ttft_requests"])),
            *("--concurrency", str(load_concurrency)),
        )
        load_out = out_load["load"]
    trials = throughput.normalize_trials(out["trials"])
    return ProfileTiming(
        profile, phase, trials_s, calls, len(trials), probe_s, load_s, trials, probe_out["outputs"], load_out
    )


def _stack_venvs(root: Path, mirror_dir: Path | None) -> tuple[list, object, dict]:
    """The mirror (built into ``root`` unless given) served on loopback, and one venv per
    stack with SGLang built into it, as tests/conftest.py makes them. Returns the venvs
    (CUDA 12.8, CUDA 13), the mirror server (to close) and an empty ld.so.conf.d."""
    sys.path.insert(0, str(REPO / "sandbox" / "mirror"))
    from sandbox_mirror import builder, catalog, testkit

    if mirror_dir is None:
        mirror_dir = builder.build_mirror(root / "mirror", root / "gnupg").out
    server = testkit.MirrorServer(mirror_dir, root / "mirror-http.log")
    releases = {r.dotted: r for r in catalog.CUDA_RELEASES}
    venvs = []
    for tag, sglang, release in (("cu128", "v0.5.8", "12.8"), ("cu130", "v0.5.9", "13.0")):
        cuda_home = testkit.extract_toolkit(mirror_dir, releases[release], root / "toolkits")
        python = testkit.make_venv(root / tag / "venv")
        testkit.install_stack(python, server.url, tag)
        clone = testkit.clone_sglang(server.url, sglang, root / tag / "sglang")
        testkit.install_sglang(python, clone, cuda_home, "-e")
        venvs.append(testkit.StackVenv(tag, python, clone, cuda_home))
    (root / "ld.so.conf.d").mkdir()
    return venvs, server, {"ld_conf": root / "ld.so.conf.d"}


def measure_host(args: argparse.Namespace) -> tuple[list[ProfileTiming], float, dict]:
    """Both phases of one host's gate on the simulated server (module doc). Returns the
    timings per profile and phase, the control node's comparison seconds and their results."""
    import yaml

    role = yaml.safe_load(ROLE_DEFAULTS.read_text(encoding="utf-8"))
    profiles = yaml.safe_load(FLEET_SERVING.read_text(encoding="utf-8"))["cuda13_profiles"]
    timings: list[ProfileTiming] = []
    with tempfile.TemporaryDirectory(prefix="gate-timing-") as tmp:
        root = Path(tmp)
        venvs, mirror, paths = _stack_venvs(root, args.mirror)
        from sandbox_mirror import testkit

        try:
            baseline: dict[str, ProfileTiming] = {}
            for phase, venv in (("baseline", venvs[0]), ("candidate", venvs[1])):
                for profile in profiles:
                    server_args = [str(a) for a in profile.get("server_args") or []]
                    if phase == "candidate":
                        server_args += [str(a) for a in profile.get("new_stack_args") or []]
                    env = testkit.clean_env(
                        SGLANG_SIM_SCENARIO=str(DEFAULT_SCENARIO),
                        SGLANG_SIM_SEED=str(args.seed),
                        CUDA_HOME=str(venv.cuda_home),
                        SANDBOX_LD_SO_CONF_D=str(paths["ld_conf"]),
                    )
                    server = testkit.SimServer(venv.python, env, root / "logs", *server_args)
                    try:
                        timing = measure_profile(
                            server.url,
                            phase,
                            profile["name"],
                            role,
                            root,
                            baseline[profile["name"]].trials if phase == "candidate" else None,
                            args.load_prompt_len,
                            args.load_concurrency,
                        )
                    finally:
                        server.close()
                    timings.append(timing)
                    if phase == "baseline":
                        baseline[profile["name"]] = timing
        finally:
            mirror.close()
    compare_s, compared = control_node_comparisons(timings, role)
    return timings, compare_s, compared


def control_node_comparisons(timings: list[ProfileTiming], role: dict) -> tuple[float, dict]:
    """The gate's comparisons of the measured outputs (probe, accept length, load), timed."""
    by_phase = {(t.phase, t.profile): t for t in timings}
    compared: dict = {}
    start = time.perf_counter()
    for (phase, profile), new in by_phase.items():
        if phase != "candidate":
            continue
        old = by_phase[("baseline", profile)]
        compared[profile] = {
            "probe": probe.compare_outputs(
                old.probe,
                new.probe,
                profile=profile,
                min_prefix_tokens=role["verify_throughput_probe_min_prefix_tokens"],
                min_agreeing_share=role["verify_throughput_probe_min_agreeing_share"],
            ),
            "accept_length": probe.compare_accept_length(
                old.probe,
                new.probe,
                profile=profile,
                max_drop_pct=role["verify_throughput_accept_length_drop_pct"],
            ),
            "load": compare_load(old.load, new.load, profile=profile) if new.load else None,
        }
    return time.perf_counter() - start, compared


def measured_report(args: argparse.Namespace) -> None:
    """Print the measured seconds and ratios (module doc)."""
    began = time.perf_counter()
    timings, compare_s, compared = measure_host(args)
    elapsed = time.perf_counter() - began
    scenario = json.loads(DEFAULT_SCENARIO.read_text(encoding="utf-8"))
    rates = scenario["rates_tok_s"]
    load = (
        f"TTFT at a {args.load_prompt_len}-word prompt and {args.load_concurrency} streams at once"
        if args.load_prompt_len or args.load_concurrency
        else "off"
    )
    print()
    print(
        "measured on the simulated server, one host, both phases: default scenario "
        f"(plain {rates['cu128']['plain']} / EAGLE-3 {rates['cu128']['eagle3']} tok/s on CUDA 12.8, "
        f"{rates['cu130']['plain']} / {rates['cu130']['eagle3']} on CUDA 13), the role's defaults; "
        f"load metrics: {load}"
    )
    print(
        f"  {'profile':<8} {'phase':<10} {'trials (s)':>10} {'n':>3} {'calls':>5} {'probe (s)':>9} "
        f"{'probe/trials':>12} {'load (s)':>8} {'load/trials':>11}"
    )
    for t in timings:
        print(
            f"  {t.profile:<8} {t.phase:<10} {t.trials_s:>10.2f} {t.n_trials:>3} {t.calls:>5} {t.probe_s:>9.2f} "
            f"{t.probe_s / t.trials_s:>12.3f} {t.load_s:>8.2f} {t.load_s / t.trials_s:>11.3f}"
        )
    trials = sum(t.trials_s for t in timings)
    probe_s = sum(t.probe_s for t in timings) + compare_s
    load_s = sum(t.load_s for t in timings)
    print(f"  control node comparisons (probe, accept length, load): {compare_s * 1000:.2f} ms per host")
    for profile, result in compared.items():
        accept = result["accept_length"]
        if accept["passed"] is not None:
            print(
                f"  {profile}: accept length read by the probe {accept['old']:.2f} -> {accept['new']:.2f} "
                f"tokens per verify step (passed: {accept['passed']}); probe passed: {result['probe']['passed']}"
            )
    print(
        f"  per host: today's gate (the trials) {trials:.1f} s; the probe and its accept-length reads add "
        f"{probe_s:.1f} s ({probe_s / trials:.3f} x)"
        + (
            f"; with the load metrics {probe_s + load_s:.1f} s ({(probe_s + load_s) / trials:.3f} x)"
            if load_s
            else ""
        )
    )
    print(f"  modelled above, per profile and phase: {probe_time_ratio():.3f} x")
    print(f"  (set-up and measurement took {elapsed:.0f} s)")


if __name__ == "__main__":
    main()
