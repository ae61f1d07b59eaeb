"""The step ``preflight``: read-only checks of a host before any change (action ``cuda13_preflight``).

In order, each refusing the host with what is wrong and what to do, and
"nothing on the host was changed":

0. the drain rule of the rollout, before the host is read: a host no drain hook
   takes out of service is refused unless ``cuda13_allow_undrained``
   (:func:`cuda13_upgrade.ondemand.drain_plan`, the rule of ``verify`` and
   ``rollback`` too);
1. the options against the host (``nvidia_driver_check_host_checks``): the unit
   exists and runs the serving venv's Python (or, switched, the new one's), the
   serving venv has a Python, NVIDIA's repository offers the toolkit's package at
   the pinned version, the indexes answer (:func:`cuda13_upgrade.options.host_failures`);
2. nvidia-smi answers, in time (:func:`cuda13_upgrade.nvidia_smi.classify_failure`);
3. the driver, the GPUs, the processes on them, the disk, Python
   (:func:`cuda13_upgrade.preflight.evaluate`);
   and, with ``cuda13_driver_target``, the driver window's plan for a host below the floor
   (:func:`cuda13_upgrade.steps.driver_window.readiness`): its blockers join the refusal;
4. what the toolkit step will do with apt, simulated in a scratch apt state
   (:func:`cuda13_upgrade.steps.toolkit.plan`);
5. the whole target resolved by pip's resolver, once per distinct target of the
   run (:func:`cuda13_upgrade.steps.resolve.resolve`);
6. the driver against the floor of every CUDA component of the resolved target
   (:func:`cuda13_upgrade.preflight.check_stack_driver`).

The host's side is the module ``cuda13_host_facts`` (one run) and the modules the
toolkit and resolution steps call. ``refuse`` false (``cuda13-upgrade plan``)
records each refusal and stops that host's checks there, instead of failing.

The operator sees each check that passed on a line of its own, ``<host>: passed:
<message>`` (:func:`tell_passed`), and each part turned off by an option
(``<host>: not checked: ...``); a refusal is the task's message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cuda13_upgrade import nvidia_smi, ondemand, preflight, space
from cuda13_upgrade import options as option_rules
from cuda13_upgrade.steps import driver_window
from cuda13_upgrade.steps.host import Host, StepFailed

#: The option behind each preflight setting, named in its failure.
OPTION_NAMES = {
    "toolkit_release": "nvidia_driver_check_toolkit_release (from cuda13_toolkit_package_version)",
    "jit": "nvidia_driver_check_require_jit",
    "min_driver_version": "nvidia_driver_check_min_driver_version",
    "allowed_compute_capabilities": "nvidia_driver_check_allowed_compute_capabilities",
    "allow_mixed_gpu_models": "nvidia_driver_check_allow_mixed_gpu_models",
    "allow_busy_gpus": "nvidia_driver_check_allow_busy_gpus",
    "allow_wsl": "nvidia_driver_check_allow_wsl",
    "expected_gpu_count": "nvidia_driver_check_expected_gpu_count",
    "required_disk_gib": "nvidia_driver_check_required_disk_gib",
    "min_python_version": "nvidia_driver_check_min_python_version",
    "nvidia_smi_timeout": "nvidia_driver_check_nvidia_smi_timeout",
}


def settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """The preflight's settings (:func:`cuda13_upgrade.preflight.evaluate`) from the options."""
    return {
        "toolkit_release": options["nvidia_driver_check_toolkit_release"],
        "jit": options["nvidia_driver_check_require_jit"],
        "min_driver_version": options.get("nvidia_driver_check_min_driver_version") or None,
        "allowed_compute_capabilities": options.get("nvidia_driver_check_allowed_compute_capabilities") or [],
        "allow_mixed_gpu_models": options["nvidia_driver_check_allow_mixed_gpu_models"],
        "allow_busy_gpus": options["nvidia_driver_check_allow_busy_gpus"],
        "allow_wsl": options["nvidia_driver_check_allow_wsl"],
        "expected_gpu_count": options.get("nvidia_driver_check_expected_gpu_count"),
        "required_disk_gib": options["nvidia_driver_check_required_disk_gib"],
        "min_python_version": options["nvidia_driver_check_min_python_version"],
        "nvidia_smi_timeout": options["nvidia_driver_check_nvidia_smi_timeout"],
        "option_names": dict(OPTION_NAMES),
    }


