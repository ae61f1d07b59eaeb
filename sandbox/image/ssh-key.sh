#!/usr/bin/env bash
# The checkout's SSH key for the sandbox hosts, created once in .sandbox/ssh:
# id_ed25519 (Ansible's ansible_ssh_private_key_file) and authorized_keys, which
# every sandbox container mounts read-only as /etc/ssh/sandbox_authorized_keys.
# The hosts have no network: the key only opens `podman exec ... sshd -i`.
set -euo pipefail

dir="$(cd "$(dirname "$0")/../.." && pwd)/.sandbox/ssh"
if [ ! -s "$dir/id_ed25519" ]; then
  mkdir -p "$dir"
  chmod 0700 "$dir"
  rm -f "$dir/id_ed25519" "$dir/id_ed25519.pub"
  ssh-keygen -q -t ed25519 -N '' -C "cuda13-upgrade sandbox" -f "$dir/id_ed25519"
fi
if ! cmp -s "$dir/id_ed25519.pub" "$dir/authorized_keys" 2>/dev/null; then
  install -m 0644 "$dir/id_ed25519.pub" "$dir/authorized_keys"
fi
