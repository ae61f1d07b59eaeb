#!/usr/bin/env python3
"""The provisioned CUDA 12.8-era sandbox host as an image layer, built once per machine.

Every molecule scenario that upgrades a host starts from the same host: the
base image (``build-image.sh``) provisioned by the ``sandbox_host`` role with
its defaults (the 12.8 toolkit from the mirror's apt repository, the serving
venv with the cu128 wheels, the SGLang tree built into it, the unit, the
router). Provisioning that host takes minutes a host; this script does it once,
commits the container as ``localhost/cuda13-sandbox-host:<key>`` and prints
that reference. A scenario host starts from it, and its prepare runs the same
role again, which changes only the host's difference from the defaults
(another nvidia-smi state, scenario file, service user, unit settings).

The key is a SHA-256 over everything that goes into the layer: the base
image's reference (itself a hash of its recipe), the mirror's build stamp
(``.sandbox/mirror/.build-stamp``: its inputs and signing key), every file
under ``sandbox/`` (the host doubles, the SGLang stand-in, the mirror's
sources and scenarios), the ``sandbox_host`` role, the readiness wait it calls,
and the provisioning playbook. A changed input gives a new key and so a new
layer; a layer is never reused for other inputs.

Usage: host-layer.py --base-image REF [--mirror DIR]   prints the layer's reference
       host-layer.py --key --base-image REF           prints the key only
Exit status 1 (with the provisioning's output on stderr) when the build fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "localhost/cuda13-sandbox-host"
LABEL = "cuda13-upgrade.sandbox"
# The inputs of the layer, relative to the checkout: directories are taken
# whole (every file under them, sorted), files as they are.
INPUTS = (
    "sandbox",
    "roles/cuda13/tasks/serve.yml",
    "src/cuda13_upgrade/hostscripts/service_cycle.py",
    "src/cuda13_upgrade/hostscripts/server_auth.py",
    "molecule/shared/prepare.yml",
    "molecule/shared/provision.yml",
    "sandbox/image/host-layer.py",
)
# Build products and caches beside the sources, never inputs.
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def input_files(root: Path) -> list[Path]:
    """The files that go into the layer, sorted, relative to ``root``; a missing input is an error.

    In a git checkout: the tracked files and the untracked ones git does not
    ignore (so a build product such as an ``.egg-info`` beside the SGLang
    stand-in never changes the key); elsewhere every file but caches.
    """
    for name in INPUTS:
        if not (root / name).exists():
            raise FileNotFoundError(f"host layer input {name} is missing under {root}")
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"]
        + list(INPUTS),
        capture_output=True,
    )
    if listed.returncode == 0 and (root / ".git").exists():
        names = {n for n in listed.stdout.decode().split("\0") if n}
        return sorted(Path(n) for n in names if (root / n).is_file())
    files: set[Path] = set()
    for name in INPUTS:
        path = root / name
        if path.is_dir():
            for item in path.rglob("*"):
                if item.is_file() and not SKIP_PARTS.intersection(item.relative_to(root).parts):
                    files.add(item.relative_to(root))
        elif path.is_file():
            files.add(path.relative_to(root))
        else:
            raise FileNotFoundError(f"host layer input {name} is missing under {root}")
    return sorted(files)


def layer_key(root: Path, base_image: str, mirror_stamp: str) -> str:
    """The layer's key: 16 hex digits of SHA-256 over the base image, the mirror stamp and the inputs.

    Each file contributes its path and its bytes (and whether it is
    executable: the role copies files with their mode), so a renamed, edited
    or re-moded file changes the key.
    """
    digest = hashlib.sha256()
    digest.update(f"base-image {base_image}\nmirror-stamp {mirror_stamp.strip()}\n".encode())
    for rel in input_files(root):
        path = root / rel
        digest.update(f"file {rel.as_posix()} {os.access(path, os.X_OK)}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args],
        check=check,
        text=True,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=subprocess.PIPE if capture else sys.stderr,
    )


def inventory_text(name: str) -> str:
    """An inventory of the one build container, reached as molecule's hosts are (ssh through podman exec)."""
    key = ROOT / ".sandbox" / "ssh" / "id_ed25519"
    return (
        "all:\n  hosts:\n"
        f"    {name}:\n"
        "      ansible_connection: ssh\n"
        "      ansible_user: root\n"
        f"      ansible_ssh_private_key_file: {key}\n"
        "      ansible_ssh_common_args: >-\n"
        '        -o ProxyCommand="podman exec -i %h /usr/sbin/sshd -i"\n'
        "        -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR\n"
        "      ansible_host_key_checking: false\n"
        "      ansible_ssh_timeout: 120\n"
        "      ansible_python_interpreter: /usr/bin/python3\n"
    )


