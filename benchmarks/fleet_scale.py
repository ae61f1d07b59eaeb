#!/usr/bin/env python3
"""How the upgrade scales to a fleet, and what the artifact cache saves, on sandbox hosts.

Replaces the sandbox hosts (``playbooks/sandbox.yml``), removes them at the end, and prints:

1. the upgrade's wall time (``upgrade-cuda13.yml -e '{"cuda13_serial": N}'``) on 1 host and on
   N hosts in one batch, with the forks Ansible runs them with (``ansible.cfg``), and the ratio;
2. the wheel bytes fetched from upstream for those N hosts without the cache -- the sum over the
   hosts of the ``.whl`` files each host's package mirror sent it during the upgrade (the access
   log of the host's ``sandbox-mirror.service``, an ``http.server``, in the host's journal; sizes
   from ``.sandbox/mirror``) -- against the bytes the control node fetched once with the cache
   (``artifact_cache_fetched_bytes`` of ``roles/artifact_cache`` run on the same N hosts, its
   upstream the same mirror served on the control node's loopback), and a second cache run;
3. with ``--cached-upgrade``: the upgrade of N fresh hosts with the cache (a play running
   ``artifact_cache`` and pointing ``cu130_wheels_find_links`` at the host's copy, then the
   unchanged ``upgrade-cuda13.yml``), its wall time and what each host still fetched itself.

Usage: benchmarks/fleet_scale.py [--hosts N] [--cached-upgrade]   (from the repository root
after ``make setup``, ``make image`` and ``make mirror``; it uses .venv/bin/ansible-playbook
and podman)
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml
from sandbox_env import ENV, REPO, fresh_sandbox, playbook, remove_sandbox

MIRROR = REPO / ".sandbox" / "mirror"
# "GET /whl/cu130/torch-2.10.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl HTTP/1.1" 200 -
WHEEL_GET = re.compile(r'"GET (?P<path>/\S+\.whl) HTTP/1\.[01]" 200 ')


def wheel_bytes(paths: list[str]) -> int:
    """Sum of the sizes of the mirror's files at these URL paths."""
    return sum((MIRROR / urllib.parse.unquote(p).lstrip("/")).stat().st_size for p in paths)


