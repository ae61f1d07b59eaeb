#!/usr/bin/env python3
"""Put the SGLang service through one planned restart and wait until it generates.

Runs on the managed host, standard library only, for every start of the
service into a profile (module ``cuda13_service``, called by
:func:`cuda13_upgrade.steps.serve.serve`): the baseline, the switch, the
verify, its restore and the rollback. One run does, in order:

1. **Decide** (``--restart``): ``always``; ``never``; ``when-changed`` restarts
   when ``--files-changed`` is given or the main process does not run
   ``--venv``'s Python with ``--exec-start`` plus ``--args-json`` (read from
   ``/proc/<MainPID>/cmdline``, proc(5)): a run cut off between writing the
   drop-ins and the restart left the files in place with the old server running.
2. **Stop** (``systemctl daemon-reload``, ``systemctl stop``), then wait until the
   unit's processes are gone and hold no GPU memory. SGLang's scheduler
   processes can outlive the server and hold tens of GB per GPU
   (sgl-project/sglang#23627); the next stack would then start on occupied
   GPUs. A process is the unit's when it is still in the unit's control group
   (``systemctl show -p ControlGroup``; ``/sys/fs/cgroup<group>/cgroup.procs``,
   or the group named in ``/proc/<pid>/cgroup``). The GPUs' compute processes
   come from ``nvidia-smi --query-compute-apps=pid,used_memory
   --format=csv,noheader,nounits`` (one ``<pid>, <MiB>`` line per process and
   GPU). The unit's leftovers are waited for ``--leftover-timeout`` seconds,
   then sent SIGTERM, and SIGKILL ``--kill-after`` seconds later. Processes of
   other units on the GPUs are named, never signalled.
3. **Start**: ``systemctl reset-failed`` first. A restart counts toward the
   unit's start limit (StartLimitBurst within StartLimitIntervalSec); past it
   systemd refuses with "Start request repeated too quickly" and the result
   start-limit-hit (systemd/systemd#10529). ``reset-failed`` flushes the
   unit's start rate counter, so a planned restart is not taken for a crash
   loop. Then ``systemctl start``.
4. **Wait until it generates** (``--ready-url``): ready means "generates", not
   "/health says 200". SGLang's /health may answer 200 while requests still
   block (sgl-project/sglang#33719); /health_generate runs a real one-token
   generation and answers 503 when none finished within
   SGLANG_HEALTH_CHECK_TIMEOUT (20 s) (python/sglang/srt/entrypoints/http_server.py),
   so each attempt waits 30 s. A server without /health_generate (404) is asked
   for a one-token ``/v1/completions`` instead. Attempts repeat every second
   until ``--ready-timeout`` seconds have passed.
5. **Read** what the main process runs now, for the check that it runs the
   profile (:func:`cuda13_upgrade.restarts.serve_outcome`).
6. With ``--server-info``, once it generates: **read its effective
   configuration**, ``GET /get_server_info`` (SGLang: the server arguments as
   it resolved them, python/sglang/srt/entrypoints/http_server.py), and the
   lines the unit logged since it started (``systemctl show -p InvocationID``,
   ``journalctl _SYSTEMD_INVOCATION_ID=<id>``), up to SGLang's "The server is
   fired up and ready to roll!" and at most ``--startup-lines``: where the
   server says it turned off a path it was asked for
   (``cuda13_upgrade.effective`` reads them). Its ``api_key`` and ``admin_api_key``
   fields are left out (``server_auth.SECRET_FIELDS``).

Steps 4 and 6 send the ``--api-key`` the unit's running server was started with, read from
its processes' command lines, as ``Authorization: Bearer <key>`` (SGLang answers 401 to
``/v1/completions`` and ``/get_server_info`` without it; ``server_auth``); the key is in
nothing this prints.

When the start fails or the server does not generate, the last
``--journal-lines`` lines of the unit's journal are included; with ``--journal``
always (after a request to the running server failed: what it logged says why).

Usage: service_cycle.py --unit sglang.service [--restart always|when-changed|never]
[--files-changed] [--exec-start CMD --venv DIR --args-json JSON]
[--leftover-timeout 30] [--kill-after 10] [--nvidia-smi nvidia-smi]
[--ready-url http://127.0.0.1:30000 --ready-timeout 900] [--journal-lines 30] [--journal]
[--server-info [--startup-lines 2000]].
Prints one JSON object::

    {"unit": "sglang.service", "restart": "always", "restarted": true,
     "release": {"free": true, "waited_s": 12.4,
                 "leftovers": [{"pid": 4242, "command": "/opt/ml-env/bin/python ...",
                                "gpu_memory_mib": 81234}],
                 "signalled": {"4242": "SIGTERM"}, "still_running": [],
                 "others": [{"pid": 77, "command": "...", "gpu_memory_mib": 512}], "nvidia_smi_error": null},
     "start_error": null,
     "ready": {"generated": true, "endpoint": "/health_generate", "waited_s": 41.0, "last": "200"},
     "journal": [], "main_pid": 4300, "cmdline_b64": "L29wdC9tbC1lbnYvYmluL3B5dGhvbgA..."}

``release`` is null without a restart, ``ready`` null without ``--ready-url``;
``cmdline_b64`` is the main process's ``/proc/<pid>/cmdline`` in base64 (empty
when none runs); with ``--server-info`` and a server that generates, also
``"server_info"`` (the JSON object, or null with ``"server_info_error"``) and
``"startup_log"`` (lines); ``cmdline_before_b64`` the same before the restart
(``when-changed`` only). Exit status 0 when every step that ran succeeded, 1
otherwise; ``--release-only`` stops after step 2 (no stop, no start), for a
unit already stopped.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import posixpath
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

try:
    from .server_auth import bearer, unit_api_key, without_secrets
except ImportError:  # run as a script: its directory is on sys.path
    from server_auth import bearer, unit_api_key, without_secrets  # type: ignore[no-redef]

# Seconds one readiness attempt may take: longer than SGLang's own 20 s wait
# (SGLANG_HEALTH_CHECK_TIMEOUT) for the generation /health_generate starts.
ATTEMPT_TIMEOUT_S = 30.0


def main_process_argv(cmdline: str | bytes | None) -> list[str]:
    """The argv of a process from its ``/proc/<pid>/cmdline`` (proc(5): the
    arguments each ended by a NUL byte), as text or bytes; ``[]`` when empty
    or None (not running)."""
    if not cmdline:
        return []
    text = cmdline.decode("utf-8", "replace") if isinstance(cmdline, bytes) else cmdline
    argv = text.split("\0")
    return argv[:-1] if argv[-1] == "" else argv


def running_args(cmdline: str | bytes | None, exec_start: str) -> list[str] | None:
    """The arguments the running server adds to the service's own command, or None.

    ``cmdline``: the main process's ``/proc/<pid>/cmdline`` (argv joined and ended
    by NUL bytes, proc(5)), as text or bytes; empty or None when the service is
    not running. ``exec_start``: the service's own command (the unit's ExecStart,
    a shell-quoted string). Returns the argv after the own command's words when
    the process runs that command, else None (another command, a wrapper, not
    running): the restart plan then restarts for every profile.
    """
    argv = main_process_argv(cmdline)
    if not argv:
        return None
    try:
        own = shlex.split(exec_start)
    except ValueError:
        return None
    if not own or argv[: len(own)] != own:
        return None
    return argv[len(own) :]


def main_process_venv(cmdline: str | bytes | None) -> str | None:
    """The virtual environment whose Python the server's main process runs, or None.

    ``cmdline``: the main process's ``/proc/<pid>/cmdline`` (proc(5)), as text or
    bytes. Returns ``VENV`` (normalised, no trailing slash) when the process's
    program, ``argv[0]``, is ``VENV/bin/python`` (or ``python3``, ``python3.X``),
    else None (not running, a wrapper script, a system Python). Which stack
    serves is read from this, not from the unit's files: a drop-in written but
    not yet applied (a run killed between the write and the restart) leaves
    the service on the other stack with the new stack's files in place.
    """
    argv = main_process_argv(cmdline)
    head, _, name = (argv[0] if argv else "").rpartition("/bin/")
    if not head or not re.fullmatch(r"python(3(\.\d+)?)?", name):
        return None
    return posixpath.normpath(head)


def serves(cmdline: str | bytes | None, exec_start: str, venv: str, args: Sequence[str]) -> bool:
    """Whether the main process runs ``venv``'s Python with ``exec_start`` plus ``args``
    (each compared as a string)."""
    return main_process_venv(cmdline) == posixpath.normpath(venv) and running_args(cmdline, exec_start) == [
        str(a) for a in args
    ]


def main_process(unit: str) -> tuple[int, bytes]:
    """The unit's MainPID (0 when none runs) and its /proc/<pid>/cmdline (b'' when gone)."""
    out = _systemctl("show", "--property=MainPID", "--value", unit)
    pid = int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip().isdigit() else 0
    if not pid:
        return 0, b""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return pid, handle.read()
    except OSError:
        return pid, b""