def tell_passed(host: Host, passed: list[Mapping[str, Any]]) -> None:
    """Show each check that passed, one line each: ``<host>: passed: <message>``
    (``cuda13_upgrade.gpucheck.preflight_messages`` reads them)."""
    for check in passed:
        host.tell(f"passed: {' '.join(str(check['message']).split())}")


def _failures_text(failures: list[Any]) -> str:
    return "\n".join(f"- {f['message'] if isinstance(f, Mapping) else f}" for f in failures)


def option_host_checks(host: Host, options: Mapping[str, Any], found: Mapping[str, Any]) -> None:
    """Step 1 (see the module docstring); raises StepFailed listing every option that does not fit."""
    unit = found.get("unit_show") or {}
    repo = str(options["cuda_toolkit_apt_repo_url"])
    apt = host.module(
        "ansible.builtin.uri",
        {"url": f"{repo}Packages", "return_content": True, "timeout": 20},
        check_mode=False,
        allow_failure=True,
    )
    indexes = []
    if not options.get("cuda13_artifact_cache"):
        indexes = [options["cu130_wheels_index_url"], *(options.get("cu130_wheels_extra_index_urls") or [])]
    answers = {}
    for url in [u for u in indexes if re.match(r"^https?://", str(u))]:
        asked = host.module(
            "ansible.builtin.uri",
            {"url": url, "method": "GET", "timeout": 20},
            check_mode=False,
            allow_failure=True,
        )
        answers[url] = f"{asked.get('status', -1)} {asked.get('msg', '')}"
    status = apt.get("status", -1)
    facts = {
        "unit_show": unit.get("stdout") or "",
        "unit_rc": unit.get("rc", 1),
        "new_venv": options["cu130_wheels_venv"],
        "old_python_exists": bool(found.get("old_python_exists")),
        "apt_packages": apt.get("content") if status == 200 else None,
        "apt_error": f"HTTP {status if status != -1 else ''} {_truncate(str(apt.get('msg') or ''), 200)}",
        "indexes": answers,
    }
    failures = option_rules.host_failures(facts, options)
    if failures:
        raise StepFailed(
            f"{host.name}: option values that do not fit the host; nothing on the host was changed.\n"
            + _failures_text(failures)
        )
    checked = [f"{options['cuda13_service_name']} runs the Python of {options['cuda13_old_venv']}"]
    if facts["apt_packages"] is not None:
        package = f"{options.get('cuda_toolkit_package')} {options['cuda13_toolkit_package_version']}"
        checked.append(f"{repo} offers {package}")
    if answers:
        checked.append(f"the {len(answers)} package index(es) answer")
    tell_passed(host, [{"message": f"the options fit the host: {'; '.join(checked)}"}])


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3].rsplit(" ", 1)[0] + "..."