def host_wheel_gets(host: str, since: float) -> list[str]:
    """URL paths of the wheels the host's own mirror sent it since ``since`` (epoch seconds)."""
    out = subprocess.run(
        ["podman", "exec", host, "journalctl", "--no-pager", "-o", "cat", "-u", "sandbox-mirror.service",
         "--since", f"@{int(since)}"],
        env=ENV, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [m["path"] for m in WHEEL_GET.finditer(out)]


def forks() -> int:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    return config.getint("defaults", "forks", fallback=5)


def upgrade(hosts: list[str], reports: Path, *extra: str) -> tuple[float, dict[str, int]]:
    """Time the upgrade of ``hosts`` in one batch; wheel bytes each host fetched meanwhile."""
    env = {**ENV, "CUDA13_REPORTS_DIR": str(reports)}
    since = time.time() - 1
    seconds = playbook(
        *extra, "upgrade-cuda13.yml", "-i", "inventory/sandbox", "-e", json.dumps({"cuda13_serial": len(hosts)}),
        env=env,
    )  # fmt: skip
    time.sleep(1.0)  # let the journals catch up
    return seconds, {host: wheel_bytes(host_wheel_gets(host, since)) for host in hosts}


def check_kept(reports: Path, hosts: list[str]) -> None:
    runs = sorted(p for p in reports.iterdir() if p.is_dir() and p.name != "artifact-cache")
    results = {h: json.loads((runs[-1] / h / "result.json").read_text())["status"] for h in hosts}
    if set(results.values()) != {"kept"}:
        print(f"  note: not every host kept the new stack: {results}")


class ControlMirror:
    """``python3 -m http.server --bind 127.0.0.1 <free port> --directory .sandbox/mirror``."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 (kept open while the server runs)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port), "--directory", str(MIRROR)],
            stdout=self._out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        self.close()
        sys.exit(f"the control node's mirror did not start on {self.url}")

    def wheel_gets(self) -> list[str]:
        return [m["path"] for m in WHEEL_GET.finditer(self.log.read_text(errors="replace"))]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._out.close()


def cache_vars(mirror: ControlMirror, cache_dir: Path, facts_file: Path) -> dict:
    sglang_defaults = yaml.safe_load((REPO / "roles" / "sglang_build" / "defaults" / "main.yml").read_text())
    return {
        "artifact_cache_index_url": f"{mirror.url}/whl/cu130",
        "artifact_cache_extra_index_urls": [
            f"{mirror.url}/sgl-whl/cu130",
            f"{mirror.url}/flashinfer-whl/cu130",
            f"{mirror.url}/pypi/simple",
        ],
        "artifact_cache_dir": str(cache_dir),
        "sglang_build_build_requirements": sglang_defaults["sglang_build_build_requirements"],
        "__fleet_scale_facts": str(facts_file),
    }


def cache_play(hosts: str) -> dict:
    """A play that fills the cache once, copies it to every host and points cu130_wheels at it."""
    return {
        "name": "Fleet artifact cache",
        "hosts": hosts,
        "gather_facts": False,
        "tasks": [
            {
                "name": "Fetch once, copy to the host",
                "ansible.builtin.include_role": {"name": "artifact_cache"},
            },
            {
                "name": "Install the cu130 wheels from the host's copy",
                "ansible.builtin.set_fact": {"cu130_wheels_find_links": "{{ artifact_cache_find_links }}"},
            },
            {
                "name": "Keep what the cache fetched",
                "ansible.builtin.copy": {
                    "content": "{{ {'fetched_bytes': artifact_cache_fetched_bytes,"
                    " 'fetched_files': artifact_cache_fetched_files, 'files': artifact_cache_files} | to_json }}",
                    "dest": "{{ __fleet_scale_facts }}",
                    "mode": "0644",
                },
                "delegate_to": "localhost",
                "run_once": True,
                "changed_when": False,
            },
        ],
    }


def run_cache(work: Path, mirror: ControlMirror, cache_dir: Path, tag: str) -> tuple[float, dict]:
    """Run the cache play on the sandbox hosts; its wall time and facts."""
    facts_file = work / f"cache-{tag}.json"
    book = work / f"cache-{tag}.yml"
    book.write_text(yaml.safe_dump([cache_play("sandbox")], sort_keys=False))
    extra = work / f"cache-{tag}-vars.json"
    extra.write_text(json.dumps(cache_vars(mirror, cache_dir, facts_file)))
    env = {**ENV, "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "CUDA13_REPORTS_DIR": str(work / "reports")}
    seconds = playbook("-i", "inventory/sandbox", "-e", f"@{extra}", str(book), env=env)
    return seconds, json.loads(facts_file.read_text())


def cached_upgrade(work: Path, mirror: ControlMirror, hosts: list[str]) -> tuple[float, dict, dict[str, int]]:
    """The cache play, then the unchanged upgrade playbook, on fresh hosts, as one run."""
    cache_dir = work / "cache-upgrade"
    facts_file = work / "cache-upgrade.json"
    book = work / "cached-upgrade.yml"
    book.write_text(
        yaml.safe_dump(
            [cache_play("{{ cuda13_target_hosts | default('blackwell') }}"),
             {"name": "Upgrade", "ansible.builtin.import_playbook": str(REPO / "upgrade-cuda13.yml")}],
            sort_keys=False,
        )
    )  # fmt: skip
    extra = work / "cached-upgrade-vars.json"
    extra.write_text(json.dumps(cache_vars(mirror, cache_dir, facts_file)))
    reports = work / "reports-cached"
    reports.mkdir()
    env = {**ENV, "ANSIBLE_ROLES_PATH": str(REPO / "roles")}
    env_reports = {**env, "CUDA13_REPORTS_DIR": str(reports)}
    since = time.time() - 1
    seconds = playbook(
        "-i", "inventory/sandbox", "-e", f"@{extra}", "-e", json.dumps({"cuda13_serial": len(hosts)}), str(book),
        env=env_reports,
    )  # fmt: skip
    time.sleep(1.0)
    check_kept(reports, hosts)
    return (
        seconds,
        json.loads(facts_file.read_text()),
        {h: wheel_bytes(host_wheel_gets(h, since)) for h in hosts},
    )


def mb(n: float) -> str:
    return f"{int(n):,} B ({n / 1e6:.3f} MB)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8, help="fleet size of the one-batch run (default 8)")
    parser.add_argument(
        "--cached-upgrade",
        action="store_true",
        help="also upgrade N fresh hosts with the cache (one more sandbox)",
    )
    args = parser.parse_args()
    n = args.hosts
    work = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    mirror = ControlMirror(work / "control-mirror.log")
    rows: list[tuple[str, str]] = []
    try:
        # 1. Wall time: one host, then N hosts in one batch.
        one = fresh_sandbox(1)
        (work / "reports-1").mkdir()
        t1, bytes1 = upgrade(one, work / "reports-1")
        check_kept(work / "reports-1", one)
        fleet = fresh_sandbox(n)
        (work / "reports-n").mkdir()
        tn, bytes_n = upgrade(fleet, work / "reports-n")
        check_kept(work / "reports-n", fleet)
        used_forks = min(forks(), n)

        # 2. Bytes: the same N hosts fetch nothing upstream themselves; the control node once.
        gets_before = len(mirror.wheel_gets())
        tc1, cold = run_cache(work, mirror, work / "cache", "cold")
        cold_gets = mirror.wheel_gets()[gets_before:]
        tc2, warm = run_cache(work, mirror, work / "cache", "warm")
        warm_gets = mirror.wheel_gets()[gets_before + len(cold_gets) :]
        if cold["fetched_bytes"] != wheel_bytes(cold_gets):
            print(
                f"  note: artifact_cache_fetched_bytes {cold['fetched_bytes']} differs from the control "
                f"node mirror's log ({wheel_bytes(cold_gets)} bytes)"
            )

        rows += [
            ("upgrade, 1 host (serial 1)", f"{t1:8.1f} s"),
            (
                f"upgrade, {n} hosts in one batch (serial {n}, forks {forks()}: {used_forks} at once)",
                f"{tn:8.1f} s",
            ),
            (f"  ratio {n} hosts / 1 host", f"{tn / t1:8.2f} x  (serial would be {n}.00 x)"),
            ("wheel bytes fetched by 1 host, no cache", mb(bytes1[one[0]])),
            (
                f"wheel bytes fetched from upstream, {n} hosts, no cache (sum over hosts)",
                mb(sum(bytes_n.values())),
            ),
            ("  per host", ", ".join(mb(b) for b in bytes_n.values())),
            (
                f"wheel bytes fetched from upstream, {n} hosts, with the cache (control node, once)",
                f"{mb(cold['fetched_bytes'])}  ({len(cold['fetched_files'])} wheels; {tc1:.1f} s incl. copy to "
                f"{n} hosts)",
            ),
            (
                "  second cache run (warm cache, hosts have the wheels)",
                f"{mb(warm['fetched_bytes'])}  ({len(warm_gets)} wheel GETs; {tc2:.1f} s)",
            ),
            (
                "  upstream bytes, no cache / cache",
                f"{sum(bytes_n.values()) / max(cold['fetched_bytes'], 1):8.2f} x",
            ),
        ]

        # 3. Optionally: the upgrade with the cache on fresh hosts.
        if args.cached_upgrade:
            fleet = fresh_sandbox(n)
            tcu, facts, residual = cached_upgrade(work, mirror, fleet)
            rows += [
                (f"upgrade with the cache, {n} hosts (cache play + upgrade, serial {n})", f"{tcu:8.1f} s"),
                ("  control node fetched", mb(facts["fetched_bytes"])),
                (
                    "  wheel bytes the hosts still fetched themselves (sum)",
                    f"{mb(sum(residual.values()))}  (SGLang's build step reads the indexes)",
                ),
            ]
    finally:
        mirror.close()
        remove_sandbox()

    width = max(len(k) for k, _ in rows)
    print(f"fleet scale on sandbox hosts ({os.cpu_count()} CPUs on this machine); work files in {work}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


if __name__ == "__main__":
    main()
