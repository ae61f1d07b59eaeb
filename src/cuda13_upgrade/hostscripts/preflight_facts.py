"""What the preflight reads on a host, in one run (module ``cuda13_host_facts``).

Runs on the managed host, standard library only, and changes nothing.

nvidia-smi hangs on a GPU or driver in a bad state (RmInitAdapter failures, Xid
errors, the wrong kernel module flavour). The query of the GPUs runs first; when it
fails (or hangs) nvidia-smi is not run again (``table`` and ``compute_apps`` are
``{"skipped": true, "msg"}``): the preflight refuses the host on that query alone,
and a hang costs one timeout, not three. Each run goes under coreutils
``timeout --foreground --kill-after=10 SECONDS``, so that a hang ends with an exit
status the preflight names (124, or 137 when TERM was not enough and KILL
followed 10 s later; ``--foreground`` makes timeout itself exit so, instead of
signalling its own process group). A process stuck in the kernel outlives even
KILL, and timeout waits for it: this module gives up 40 s later (KILL's 10 s and
30 s more) and records the run as timed out, for the same report.

Read: the GPUs (``--query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,pci.bus_id``),
the loaded kernel module's version (``/proc/driver/nvidia/version``, whose first
line names the module's flavour), nvidia-smi's table header (the CUDA version),
the processes on the GPUs (``--query-compute-apps``) and each one's control group
(``/proc/<pid>/cgroup``, to tell the service's own from others), the unit's main
pid, control group, load state and ``ExecStart``, the kernel release and
machine, the free space where the run writes (``df``, and every place of
``space_places`` through ``space_probe``), the Python version, and whether the
serving venv's Python exists.
"""

from __future__ import annotations

import os
import subprocess

from .space_probe import _mount_types, measure

GPU_FIELDS = ("index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "pci.bus_id")
#: nvidia-smi's arguments of the preflight's query of the GPUs (the fields of GPU_FIELDS).
GPU_QUERY = (
    "--query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,pci.bus_id",
    "--format=csv,noheader,nounits",
)
#: nvidia-smi's arguments of the query of the processes on the GPUs.
APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits")


def _run(argv: list[str], timeout: float | None = 120) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError as exc:
        return {
            "rc": 127,
            "stdout": "",
            "stderr": str(exc),
            "msg": f"[Errno 2] No such file or directory: {argv[0]!r}",
        }
    except OSError as exc:
        return {"rc": 126, "stdout": "", "stderr": str(exc), "msg": str(exc)}
    except subprocess.TimeoutExpired:
        return {
            "rc": None,
            "stdout": "",
            "stderr": "",
            "timedout": True,
            "msg": f"The command action failed to execute in the expected time frame ({timeout})"
            " and was terminated",
        }
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _nvidia_smi(command: list[str], timeout: int) -> dict:
    """``command`` (nvidia-smi and its arguments) under coreutils timeout (see the module docstring)."""
    argv = ["timeout", "--foreground", "--kill-after=10", str(timeout), *command]
    return _run(argv, timeout=timeout + 40)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def facts(params: dict) -> dict:
    """See the module docstring; ``params`` as :data:`FACTS_SPEC`."""
    nvidia_smi, timeout = params["nvidia_smi"], int(params["nvidia_smi_timeout"])
    out: dict = {}
    out["query"] = _nvidia_smi([nvidia_smi, *GPU_QUERY], timeout)
    out["proc_version"] = _read("/proc/driver/nvidia/version")
    if out["query"].get("rc") == 0:
        out["table"] = _nvidia_smi([nvidia_smi], timeout)
        out["compute_apps"] = _nvidia_smi([nvidia_smi, *APPS_QUERY], timeout)
    else:
        # The preflight refuses the host on the query alone; a hung nvidia-smi is waited for once.
        out["table"] = out["compute_apps"] = {"skipped": True, "msg": "not run: the query of the GPUs failed"}
    unit = params["unit"]
    out["unit"] = _run(["systemctl", "show", "--property=MainPID", "--property=ControlGroup", unit])
    cgroups = {}
    if out["compute_apps"].get("rc") == 0:
        for line in out["compute_apps"]["stdout"].splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[1].isdigit():
                cgroups[parts[1]] = _read(f"/proc/{parts[1]}/cgroup")
    out["cgroups"] = cgroups
    out["uname"] = _run(["uname", "-r", "-m"])
    out["df"] = _run(["df", "--output=avail", "--block-size=1", params["disk_path"]])
    places = {k: v for k, v in (params.get("space_places") or {}).items() if v}
    if places:
        types = _mount_types()
        out["space"] = {name: measure(path, types) for name, path in places.items()}
    else:
        out["space"] = None
    out["python"] = _run([params["python"], "-c", "import platform; print(platform.python_version())"])
    if params.get("host_checks"):
        out["unit_show"] = _run(["systemctl", "show", "--property=LoadState", "--property=ExecStart", unit])
        out["old_python_exists"] = os.path.exists(os.path.join(params["old_venv"], "bin", "python"))
    return out


#: The argument spec of the module cuda13_host_facts.
FACTS_SPEC = {
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "nvidia_smi_timeout": {"type": "int", "default": 60},
    "unit": {"type": "str", "required": True},
    "disk_path": {"type": "path", "required": True},
    "space_places": {"type": "dict", "default": {}},
    "python": {"type": "str", "default": "/usr/bin/python3"},
    "host_checks": {"type": "bool", "default": True},
    "old_venv": {"type": "path", "default": "/opt/ml-env"},
}


def facts_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_host_facts: :func:`facts`."""
    return {"changed": False, "facts": facts(params)}
