"""A read-only, offline check of this package on a machine with a real NVIDIA GPU and driver.

::

    scripts/gpu-check.sh OUTDIR [--torch-python PY] [--nvidia-smi CMD] ...
    PYTHONPATH=src python3 -m cuda13_upgrade.gpucheck OUTDIR ...      (what the script runs)

It runs what the package runs on a host, against the tools of this machine,
and writes each raw output, and what the package's parsers and decisions make
of it, into ``OUTDIR`` (a new or empty directory). The parts, in order:

``nvidia-smi/<query>``
    each nvidia-smi command of :data:`QUERIES`: the five the package runs (the
    preflight's three, hostscripts/preflight_facts.py (module cuda13_host_facts); the stack
    digest's, hostscripts/stack_digest.py; the service cycle's,
    hostscripts/service_cycle.py) and the three other forms
    :mod:`cuda13_upgrade.nvidia_smi` parses (``-L``, ``--version``,
    ``topo -m``). The output goes to ``nvidia-smi/<query>.txt``, the parse
    (or its error) to ``nvidia-smi/<query>.json``. After a query that finds no
    nvidia-smi or gets no answer in time, the others are skipped.
``module-flavour``
    ``/proc/driver/nvidia/version``, read by
    :func:`cuda13_upgrade.nvidia_smi.kernel_module_flavour`; the loaded
    module's version must be the driver version nvidia-smi reports.
``stack-probe``
    ``hostscripts/stack_probe.py``, run by the Python that has torch
    (``--torch-python``, else the first of this Python, ``python3`` and
    ``python`` on ``PATH`` that has it), importing torch and whichever of
    sgl_kernel, flashinfer and sglang are installed.
``stack-verdict``
    :func:`cuda13_upgrade.stack.stack_verdict` on the probe, for CUDA
    ``--cuda-major`` (13), with the GPUs' compute capabilities and driver
    version from nvidia-smi.
``elf-check``
    :func:`cuda13_upgrade.wheels.check_shared_objects` on the probe's shared
    objects and libraries; torch must have objects that need a CUDA library;
    where ``readelf`` is installed, each shared object of the CUDA-carrying
    distributions is read with ``readelf -d`` too and its CUDA ``NEEDED``
    entries must be the probe's.
``preflight``
    ``playbooks/preflight.yml`` in check mode with connection local, against
    an inventory of localhost written to ``OUTDIR/preflight`` (see
    :func:`preflight_vars` for what is turned off to keep it offline);
    skipped where ansible-playbook is not found.

Each part is passed, failed (with its message) or skipped (with why), runs
under a time limit (coreutils ``timeout``), and all of them within
``--budget`` seconds (:data:`BUDGET_S`); ``summary.json`` and ``summary.md``
are rewritten after each part. Nothing on the machine changes: the commands
only read, and the preflight runs in check mode besides.

Needs the standard library and this package's stdlib-only modules; the
stack verdict and the ELF check need ``packaging`` (or the copy pip vendors),
the preflight ansible-core. Where those are missing the parts that need them
are skipped, saying so.

Exit status: 0 when every part that ran passed, 1 otherwise, 2 for bad usage
(no ``OUTDIR``; one that cannot be created, is not writable or is not empty).
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cuda13_upgrade.hostscripts import preflight_facts, stack_digest, stack_probe
from cuda13_upgrade.hostscripts.service_cycle import GPU_PROCESSES_QUERY, parse_gpu_processes
from cuda13_upgrade.nvidia_smi import (
    TIMEOUT_OPTION,
    TIMEOUT_RCS,
    GpuInventory,
    classify_failure,
    kernel_module_flavour,
    parse_compute_apps,
    parse_list,
    parse_proc_driver_version,
    parse_query_gpu,
    parse_table,
    parse_table_header,
    parse_topology,
    parse_version_info,
)

__all__ = [
    "BUDGET_S",
    "PREFLIGHT_OFFLINE_VARS",
    "QUERIES",
    "PartResult",
    "Query",
    "main",
    "preflight_command",
    "preflight_messages",
    "preflight_vars",
    "query_fields",
]

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

#: Seconds all parts may take together: under five minutes with the script's
#: own margin (scripts/gpu-check.sh ends the run at 295 s).
BUDGET_S = 280.0
#: Seconds one nvidia-smi run may take (the preflight the same, or less to fit its own limit).
NVIDIA_SMI_TIMEOUT_S = 30.0
#: Seconds to find the Python that has torch and its modules.
FIND_TIMEOUT_S = 30.0
#: Seconds the stack probe may take (torch's import and CUDA initialisation, pip check).
PROBE_TIMEOUT_S = 150.0
#: Seconds ``readelf -d`` may take on one shared object.
READELF_TIMEOUT_S = 10.0
#: Seconds the preflight playbook may take.
PREFLIGHT_TIMEOUT_S = 90.0
#: Seconds coreutils timeout waits after TERM before KILL (timeout --kill-after).
KILL_AFTER_S = 5.0
#: A part that would get less than this is skipped instead.
MIN_PART_S = 3.0
#: Characters of a message in summary.md's table (summary.json has all of it).
MD_MESSAGE_CHARS = 1500

REPO = Path(__file__).resolve().parents[2]
SRC = Path(__file__).resolve().parents[1]
STACK_PROBE = Path(stack_probe.__file__)
PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"


# --- results ---------------------------------------------------------------------------


@dataclass
class PartResult:
    """One part's outcome.

    Attributes:
        name: the part (``"nvidia-smi/gpus"``, ``"preflight"``, ...).
        status: ``"passed"``, ``"failed"`` or ``"skipped"``.
        message: what was found (passed), what is wrong and what to do (failed), or why
            the part did not run (skipped).
        duration_s: seconds it took.
        limit_s: the seconds it was given, None where it ran no command.
        files: the files it wrote, relative to OUTDIR.
    """

    name: str
    status: str
    message: str
    duration_s: float = 0.0
    limit_s: float | None = None
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the attributes, seconds rounded to 0.01."""
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "duration_s": round(self.duration_s, 2),
            "limit_s": None if self.limit_s is None else round(self.limit_s, 2),
            "files": list(self.files),
        }


