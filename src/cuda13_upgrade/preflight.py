"""Read-only preflight: may this host be moved to the target CUDA release?

:func:`evaluate` combines the rules of :mod:`cuda13_upgrade.versions` with a
host's facts and the inventory's settings, and returns every failure at once
(not just the first), each naming the value, the option to change and what to
do. Nothing on a host changes unless the report is ``ok``. Once pip has resolved
the target, :func:`check_stack_driver` runs its ``stack_driver`` check alone on
the resolved set (:func:`resolved_target_facts`).

Facts (what the host is), a dict::

    {
      "driver_version": "590.48.01",        # nvidia-smi --query-gpu=driver_version
      "cuda_driver_version": "13.1",        # optional: "CUDA Version" of the nvidia-smi table
      "gpus": [                             # nvidia-smi rows or GpuInventory.to_dict()["gpus"]
        {"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
         "compute_capability": "12.0"},     # "compute_cap" is accepted too
      ],
      "disk_free_bytes": 214748364800,      # free bytes where the new stack goes
      "disk_path": "/opt",                  # optional, for messages
      "space_plan": [...],                  # optional: cuda13_upgrade.space.plan(), one entry per
                                            # filesystem the run writes to
      "python_version": "3.11.2",           # the host Python that builds the new venv
      "architecture": "x86_64",             # optional: uname -m (picks the default allowed list)
      "kernel_release": "6.1.0-28-amd64",   # optional: uname -r (WSL's ends in -microsoft-standard-WSL2)
      "nvidia_smi_version": "590.48.01",    # optional: NVIDIA-SMI of the table header (WSL: differs)
      "compute_apps": [                     # optional: nvidia-smi --query-compute-apps rows
        {"gpu_uuid": "GPU-...", "pid": 4242, "process_name": "python3", "used_memory": 1714}],
      "service_pids": [4242],               # optional: the serving unit's processes (not "other")
      "module_version_text": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ...",
                                            # optional: /proc/driver/nvidia/version as read (the
                                            # loaded module's flavour); None = not read, no check
      "target_dists": {"cuda-bindings": "13.0.3", "nvidia-cuda-runtime": "13.0.96"},
                                            # optional: the resolved target's {name: version}
      "target_torch_cuda": "13.0",          # optional: the target torch's CUDA build
      "nvidia_smi_runs": {                  # optional: the results (rc, stdout, stderr,
        "table": {"rc": 0, ...},            # timedout) of the nvidia-smi runs after the GPU query:
        "compute_apps": {"rc": 124, ...},   # the table, --query-compute-apps (NVIDIA_SMI_RUNS)
      },
    }

Settings (what the inventory asks for), a dict; every key is optional and
defaults to :data:`DEFAULT_SETTINGS`. Their values are the options that
:func:`cuda13_upgrade.options.validate` checked (types, formats, ranges, the
release's compute capability floor; the action ``cuda13_options``, before
the preflight): :func:`evaluate` does not check them again, it checks the host:

====================================  ==========================================
key                                   meaning
====================================  ==========================================
``toolkit_release``                   target release, ``"13.0"`` or ``"13.0.2"``
``jit``                               the stack JIT-compiles PTX (flashinfer, Triton)
``min_driver_version``                explicit minimum driver, overrides the table
``allowed_compute_capabilities``      GPUs allowed (default ``None``: the host
                                      platform's list, see
                                      :func:`versions.default_allowed_compute_capabilities`);
                                      never below the release's floor (CUDA 13: 7.5)
``allow_wsl``                         accept a WSL host (Windows driver)
``allow_mixed_gpu_models``            accept more than one GPU model on a host
``allow_busy_gpus``                   accept GPUs used by processes other than the service
``expected_gpu_count``                ``None`` = any number (but never zero)
``required_disk_gib``                 free space needed, GiB (2**30 bytes); ``None`` skips
``min_python_version``                minimum host Python, ``"3.10"``; ``None`` skips
``nvidia_smi_timeout``                seconds each nvidia-smi run had (coreutils
                                      ``timeout``); its exit status 124 or 137 is a hang
``option_names``                      {key: Ansible variable} to quote in messages
====================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from cuda13_upgrade.errors import Cuda13Error, ParseError, PreflightError, format_message
from cuda13_upgrade.nvidia_smi import TIMEOUT_OPTION, classify_failure, kernel_module_flavour
from cuda13_upgrade.versions import (
    MIN_DRIVER_OPTION,
    default_allowed_compute_capabilities,
    driver_cuda_version_supports,
    driver_supports,
    min_compute_capability,
    parse_compute_capability,
    parse_driver_version,
    stack_driver_floor,
)
from cuda13_upgrade.wheels import cuda_tag_of_label, local_label

__all__ = [
    "DEFAULT_SETTINGS",
    "OPTION_NAMES",
    "GIB",
    "PreflightReport",
    "check_stack_driver",
    "evaluate",
    "resolved_target_facts",
]

#: Bytes in a GiB.
GIB = 1024**3

#: Settings used where the caller gives none.
DEFAULT_SETTINGS: dict[str, Any] = {
    "toolkit_release": "13.0",
    "jit": True,
    "min_driver_version": None,
    "allowed_compute_capabilities": None,
    "expected_gpu_count": None,
    "required_disk_gib": 27,  # benchmarks/real_stack.py: the real stack, its cache copy, toolkit, SGLang
    "min_python_version": "3.10",
    "allow_wsl": False,
    "allow_mixed_gpu_models": False,
    "allow_busy_gpus": False,
    "nvidia_smi_timeout": 60,
}

#: The Ansible variable behind each setting, quoted in messages.
OPTION_NAMES: dict[str, str] = {
    "toolkit_release": "cuda13_toolkit_release",
    "jit": "nvidia_driver_check_require_jit",
    "min_driver_version": MIN_DRIVER_OPTION,
    "allowed_compute_capabilities": "nvidia_driver_check_allowed_compute_capabilities",
    "expected_gpu_count": "nvidia_driver_check_expected_gpu_count",
    "required_disk_gib": "preflight_required_disk_gib",
    "min_python_version": "preflight_min_python_version",
    "allow_wsl": "nvidia_driver_check_allow_wsl",
    "allow_mixed_gpu_models": "nvidia_driver_check_allow_mixed_gpu_models",
    "allow_busy_gpus": "nvidia_driver_check_allow_busy_gpus",
    "nvidia_smi_timeout": TIMEOUT_OPTION,
    # Not a setting: the option that names the target whose CUDA components set a floor.
    "target": "cu130_wheels_requirements",
}

#: The nvidia-smi runs after the GPU query whose hang the preflight refuses, by their key
#: in the facts' ``nvidia_smi_runs``: what each reads. The query's own failure, a hang
#: included, stops the host before the preflight is evaluated
#: (cuda13_upgrade.steps.preflight.evaluate, cuda13_upgrade.nvidia_smi.classify_failure).
NVIDIA_SMI_RUNS: dict[str, str] = {
    "table": "the table, for its CUDA Version",
    "compute_apps": "--query-compute-apps, the processes on the GPUs",
}


@dataclass
class PreflightReport:
    """The outcome of :func:`evaluate`.

    Attributes:
        failures: one dict per failed check: ``check`` (``"driver"``,
            ``"driver_cuda_version"``, ``"stack_driver"``, ``"gpu_count"``, ``"compute_capability"``,
            ``"wsl"``, ``"gpu_models"``, ``"gpu_processes"``, ``"kernel_module"``, ``"nvidia_smi"``,
            ``"disk"``, ``"space"``, ``"python"``),
            ``value`` (the offending value),
            ``option`` (the Ansible variable to change, or ``None`` when only the
            host can be fixed) and ``message`` (value, option and remedy).
        passed: one dict per passed check: ``check``, ``value``, ``message``.
    """

    failures: list[dict[str, Any]] = field(default_factory=list)
    passed: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.failures

    def fail(self, check: str, value: Any, option: str | None, problem: str, remedy: str) -> None:
        """Record a failed check; the message comes from :func:`errors.format_message`."""
        message = format_message(problem, value, option=option, remedy=remedy)
        self.failures.append({"check": check, "value": value, "option": option, "message": message})

    def pass_(self, check: str, value: Any, message: str) -> None:
        """Record a passed check."""
        self.passed.append({"check": check, "value": value, "message": message})

    def to_dict(self) -> dict[str, Any]:
        """``{"ok": bool, "failures": [...], "passed": [...]}`` for Ansible and JSON."""
        return {"ok": self.ok, "failures": list(self.failures), "passed": list(self.passed)}


def _settings(settings: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise PreflightError(
            "preflight settings must be a mapping",
            settings,
            option="settings",
            remedy=f"pass a dict with keys among {sorted(DEFAULT_SETTINGS)}",
        )
    unknown = sorted(set(settings) - set(DEFAULT_SETTINGS) - {"option_names"})
    if unknown:
        raise PreflightError(
            "unknown preflight settings",
            unknown,
            option="settings",
            remedy=f"use only {sorted(DEFAULT_SETTINGS)} and option_names",
        )
    names = dict(OPTION_NAMES)
    extra = settings.get("option_names") or {}
    if not isinstance(extra, Mapping):
        raise PreflightError(
            "option_names must map setting keys to variable names",
            extra,
            option="option_names",
            remedy="pass e.g. {'required_disk_gib': 'my_role_required_disk_gib'}",
        )
    names.update({str(k): str(v) for k, v in extra.items()})
    merged = {**DEFAULT_SETTINGS, **{k: v for k, v in settings.items() if k != "option_names"}}
    # The values themselves were checked by cuda13_upgrade.options.validate (types,
    # formats, ranges, the release's compute capability floor); here they are only
    # brought to the form the checks compare with.
    allowed = merged["allowed_compute_capabilities"]
    merged["allowed_compute_capabilities"] = (
        [
            "{}.{}".format(*parse_compute_capability(cc, option=names["allowed_compute_capabilities"]))
            for cc in allowed
        ]
        if allowed
        else None
    )
    return merged, names


def _check_driver(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    driver = facts.get("driver_version")
    if driver is None:
        report.fail(
            "driver",
            None,
            None,
            "the driver version fact is missing",
            "gather 'nvidia-smi --query-gpu=driver_version --format=csv,noheader' first",
        )
        return
    try:
        result = driver_supports(
            driver,
            s["toolkit_release"],
            jit=s["jit"],
            min_driver_version=s["min_driver_version"],
            release_option=n["toolkit_release"],
            driver_option="driver_version",
            min_driver_option=n["min_driver_version"],
        )
    except Cuda13Error as exc:
        option = exc.option if exc.option in n.values() else None
        report.fail("driver", exc.value, option, exc.problem, exc.remedy or "")
        return
    if result.ok:
        report.pass_("driver", driver, result.message)
        return
    option = n["min_driver_version"] if result.rule == "override" else n["toolkit_release"]
    report.fail(
        "driver",
        driver,
        option,
        f"the NVIDIA driver is too old for CUDA {s['toolkit_release']} (needs >= "
        f"{result.required}, rule {result.rule})",
        f"upgrade the driver to {result.required} or newer (this package never changes the "
        f"driver), or set {n['toolkit_release']} to a release the driver supports",
    )


#: The source of each rule of :func:`versions.stack_driver_floor`, quoted in messages.
_FLOOR_SOURCES = {
    "toolkit-driver": "CUDA Toolkit Release Notes, Table 3: the release's own minimum, which PTX JIT "
    "needs (nvidia_driver_check_require_jit)",
    "minor-version-compatibility": "CUDA Toolkit Release Notes, Table 2: minor version compatibility",
}


def _check_stack_driver(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    """The driver floor of the whole resolved target (:func:`versions.stack_driver_floor`)."""
    dists, torch_cuda = facts.get("target_dists"), facts.get("target_torch_cuda")
    if not dists and not torch_cuda or s["min_driver_version"]:
        return
    driver = facts.get("driver_version")
    try:
        floor = stack_driver_floor(
            dists if isinstance(dists, Mapping) else {},
            torch_cuda=str(torch_cuda) if torch_cuda else None,
            toolkit_release=s["toolkit_release"],
            jit=s["jit"],
        )
        found = parse_driver_version(str(driver), option=None)
    except Cuda13Error:
        return  # a malformed driver version or torch CUDA: _check_driver reports the driver
    if floor["floor"] is None:
        return
    required = str(floor["floor"])
    source = f" ({_FLOOR_SOURCES[str(floor['rule'])]})"
    listing = f"driver {driver} >= {required}, set by {floor['set_by']}{source}"
    if found >= parse_driver_version(required if "." in required else required + ".0", option=None):
        report.pass_("stack_driver", driver, listing)
        return
    if str(floor["set_by"]).startswith("cuda-toolkit "):
        return  # the toolkit alone sets it: _check_driver says so already
    report.fail(
        "stack_driver",
        driver,
        n["target"],
        f"the NVIDIA driver {driver} is too old for the resolved target: {floor['set_by']} needs "
        f">= {required}{source}",
        f"upgrade the driver to {required} or newer (this package never changes the driver), or pin "
        f"the target's CUDA components in {n['target']} to a release this driver supports",
    )


def _check_driver_cuda(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    cuda = facts.get("cuda_driver_version")
    if cuda is None or s["min_driver_version"]:
        return
    try:
        result = driver_cuda_version_supports(
            cuda, s["toolkit_release"], jit=s["jit"], release_option=n["toolkit_release"]
        )
    except Cuda13Error as exc:
        report.fail("driver_cuda_version", exc.value, None, exc.problem, exc.remedy or "")
        return
    if result.ok:
        report.pass_("driver_cuda_version", cuda, result.message)
    else:
        report.fail(
            "driver_cuda_version",
            cuda,
            n["toolkit_release"],
            f"nvidia-smi reports the driver supports CUDA up to {cuda}, older than {s['toolkit_release']}",
            f"upgrade the driver, or set {n['toolkit_release']} to {cuda} or older",
        )


def _check_gpus(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    gpus = facts.get("gpus")
    if not isinstance(gpus, list):
        report.fail(
            "gpu_count",
            gpus,
            None,
            "the GPU list fact is missing or not a list",
            "gather 'nvidia-smi --query-gpu=index,name,compute_cap ...' and pass its rows as gpus",
        )
        return
    expected = s["expected_gpu_count"]
    if not gpus:
        report.fail(
            "gpu_count",
            0,
            n["expected_gpu_count"],
            "no GPU found on the host",
            "check that nvidia-smi lists the GPUs (driver loaded, open kernel module) before "
            "upgrading; a host without GPUs is never upgraded",
        )
        return
    if expected is not None and len(gpus) != expected:
        report.fail(
            "gpu_count",
            len(gpus),
            n["expected_gpu_count"],
            f"the host has {len(gpus)} GPUs, {expected} expected",
            f"find the missing or extra GPUs (nvidia-smi -L, dmesg), or set "
            f"{n['expected_gpu_count']} to {len(gpus)} for this host",
        )
    else:
        report.pass_("gpu_count", len(gpus), f"{len(gpus)} GPUs")

    allowed = s["allowed_compute_capabilities"]
    if allowed is None:
        allowed = default_allowed_compute_capabilities(facts.get("architecture"))
    floor = min_compute_capability(s["toolkit_release"], option=None)
    refused: dict[str, list[str]] = {}
    below_floor: dict[str, list[str]] = {}
    option = n["allowed_compute_capabilities"]
    for position, gpu in enumerate(gpus):
        gpu = gpu if isinstance(gpu, Mapping) else {}
        index = gpu.get("index", position)
        name = gpu.get("name") or "unknown GPU"
        cc = gpu.get("compute_capability", gpu.get("compute_cap"))
        try:
            cc_norm = "{}.{}".format(*parse_compute_capability(cc, option=None))
        except Cuda13Error:
            report.fail(
                "compute_capability",
                cc,
                None,
                f"GPU {index} ({name}) reports no valid compute capability",
                "query compute_cap with nvidia-smi (driver R510 or newer) and pass it",
            )
            continue
        if floor is not None and parse_compute_capability(cc_norm, option=None) < parse_compute_capability(
            floor, option=None
        ):
            below_floor.setdefault(cc_norm, []).append(f"{index} ({name})")
        elif cc_norm not in allowed:
            refused.setdefault(cc_norm, []).append(f"{index} ({name})")
    for cc_norm, which in sorted(below_floor.items()):
        report.fail(
            "compute_capability",
            cc_norm,
            None,
            f"GPU {', '.join(which)} has compute capability {cc_norm}, below {floor}, the oldest "
            f"CUDA {s['toolkit_release']} supports (CUDA 13 removed Maxwell, Pascal and Volta)",
            "leave this host on its CUDA 12 stack; no allowed list lifts this floor",
        )
    for cc_norm, which in sorted(refused.items()):
        report.fail(
            "compute_capability",
            cc_norm,
            option,
            f"GPU {', '.join(which)} has compute capability {cc_norm}, which is not in the "
            f"allowed list {allowed}",
            f"add '{cc_norm}' to {option} if the CUDA 13 stack is meant to run on it, "
            "or leave this host out of the upgrade",
        )
    if not refused and not below_floor:
        found = sorted(
            {str(g.get("compute_capability", g.get("compute_cap"))) for g in gpus if isinstance(g, Mapping)}
        )
        report.pass_("compute_capability", found, f"all GPUs are in {allowed}")


def _gpu_label(gpus: list[Any]) -> dict[str, str]:
    """``{uuid: "0 (NVIDIA RTX PRO 6000 ...)"}`` for the GPUs that have a uuid."""
    labels = {}
    for position, gpu in enumerate(gpus):
        if isinstance(gpu, Mapping) and gpu.get("uuid"):
            labels[str(gpu["uuid"])] = f"{gpu.get('index', position)} ({gpu.get('name') or 'unknown GPU'})"
    return labels


def _check_wsl(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    smi = facts.get("nvidia_smi_version")
    driver = facts.get("driver_version")
    kernel = str(facts.get("kernel_release") or "")
    signs = []
    if smi and driver and str(smi) != str(driver):
        signs.append(f"nvidia-smi {smi} reports the driver as {driver}")
    if "microsoft" in kernel.lower():
        signs.append(f"the kernel is {kernel}")
    if not signs:
        if smi or kernel:
            report.pass_("wsl", kernel or smi, "not a WSL host")
        return
    if s["allow_wsl"]:
        report.pass_("wsl", signs, f"a WSL host ({'; '.join(signs)}), accepted by {n['allow_wsl']}")
        return
    report.fail(
        "wsl",
        "; ".join(signs),
        n["allow_wsl"],
        "this is a WSL host: the GPUs are driven by the Windows NVIDIA driver, which this "
        "package can neither check against Linux driver tables nor manage",
        f"upgrade fleet hosts that run Linux natively; set {n['allow_wsl']} to true only for "
        "a workstation you manage by hand",
    )


def _check_models(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    gpus = facts.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return
    models: dict[str, list[str]] = {}
    for position, gpu in enumerate(gpus):
        if isinstance(gpu, Mapping):
            models.setdefault(str(gpu.get("name") or "unknown GPU"), []).append(
                str(gpu.get("index", position))
            )
    if len(models) < 2:
        report.pass_("gpu_models", sorted(models), f"one GPU model: {next(iter(models))}")
        return
    listing = "; ".join(f"GPU {', '.join(which)}: {name}" for name, which in sorted(models.items()))
    if s["allow_mixed_gpu_models"]:
        report.pass_("gpu_models", sorted(models), f"{len(models)} GPU models ({listing}), accepted")
        return
    report.fail(
        "gpu_models",
        sorted(models),
        n["allow_mixed_gpu_models"],
        f"the host mixes {len(models)} GPU models ({listing}); the baseline and the gate "
        "measure one model's throughput, and tensor parallelism runs at the slowest board's pace",
        f"check that the boards are the ones ordered (nvidia-smi --query-gpu=index,name); set "
        f"{n['allow_mixed_gpu_models']} to true to upgrade such a host anyway",
    )


def _check_busy(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    apps = facts.get("compute_apps")
    if apps is None:
        return
    if not isinstance(apps, list):
        report.fail(
            "gpu_processes",
            apps,
            None,
            "the compute processes fact is not a list",
            "pass the rows of nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory",
        )
        return
    service = {int(p) for p in facts.get("service_pids") or [] if str(p).isdigit()}
    labels = _gpu_label(facts.get("gpus") if isinstance(facts.get("gpus"), list) else [])
    others = [a for a in apps if isinstance(a, Mapping) and a.get("pid") not in service]
    if not others:
        report.pass_("gpu_processes", len(apps), "no process other than the service uses a GPU")
        return
    listing = "; ".join(
        f"GPU {labels.get(str(a.get('gpu_uuid')), a.get('gpu_uuid'))}: pid {a.get('pid')} "
        f"{a.get('process_name')} ({a.get('used_memory')} MiB)"
        for a in others
    )
    if s["allow_busy_gpus"]:
        report.pass_("gpu_processes", len(others), f"GPUs in use by other processes ({listing}), accepted")
        return
    report.fail(
        "gpu_processes",
        [a.get("pid") for a in others],
        n["allow_busy_gpus"],
        f"GPUs are used by processes other than the service ({listing}); they would skew the "
        "throughput gate and may hold memory the new stack needs",
        f"stop those processes or move them off the host, or set {n['allow_busy_gpus']} to true",
    )


#: Where the loaded module names its flavour.
PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"

#: The oldest compute capability that only the open kernel modules drive: Blackwell
#: (10.x, 11.x, 12.x) and later. Source: NVIDIA driver README, chapter "kernel_open";
#: the R580 proprietary module itself logs, for a Blackwell board, "NVRM: installed
#: in this system requires use of the NVIDIA open kernel modules." followed by
#: "RmInitAdapter failed!" (public log, code search id 196968485).
OPEN_MODULE_ONLY_FROM: tuple[int, int] = (10, 0)


def _check_nvidia_smi(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    """Refuse a host where an nvidia-smi run of :data:`NVIDIA_SMI_RUNS` did not answer in time."""
    runs = facts.get("nvidia_smi_runs")
    if not isinstance(runs, Mapping):
        return
    for key, what in NVIDIA_SMI_RUNS.items():
        result = runs.get(key)
        if not isinstance(result, Mapping):
            continue
        rc = result.get("rc")
        failure = classify_failure(
            rc if isinstance(rc, int) else None,
            str(result.get("stdout") or ""),
            str(result.get("stderr") or result.get("msg") or ""),
            timeout_s=s["nvidia_smi_timeout"],
            timed_out=bool(result.get("timedout")),
        )
        if failure.code == "timeout":
            report.fail(
                "nvidia_smi",
                rc if isinstance(rc, int) else "ended by the task's timeout",
                n["nvidia_smi_timeout"],
                f"nvidia-smi ({what}) {failure.summary}; the exit status",
                failure.remedy,
            )


def _check_kernel_module(report: PreflightReport, facts: Mapping[str, Any]) -> None:
    """Refuse a host whose Blackwell GPUs run on the proprietary kernel module."""
    if "module_version_text" not in facts or facts["module_version_text"] is None:
        return
    text = facts["module_version_text"]
    try:
        module = kernel_module_flavour(text if isinstance(text, str) else "")
    except ParseError as exc:
        report.fail(
            "kernel_module",
            exc.value if isinstance(text, str) else text,
            None,
            f"{PROC_DRIVER_VERSION} does not name the loaded NVIDIA kernel module and its flavour",
            f"check that the nvidia module is loaded ('lsmod | grep nvidia') and that "
            f"'cat {PROC_DRIVER_VERSION}' starts with 'NVRM version: NVIDIA UNIX'",
        )
        return
    gpus = facts.get("gpus") if isinstance(facts.get("gpus"), list) else []
    needing_open = []
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, Mapping):
            continue
        try:
            cc = parse_compute_capability(gpu.get("compute_capability", gpu.get("compute_cap")), option=None)
        except Cuda13Error:
            continue  # _check_gpus reports it
        if cc >= OPEN_MODULE_ONLY_FROM:
            needing_open.append(f"{gpu.get('index', position)} ({gpu.get('name') or 'unknown GPU'})")
    described = f"the {module['flavour']} kernel module {module['driver_version']}"
    if module["flavour"] == "open" or not needing_open:
        report.pass_("kernel_module", module["flavour"], f"{described} is loaded")
        return
    branch = module["driver_version"].split(".")[0]
    report.fail(
        "kernel_module",
        f"{module['flavour']} {module['driver_version']}",
        None,
        f"GPU {', '.join(needing_open)} need the open NVIDIA kernel module (Blackwell and later are "
        f"supported only by the open flavour, NVIDIA driver README 'kernel_open'), but "
        f"{PROC_DRIVER_VERSION} shows {described}",
        f"install the open flavour of the same driver (Ubuntu: nvidia-driver-{branch}-open; "
        f"NVIDIA's repository: nvidia-open; runfile: -m=kernel-open) and reboot; this package never "
        "changes the driver",
    )


def _check_disk(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    required = s["required_disk_gib"]
    if required is None:
        return
    option = n["required_disk_gib"]
    free = facts.get("disk_free_bytes")
    where = facts.get("disk_path") or "the target filesystem"
    if isinstance(free, bool) or not isinstance(free, int) or free < 0:
        report.fail(
            "disk",
            free,
            None,
            f"free disk space of {where} is missing or not a byte count",
            "gather it (e.g. ansible_facts mounts size_available) and pass it as disk_free_bytes",
        )
        return
    if free < required * GIB:
        report.fail(
            "disk",
            free,
            option,
            f"{where} has {free / GIB:.1f} GiB free ({free} bytes), less than the {required} GiB required",
            f"free space on {where}, or lower {option} if the new stack needs less",
        )
    else:
        report.pass_("disk", free, f"{where} has {free / GIB:.1f} GiB free (>= {required} GiB)")


def _check_space(report: PreflightReport, facts: Mapping[str, Any]) -> None:
    """One result per filesystem of ``facts["space_plan"]`` (:func:`cuda13_upgrade.space.plan`)."""
    groups = facts.get("space_plan")
    if groups is None:
        return
    for group in groups:
        if group.get("ok"):
            report.pass_("space", group.get("free_bytes"), group["message"])
            continue
        options = [p["option"] for p in group.get("places", []) if p.get("option")]
        report.fail(
            "space",
            group.get("free_bytes"),
            ", ".join(options) or None,
            group.get("problem", group.get("message", "not enough space")),
            group.get("remedy", ""),
        )


def _check_python(report: PreflightReport, facts: Mapping[str, Any], s: dict, n: dict) -> None:
    minimum = s["min_python_version"]
    if minimum is None:
        return
    option = n["min_python_version"]
    found = facts.get("python_version")
    try:
        version = Version(str(found)) if found is not None else None
    except InvalidVersion:
        version = None
    if version is None:
        report.fail(
            "python",
            found,
            None,
            "the host Python version fact is missing or not a version",
            "gather ansible_facts.python_version (or 'python3 -V') and pass it as python_version",
        )
        return
    if Version(".".join(str(part) for part in version.release)) < Version(minimum):
        report.fail(
            "python",
            found,
            option,
            f"host Python {found} is older than the required {minimum}",
            f"install Python {minimum} or newer for the new virtual environment, or lower {option}",
        )
    else:
        report.pass_("python", found, f"Python {found} >= {minimum}")


def resolved_target_facts(resolved: Any) -> dict[str, Any]:
    """The facts :func:`evaluate`'s ``stack_driver`` check reads, from a resolved target.

    Args:
        resolved: the run's target as pip's resolver gave it
            (:func:`cuda13_upgrade.resolve.resolved_set`, ``cu130_wheels_resolved_target``):
            ``[{"name": "torch", "version": "2.9.1+cu130", "url": ..., "sha256": ...}, ...]``.

    Returns:
        ``{"target_dists": {name: version}, "target_torch_cuda": "13.0" or None}``: torch's
        CUDA build from its local label (PyTorch's index: ``2.9.1+cu130``); None for a torch
        without one (PyPI's ``2.14.1``), whose CUDA runtime wheels then set its floor.

    Raises:
        PreflightError: ``resolved`` is not a list of ``{"name", "version"}`` dicts.
    """
    if not isinstance(resolved, list) or not all(
        isinstance(d, Mapping) and isinstance(d.get("name"), str) and isinstance(d.get("version"), str)
        for d in resolved
    ):
        raise PreflightError(
            "the resolved target must be a list of {name, version} dicts",
            resolved,
            option="cu130_wheels_resolved_target",
            remedy="pass the resolved set (cuda13_upgrade.resolve.resolved_set, as the preflight records it)",
        )
    dists = {str(d["name"]): str(d["version"]) for d in resolved}
    torch_cuda = None
    try:
        label = local_label(dists["torch"]) if "torch" in dists else None
        torch_cuda = cuda_tag_of_label(label) if label else None
    except Cuda13Error:
        torch_cuda = None  # a cpu or rocm build, or no PEP 440 version: no CUDA floor of its own
    return {"target_dists": dists, "target_torch_cuda": torch_cuda}


def check_stack_driver(
    resolved: Any, driver_version: Any, settings: Mapping[str, Any] | None = None
) -> PreflightReport:
    """Only the ``stack_driver`` check, once the target is resolved (after :func:`evaluate`).

    The preflight's other checks run before pip resolves the target; this one needs the
    resolved set (:func:`cuda13_upgrade.steps.preflight.stack_driver`, after
    :func:`cuda13_upgrade.steps.resolve.resolve`). The floor is that of every CUDA component of
    the target (:func:`cuda13_upgrade.versions.stack_driver_floor`: torch's CUDA build,
    nvidia-cuda-runtime, nvidia-nvjitlink, nvidia-cuda-nvrtc, cuda-bindings, cuda-python,
    the apt toolkit of ``settings["toolkit_release"]``).

    Args:
        resolved: the resolved target (:func:`resolved_target_facts`).
        driver_version: the driver nvidia-smi reports (``"590.48.01"``).
        settings: as for :func:`evaluate` (``toolkit_release``, ``jit``,
            ``min_driver_version``, ``option_names``).

    Returns:
        A :class:`PreflightReport` with one ``stack_driver`` entry, failed or passed, or
        none when the check does not apply (no CUDA component, an explicit
        ``min_driver_version``, a malformed driver version, which :func:`evaluate`
        reported, or a floor the toolkit alone sets, which its ``driver`` check did).

    Raises:
        PreflightError: a malformed ``resolved``, or settings as :func:`evaluate` raises.
    """
    s, n = _settings(settings)
    report = PreflightReport()
    _check_stack_driver(report, {**resolved_target_facts(resolved), "driver_version": driver_version}, s, n)
    return report


def evaluate(facts: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> PreflightReport:
    """Run every preflight check on one host.

    Args:
        facts: what the host is (see the module docstring).
        settings: what the inventory asks for; missing keys take
            :data:`DEFAULT_SETTINGS`; ``option_names`` renames the variables
            quoted in messages (default :data:`OPTION_NAMES`).

    Returns:
        A :class:`PreflightReport` listing every failed and passed check.
        A GPU outside ``allowed_compute_capabilities`` (e.g. an NVIDIA H200,
        9.0, under the Blackwell default) fails with its index and name; zero
        GPUs always fails, whatever ``expected_gpu_count`` says.

    Raises:
        PreflightError: *facts* or *settings* that are not a mapping, or
            settings with unknown keys. The settings' values are not checked
            here: :func:`cuda13_upgrade.options.validate` checks them first, and
            its message names the option. Malformed *facts* become failures.
    """
    if not isinstance(facts, Mapping):
        raise PreflightError(
            "preflight facts must be a mapping",
            facts,
            option="facts",
            remedy="pass a dict with driver_version, gpus, disk_free_bytes and python_version",
        )
    s, n = _settings(settings)
    report = PreflightReport()
    _check_wsl(report, facts, s, n)
    _check_driver(report, facts, s, n)
    _check_stack_driver(report, facts, s, n)
    _check_driver_cuda(report, facts, s, n)
    _check_gpus(report, facts, s, n)
    _check_models(report, facts, s, n)
    _check_busy(report, facts, s, n)
    _check_kernel_module(report, facts)
    _check_nvidia_smi(report, facts, s, n)
    _check_disk(report, facts, s, n)
    _check_space(report, facts)
    _check_python(report, facts, s, n)
    return report
