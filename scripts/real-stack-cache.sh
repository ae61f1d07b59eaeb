#!/usr/bin/env bash
# Downloads the real CUDA 13 SGLang stack from PyPI once into a machine-wide
# cache outside the clone, reused across runs and clones (a clean machine
# downloads it again). PyPI only: --isolated ignores the machine's pip
# configuration, which may add local indexes or find-links.
#
#   $CACHE/wheels/    what `pip download sglang==$VERSION` resolves (Python 3.11, x86_64),
#                     left free and with the compiler components pinned
#   $CACHE/variants/  single wheels (no dependencies) of real inconsistent stacks
#   $CACHE/simple/    a PEP 503 directory index over both, for a host's pip
set -euo pipefail

CACHE="${CUDA13_REAL_STACK_CACHE:-/var/cache/cuda13-upgrade-ci/real-stack}"
PYTHON="${PYTHON:-python3}"  # an interpreter with pip: Python 3.11 x86_64, as on the hosts
SGLANG="${CUDA13_REAL_STACK_SGLANG:-sglang==0.5.23}"
# Left free, pip picks the newest CUDA compiler components (nvcc, crt, nvvm
# 13.5, cccl 13.3) beside the 13.0 runtime torch 2.14.1 pins: the versions
# cuda-toolkit 13.0.3 (torch's CUDA release) pins keep them on one release.
COMPILER_PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-nvvm==13.0.88)
# Real inconsistent variants: torch 2.10.0 from PyPI is a CUDA 12.8 build;
# sglang-kernel 0.4.0 is a CUDA 12 build; flashinfer-cubin at a version other
# than flashinfer-python's.
VARIANTS=(torch==2.10.0 sglang-kernel==0.4.0 flashinfer-cubin==0.6.13)
PIP=("$PYTHON" -m pip --isolated --disable-pip-version-check download
     --index-url https://pypi.org/simple --only-binary :all:)

mkdir -p "$CACHE/wheels" "$CACHE/variants"
if [[ ! -f "$CACHE/wheels/.complete-$SGLANG" ]]; then
  "${PIP[@]}" --dest "$CACHE/wheels" "$SGLANG"
  touch "$CACHE/wheels/.complete-$SGLANG"
fi
if [[ ! -f "$CACHE/wheels/.complete-$SGLANG-compiler-pinned" ]]; then
  "${PIP[@]}" --dest "$CACHE/wheels" "$SGLANG" "${COMPILER_PINS[@]}"
  touch "$CACHE/wheels/.complete-$SGLANG-compiler-pinned"
fi
for spec in "${VARIANTS[@]}"; do
  if [[ ! -f "$CACHE/variants/.complete-$spec" ]]; then
    "${PIP[@]}" --no-deps --dest "$CACHE/variants" "$spec"
    touch "$CACHE/variants/.complete-$spec"
  fi
done
"$PYTHON" "$(dirname "$0")/pep503_index.py" "$CACHE/simple" "$CACHE/wheels" "$CACHE/variants"
echo "$CACHE"