@dataclass
class _Run:
    argv: list[str]
    rc: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    limit_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "rc": self.rc,
            "timed_out": self.timed_out,
            "limit_s": round(self.limit_s, 2),
            "duration_s": round(self.duration_s, 2),
            "stderr": self.stderr,
        }


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _run(
    argv: Sequence[str],
    limit_s: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> _Run:
    """Run ``argv`` under ``timeout --kill-after=5 LIMIT`` (coreutils); rc 127 when it
    cannot be started, ``timed_out`` when timeout ended it (124, 137)."""
    timeout = shutil.which("timeout")
    full = [timeout, f"--kill-after={KILL_AFTER_S:g}", f"{limit_s:g}", *argv] if timeout else list(argv)
    started = time.monotonic()
    try:
        done = subprocess.run(
            full,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            cwd=cwd,
            timeout=limit_s + KILL_AFTER_S + 5,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return _Run(
            list(argv), None, _text(exc.stdout), _text(exc.stderr), time.monotonic() - started, True, limit_s
        )
    except OSError as exc:
        return _Run(list(argv), 127, "", str(exc), time.monotonic() - started, False, limit_s)
    rc = done.returncode
    return _Run(
        list(argv),
        rc,
        _text(done.stdout),
        _text(done.stderr),
        time.monotonic() - started,
        bool(timeout) and rc in TIMEOUT_RCS,
        limit_s,
    )


class _Budget:
    """The seconds left of the run's budget."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self.started = time.monotonic()

    def limit(self, wanted_s: float) -> float:
        """``wanted_s``, or what is left of the budget when that is less (may be <= 0)."""
        return min(wanted_s, self.total_s - (time.monotonic() - self.started))


# --- nvidia-smi --------------------------------------------------------------------------


def query_fields(args: Sequence[str]) -> tuple[list[str], str]:
    """The fields and ``--format`` value of an nvidia-smi query's arguments.

    ``query_fields(["--query-gpu=index,name", "--format=csv,noheader"]) ==
    (["index", "name"], "csv,noheader")``. Raises ValueError when ``args`` hold no
    ``--query-gpu=`` or ``--query-compute-apps=`` and ``--format=`` pair.
    """
    fields = next(
        (a.partition("=")[2] for a in args if a.startswith(("--query-gpu=", "--query-compute-apps="))), ""
    )
    fmt = next((a.partition("=")[2] for a in args if a.startswith("--format=")), "")
    if not fields or not fmt:
        raise ValueError(f"not an nvidia-smi query with --format: {list(args)!r}")
    return fields.split(","), fmt


@dataclass(frozen=True)
class Query:
    """An nvidia-smi command this package runs or parses.

    Attributes:
        name: the part's name after ``nvidia-smi/``, and the name of its files.
        args: the arguments after the nvidia-smi command.
        source: where the package runs it, or which parser reads it.
        parse: ``(stdout, rc) -> (parsed, message)``: what the package's parsers make of
            the output (JSON-able) and one line saying what was found; raises
            ``ValueError`` (:class:`~cuda13_upgrade.errors.ParseError`) as they do.
    """

    name: str
    args: tuple[str, ...]
    source: str
    parse: Callable[[str, int], tuple[Any, str]]


#: The preflight's queries, as its host module runs them.
_GPUS_ARGS = tuple(preflight_facts.GPU_QUERY)
_APPS_ARGS = tuple(preflight_facts.APPS_QUERY)


def _parse_gpus(text: str, rc: int) -> tuple[Any, str]:
    fields, fmt = query_fields(_GPUS_ARGS)
    rows = parse_query_gpu(text, fields, fmt, rc=rc)
    inventory = GpuInventory.from_query(text, fields, fmt)
    names = sorted({f"{g.name} (compute capability {g.compute_capability})" for g in inventory.gpus})
    return (
        {"rows": rows, "inventory": inventory.to_dict()},
        f"{inventory.count} GPUs: {', '.join(names)}; driver {inventory.driver_version}",
    )


def _parse_table(text: str, rc: int) -> tuple[Any, str]:
    header = parse_table_header(text)
    table = parse_table(text)
    return (
        {"header": header, "table": table},
        f"NVIDIA-SMI {header['nvidia_smi_version']}, driver {header['driver_version']}, "
        f"CUDA {header['cuda_version']}; {len(table.get('gpus') or [])} GPU rows, "
        f"{len(table.get('processes') or [])} processes",
    )


def _parse_compute_apps(text: str, rc: int) -> tuple[Any, str]:
    rows = parse_compute_apps(text, rc=rc)
    return rows, f"{len(rows)} compute processes on the GPUs"


def _parse_digest_gpus(text: str, rc: int) -> tuple[Any, str]:
    fields, fmt = query_fields(stack_digest.DRIVER_QUERY)
    rows = parse_query_gpu(text, fields, fmt, rc=rc)
    return rows, f"{len(rows)} GPUs, driver {', '.join(sorted({str(r['driver_version']) for r in rows}))}"


def _parse_gpu_processes(text: str, rc: int) -> tuple[Any, str]:
    fields, fmt = query_fields(GPU_PROCESSES_QUERY)
    rows = parse_query_gpu(text, fields, fmt, rc=rc, allow_empty=True)
    used = parse_gpu_processes(text)
    return (
        {"rows": rows, "used_mib_by_pid": {str(pid): mib for pid, mib in sorted(used.items())}},
        f"{len(used)} processes hold {sum(used.values())} MiB",
    )


def _parse_list(text: str, rc: int) -> tuple[Any, str]:
    gpus = parse_list(text)
    return gpus, f"{len(gpus)} GPUs listed"


def _parse_version(text: str, rc: int) -> tuple[Any, str]:
    info = parse_version_info(text)
    return info, ", ".join(f"{k} {v}" for k, v in info.items())


def _parse_topology(text: str, rc: int) -> tuple[Any, str]:
    topo = parse_topology(text)
    return topo, f"{len(topo['devices'])} devices: {' '.join(topo['devices'])}"


#: Every nvidia-smi command the package runs, then the other forms its parsers read.
QUERIES: tuple[Query, ...] = (
    Query("gpus", _GPUS_ARGS, "hostscripts/preflight_facts.py, the preflight's GPU query", _parse_gpus),
    Query("table", (), "hostscripts/preflight_facts.py, the table header (CUDA Version)", _parse_table),
    Query(
        "compute-apps",
        _APPS_ARGS,
        "hostscripts/preflight_facts.py, the GPUs' processes",
        _parse_compute_apps,
    ),
    Query(
        "digest-gpus",
        tuple(stack_digest.DRIVER_QUERY),
        "hostscripts/stack_digest.py, the digest's driver part",
        _parse_digest_gpus,
    ),
    Query(
        "gpu-processes",
        tuple(GPU_PROCESSES_QUERY),
        "hostscripts/service_cycle.py, the processes a stopped service leaves",
        _parse_gpu_processes,
    ),
    Query("list", ("-L",), "cuda13_upgrade.nvidia_smi.parse_list", _parse_list),
    Query("version", ("--version",), "cuda13_upgrade.nvidia_smi.parse_version_info", _parse_version),
    Query("topology", ("topo", "-m"), "cuda13_upgrade.nvidia_smi.parse_topology", _parse_topology),
)


# --- the run -----------------------------------------------------------------------------


@dataclass
class _Context:
    out: Path
    budget: _Budget
    nvidia_smi: str
    nvidia_smi_timeout: float
    torch_python: str | None
    proc_driver_version: str
    cuda_major: int
    packaging: str | None = None
    packaging_error: str | None = None
    results: list[PartResult] = field(default_factory=list)
    started: str = ""
    # what later parts read from earlier ones
    nvidia_smi_path: str | None = None
    inventory: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    probe_python: str | None = None

    def write(self, relative: str, content: str | dict | list) -> str:
        path = self.out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_text(
                json.dumps(content, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
            )
        return relative

    def limit(self, wanted_s: float) -> float:
        return self.budget.limit(wanted_s)

    def out_of_time(self, name: str, limit_s: float, wanted_s: float) -> PartResult | None:
        """A skipped part when the budget leaves less than ``wanted_s`` and :data:`MIN_PART_S`."""
        if limit_s >= min(wanted_s, MIN_PART_S):
            return None
        return PartResult(name, SKIPPED, f"the check's time budget ({self.budget.total_s:g} s) is spent")


def _failure_message(command: str, run: _Run) -> tuple[str, str | None]:
    """(message, why the next queries are skipped or None) for a failed nvidia-smi run."""
    failure = classify_failure(run.rc, run.stdout, run.stderr, timeout_s=run.limit_s, timed_out=run.timed_out)
    # The package's words, with this check's option for nvidia-smi's time limit.
    message = f"{command} {failure.summary}. Fix: {failure.remedy}".replace(
        TIMEOUT_OPTION, "--nvidia-smi-timeout"
    )
    if failure.code == "timeout":
        return message, f"nvidia-smi did not answer within {run.limit_s:g} s"
    if failure.code == "not_installed" or run.rc in (126, 127):
        return message, f"nvidia-smi ({command}) could not be run"
    return message, None


def check_nvidia_smi(ctx: _Context) -> None:
    """Run each query of :data:`QUERIES` with the nvidia-smi found on ``PATH``; one part
    each (``nvidia-smi/<name>``), its output and parse saved; the GPU inventory kept for
    the later parts. No nvidia-smi, or a run that does not answer in time
    (:func:`cuda13_upgrade.nvidia_smi.classify_failure`), skips the queries after it."""
    command = shutil.which(ctx.nvidia_smi)
    ctx.nvidia_smi_path = command
    stop: str | None = None
    for query in QUERIES:
        name = f"nvidia-smi/{query.name}"
        if stop is not None:
            ctx.results.append(PartResult(name, SKIPPED, f"{stop} in an earlier query"))
            continue
        if command is None:
            failure = classify_failure(127, "", f"{ctx.nvidia_smi}: command not found")
            ctx.results.append(
                PartResult(
                    name,
                    FAILED,
                    f"{ctx.nvidia_smi} was not found (PATH={os.environ.get('PATH', '')}). "
                    f"Fix: {failure.remedy}",
                )
            )
            stop = f"{ctx.nvidia_smi} was not found"
            continue
        limit = ctx.limit(ctx.nvidia_smi_timeout)
        skipped = ctx.out_of_time(name, limit, ctx.nvidia_smi_timeout)
        if skipped:
            ctx.results.append(skipped)
            continue
        run = _run([command, *query.args], limit)
        record: dict[str, Any] = {"source": query.source, **run.to_dict()}
        files = [ctx.write(f"nvidia-smi/{query.name}.txt", run.stdout)]
        status, message = PASSED, ""
        if run.rc != 0 or run.timed_out:
            message, stop = _failure_message(command, run)
            status = FAILED
            record["error"] = message
        else:
            try:
                parsed, message = query.parse(run.stdout, run.rc)
                record["parsed"] = parsed
                if query.name == "gpus":
                    ctx.inventory = parsed["inventory"]
            except ValueError as exc:
                status, message = (
                    FAILED,
                    f"the output of {command} {' '.join(query.args)} does not parse: {exc}",
                )
                record["error"] = message
        files.append(ctx.write(f"nvidia-smi/{query.name}.json", record))
        ctx.results.append(PartResult(name, status, message, run.duration_s, limit, files))


def check_module_flavour(ctx: _Context) -> PartResult:
    """The loaded kernel module's flavour and version (``/proc/driver/nvidia/version``,
    :func:`cuda13_upgrade.nvidia_smi.kernel_module_flavour`); failed when the file is
    missing or unreadable, or its version is not the driver nvidia-smi reports."""
    name, path = "module-flavour", Path(ctx.proc_driver_version)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return PartResult(
            name,
            FAILED,
            f"{path} does not exist: the nvidia kernel module is not loaded (the file exists only while "
            "it is); check 'lsmod | grep nvidia' and dmesg",
        )
    except OSError as exc:
        return PartResult(name, FAILED, f"{path} cannot be read: {exc}")
    files = [ctx.write("module-flavour/version.txt", text)]
    try:
        module = {**parse_proc_driver_version(text), **kernel_module_flavour(text)}
    except ValueError as exc:
        files.append(ctx.write("module-flavour/module.json", {"path": str(path), "error": str(exc)}))
        return PartResult(name, FAILED, str(exc), files=files)
    driver = (ctx.inventory or {}).get("driver_version")
    module = {"path": str(path), **module, "nvidia_smi_driver_version": driver}
    files.append(ctx.write("module-flavour/module.json", module))
    described = f"the {module['flavour']} kernel module {module['driver_version']} ({module['arch']})"
    if driver and driver != module["driver_version"]:
        return PartResult(
            name,
            FAILED,
            f"{path} shows {described} but nvidia-smi reports driver {driver}: the loaded module is not "
            "the installed driver's (a driver package changed without a reboot); reboot the host",
            files=files,
        )
    same = ", the driver nvidia-smi reports" if driver else " (nvidia-smi gave no driver version to compare)"
    return PartResult(name, PASSED, f"{described} is loaded{same}", files=files)


_FIND_MODULES = (
    "import importlib.util, json, sys\n"
    "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
)

_DIST_OBJECTS = (
    "import importlib.metadata as md, json, re, sys\n"
    "so = re.compile(r'\\.so(\\.\\d+)*$')\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        d = md.distribution(name)\n"
    "    except md.PackageNotFoundError:\n"
    "        continue\n"
    "    out[name] = {'location': str(d.locate_file('')),\n"
    "                 'objects': sorted(f.as_posix() for f in d.files or () if so.search(f.name))}\n"
    "print(json.dumps(out))"
)


def _probe_env() -> dict[str, str]:
    """This environment without the package's ``src`` in ``PYTHONPATH``: the torch
    Python sees its own distributions, as on a host."""
    env = dict(os.environ)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SRC]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _torch_python_candidates(given: str | None) -> list[str]:
    if given:
        return [given]
    found: list[str] = []
    for candidate in (sys.executable, shutil.which("python3"), shutil.which("python")):
        if candidate and candidate not in found:
            found.append(candidate)
    return found


def check_stack_probe(ctx: _Context) -> PartResult:
    """``hostscripts/stack_probe.py`` run by the Python that has torch, importing torch and
    the stack's other modules it has; passed when the probe printed its JSON (what the
    JSON says is the verdict's to judge)."""
    name = "stack-probe"
    started = time.monotonic()
    limit = ctx.limit(FIND_TIMEOUT_S)
    skipped = ctx.out_of_time(name, limit, FIND_TIMEOUT_S)
    if skipped:
        return skipped
    env = _probe_env()
    tried: list[str] = []
    python, present = None, {}
    for candidate in _torch_python_candidates(ctx.torch_python):
        run = _run([candidate, "-c", _FIND_MODULES, *stack_probe.MODULES], limit, env=env)
        if run.rc != 0:
            tried.append(f"{candidate} (rc {run.rc}: {(run.stderr or run.stdout).strip()[-200:]})")
            continue
        found = json.loads(run.stdout)
        if ctx.torch_python or found.get("torch"):
            python, present = candidate, found
            break
        tried.append(f"{candidate} (no torch)")
    if python is None:
        return PartResult(
            name,
            FAILED,
            f"no Python here has torch (tried {'; '.join(tried)}): "
            "give the one that does with --torch-python",
            time.monotonic() - started,
            limit,
        )
    modules = ["torch"] + [m for m in stack_probe.MODULES if m != "torch" and present.get(m)]
    files = [ctx.write("stack/modules.json", {"python": python, "installed": present, "imported": modules})]
    limit = ctx.limit(PROBE_TIMEOUT_S)
    skipped = ctx.out_of_time(name, limit, PROBE_TIMEOUT_S)
    if skipped:
        return skipped
    run = _run([python, str(STACK_PROBE), *modules], limit, env=env)
    files.append(ctx.write("stack/probe.json", run.stdout))
    files.append(ctx.write("stack/probe-run.json", run.to_dict()))
    duration = time.monotonic() - started
    if run.timed_out:
        return PartResult(
            name,
            FAILED,
            f"{python} {STACK_PROBE.name} did not finish within {limit:g} s (torch's import or its CUDA "
            "initialisation hangs: read the kernel log for NVRM and Xid lines)",
            duration,
            limit,
            files,
        )
    try:
        probe = json.loads(run.stdout)
    except ValueError:
        tail = (run.stderr or run.stdout).strip()[-600:]
        return PartResult(
            name,
            FAILED,
            f"{python} {STACK_PROBE.name} exited {run.rc} without its JSON: {tail}",
            duration,
            limit,
            files,
        )
    ctx.probe, ctx.probe_python = probe, python
    torch = probe.get("torch") or {}
    imported = [m for m, text in (probe.get("imports") or {}).items() if text is None]
    failed = [m for m, text in (probe.get("imports") or {}).items() if text is not None]
    torch_text = (
        f"torch {torch.get('version')} (CUDA {torch.get('cuda')}, "
        f"cuda_available {torch.get('cuda_available')}, {torch.get('device_count')} devices)"
        if torch
        else "torch does not import"
    )
    message = (
        f"{python}: Python {probe.get('python')}, {torch_text}; "
        f"{len(probe.get('dists') or {})} distributions; imported {', '.join(imported) or 'nothing'}"
        + (f"; failed to import {', '.join(failed)}" if failed else "")
    )
    return PartResult(name, PASSED, message, duration, limit, files)


def _capabilities(ctx: _Context) -> list[str]:
    return list((ctx.inventory or {}).get("compute_capabilities") or [])


def check_stack_verdict(ctx: _Context) -> PartResult:
    """:func:`cuda13_upgrade.stack.stack_verdict` on the probe, for ``--cuda-major``, with
    the GPUs' compute capabilities and driver; failed when it finds the stack inconsistent."""
    name = "stack-verdict"
    if ctx.probe is None:
        return PartResult(name, SKIPPED, "the stack probe gave no result")
    if ctx.packaging is None:
        return PartResult(name, SKIPPED, str(ctx.packaging_error))
    from cuda13_upgrade.stack import stack_verdict

    verdict = stack_verdict(
        ctx.probe,
        ctx.cuda_major,
        compute_capabilities=_capabilities(ctx),
        driver_version=(ctx.inventory or {}).get("driver_version"),
        gpu_names=[str(g.get("name")) for g in (ctx.inventory or {}).get("gpus") or []],
    )
    files = [ctx.write("stack/verdict.json", verdict)]
    if verdict["consistent"]:
        return PartResult(name, PASSED, verdict["summary"], files=files)
    return PartResult(name, FAILED, f"{verdict['summary']}: {' | '.join(verdict['problems'])}", files=files)


_READELF_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")


def _readelf_cross_check(ctx: _Context, deadline_s: float) -> dict[str, Any]:
    """Each shared object of the CUDA-carrying distributions (and of every distribution
    the probe lists objects for), read with ``readelf -d``: its CUDA ``NEEDED`` entries
    (:func:`stack_probe.cuda_libraries`) against the probe's."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return {
            "ran": False,
            "why": "readelf is not installed (binutils): the NEEDED entries were not cross-checked",
        }
    probe = ctx.probe or {}
    objects = probe.get("objects") or {}
    dists = sorted((set(stack_probe.CUDA_DISTRIBUTIONS) & set(probe.get("dists") or {})) | set(objects))
    run = _run(
        [str(ctx.probe_python), "-c", _DIST_OBJECTS, *dists],
        max(1.0, min(FIND_TIMEOUT_S, deadline_s - time.monotonic())),
        env=_probe_env(),
    )
    if run.rc != 0:
        return {
            "ran": False,
            "why": f"the distributions' files could not be listed: {run.stderr.strip()[-300:]}",
        }
    listing = json.loads(run.stdout)
    read, unreadable, mismatches, stopped = 0, [], [], None
    for dist, info in sorted(listing.items()):
        for relative in info["objects"]:
            left = deadline_s - time.monotonic()
            if left < 1:
                stopped = f"stopped after {read} objects: the part's time limit"
                break
            done = _run(
                [readelf, "-d", "-W", str(Path(info["location"]) / relative)], min(READELF_TIMEOUT_S, left)
            )
            read += 1
            if done.rc != 0:
                unreadable.append(f"{dist} {relative}: {(done.stderr or done.stdout).strip()[:200]}")
                needed: list[str] = []
            else:
                needed = stack_probe.cuda_libraries(_READELF_NEEDED.findall(done.stdout))
            probed = list(((objects.get(dist) or {}).get(relative) or {}).get("needed") or [])
            if needed != probed:
                mismatches.append(f"{dist} {relative}: readelf -d names {needed}, the probe {probed}")
        if stopped:
            break
    return {
        "ran": True,
        "readelf": readelf,
        "distributions": sorted(listing),
        "objects_read": read,
        "unreadable": unreadable,
        "mismatches": mismatches,
        "stopped": stopped,
    }


def check_elf(ctx: _Context) -> PartResult:
    """:func:`cuda13_upgrade.wheels.check_shared_objects` on the probe's objects and
    libraries; failed on its problems, when torch has no object that needs a CUDA library,
    or when ``readelf -d`` reads other CUDA ``NEEDED`` entries than the probe did."""
    name = "elf-check"
    if ctx.probe is None:
        return PartResult(name, SKIPPED, "the stack probe gave no result")
    if ctx.packaging is None:
        return PartResult(name, SKIPPED, str(ctx.packaging_error))
    from cuda13_upgrade.wheels import check_shared_objects, cuda_majors_of_needed

    started = time.monotonic()
    limit = ctx.limit(FIND_TIMEOUT_S + 60)
    probe = ctx.probe
    dists = probe.get("dists") or {}
    objects = probe.get("objects") or {}
    found = check_shared_objects(
        objects,
        ctx.cuda_major,
        dists=dists,
        imported=[m for m, text in (probe.get("imports") or {}).items() if text is None],
        libraries=probe.get("libraries"),
    )
    problems = list(found["problems"])
    torch_objects = objects.get("torch") or {}
    torch_majors = sorted(
        cuda_majors_of_needed(lib for rec in torch_objects.values() for lib in rec.get("needed", []))
    )
    if "torch" not in dists:
        problems.append(f"torch is not installed for {ctx.probe_python}")
    elif not torch_objects:
        problems.append(
            f"no shared object of torch {dists['torch']} names a CUDA library among its NEEDED entries "
            "(hostscripts/stack_probe.py, elf_needed): a CUDA build of torch has them "
            f"(libtorch_cuda.so needs libcudart.so.{ctx.cuda_major})"
        )
    cross = (
        _readelf_cross_check(ctx, started + limit)
        if limit >= MIN_PART_S
        else {"ran": False, "why": "the check's time budget is spent"}
    )
    problems += [f"ELF reader and readelf disagree: {m}" for m in cross.get("mismatches", [])]
    record = {
        **found,
        "problems": problems,
        "objects": {dist: len(files) for dist, files in sorted(objects.items())},
        "torch_cuda_majors": torch_majors,
        "readelf": cross,
    }
    files = [ctx.write("stack/elf-check.json", record)]
    duration = time.monotonic() - started
    if problems:
        return PartResult(name, FAILED, " | ".join(problems), duration, limit, files)
    count = sum(len(f) for f in objects.values())
    readelf = (
        f"; readelf -d agrees on all {cross['objects_read']} objects of {', '.join(cross['distributions'])}"
        + (f" ({cross['stopped']})" if cross.get("stopped") else "")
        if cross.get("ran")
        else f"; {cross.get('why')}"
    )
    return PartResult(
        name,
        PASSED,
        f"{count} shared objects of {len(objects)} distributions need CUDA libraries; torch's "
        f"({len(torch_objects)}) fix CUDA {', '.join(map(str, torch_majors)) or 'no major'}; none of another "
        f"major than {ctx.cuda_major}"
        + (f"; {len(found['notes'])} notes" if found["notes"] else "")
        + readelf,
        duration,
        limit,
        files,
    )


# --- preflight ---------------------------------------------------------------------------

#: Options that keep the preflight offline and on this machine, and why.
PREFLIGHT_OFFLINE_VARS: dict[str, Any] = {
    # The checks against a serving host ask the apt repository and the package indexes over
    # HTTP and simulate the toolkit's apt transaction (cuda13_upgrade.steps.preflight, step 1 and 4).
    "nvidia_driver_check_host_checks": False,
    # pip's resolver in report mode asks the package indexes.
    "cuda13_preflight_resolve": False,
    # Not a serving host: the space the new stack needs is not this check's question.
    "nvidia_driver_check_space_stack": "",
    "nvidia_driver_check_required_disk_gib": 0,
    # The hosts of the play: those of the written inventory (localhost).
    "cuda13_target_hosts": "all",
    # Not a fleet host: no router sends it traffic, and the preflight restarts nothing (the
    # rollout's refusal of a host without a drain hook, cuda13_upgrade.ondemand.drain_plan).
    "cuda13_allow_undrained": True,
}


def default_capabilities_missing(capabilities: Sequence[str], architecture: str) -> list[str] | None:
    """The compute capabilities of ``capabilities`` outside the default allowed list for
    ``architecture`` (:func:`cuda13_upgrade.versions.default_allowed_compute_capabilities`);
    None when that list cannot be read (no ``packaging``): then all of them are named."""
    try:
        from cuda13_upgrade.versions import default_allowed_compute_capabilities
    except ImportError:
        return None
    default = default_allowed_compute_capabilities(architecture)
    return [c for c in capabilities if c not in default]


def preflight_vars(
    out_dir: Path,
    *,
    python: str,
    nvidia_smi: str,
    nvidia_smi_timeout_s: float,
    capabilities: Sequence[str],
    architecture: str,
) -> dict[str, Any]:
    """The extra variables of the preflight on this machine.

    :data:`PREFLIGHT_OFFLINE_VARS`; ``cuda13_new_venv`` under ``out_dir/preflight``
    (never created: the disk check reads that directory's filesystem); the nvidia-smi,
    its time limit (whole seconds, at least 1) and the Python this check runs with
    (``nvidia_driver_check_python``); and, when a GPU's compute capability is outside
    the default allowed list, ``nvidia_driver_check_allowed_compute_capabilities``: the
    default list and those (all of ``capabilities`` where the default list cannot be read).
    """
    values: dict[str, Any] = {
        **PREFLIGHT_OFFLINE_VARS,
        "cuda13_new_venv": str(out_dir / "preflight" / "new-venv"),
        "nvidia_driver_check_nvidia_smi": nvidia_smi,
        "nvidia_driver_check_nvidia_smi_timeout": max(1, math.ceil(nvidia_smi_timeout_s)),
        "nvidia_driver_check_python": python,
    }
    missing = default_capabilities_missing(capabilities, architecture)
    if missing is None and capabilities:
        values["nvidia_driver_check_allowed_compute_capabilities"] = sorted(set(capabilities), key=_cc_key)
    elif missing:
        from cuda13_upgrade.versions import default_allowed_compute_capabilities

        allowed = set(default_allowed_compute_capabilities(architecture)) | set(missing)
        values["nvidia_driver_check_allowed_compute_capabilities"] = sorted(allowed, key=_cc_key)
    return values


def _cc_key(cc: str) -> tuple[int, ...]:
    return tuple(int(p) for p in cc.split(".") if p.isdigit())


def preflight_inventory(python: str) -> str:
    """The inventory of the preflight: localhost alone, connection local, ``python``'s modules."""
    return (
        "# This machine only, reached without a connection (cuda13_upgrade.gpucheck).\n"
        "all:\n"
        "  hosts:\n"
        "    localhost:\n"
        "      ansible_connection: local\n"
        f"      ansible_python_interpreter: {json.dumps(python)}\n"
    )


def preflight_command(
    ansible_playbook: Sequence[str], repo: Path, inventory: Path, variables: Path
) -> list[str]:
    """``ansible-playbook playbooks/preflight.yml --check -c local -i INVENTORY -e @VARS``."""
    return [
        *ansible_playbook,
        str(repo / "playbooks" / "preflight.yml"),
        "--check",
        "-c",
        "local",
        "-i",
        str(inventory),
        "-e",
        f"@{variables}",
    ]


def preflight_env(base: Mapping[str, str], repo: Path, work: Path) -> dict[str, str]:
    """ansible-playbook's environment: the checkout's ansible.cfg, no colour, and its
    home and temporary directories under ``work``."""
    return {
        **base,
        "ANSIBLE_CONFIG": str(repo / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_HOME": str(work / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-home" / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(work / "ansible-home" / "remote-tmp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    }


def find_ansible_playbook(limit_s: float = FIND_TIMEOUT_S) -> tuple[list[str] | None, str]:
    """The ansible-playbook to run and where it was found: beside this Python (a venv's
    ``bin``), on ``PATH``, or ``python -m ansible.cli.playbook`` where ansible-core
    imports; ``(None, why)`` otherwise."""
    beside = Path(sys.executable).with_name("ansible-playbook")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)], f"{beside} (beside {sys.executable})"
    on_path = shutil.which("ansible-playbook")
    if on_path:
        return [on_path], f"{on_path} (PATH)"
    run = _run([sys.executable, "-c", "import ansible.cli.playbook"], limit_s)
    if run.rc == 0:
        return [sys.executable, "-m", "ansible.cli.playbook"], f"{sys.executable} -m ansible.cli.playbook"
    last = (run.stderr.strip().splitlines() or ["no output"])[-1]
    return (
        None,
        f"not beside {sys.executable}, not on PATH, and ansible.cli.playbook does not import ({last})",
    )


def preflight_messages(log: str) -> dict[str, list[str]]:
    """What a preflight's ansible-playbook output says, in the default callback's YAML form.

    Returns:
        ``{"passed": [...], "errors": [...]}``: the checks passed (the lines
        ``<host>: passed: <message>`` the action cuda13_preflight shows, one per
        check: :func:`cuda13_upgrade.steps.preflight.tell_passed`), and each error:
        ansible-core 2.19's ``[ERROR]:`` text up to its ``Origin:`` line (its "Task
        failed: Action failed: " prefix dropped), or, from older releases, each
        ``fatal:`` line with its ``msg``.
    """
    lines = log.splitlines()
    passed: list[str] = []
    errors: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        told = _PASSED_LINE.match(line)
        if told:
            passed.append(told.group(1).strip())
            i += 1
            continue
        if line.startswith("[ERROR]:"):
            block = [line[len("[ERROR]:") :].strip()]
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].startswith("Origin:"):
                block.append(lines[i].strip())
                i += 1
            text = "\n".join(block).removeprefix("Task failed: ").removeprefix("Action failed: ")
            errors.append(text)
            continue
        i += 1
    if not errors:
        for index, line in enumerate(lines):
            if line.startswith("fatal:"):
                block = [line.strip()]
                for more in lines[index + 1 :]:
                    if not more.strip():
                        break
                    block.append(more.strip())
                errors.append(" ".join(block))
    return {"passed": passed, "errors": errors}


#: A check the preflight passed, as the action cuda13_preflight shows it.
_PASSED_LINE = re.compile(r"^[^\s:]+: passed: (.+)$")


def check_preflight(ctx: _Context, repo: Path = REPO) -> PartResult:
    """``playbooks/preflight.yml`` against this machine (:func:`preflight_command`,
    :func:`preflight_vars`); skipped where ansible-playbook is not found
    (:func:`find_ansible_playbook`); failed with the errors the playbook printed."""
    name = "preflight"
    if not (repo / "playbooks" / "preflight.yml").is_file():
        return PartResult(
            name, SKIPPED, f"{repo} is not a checkout of this package (no playbooks/preflight.yml)"
        )
    if ctx.nvidia_smi_path is None:
        nvidia_smi = ctx.nvidia_smi
    else:
        nvidia_smi = ctx.nvidia_smi_path
    started = time.monotonic()
    ansible_playbook, where = find_ansible_playbook(max(1.0, min(FIND_TIMEOUT_S, ctx.limit(FIND_TIMEOUT_S))))
    if ansible_playbook is None:
        return PartResult(name, SKIPPED, f"ansible-playbook not found: {where}", time.monotonic() - started)
    limit = ctx.limit(PREFLIGHT_TIMEOUT_S)
    skipped = ctx.out_of_time(name, limit, PREFLIGHT_TIMEOUT_S)
    if skipped:
        return skipped
    work = ctx.out / "preflight"
    work.mkdir(parents=True, exist_ok=True)
    variables = preflight_vars(
        ctx.out,
        python=sys.executable,
        nvidia_smi=nvidia_smi,
        nvidia_smi_timeout_s=min(ctx.nvidia_smi_timeout, max(1.0, (limit - 20) / 3)),
        capabilities=_capabilities(ctx),
        architecture=platform.machine(),
    )
    files = [
        ctx.write("preflight/inventory.yml", preflight_inventory(sys.executable)),
        ctx.write("preflight/vars.json", variables),
    ]
    argv = preflight_command(ansible_playbook, repo, work / "inventory.yml", work / "vars.json")
    run = _run(argv, limit, env=preflight_env(os.environ, repo, work), cwd=repo)
    log = run.stdout + ("\n" + run.stderr if run.stderr else "")
    files.append(ctx.write("preflight/ansible.log", log))
    found = preflight_messages(log)
    files.append(ctx.write("preflight/result.json", {"ansible_playbook": where, **run.to_dict(), **found}))
    duration = time.monotonic() - started
    if run.timed_out:
        return PartResult(
            name,
            FAILED,
            f"ansible-playbook did not finish within {limit:g} s (preflight/ansible.log)",
            duration,
            limit,
            files,
        )
    if run.rc != 0:
        why = " | ".join(found["errors"]) or "; ".join(log.strip().splitlines()[-5:])
        return PartResult(name, FAILED, f"ansible-playbook exited {run.rc}: {why}", duration, limit, files)
    allowed = variables.get("nvidia_driver_check_allowed_compute_capabilities")
    extra = f" (compute capabilities allowed: {', '.join(allowed)})" if allowed else ""
    return PartResult(
        name,
        PASSED,
        f"localhost passed the preflight in check mode{extra}: {'; '.join(found['passed'])}",
        duration,
        limit,
        files,
    )


# --- packaging ---------------------------------------------------------------------------


def ensure_packaging() -> tuple[str | None, str | None]:
    """Make ``packaging`` importable: installed, else the copy pip vendors
    (``pip/_vendor/packaging``, put on ``sys.path`` alone through a temporary link).

    Returns:
        ``(description, None)``: which one, e.g. ``"packaging 26.4
        (/usr/lib/python3/dist-packages/packaging)"``; or ``(None, why)`` when
        neither imports.
    """
    try:
        import packaging.requirements  # noqa: F401

        return _packaging_description("packaging"), None
    except ImportError:
        pass
    spec = importlib.util.find_spec("pip")
    locations = list(spec.submodule_search_locations or []) if spec else []
    vendored = next((Path(p) / "_vendor" / "packaging" for p in locations), None)
    if vendored is not None and (vendored / "__init__.py").is_file():
        links = Path(tempfile.mkdtemp(prefix="cuda13-gpucheck-"))
        atexit.register(shutil.rmtree, links, True)
        (links / "packaging").symlink_to(vendored, target_is_directory=True)
        sys.path.append(str(links))
        try:
            import packaging.requirements  # noqa: F401

            return _packaging_description(f"pip's vendored copy, {vendored}"), None
        except ImportError as exc:
            why = f"pip's vendored copy ({vendored}) does not import: {exc}"
    else:
        why = "nor does pip vendor one"
    return None, (
        f"the Python package 'packaging' is not importable by {sys.executable} ({why}): install it "
        "(python3-packaging), or run with a Python that has it (PYTHON=... scripts/gpu-check.sh)"
    )


def _packaging_description(where: str) -> str:
    import packaging

    version = getattr(packaging, "__version__", "?")
    if where == "packaging":
        where = str(Path(packaging.__file__).parent)
    return f"packaging {version} ({where})"


# --- summary -----------------------------------------------------------------------------


def _summary(ctx: _Context, finished: bool) -> dict[str, Any]:
    failed = [r.name for r in ctx.results if r.status == FAILED]
    return {
        "status": ("failed" if failed else "passed") if finished else "running",
        "failed": failed,
        "started": ctx.started,
        "duration_s": round(time.monotonic() - ctx.budget.started, 2),
        "budget_s": ctx.budget.total_s,
        "machine": {
            "hostname": platform.node(),
            "kernel": platform.release(),
            "architecture": platform.machine(),
        },
        "python": f"{sys.executable} ({platform.python_version()})",
        "packaging": ctx.packaging or ctx.packaging_error,
        "nvidia_smi": ctx.nvidia_smi_path or ctx.nvidia_smi,
        "parts": [r.to_dict() for r in ctx.results],
    }


def _markdown(summary: dict[str, Any]) -> str:
    def cell(text: str) -> str:
        text = " ".join(str(text).split())
        if len(text) > MD_MESSAGE_CHARS:
            text = text[:MD_MESSAGE_CHARS] + " ... (summary.json has all of it)"
        return text.replace("|", "\\|")

    lines = [
        f"# GPU check: {summary['status']}",
        "",
        f"- started {summary['started']}, {summary['duration_s']} s of {summary['budget_s']:g}",
        f"- machine: {summary['machine']['hostname']}, {summary['machine']['architecture']}, "
        f"kernel {summary['machine']['kernel']}",
        f"- Python: {summary['python']}; {summary['packaging']}",
        f"- nvidia-smi: {summary['nvidia_smi']}",
        "",
        "| part | status | s | message |",
        "| --- | --- | ---: | --- |",
    ]
    for part in summary["parts"]:
        lines.append(
            f"| {part['name']} | {part['status']} | {part['duration_s']} | {cell(part['message'])} |"
        )
    return "\n".join(lines) + "\n"


def _write_summary(ctx: _Context, finished: bool) -> None:
    summary = _summary(ctx, finished)
    ctx.write("summary.json", summary)
    ctx.write("summary.md", _markdown(summary))


def _run_part(ctx: _Context, name: str, part: Callable[[], PartResult | None]) -> None:
    before = len(ctx.results)
    started = time.monotonic()
    try:
        result = part()
    except Exception as exc:  # noqa: BLE001 - one part's crash is that part's failure
        text = traceback.format_exc()
        ctx.write(f"errors/{name.replace('/', '-')}.txt", text)
        result = PartResult(
            name, FAILED, f"{type(exc).__name__}: {exc} (errors/{name}.txt)", time.monotonic() - started
        )
    if result is not None:
        ctx.results.append(result)
    for shown in ctx.results[before:]:
        line = " ".join(shown.message.split())
        print(f"{shown.status:8} {shown.name:26} {shown.duration_s:6.1f} s  {line[:400]}", flush=True)
    _write_summary(ctx, finished=False)


# --- command line ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=os.environ.get("CUDA13_GPUCHECK_PROG", "python -m cuda13_upgrade.gpucheck"),
        description="Read-only, offline check of this package's parsers, stack probe, verdicts and "
        "preflight on a machine with a real NVIDIA GPU; results in OUTDIR.",
    )
    parser.add_argument("out_dir", metavar="OUTDIR", help="directory for the results: new, or empty")
    parser.add_argument(
        "--torch-python", metavar="PY", help="the Python whose torch is probed (default: found)"
    )
    parser.add_argument(
        "--nvidia-smi", default="nvidia-smi", metavar="CMD", help="default: nvidia-smi on PATH"
    )
    parser.add_argument(
        "--nvidia-smi-timeout", type=float, default=NVIDIA_SMI_TIMEOUT_S, metavar="S", help="seconds per run"
    )
    parser.add_argument("--proc-driver-version", default=PROC_DRIVER_VERSION, metavar="PATH")
    parser.add_argument("--cuda-major", type=int, default=13, metavar="N", help="the stack's CUDA major (13)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="S", help="seconds for all parts")
    return parser


def _out_dir(parser: argparse.ArgumentParser, value: str) -> Path:
    out = Path(value).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"OUTDIR {value}: cannot be created: {exc}")
    if not out.is_dir():
        parser.error(f"OUTDIR {value}: not a directory")
    if any(out.iterdir()):
        parser.error(f"OUTDIR {value}: not empty; give a new or empty directory for the results")
    try:
        probe = out / ".writable"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        parser.error(f"OUTDIR {value}: not writable: {exc}")
    return out.resolve()


def main(argv: Sequence[str] | None = None) -> int:
    """Run every part; exit status 0 when every part that ran passed, 1 otherwise
    (2, through ``argparse``, for bad usage)."""
    parser = _parser()
    args = parser.parse_args(argv)
    out = _out_dir(parser, args.out_dir)
    if args.nvidia_smi_timeout <= 0 or args.budget <= 0:
        parser.error("--nvidia-smi-timeout and --budget must be positive seconds")
    ctx = _Context(
        out=out,
        budget=_Budget(args.budget),
        nvidia_smi=args.nvidia_smi,
        nvidia_smi_timeout=args.nvidia_smi_timeout,
        torch_python=args.torch_python,
        proc_driver_version=args.proc_driver_version,
        cuda_major=args.cuda_major,
        # timezone.utc, not datetime.UTC (3.11): this module runs on a GPU machine's Python 3.10 too.
        started=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),  # noqa: UP017
    )
    ctx.packaging, ctx.packaging_error = ensure_packaging()
    print(f"GPU check into {out} (read-only, offline; {args.budget:g} s at most)", flush=True)
    _write_summary(ctx, finished=False)
    _run_part(ctx, "nvidia-smi", lambda: check_nvidia_smi(ctx))
    _run_part(ctx, "module-flavour", lambda: check_module_flavour(ctx))
    _run_part(ctx, "stack-probe", lambda: check_stack_probe(ctx))
    _run_part(ctx, "stack-verdict", lambda: check_stack_verdict(ctx))
    _run_part(ctx, "elf-check", lambda: check_elf(ctx))
    _run_part(ctx, "preflight", lambda: check_preflight(ctx))
    _write_summary(ctx, finished=True)
    failed = [r.name for r in ctx.results if r.status == FAILED]
    print(f"{'failed: ' + ', '.join(failed) if failed else 'passed'}; {out / 'summary.md'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
