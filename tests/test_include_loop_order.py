"""Each host measures its own profiles in its own planned order; after a failed soak, no further one.

A looped ``include_tasks`` once ran a host's profiles out of its order: Ansible runs a looped
include once per distinct item, for all the hosts that have that item, in the order the items
first appear across hosts (ansible/ansible#36978, #80229). When the items differed per host (a
host's own ``new_stack_args``), one host measured its second profile before its first, on a server
started for the other profile, and a collapsed EAGLE-3 accept length passed unseen (molecule gate,
cuda13-gate-3). The profiles are now looped in Python, per host (``cuda13_upgrade.steps.measure.phase``,
under the actions cuda13_baseline, cuda13_verify and cuda13_rollback); what the fault broke is kept
here: on two hosts whose plans differ, measured at once as Ansible's forks measure them, each host
serves and measures its profiles in its planned order, every measurement on a server started for
that very profile, and a host whose soak failed measures no further profile while the other goes on.

The static test holds every looped include left in the project to host-invariant items.
"""

from __future__ import annotations

import base64
import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from fakehost import FakeHost
from test_steps import _options

from cuda13_upgrade.steps import measure

REPO = Path(__file__).resolve().parents[1]
VENV = "/opt/ml-env-cu130"
EXEC_START = f"{VENV}/bin/python -m sglang.launch_server --model-path /models/m"

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
# The plans of molecule gate's hosts: one host's first profile has new-stack arguments.
PLANS = {
    "with-new-stack-args": [
        {"profile": "eagle3", "args": [*EAGLE3, "--enable-torch-symm-mem"], "restart": False},
        {"profile": "plain", "args": [], "restart": True},
    ],
    "without": [
        {"profile": "eagle3", "args": EAGLE3, "restart": False},
        {"profile": "plain", "args": [], "restart": True},
    ],
}
PROFILES = {
    "with-new-stack-args": [
        {"name": "plain", "server_args": []},
        {"name": "eagle3", "server_args": EAGLE3, "new_stack_args": ["--enable-torch-symm-mem"]},
    ],
    "without": [{"name": "plain", "server_args": []}, {"name": "eagle3", "server_args": EAGLE3}],
}
PASSED_SOAK = {"requests": 64, "served": 64, "deadline_s": 30, "failures": []}
FAILED_SOAK = {
    "requests": 64,
    "served": 3,
    "deadline_s": 30,
    "failures": [{"request": 4, "outcome": "stall"}],
}


class Server:
    """One host's service and benchmark: the server runs the arguments of its last start (the
    switch started the phase's first profile); each benchmark is logged with the profile whose
    arguments the server runs then."""

    def __init__(self, host: str, soaks: dict[str, dict] | None = None) -> None:
        self.profiles = {p["name"]: p for p in PROFILES[host]}
        self.running = PLANS[host][0]["args"]
        self.soaks = soaks or {}
        self.log: list[tuple[str, str]] = []

    def _serving(self) -> str:
        (name,) = [
            n
            for n, p in self.profiles.items()
            if [*p["server_args"], *p.get("new_stack_args", [])] == self.running
        ]
        return name

    def service(self, args: dict) -> dict:
        restarted = args["restart"] == "always"
        if restarted:
            self.running = list(args["args"])
        self.log.append(("serve", self._serving()))
        argv = shlex.split(args["exec_start"]) + self.running
        cycle = {
            "restarted": restarted,
            "release": {"free": True, "leftovers": []} if restarted else None,
            "start_error": None,
            "ready": {"generated": True, "endpoint": "/health_generate", "waited_s": 0.1, "last": "200"},
            "journal": [],
            "cmdline_b64": base64.b64encode("".join(a + "\0" for a in argv).encode()).decode(),
        }
        return {"changed": restarted, "dropin_changed": False, "cycle": cycle}

    def bench(self, args: dict) -> dict:
        name = self._serving()
        self.log.append((args["mode"], name))
        if args["mode"] == "trials":
            rate = 96.1 if name == "eagle3" else 92.0
            return {"bench": {"trials": [{"output_tok_s": rate * f} for f in (0.99, 1.0, 1.01, 1.0, 0.995)]}}
        if args["mode"] == "probe":
            return {"bench": {"outputs": []}}
        return {"bench": {"load": {}, "soak": self.soaks.get(name, PASSED_SOAK)}}


