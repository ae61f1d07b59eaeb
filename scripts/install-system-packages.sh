#!/usr/bin/env bash
# Install the Debian/Ubuntu packages the sandbox and the tests need, when missing.
# Runs as root (or with sudo available). Quick when everything is present.
set -euo pipefail

# prometheus: the alert gate's tests (tests/test_alerts_prometheus.py) start Debian's server on
# 127.0.0.1 themselves.
packages=(podman runc debootstrap dpkg-dev apt-utils gnupg git make ca-certificates openssh-client
  python3-wheel-whl python3-setuptools-whl prometheus)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "installing system packages: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
# The package's own service (a server on every address, port 9090) is not the tests': installed
# here, it is stopped and disabled where systemd runs (a container without systemd never starts it).
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
