"""Helpers the testinfra verifiers share: run the project's host scripts."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOSTSCRIPTS = REPO / "src" / "cuda13_upgrade" / "hostscripts"
BENCH = HOSTSCRIPTS / "completion_bench.py"
#: The host scripts the benchmark imports (run as a script, from its own directory).
BENCH_IMPORTS = ("server_auth.py",)


def stream_decode(
    host, *, max_tokens: int = 128, trials: int = 2, url: str = "http://127.0.0.1:30000"
) -> dict:
    """Run the streaming decode benchmark on ``host``; returns its JSON result.

    The script and the host scripts it imports are written to a directory of their
    own on the host (removed after), as the project's host module runs them."""
    directory = host.check_output("mktemp -d /tmp/cuda13-probe.XXXXXX")
    writes = "".join(
        f"cat > {directory}/{path.name} <<'CUDA13_PROBE_EOF'\n{path.read_text(encoding='utf-8')}\nCUDA13_PROBE_EOF\n"
        for path in (BENCH, *(HOSTSCRIPTS / name for name in BENCH_IMPORTS))
    )
    try:
        written = host.run(writes)
        assert written.rc == 0, written.stderr
        result = host.run(
            f"python3 {directory}/{BENCH.name} --url {url} --trials {trials} --warmup 1 --max-tokens {max_tokens}"
        )
    finally:
        host.run(f"rm -rf {directory}")
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