def _measure(tmp_path: Path, soaks: dict[str, dict[str, dict]] | None = None) -> dict[str, tuple[dict, list]]:
    """Measure the candidate phase on both hosts at once; ``{host: (phase record, server log)}``."""
    options = _options(
        tmp_path,
        verify_throughput_min_trials=5,
        verify_throughput_max_trials=5,
        verify_throughput_probe=False,
        verify_throughput_dir=str(tmp_path / "throughput"),
    )
    baseline = {"plain": [{"output_tok_s": 89.5}] * 5, "eagle3": [{"output_tok_s": 54.1}] * 5}

    def one(host: str) -> tuple[dict, list]:
        server = Server(host, (soaks or {}).get(host))
        fake = FakeHost(host, handlers={"cuda13_service": server.service, "cuda13_bench": server.bench})
        record = measure.phase(
            fake,
            phase="candidate",
            options=options,
            profiles=PROFILES[host],
            venv=VENV,
            exec_start=EXEC_START,
            run_id="r1",
            plan={"phase": "candidate", "steps": PLANS[host], "restore": False},
            baseline=baseline,
            prompts={"seed": 1, "prompts": ["p"]},
        )
        return record, server.log

    with ThreadPoolExecutor(max_workers=len(PLANS)) as pool:
        done = {host: pool.submit(one, host) for host in PLANS}
    return {host: future.result() for host, future in done.items()}


@pytest.mark.parametrize("host", sorted(PLANS))
def test_each_host_measures_its_profiles_in_its_planned_order(tmp_path, host):
    record, log = _measure(tmp_path)[host]
    planned = [s["profile"] for s in PLANS[host]]
    assert list(record["results"]) == planned
    # Each profile served, then measured (trials, then the load and soak) on a server that runs it.
    assert log == [(what, name) for name in planned for what in ("serve", "trials", "load")]
    assert record["plan"]["steps"] == PLANS[host]
    assert record["restarts"] == 1  # plain only: the switch started eagle3
    assert record["soak_failed"] is None


def test_a_host_whose_soak_failed_measures_no_further_profile(tmp_path):
    # Its server crashed or stopped answering: the other host goes on in its own order.
    measured = _measure(tmp_path, {"without": {"eagle3": FAILED_SOAK}})
    record, log = measured["without"]
    assert record["soak_failed"] == "eagle3"
    assert list(record["results"]) == ["eagle3"]
    assert ("serve", "plain") not in log and log[-1] == ("load", "eagle3")
    other, other_log = measured["with-new-stack-args"]
    assert list(other["results"]) == ["eagle3", "plain"] and other["soak_failed"] is None
    assert [entry for entry in other_log if entry[0] == "serve"] == [("serve", "eagle3"), ("serve", "plain")]


# Looped includes whose items may run in any order on a host, with why.
ORDER_FREE: set[tuple[str, str]] = set()


def _looped_includes(node, found):
    if isinstance(node, list):
        for item in node:
            _looped_includes(item, found)
    elif isinstance(node, dict):
        keys = [k for k in node if k.split(".")[-1] in ("include_tasks", "include_role")]
        loops = [k for k in node if k == "loop" or k.startswith("with_")]
        if keys and loops:
            target = node[keys[0]]
            target = target.get("file") or target.get("name") if isinstance(target, dict) else target
            found.append((str(target), str(node[loops[0]])))
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                _looped_includes(node[key], found)


def test_every_looped_include_loops_over_items_the_same_on_every_host():
    offenders = []
    for path in sorted([*REPO.glob("roles/**/*.yml"), *REPO.glob("playbooks/**/*.yml")]):
        found: list[tuple[str, str]] = []
        _looped_includes(yaml.safe_load(path.read_text()), found)
        rel = str(path.relative_to(REPO))
        for target, loop in found:
            if (rel, target) in ORDER_FREE:
                continue
            if not loop.replace(" ", "").startswith("{{range("):
                offenders.append(f"{rel}: include of {target} loops over {loop}")
    assert offenders == [], (
        "a looped include must loop over step numbers (range(...)), the same items on every "
        "host, or be listed in ORDER_FREE with why its order does not matter: " + "; ".join(offenders)
    )
