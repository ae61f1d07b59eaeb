#!/usr/bin/env bash
# Build the sandbox host image: Debian 12 (bookworm), systemd as PID 1, python3.
# No registry is reachable, so the root filesystem comes from debootstrap and is
# imported with `podman import`. The image tag carries a hash of this recipe:
# an image built from the same recipe is reused, a changed recipe builds anew.
#
# Usage: build-image.sh            prints the image reference on stdout
# Env:   SANDBOX_DEBIAN_MIRROR     Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/../containers.conf}"
mirror="${SANDBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
recipe_hash="$(cat "$here/build-image.sh" "$here/packages.txt" | sha256sum | cut -c1-12)"
image="localhost/cuda13-sandbox:${recipe_hash}"

# The key the hosts authorize is the checkout's, not the image's.
"$here/ssh-key.sh"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

include="$(grep -v '^#' "$here/packages.txt" | grep -v '^$' | paste -sd, -)"
rootfs="$(mktemp -d /var/tmp/cuda13-sandbox-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT

echo "building $image with debootstrap (about a minute)" >&2
debootstrap --variant=minbase --include="$include" bookworm "$rootfs" "$mirror" >&2

# A container needs neither getty nor the units that wait for hardware.
chroot "$rootfs" systemctl mask \
  getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-remount-fs.service \
  sys-kernel-debug.mount sys-kernel-tracing.mount >&2 || true
echo "cuda13-sandbox" > "$rootfs/etc/hostname"
# SSH without a listening daemon: Ansible's ssh connection reaches the host
# through `podman exec -i HOST /usr/sbin/sshd -i` (ProxyCommand), one sshd per
# connection, multiplexed by ssh's ControlMaster. Root logs in with the
# checkout's key, mounted read-only (ssh-key.sh); sshd needs /run/sshd.
chroot "$rootfs" systemctl disable ssh.service >&2 || true
chroot "$rootfs" systemctl mask ssh.service ssh.socket >&2 || true
echo 'd /run/sshd 0755 root root -' > "$rootfs/usr/lib/tmpfiles.d/sandbox-sshd.conf"
cat > "$rootfs/etc/ssh/sshd_config.d/sandbox.conf" <<'EOF'
# Sandbox host: sshd -i behind podman exec, root with the checkout's key only.
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/sandbox_authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
EOF
# The sandbox host is offline (--network none): its only package source is the
# local mirror that the provisioning adds.
echo "# offline sandbox host: packages come from the local mirror only" > "$rootfs/etc/apt/sources.list"
rm -f "$rootfs"/var/cache/apt/archives/*.deb
rm -rf "$rootfs"/var/lib/apt/lists/*

tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' \
  --change 'ENV container=podman' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  - "$image" >&2
echo "$image"
