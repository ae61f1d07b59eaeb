"""Wait, from the control node, until a path appears on a sandbox host.

A poll must not cost the machine what the lanes beside it need: a `podman
exec` starts podman, conmon and runc (about 60 ms of CPU in podman alone,
measured here, more on a loaded machine), and these waits poll 5 to 10 times
a second for minutes. So the poll is a stat through the container's init
process, /proc/<pid>/root (the host's whole mount namespace, its tmpfs mounts
included), and each sighting is confirmed once inside the host with `podman
exec test -e` before the caller acts on it.
"""

import os
import subprocess
import time

# The drop-in the switch writes (roles/stack_switch): once it exists, the
# service is being moved to the new stack.
SWITCH_DROPIN = "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf"


def container_root(host: str) -> str | None:
    """``/proc/<pid>/root`` of the host's init process, or None when podman does not name one."""
    proc = subprocess.run(
        ["podman", "inspect", "--format", "{{.State.Pid}}", host], capture_output=True, text=True, check=False
    )
    pid = proc.stdout.strip()
    return f"/proc/{pid}/root" if proc.returncode == 0 and pid.isdigit() and int(pid) > 0 else None


def seen(root: str | None, *paths: str) -> bool:
    """Whether every path may exist on the host: True when there is no root to look through."""
    if root is None:
        return True
    try:
        return all(os.path.lexists(root + path) for path in paths)
    except OSError:
        return True


def wait_for_path(host: str, path: str, running, timeout_s: float = 600.0, every_s: float = 0.2) -> bool:
    """True once ``path`` exists on ``host`` (looked for every ``every_s``
    seconds through :func:`container_root`, confirmed with podman exec);
    False when ``running()`` turns false or ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    root = container_root(host)
    while time.monotonic() < deadline and running():
        if (
            seen(root, path)
            and subprocess.run(["podman", "exec", host, "test", "-e", path], check=False).returncode == 0
        ):
            return True
        time.sleep(every_s)
    return False


def rollout_running(run_id: str) -> bool:
    """Whether a process on this machine runs with ``--run-id RUN_ID`` among its arguments."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if any(a == "--run-id" and b == run_id for a, b in zip(argv, argv[1:], strict=False)):
            return True
    return False
