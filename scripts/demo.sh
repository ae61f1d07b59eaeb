#!/usr/bin/env bash
# The demo: a fresh simulated CUDA 12.8-era Blackwell host, its state, the
# CUDA 13 upgrade through the cuda13-upgrade command, and the report.
#
#   scripts/demo.sh [default|regression|driver]
# default: the new stack is faster and stays; regression: the new stack is 10 %
# slower and the host rolls back; driver: a host on an R570 driver is moved to
# R580 first (the driver window, docs/driver.md), then to CUDA 13, in one run.
# Exit status 0 when the outcome is the one the scenario expects.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario="${1:-default}"
case "$scenario" in
  default) expect=kept ;;
  regression) expect=rolled_back ;;
  driver) expect=kept ;;
  *) echo "unknown scenario '$scenario' (SCENARIO): default, regression or driver" >&2; exit 2 ;;
esac
host_vars=(-e sandbox_host_scenario="$scenario")
run_vars=()
if [ "$scenario" = driver ]; then
  # Ubuntu's archive packages of 570.211.01 installed and held; the move to 580.142 from the same
  # repository (the sandbox mirror's stand-ins, sandbox/mirror/records/apt/nvidia-driver-standins.md).
  host_vars=(-e '{"sandbox_host_scenario": "default", "sandbox_host_nvidia_smi_state": "driver-r570-halves",
    "sandbox_host_driver_packages": ["nvidia-driver-570-open=570.211.01-0ubuntu0.24.04.2"]}')
  run_vars=(-e '{"cuda13_driver_target": "580.142", "cuda13_driver_packages": ["nvidia-driver-580-open"]}')
fi

bin=.venv/bin
run_id="demo-$(date -u +%Y%m%dT%H%M%SZ)"
export CUDA13_RUN_ID="$run_id"

echo "== A fresh sandbox host (scenario: $scenario)"
$bin/ansible-playbook playbooks/sandbox.yml -e sandbox_state=absent >/dev/null
$bin/ansible-playbook playbooks/sandbox.yml "${host_vars[@]}" >/tmp/cuda13-demo-sandbox.log \
  || { tail -40 /tmp/cuda13-demo-sandbox.log; exit 1; }

echo "== The host before the upgrade"
$bin/ansible-playbook playbooks/sandbox-status.yml | sed -n '/"msg":\|msg:/,/PLAY RECAP/p' | grep -v "PLAY RECAP"

echo "== cuda13-upgrade plan -i inventory/sandbox (read-only: what the rollout will do)"
$bin/cuda13-upgrade plan -i inventory/sandbox --run-id "$run_id" "${run_vars[@]}" | sed -n '/^$/,$p'

echo "== cuda13-upgrade rollout -i inventory/sandbox --yes"
set +e
# Each demo starts a fresh host: the rollbacks of earlier demos in reports/ are
# not this host's history, so the breaker across runs is off here.
$bin/cuda13-upgrade rollout -i inventory/sandbox --run-id "$run_id" --yes -e cuda13_breaker_rollbacks=0 "${run_vars[@]}"
rc=$?
set -e

echo "== The host after the upgrade"
$bin/ansible-playbook playbooks/sandbox-status.yml -e status_venv="$([ "$expect" = kept ] && echo /opt/ml-env-cu130 || echo /opt/ml-env)" \
  | sed -n '/torch (version/,/completion/p'

if [ "$scenario" = driver ]; then
  echo "== The driver window"
  $bin/python -c 'import json,sys; w=json.load(open(sys.argv[1]))["driver_window"] or {}; print("\n".join(f"{k}: {v}" for k, v in w.items()))' \
    "reports/$run_id/cuda13-sandbox-1/result.json" || true
fi
status="$($bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "reports/$run_id/cuda13-sandbox-1/result.json" 2>/dev/null || echo none)"
echo "== Outcome: $status (expected: $expect; cuda13-upgrade exit status $rc)"
[ "$status" = "$expect" ]