def _systemctl(*argv: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["systemctl", *argv], capture_output=True, text=True, check=False)
    except OSError as exc:
        return subprocess.CompletedProcess(["systemctl", *argv], 127, "", str(exc))


def control_group(unit: str) -> str:
    """The unit's control group path, e.g. /system.slice/sglang.service ('' if unknown)."""
    try:
        out = subprocess.run(
            ["systemctl", "show", "--property=ControlGroup", "--value", unit],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return ""
    return out or f"/system.slice/{unit}"


def unit_pids(group: str) -> set[int]:
    """Pids in the unit's control group (cgroup v2, or v1's name=systemd hierarchy)."""
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        try:
            with open(f"{root}{group}/cgroup.procs", encoding="ascii") as handle:
                return {int(line) for line in handle if line.strip().isdigit()}
        except OSError:
            continue
    return set()


def in_group(pid: int, group: str) -> bool:
    """Whether /proc/<pid>/cgroup places the process in the group."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
            # A container's processes may show the host's path above the unit's own.
            return any(line.rstrip("\n").split(":", 2)[-1].endswith(group) for line in handle)
    except OSError:
        return False


def command(pid: int) -> str:
    """The process's command line, or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


#: The arguments of the nvidia-smi command that lists the GPUs' compute processes.
GPU_PROCESSES_QUERY = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")


def parse_gpu_processes(text: str) -> dict[int, int]:
    """{pid: MiB summed over GPUs} from the output of ``nvidia-smi`` with
    :data:`GPU_PROCESSES_QUERY` (``<pid>, <MiB>`` per process and GPU; a memory
    value that is not a number, ``[N/A]``, counts 0). Other lines are left out."""
    used: dict[int, int] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            memory = int(parts[1]) if parts[1].isdigit() else 0
            used[int(parts[0])] = used.get(int(parts[0]), 0) + memory
    return used


def gpu_processes(nvidia_smi: str) -> tuple[dict[int, int], str | None]:
    """{pid: MiB summed over GPUs} of the compute processes, and an error text or None."""
    try:
        proc = subprocess.run(
            [nvidia_smi, *GPU_PROCESSES_QUERY],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        return {}, str(exc)
    if proc.returncode != 0:
        return {}, (proc.stdout + proc.stderr).strip() or f"exit status {proc.returncode}"
    return parse_gpu_processes(proc.stdout), None


def alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def release(unit: str, *, timeout: float, kill_after: float, nvidia_smi: str, interval: float) -> dict:
    """Wait until the stopped unit's processes are gone and hold no GPU memory (step 2).

    Returns ``{"free", "waited_s", "leftovers", "signalled", "still_running", "others",
    "nvidia_smi_error"}`` (see the module's docstring)."""
    group = control_group(unit)
    started = time.monotonic()
    leftovers: dict[int, dict] = {}
    others: dict[int, dict] = {}
    signalled: dict[str, str] = {}
    error = None
    term_at = None
    while True:
        used, error = gpu_processes(nvidia_smi)
        mine = {p for p in unit_pids(group) if alive(p)}
        mine |= {p for p in used if in_group(p, group)}
        for pid in mine:
            leftovers.setdefault(
                pid, {"pid": pid, "command": command(pid), "gpu_memory_mib": used.get(pid, 0)}
            )
        for pid in set(used) - mine:
            others.setdefault(pid, {"pid": pid, "command": command(pid), "gpu_memory_mib": used[pid]})
        holding = {p for p in mine if alive(p)}
        if not holding:
            break
        waited = time.monotonic() - started
        if term_at is None and waited >= timeout:
            _signal(holding, signal.SIGTERM, signalled)
            term_at = time.monotonic()
        elif term_at is not None and time.monotonic() - term_at >= kill_after:
            if all(signalled.get(str(p)) == "SIGKILL" for p in holding):
                if time.monotonic() - term_at >= kill_after + 5:
                    break
            _signal(holding, signal.SIGKILL, signalled)
        time.sleep(interval)
    used, error = gpu_processes(nvidia_smi)
    still = [p for p in leftovers if alive(p) or p in used]
    return {
        "free": not still,
        "waited_s": round(time.monotonic() - started, 2),
        "leftovers": sorted(leftovers.values(), key=lambda e: e["pid"]),
        "signalled": signalled,
        "still_running": still,
        "others": sorted(others.values(), key=lambda e: e["pid"]),
        "nvidia_smi_error": error,
    }


def _signal(pids: set[int], sig: signal.Signals, signalled: dict[str, str]) -> None:
    """Send ``sig`` to each pid still there; record it in ``signalled`` ({pid: signal name})."""
    for pid in pids:
        try:
            os.kill(pid, sig)
            signalled[str(pid)] = sig.name
        except OSError:
            pass


def _attempt(request: urllib.request.Request) -> tuple[int, str]:
    """One HTTP attempt: (status, what it answered); status 0 when no answer came.

    The text follows ansible.builtin.uri's messages ("Status code was 503 and not
    [200]: HTTP Error 503: ...", "Request failed: <urlopen error ...>")."""
    try:
        with urllib.request.urlopen(request, timeout=ATTEMPT_TIMEOUT_S) as response:
            response.read()
            return response.status, str(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code, f"Status code was {exc.code} and not [200]: {exc}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return 0, f"Request failed: {exc}"


def wait_until_generates(url: str, timeout: float, *, interval: float = 1.0) -> dict:
    """Step 4: ``{"generated": bool, "endpoint": str, "waited_s": float, "last": str}``.

    ``url`` is the server's base URL without a trailing slash; ``timeout`` in seconds."""
    started = time.monotonic()
    endpoint = "/health_generate"
    last = "none"
    while True:
        if endpoint == "/health_generate":
            status, last = _attempt(urllib.request.Request(url + endpoint))
            if status == 404:
                endpoint = "/v1/completions"
                continue
        else:
            body = json.dumps({"prompt": "ready", "max_tokens": 1, "temperature": 0}).encode()
            status, last = _attempt(
                urllib.request.Request(
                    url + endpoint, data=body, headers={"Content-Type": "application/json"}, method="POST"
                )
            )
        if status == 200:
            return {"generated": True, "endpoint": endpoint, "waited_s": _since(started), "last": last}
        if time.monotonic() - started + interval >= timeout:
            return {"generated": False, "endpoint": endpoint, "waited_s": _since(started), "last": last}
        time.sleep(interval)


def journal_tail(unit: str, lines: int) -> list[str]:
    """The unit's last journal lines (journalctl --output cat), [] when unreadable."""
    try:
        out = subprocess.run(
            ["journalctl", "--unit", unit, "--lines", str(lines), "--no-pager", "--output", "cat"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return []
    return out.stdout.splitlines()


# SGLang's line once the server serves (python/sglang/srt/entrypoints/http_server.py).
READY_LINE = "The server is fired up and ready to roll!"


def startup_log(unit: str, limit: int) -> list[str]:
    """The lines the unit's current run logged, up to the ready line, at most ``limit``
    ([] when the run or the journal cannot be read)."""
    invocation = _systemctl("show", "--property=InvocationID", "--value", unit).stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{32}", invocation):
        return []
    try:
        out = subprocess.run(
            ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "--no-pager", "--output", "cat"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return []
    lines: list[str] = []
    for line in out.stdout.splitlines():
        if len(lines) >= limit:
            break
        lines.append(line)
        if READY_LINE in line:
            break
    return lines


def server_info(url: str) -> tuple[dict | None, str | None]:
    """``GET <url>/get_server_info``: (the JSON object without ``server_auth.SECRET_FIELDS``, None) or
    (None, why not)."""
    try:
        with urllib.request.urlopen(url + "/get_server_info", timeout=ATTEMPT_TIMEOUT_S) as response:
            document = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        return None, f"Status code was {exc.code} and not [200]: {exc}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, f"Request failed: {exc}"
    if not isinstance(document, dict):
        return None, f"not a JSON object: {str(document)[:200]}"
    return without_secrets(document), None


def _step(result: dict, verb: str, unit: str) -> bool:
    """``systemctl VERB UNIT``; on failure its message goes to ``result["start_error"]``."""
    done = _systemctl(verb, unit)
    if done.returncode != 0:
        result["start_error"] = f"systemctl {verb} {unit}: {(done.stderr or done.stdout).strip()}"
    return done.returncode == 0


def _since(started: float) -> float:
    return round(time.monotonic() - started, 2)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def cycle(
    unit: str,
    *,
    restart: str = "never",
    files_changed: bool = False,
    exec_start: str = "",
    venv: str = "",
    args: Sequence[str] = (),
    leftover_timeout: float = 30.0,
    kill_after: float = 10.0,
    nvidia_smi: str = "nvidia-smi",
    interval: float = 0.5,
    release_only: bool = False,
    ready_url: str = "",
    ready_timeout: float = 900.0,
    journal_lines: int = 30,
    server_info_too: bool = False,
    startup_lines: int = 2000,
    journal_too: bool = False,
) -> tuple[dict, bool]:
    """Steps 1-6 of the module docstring for ``unit``; returns (the result object, whether
    every step that ran succeeded). The keyword arguments are the command line's options."""
    result: dict = {
        "unit": unit,
        "restart": restart,
        "restarted": False,
        "release": None,
        "start_error": None,
        "ready": None,
        "journal": [],
    }
    ok = True
    do_restart = restart == "always"
    if restart == "when-changed":
        _, before = main_process(unit)
        result["cmdline_before_b64"] = _b64(before)
        do_restart = files_changed or not serves(before, exec_start, venv, list(args))
    if do_restart and not release_only:
        result["restarted"] = True
        _systemctl("daemon-reload")
        ok = _step(result, "stop", unit)
    if ok and (release_only or do_restart):
        result["release"] = release(
            unit, timeout=leftover_timeout, kill_after=kill_after, nvidia_smi=nvidia_smi, interval=interval
        )
        ok = result["release"]["free"]
    if ok and do_restart and not release_only:
        _systemctl("reset-failed", unit)
        ok = _step(result, "start", unit)
    if ok and ready_url:
        # A server started with --api-key answers 401 to /v1/completions and /get_server_info
        # without its key (/health_generate is exempt): the key of the unit's running server.
        with bearer(unit_api_key(unit)):
            result["ready"] = wait_until_generates(ready_url.rstrip("/"), ready_timeout)
            ok = result["ready"]["generated"]
            if ok and server_info_too:
                result["server_info"], result["server_info_error"] = server_info(ready_url.rstrip("/"))
        if ok and server_info_too:
            result["startup_log"] = startup_log(unit, startup_lines)
    if journal_too or (not ok and (result["start_error"] or result["ready"])):
        result["journal"] = journal_tail(unit, journal_lines)
    result["main_pid"], cmdline = main_process(unit)
    result["cmdline_b64"] = _b64(cmdline)
    return result, ok


def profile_dropin(exec_start: str, args: Sequence[str], *, unit: str, about: str, managed: str) -> str:
    """The profile drop-in's text: ExecStart reset, then the service's own command with the
    profile's arguments, each shell-quoted (systemd.service(5) splits ExecStart by its own
    quoting rules, which accept POSIX single quotes). ``managed``: the first comment line."""
    command = " ".join([exec_start, *(shlex.quote(str(a)) for a in args)])
    return (
        f"# {managed}\n"
        f"# cuda13-upgrade: {unit} with the arguments of\n"
        f"# {about}.\n"
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={command}\n"
    )


def set_dropin(path: str, content: str | None, *, check_mode: bool = False) -> bool:
    """Write the drop-in ``path`` with ``content`` (0644, its directory 0755), or remove it
    when ``content`` is None; returns whether it changed."""
    if content is None:
        if not os.path.lexists(path):
            return False
        if not check_mode:
            os.unlink(path)
        return True
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == content and (os.stat(path).st_mode & 0o7777) == 0o644:
                return False
    except OSError:
        pass
    if not check_mode:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        scratch = path + ".cuda13-tmp"
        with open(scratch, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(scratch, 0o644)
        os.replace(scratch, path)
    return True


#: The argument spec of the module cuda13_service.
SERVICE_SPEC = {
    "unit": {"type": "str", "required": True},
    "dropin_path": {"type": "path"},
    "dropin_content": {"type": "str"},
    "restart": {"type": "str", "choices": ["always", "never", "when-changed"], "default": "always"},
    "changed": {"type": "bool", "default": False},
    "exec_start": {"type": "str", "default": ""},
    "venv": {"type": "str", "default": ""},
    "args": {"type": "list", "elements": "str", "default": []},
    "leftover_timeout": {"type": "float", "default": 30.0},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "url": {"type": "str", "default": ""},
    "ready_timeout": {"type": "float", "default": 900.0},
    "server_info": {"type": "bool", "default": True},
    "journal": {"type": "bool", "default": False},
}


def _read_text(path: str) -> str:
    """The file's text, '' when it is not there or cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def service_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_service: the profile drop-in (unless ``restart`` is never), then
    :func:`cycle` (not in check mode). A drop-in that changes (or would, in check mode) comes
    with ``diff`` (``before``, ``after``, their headers: the path), which ansible-playbook's
    ``--diff`` shows as it shows a template's."""
    dropin_changed = False
    diff = None
    if params["restart"] != "never" and params.get("dropin_path"):
        path = params["dropin_path"]
        before = _read_text(path)
        try:
            dropin_changed = set_dropin(path, params.get("dropin_content"), check_mode=check_mode)
        except OSError as exc:
            return {"failed": True, "msg": f"cannot write the profile drop-in {path}: {exc}"}
        if dropin_changed:
            diff = {
                "before_header": path,
                "after_header": path if params.get("dropin_content") is not None else f"{path} (removed)",
                "before": before,
                "after": params.get("dropin_content") or "",
            }
    extra = {"diff": diff} if diff else {}
    if check_mode:
        return {
            "changed": dropin_changed,
            "dropin_changed": dropin_changed,
            "cycle": None,
            "ok": True,
            **extra,
        }
    record, ok = cycle(
        params["unit"],
        restart=params["restart"],
        files_changed=params["changed"] or dropin_changed,
        exec_start=params["exec_start"],
        venv=params["venv"],
        args=params["args"],
        leftover_timeout=params["leftover_timeout"],
        nvidia_smi=params["nvidia_smi"],
        ready_url=params["url"],
        ready_timeout=params["ready_timeout"],
        server_info_too=params["server_info"],
        journal_too=params["journal"],
    )
    return {
        "changed": dropin_changed or record["restarted"],
        "dropin_changed": dropin_changed,
        "cycle": record,
        "ok": ok,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--restart", choices=["always", "when-changed", "never"], default="never")
    parser.add_argument("--files-changed", action="store_true", help="a drop-in changed (when-changed)")
    parser.add_argument("--exec-start", default="", help="the service's own command")
    parser.add_argument("--venv", default="", help="the venv whose Python the server must run")
    parser.add_argument("--args-json", default="[]", help="the profile's arguments, a JSON list")
    parser.add_argument(
        "--leftover-timeout",
        "--timeout",
        type=float,
        default=30.0,
        dest="leftover_timeout",
        help="seconds to wait for leftovers before SIGTERM",
    )
    parser.add_argument("--kill-after", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL")
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--release-only", action="store_true", help="only step 2, for a stopped unit")
    parser.add_argument("--ready-url", default="", help="base URL to wait at until the server generates")
    parser.add_argument("--ready-timeout", type=float, default=900.0)
    parser.add_argument("--journal-lines", type=int, default=30)
    parser.add_argument(
        "--server-info",
        action="store_true",
        help="read /get_server_info and the start-up log once it generates",
    )
    parser.add_argument("--startup-lines", type=int, default=2000)
    parser.add_argument("--journal", action="store_true", help="include the journal's last lines always")
    args = parser.parse_args(argv)
    try:
        profile_args = json.loads(args.args_json)
    except ValueError as exc:
        parser.error(f"--args-json: not JSON: {exc}")
    if not isinstance(profile_args, list):
        parser.error(f"--args-json must be a JSON list, got {args.args_json!r}")
    result, ok = cycle(
        args.unit,
        restart=args.restart,
        files_changed=args.files_changed,
        exec_start=args.exec_start,
        venv=args.venv,
        args=profile_args,
        leftover_timeout=args.leftover_timeout,
        kill_after=args.kill_after,
        nvidia_smi=args.nvidia_smi,
        interval=args.interval,
        release_only=args.release_only,
        ready_url=args.ready_url,
        ready_timeout=args.ready_timeout,
        journal_lines=args.journal_lines,
        server_info_too=args.server_info,
        startup_lines=args.startup_lines,
        journal_too=args.journal,
    )
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
