"""Helpers the testinfra verifiers share: run the project's host scripts."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "src" / "cuda13_upgrade" / "hostscripts" / "completion_bench.py"


def stream_decode(
    host, *, max_tokens: int = 128, trials: int = 2, url: str = "http://127.0.0.1:30000"
) -> dict:
    """Run the streaming decode benchmark on ``host``; returns its JSON result."""
    script = BENCH.read_text(encoding="utf-8")
    cmd = (
        f"python3 - --url {url} --trials {trials} --warmup 1 --max-tokens {max_tokens} "
        f"<<'CUDA13_BENCH_EOF'\n{script}\nCUDA13_BENCH_EOF"
    )
    result = host.run(cmd)
    assert result.rc == 0, result.stderr
    return json.loads(result.stdout)


def pip_freeze(host, venv: str) -> dict[str, str]:
    """``pip freeze`` of ``venv`` on ``host`` as {normalized name: version or line}."""
    out = host.check_output(f"{venv}/bin/python -m pip freeze --all --isolated")
    dists = {}
    for line in out.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            dists[name.strip().lower().replace("_", "-")] = version.strip()
        elif line.startswith("-e "):
            dists["-e"] = line
    return dists
