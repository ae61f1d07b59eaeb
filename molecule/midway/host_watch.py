"""Wait, from the control node, until a path appears on a sandbox host."""

import subprocess
import time

# The drop-in the switch writes (roles/stack_switch): once it exists, the
# service is being moved to the new stack.
SWITCH_DROPIN = "/etc/systemd/system/sglang.service.d/50-cuda13-upgrade.conf"


def wait_for_path(host: str, path: str, running, timeout_s: float = 600.0, every_s: float = 0.2) -> bool:
    """True once ``path`` exists on ``host`` (polled with podman exec every
    ``every_s`` seconds); False when ``running()`` turns false or ``timeout_s``
    passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running():
        if subprocess.run(["podman", "exec", host, "test", "-e", path], check=False).returncode == 0:
            return True
        time.sleep(every_s)
    return False