def build(base_image: str, mirror: Path, image: str) -> None:
    """Start a container from the base image, provision it, stop its services and commit it as ``image``."""
    name = f"cuda13-host-layer-{os.getpid()}"
    podman(
        "run",
        "--detach",
        "--name",
        name,
        "--hostname",
        "cuda13-sandbox",
        "--label",
        f"{LABEL}=cuda13-host-layer",
        "--systemd=always",
        "--network",
        "none",
        "--volume",
        f"{ROOT / '.sandbox' / 'ssh' / 'authorized_keys'}:/etc/ssh/sandbox_authorized_keys:ro",
        "--volume",
        f"{mirror}:/srv/mirror:ro",
        base_image,
        "/sbin/init",
    )
    try:
        with tempfile.TemporaryDirectory(prefix="cuda13-host-layer-") as tmp:
            inventory = Path(tmp) / "hosts.yml"
            inventory.write_text(inventory_text(name))
            env = dict(os.environ)
            env.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
            env["ANSIBLE_ROLES_PATH"] = f"{ROOT / 'roles'}:{ROOT / 'sandbox' / 'roles'}"
            env["ANSIBLE_FILTER_PLUGINS"] = str(ROOT / "filter_plugins")
            env["ANSIBLE_ACTION_PLUGINS"] = str(ROOT / "action_plugins")
            env["ANSIBLE_LIBRARY"] = str(ROOT / "library")
            env["ANSIBLE_MODULE_UTILS"] = str(ROOT / "module_utils")
            playbook = ROOT / "molecule" / "shared" / "provision.yml"
            print(f"building {image}: provisioning {name} ({playbook.relative_to(ROOT)})", file=sys.stderr)
            ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
            subprocess.run(
                [str(ansible_playbook), "-i", str(inventory), str(playbook)],
                check=True,
                env=env,
                stdout=sys.stderr,
                stdin=subprocess.DEVNULL,
            )
        # The layer is a host that has booted once and been provisioned: its
        # services are enabled and start at the next boot; what they wrote
        # while running (router events, journal, machine id) goes, so that a
        # scenario host starts as a freshly provisioned one.
        podman(
            "exec",
            name,
            "sh",
            "-c",
            "systemctl stop sglang.service sglang-router.service sandbox-mirror.service"
            " && rm -f /var/log/sglang-router-events.jsonl && : > /etc/machine-id"
            f" && printf '%s\\n' '{{\"layer\": \"{image}\"}}' > /etc/sandbox-host-layer.json"
            " && rm -rf /var/log/journal/* /var/lib/apt/lists/partial/*",
        )
        podman("stop", "--time", "30", name)
        podman(
            "commit",
            "--quiet",
            "--change",
            'CMD ["/sbin/init"]',
            "--change",
            "STOPSIGNAL SIGRTMIN+3",
            name,
            image,
        )
    finally:
        podman("rm", "--force", "--volumes", name, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", required=True, help="the base image (build-image.sh's output)")
    parser.add_argument("--mirror", type=Path, default=ROOT / ".sandbox" / "mirror", help="the built mirror")
    parser.add_argument("--key", action="store_true", help="print the layer's key and build nothing")
    args = parser.parse_args(argv)

    stamp_file = args.mirror / ".build-stamp"
    if not stamp_file.is_file():
        parser.error(f"--mirror {args.mirror}: no .build-stamp, build the mirror first (make mirror)")
    key = layer_key(ROOT, args.base_image, stamp_file.read_text())
    image = f"{REPOSITORY}:{key}"
    if args.key:
        print(key)
        return 0
    if podman("image", "exists", image, check=False).returncode != 0:
        try:
            build(args.base_image, args.mirror.resolve(), image)
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or "").strip() if isinstance(exc.stderr, str) else ""
            print(
                f"host layer {image}: {' '.join(map(str, exc.cmd[:3]))} failed ({exc.returncode}) {detail}",
                file=sys.stderr,
            )
            return 1
    print(image)
    return 0


if __name__ == "__main__":
    sys.exit(main())
