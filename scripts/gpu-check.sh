#!/usr/bin/env bash
# A read-only, offline check of this package on a machine with a real NVIDIA GPU
# and driver: every nvidia-smi query the package makes, parsed from the real
# tool; the loaded kernel module's flavour; the stack probe, its verdict and the
# ELF check on the installed torch; the preflight against this machine (where
# ansible-playbook is found). Results in OUTDIR (summary.md, summary.json).
#
#   scripts/gpu-check.sh OUTDIR [--torch-python PY] [--nvidia-smi CMD] [--help]
#
# Runs cuda13_upgrade.gpucheck from this checkout's src/ (no installation) with
# $PYTHON, else the checkout's .venv, else python3; all of it within 295 s.
# Exit status: 0 every part that ran passed, 1 a part failed, 2 bad usage.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]] && "$repo/.venv/bin/python" -c "" 2>/dev/null; then
    python="$repo/.venv/bin/python"
  else
    python="$(command -v python3 || true)"
  fi
fi
if [[ -z "$python" ]]; then
  echo "gpu-check: no Python found: set PYTHON to a Python 3.11 or newer" >&2
  exit 2
fi

export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
# Nothing written outside OUTDIR, the checkout included (no __pycache__ under src/).
export PYTHONDONTWRITEBYTECODE=1
export CUDA13_GPUCHECK_PROG="scripts/gpu-check.sh"
timeout --kill-after=5 295 "$python" -m cuda13_upgrade.gpucheck "$@"
rc=$?
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "gpu-check: ended after 295 s; the parts done so far are in OUTDIR's summary.md" >&2
  exit 1
fi
exit "$rc"