def evaluate(
    host: Host, options: Mapping[str, Any], found: Mapping[str, Any], figures: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Steps 2 and 3 (see the module docstring); ``figures``: the stacks' space figures
    (``roles/nvidia_driver_check/files/stack-space.yml``). Returns ``{"report", "gpus",
    "compute_capabilities", "driver_version"}``; raises StepFailed when nvidia-smi does not
    answer or a check fails (after showing the checks that passed, :func:`tell_passed`)."""
    smi = options["nvidia_driver_check_nvidia_smi"]
    timeout = options["nvidia_driver_check_nvidia_smi_timeout"]
    query = found.get("query") or {}
    proc = found.get("proc_version") or ""
    if query.get("rc") != 0:
        failure = nvidia_smi.classify_failure(
            query.get("rc") if isinstance(query.get("rc"), int) else None,
            str(query.get("stdout") or ""),
            str(query.get("stderr") or query.get("msg") or ""),
            timeout_s=timeout,
            timed_out=bool(query.get("timedout")),
        )
        module = (
            f" The loaded kernel module is {nvidia_smi.parse_proc_driver_version(proc)['module_version']}"
            " (/proc/driver/nvidia/version)."
            if "NVRM version" in proc
            else ""
        )
        raise StepFailed(
            f"{host.name}: {smi} {failure.summary}.{module} Fix: {failure.remedy}."
            " Nothing on the host was changed."
        )
    gpus = nvidia_smi.parse_query_gpu(
        query.get("stdout") or "",
        ["index", "name", "uuid", "driver_version", "compute_cap", "memory.total", "pci.bus_id"],
        "csv,noheader,nounits",
    )
    table = found.get("table") or {}
    header = nvidia_smi.parse_table_header(table.get("stdout") or "") if table.get("rc") == 0 else {}
    apps_run = found.get("compute_apps") or {}
    apps = (
        nvidia_smi.parse_compute_apps(apps_run.get("stdout") or "", rc=apps_run.get("rc"))
        if apps_run.get("rc") == 0
        else None
    )
    unit_text = str((found.get("unit") or {}).get("stdout") or "")
    group = re.findall(r"(?m)^ControlGroup=(/.+)$", unit_text)
    leaf = (group[0] if group else "/" + str(options["cuda13_service_name"])).split("/")[-1]
    unit_pids = [
        int(pid)
        for pid, text in (found.get("cgroups") or {}).items()
        if text and re.search("/" + re.escape(leaf) + "$", text, re.MULTILINE)
    ]
    main_pids = [int(p) for p in re.findall(r"MainPID=([0-9]+)", unit_text)]
    uname = str((found.get("uname") or {}).get("stdout") or "").split()
    df = found.get("df") or {}
    python = found.get("python") or {}
    space_plan = None
    if options.get("nvidia_driver_check_space_stack") and found.get("space") is not None:
        space_plan = space.plan(
            found["space"],
            dict(options.get("nvidia_driver_check_space_places") or {}),
            space.stack_figures(dict(figures or {}), options["nvidia_driver_check_space_stack"]),
        )
    facts = {
        "driver_version": gpus[0]["driver_version"] if gpus else "",
        "cuda_driver_version": header.get("cuda_version"),
        "nvidia_smi_version": header.get("nvidia_smi_version"),
        "gpus": gpus,
        "module_version_text": proc or None,
        "compute_apps": apps,
        "service_pids": sorted({p for p in unit_pids + main_pids if p}),
        "kernel_release": uname[0] if uname else "",
        "architecture": uname[-1] if uname else "",
        "disk_free_bytes": int(str(df.get("stdout") or "").split()[-1]) if df.get("rc") == 0 else None,
        "disk_path": options["nvidia_driver_check_disk_path"],
        "python_version": str(python.get("stdout") or "").strip() if python.get("rc") == 0 else "",
        "nvidia_smi_runs": {"table": table, "compute_apps": apps_run},
        "space_plan": space_plan,
    }
    report = preflight.evaluate(facts, settings(options)).to_dict()
    tell_passed(host, report["passed"])
    capabilities = list(dict.fromkeys(str(g["compute_cap"]) for g in gpus))
    window = None
    if facts["driver_version"]:
        window = driver_window.readiness(
            host,
            options,
            current=facts["driver_version"],
            compute_capabilities=capabilities,
            proc_version=proc,
        )
    current = facts["driver_version"]
    planned = driver_window.planned_version(window)
    if not report["ok"] and planned:
        # A driver below the floor with a ready window: the host passes when every other check
        # passes with the target's driver, which the window installs before anything else.
        after = preflight.evaluate(
            {
                **facts,
                "driver_version": planned,
                "cuda_driver_version": None,
                "nvidia_smi_version": planned if facts["nvidia_smi_version"] else None,
            },
            settings(options),
        ).to_dict()
        if after["ok"]:
            report = {**after, "driver_moves_from": current}
            facts["driver_version"] = planned
            host.tell(
                f"{host.name}: driver window: {current} is below the floor; the run moves the driver to"
                f" {window['target']} first, then every other check passes"
            )
            window = {**window, "move": True}
    if not report["ok"]:
        below = window is not None and window.get("needs_move")
        raise StepFailed(
            f"{host.name} fails the preflight for CUDA {options['nvidia_driver_check_toolkit_release']};"
            f" nothing was changed:\n{_failures_text(report['failures'])}"
            + (f"\n{driver_window.refusal_text(window)}" if below else ""),
            {"report": report, "gpus": gpus, "driver_window": window},
        )
    return {
        "report": report,
        "gpus": gpus,
        "compute_capabilities": capabilities,
        "driver_version": facts["driver_version"],
        "driver_version_now": current,
        "driver_window": window,
    }


def stack_driver(
    host: Host, options: Mapping[str, Any], resolved: list, driver_version: str
) -> dict[str, Any]:
    """Step 6 (see the module docstring); raises StepFailed naming each component whose floor the
    driver does not meet."""
    checked = preflight.check_stack_driver(
        resolved,
        driver_version,
        {
            "toolkit_release": options["nvidia_driver_check_toolkit_release"],
            "jit": options["nvidia_driver_check_require_jit"],
            "min_driver_version": options.get("nvidia_driver_check_min_driver_version") or None,
            "option_names": {k: OPTION_NAMES[k] for k in ("toolkit_release", "jit", "min_driver_version")},
        },
    ).to_dict()
    if not checked["ok"]:
        raise StepFailed(
            f"{host.name} fails the preflight for its resolved target; nothing was changed:\n"
            + _failures_text(checked["failures"]),
            {"stack_driver": checked},
        )
    if checked["passed"]:
        tell_passed(host, checked["passed"])
    else:
        host.tell("no CUDA component to check")
    return checked


def _failed_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A refused host's record, kept small (a failed task's result is printed whole): the
    resolved set (some 200 distributions for a real stack) as its size, ``resolved_count``."""
    small = dict(record)
    resolved = small.pop("resolved", None)
    small["resolved_count"] = len(resolved) if isinstance(resolved, list) else None
    return small


def check(
    host: Host,
    options: Mapping[str, Any],
    *,
    run_dir: Path,
    refuse: bool = True,
    figures: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole preflight of ``host`` (see the module docstring); ``figures``: as :func:`evaluate`.

    Returns ``{"ok": bool, "refusals": [message], "report", "gpus", "compute_capabilities",
    "driver_version", "toolkit": the apt plan or None, "resolved": [...] or None, "resolved_by",
    "requirement", "stack_driver", "driver_window": the driver window's plan
    (:func:`cuda13_upgrade.steps.driver_window.readiness`) or None}``. With ``refuse`` (the
    rollout) the first refusal raises StepFailed, whose record is this one with ``resolved_count``
    for ``resolved``; without it, it is recorded and the host's checks stop there.
    """
    from cuda13_upgrade.steps import resolve, toolkit

    record: dict[str, Any] = {
        "ok": False,
        "refusals": [],
        "report": None,
        "gpus": [],
        "compute_capabilities": [],
        "driver_version": "",
        "toolkit": None,
        "resolved": None,
        "resolved_by": None,
        "requirement": None,
        "stack_driver": None,
        "driver_window": None,
    }
    host_checks = bool(options.get("nvidia_driver_check_host_checks", True))
    try:
        drain = ondemand.drain_plan(
            "upgrade",
            host.name,
            str(options.get("cuda13_service_name")),
            options.get("cuda13_drain_tasks"),
            options.get("cuda13_undrain_tasks"),
            bool(options.get("cuda13_allow_undrained")),
        )
        if drain["refusal"]:
            raise StepFailed(drain["refusal"])
        found = host.module(
            "cuda13_host_facts",
            {
                "nvidia_smi": options["nvidia_driver_check_nvidia_smi"],
                "nvidia_smi_timeout": int(options["nvidia_driver_check_nvidia_smi_timeout"]),
                "unit": options["cuda13_service_name"],
                "disk_path": options["nvidia_driver_check_disk_path"],
                "space_places": dict(options.get("nvidia_driver_check_space_places") or {})
                if options.get("nvidia_driver_check_space_stack")
                else {},
                "python": options["nvidia_driver_check_python"],
                "host_checks": host_checks,
                "old_venv": options["cuda13_old_venv"],
            },
            check_mode=False,
        )["facts"]
        if host_checks:
            option_host_checks(host, options, found)
        record.update(evaluate(host, options, found, figures))
        if host_checks:
            record["toolkit"] = toolkit.plan(host, options)
        else:
            host.tell(
                "not checked: the options against the host, NVIDIA's repository, the indexes and"
                " apt's transaction (nvidia_driver_check_host_checks is false)"
            )
        if not options.get("cuda13_preflight_resolve", True):
            host.tell(
                "not checked: the target's resolution and its driver floor"
                " (cuda13_preflight_resolve is false)"
            )
        else:
            resolved = resolve.resolve(host, options, run_dir=run_dir)
            record.update(
                resolved=resolved["resolved"],
                resolved_by=resolved.get("resolved_by"),
                requirement=resolved.get("requirement"),
            )
            record["stack_driver"] = stack_driver(
                host, options, resolved["resolved"], record["driver_version"]
            )
    except StepFailed as exc:
        if refuse:
            raise StepFailed(exc.msg, _failed_record({**record, **exc.record})) from exc
        record["refusals"].append(exc.msg)
        if "driver_window" in exc.record:
            record["driver_window"] = exc.record["driver_window"]
        return record
    record["ok"] = True
    return record
