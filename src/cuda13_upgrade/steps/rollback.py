"""The step ``rollback``: a host put back on its snapshot's stack (action ``cuda13_rollback``).

In the upgrade's rescue (:func:`after_failure`): what failed is noted and
diagnosed (:func:`cuda13_upgrade.diagnosis.diagnose`, a full disk by
:func:`cuda13_upgrade.nospace.diagnose_no_space` from ``df``); the kernel log
since the switch is read when the gate did not read it (a GPU that fell off the
bus stops the new server from starting); the space a failed step took before
the switch is freed, so the rollback has room; then, when the host changed,
:func:`restore` puts the snapshot's stack back, and the old stack is measured
again against its baseline (the restart plan's rollback phase,
``cuda13_rollback_verify``). A rollback that itself fails says what it left on
the host (the unit's state and drop-ins, ``/usr/local/cuda``) and how to go on.

:func:`restore`, the rollback itself (also ``playbooks/rollback.yml`` on demand):
the upgrade's drop-ins removed, every CUDA alternatives group put back as the
snapshot recorded it (:func:`cuda13_upgrade.ondemand.alternatives_restore`), the
toolkit step's apt changes undone (:func:`cuda13_upgrade.steps.toolkit.revert`),
the new stack's caches cleared, the old stack started (into the re-check's
first profile), and the host checked against its snapshot (the venv's ``pip
freeze``, ``/usr/local/cuda``, the service's command).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from cuda13_upgrade import diagnosis, nospace, ondemand, stack, throughput
from cuda13_upgrade.steps import measure
from cuda13_upgrade.steps.host import Host, ModuleFailed, StepFailed, begin_step, current_step
from cuda13_upgrade.steps.serve import serve, serve_options, stack_context
from cuda13_upgrade.steps.verify import read_kernel_log

#: The steps before the switch: a failure there leaves the old stack serving and the new one unused.
BEFORE_SWITCH = ("snapshot", "artifact_cache", "toolkit", "wheels", "sglang_build", "drain", "baseline")

#: The steps from which on the service runs something else than its old stack (the driver
#: window's move, which stops it, the switch drop-in, the new stack measured, the kept host
#: watched): a failure there restarts it.
SERVING_STEPS = ("driver", "switch", "verify", "batch_soak")

#: What the rollback's record and line say when it restored files and links only.
NOT_RESTARTED = "The server was not restarted: it never left the old stack."


def serving_touched(
    run: Mapping[str, Any],
    failed: Mapping[str, Any],
    records: Mapping[str, Any],
    options: Mapping[str, Any],
) -> str:
    """Why the rollback must restart the service, or ``""`` when the running server never left
    its old stack (then the rollback restores files and links only).

    Decided from the host's run record (``run["steps"]``), the failed task's result
    (``failed``: a failed step's record, e.g. the baseline's ``restarts`` and ``dropin_changed``)
    and the steps' records so far (``records["baseline"]``). The service was touched when:

    * a step of :data:`SERVING_STEPS` began (the switch drop-in points it at the new stack,
      or the new stack was measured or watched);
    * the baseline restarted it or changed its drop-in (the old stack measured in a profile's
      arguments, ``60-cuda13-profile.conf``);
    * the wheels or the SGLang build installed into the venv it runs (``cuda13_new_venv`` equal to
      ``cuda13_old_venv``).

    The toolkit step leaves ``/usr/local/cuda`` where it was (it pins the CUDA alternatives
    groups and fails when a pin moved); a link it moved is put back by the rollback before any
    start, and the running server loaded its libraries at its own start, from the old target.
    The rule: a failure before the switch changes nothing on the serving side.
    """
    steps = [str(s.get("step")) for s in run.get("steps") or [] if isinstance(s, Mapping)]
    begun = [s for s in SERVING_STEPS if s in steps]
    if begun:
        return f"the step '{begun[0]}' began: the service left its old stack"
    baseline = records.get("baseline") or {}
    failed_step = str(run.get("failed_step") or current_step(run, ""))
    baseline_restarts = int(baseline.get("restarts") or 0)
    if failed_step == "baseline":
        baseline_restarts += int(failed.get("restarts") or 0)
    if baseline_restarts or (failed_step == "baseline" and failed.get("dropin_changed")):
        return "the baseline restarted the service into a profile's arguments"
    same_venv = options.get("cuda13_new_venv") and options.get("cuda13_new_venv") == options.get(
        "cuda13_old_venv"
    )
    if same_venv and any(s in steps for s in ("wheels", "sglang_build")):
        return f"the upgrade installed into the venv the service runs ({options['cuda13_old_venv']})"
    return ""


def _truncate(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    return text[: width - 3].rsplit(" ", 1)[0] + "..."


def failure_texts(failed: Mapping[str, Any]) -> list[str]:
    """What a failed task said, all of it: its message, its output's lines, its items' messages."""
    lines = [str(failed.get("msg") or "")]
    lines += [str(x) for x in failed.get("stdout_lines") or []]
    lines += [str(x) for x in failed.get("stderr_lines") or []]
    lines += [str(item.get("msg") or "") for item in failed.get("results") or [] if isinstance(item, Mapping)]
    module_result = failed.get("module_result") or {}
    if isinstance(module_result, Mapping):
        for key in ("stdout", "stderr", "module_stderr"):
            lines += str(module_result.get(key) or "").splitlines()
    return lines


def _failed_stack(options: Mapping[str, Any], step: str, records: Mapping[str, Any]) -> dict[str, str]:
    """The stack a failed step served, for its diagnosis (:func:`cuda13_upgrade.steps.serve.stack_context`):
    the old one for the baseline (its CUDA release from the snapshot's manifest), the new one from
    the switch on (:data:`SERVING_STEPS`); ``{}`` for a step that serves nothing (the remedies
    follow the target)."""
    if step == "baseline":
        return stack_context(options, "old", (records.get("snapshot") or {}).get("manifest"))
    if step in SERVING_STEPS:
        return stack_context(options, "new")
    return {}


def _df(host: Host, paths: list[str]) -> dict[str, int | None]:
    done = host.module(
        "ansible.builtin.command",
        {"argv": ["df", "--output=avail", "--block-size=1", *paths]},
        check_mode=False,
        allow_failure=True,
    )
    if done.get("rc") != 0:
        return {}
    try:
        return nospace.parse_df_avail(str(done.get("stdout") or ""), paths)
    except ValueError:
        return {}


def free_space(host: Host, options: Mapping[str, Any], written: list[str]) -> dict[str, Any]:
    """Remove what the upgrade wrote beside the old stack (the partial new venv and SGLang tree,
    apt's downloaded archives), while the new stack does not serve; returns ``{"removed", "free"}``."""
    old = {options["cuda13_old_venv"], options["cuda13_old_sglang_src"]}
    removed = [p for p in (options["cuda13_new_venv"], options["cuda13_new_sglang_src"]) if p not in old]
    for path in removed:
        host.module("ansible.builtin.file", {"path": path, "state": "absent"})
    host.module("ansible.builtin.apt", {"clean": True})
    return {"removed": removed, "free": _df(host, written)}


def _restore_alternatives(host: Host, recorded: Mapping[str, Any]) -> list[dict[str, Any]]:
    left = []
    for group, entry in recorded.items():
        if entry is None:
            continue
        done = host.module(
            "ansible.builtin.command",
            {"argv": ["update-alternatives", "--query", group]},
            check_mode=False,
            allow_failure=True,
        )
        query = stack.parse_alternatives_query(done["stdout"]) if done.get("rc") == 0 else None
        plan = ondemand.alternatives_restore(group, entry, query)
        if plan["action"] == "auto":
            host.module("ansible.builtin.command", {"argv": ["update-alternatives", "--auto", group]})
        elif plan["action"] == "select":
            host.module(
                "community.general.alternatives",
                {"name": group, "path": entry["value"], "link": entry["link"], "state": "selected"},
            )
        if plan["left_manual"] is not None:
            left.append(plan["left_manual"])
    return left


def _check_restored(
    host: Host, options: Mapping[str, Any], manifest: Mapping[str, Any], args: list[str]
) -> None:
    venv = manifest["venv"]["path"]
    freeze = host.module(
        "ansible.builtin.command",
        {"argv": [f"{venv}/bin/python", "-m", "pip", "freeze", "--all", "--isolated"]},
        check_mode=False,
    )
    cuda = host.module(
        "ansible.builtin.command", {"argv": ["readlink", "-f", "/usr/local/cuda"]}, check_mode=False
    )
    unit = host.module(
        "ansible.builtin.command",
        {"argv": ["systemctl", "cat", options["rollback_service_name"]]},
        check_mode=False,
    )
    diff = stack.freeze_difference(
        manifest["venv"]["pip_freeze"], stack.parse_pip_freeze_lines(freeze["stdout"])
    )
    expected = manifest["service"]["exec_start"] + "".join(f" {shlex.quote(str(a))}" for a in args)
    try:
        runs = stack.service_exec_start(unit["stdout"])
    except ValueError as exc:
        runs = f"nothing ({exc})"
    if diff["removed"] or diff["added"] or cuda["stdout"] != manifest["cuda"]["resolved"] or runs != expected:
        with_args = (
            f", with the first profile arguments {' '.join(shlex.quote(str(a)) for a in args)}"
            if args
            else ""
        )
        raise StepFailed(
            f"After the rollback the host differs from its snapshot {options['rollback_snapshot_file']}: venv"
            f" {venv} lost {diff['removed']} and gained {diff['added']}; /usr/local/cuda resolves to"
            f" {cuda['stdout']} (snapshot: {manifest['cuda']['resolved']}); the service runs {runs}"
            f" (snapshot: {manifest['service']['exec_start']}{with_args})."
        )


def _remove_new_stack(host: Host, options: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[str]:
    record_path = options["rollback_sglang_build_record"]
    found = host.module("cuda13_record", {"read": [record_path]}, check_mode=False)["read"][record_path]
    paths = [options["rollback_new_venv"], options["rollback_new_sglang_src"]]
    if found["content"]:
        try:
            paths = list(json.loads(found["content"]).get("paths") or [])
        except ValueError:
            pass
    keep = {options["cuda13_old_venv"], options["cuda13_old_sglang_src"], manifest["venv"]["path"]}
    removed = [p for p in paths if p not in keep]
    host.module("cuda13_record", {"absent": [*removed, record_path]})
    return removed


@contextlib.contextmanager
def _part(where: str) -> Iterator[None]:
    """Name the part of the rollback a failure inside happened in (``record["where"]``), for the
    message of a rollback that itself failed."""
    try:
        yield
    except StepFailed as exc:
        exc.record.setdefault("where", where)
        raise


#: What a pre-upgrade snapshot must hold for the rollback: its paths in the manifest.
SNAPSHOT_NEEDS = (
    ("service", "exec_start"),
    ("venv", "path"),
    ("venv", "pip_freeze"),
    ("cuda", "resolved"),
)


def load_snapshot(host: Host, path: str) -> dict[str, Any]:
    """The pre-upgrade snapshot ``path`` on the host, read and checked (:data:`SNAPSHOT_NEEDS`).

    Returns the manifest. Raises StepFailed (``record["where"]``: ``Read the pre-upgrade snapshot``
    or ``Load the snapshot``) when the file cannot be read, is not JSON, or lacks what the
    rollback restores; nothing on the host is changed then.
    """
    with _part("Read the pre-upgrade snapshot"):
        found = host.module("cuda13_record", {"read": [path]}, check_mode=False)["read"][path]
        if not found["content"]:
            raise StepFailed(f"Read the pre-upgrade snapshot: {path} cannot be read on {host.name}")
    with _part("Load the snapshot"):
        try:
            manifest = json.loads(found["content"])
        except ValueError as exc:
            raise StepFailed(
                f"Load the snapshot: {path} on {host.name} is not JSON ({exc})."
                " Nothing on the host was changed."
            ) from exc
        missing = [
            ".".join(keys)
            for keys in SNAPSHOT_NEEDS
            if not isinstance(manifest, Mapping)
            or not isinstance(manifest.get(keys[0]), Mapping)
            or manifest[keys[0]].get(keys[1]) is None
        ]
        if missing:
            raise StepFailed(
                f"Load the snapshot: {path} on {host.name} is not a pre-upgrade snapshot of cuda13-upgrade:"
                f" it lacks {', '.join(missing)}. Nothing on the host was changed. Put the snapshot the"
                " upgrade took back in place (the run's report keeps a copy, <run dir>/<host>/snapshot.json),"
                " or restore the host's stack by hand."
            )
    return dict(manifest)


def restore(
    host: Host,
    options: Mapping[str, Any],
    *,
    profile_args: list[str] | None = None,
    revert_apt: Callable[[Host, Mapping[str, Any]], Any] | None = None,
    restart: bool = True,
) -> dict[str, Any]:
    """Put the host back on its snapshot's stack (``rollback_snapshot_file``).

    ``profile_args``: the arguments the old stack starts with (the re-check's first profile).
    ``revert_apt``: undoes the toolkit step's apt changes (:func:`cuda13_upgrade.steps.toolkit.revert`).
    ``restart``: False restores files and links only and leaves the running service alone (a
    failure before the switch, :func:`serving_touched`): ``served`` is then ``{}``.
    Returns ``{"seconds": until the old stack generated again, "alternatives_manual": [groups left
    in manual mode], "served", "removed": [paths], "restarts", "leftovers", "manifest"}``. Raises
    StepFailed with ``record["where"]``, the part that failed (``Read the pre-upgrade snapshot``,
    ``Load the snapshot``, ``Remove the upgrade's drop-ins``, ``Restore the CUDA alternatives``,
    ``Undo the toolkit step's apt changes``, ``Clear the new stack's caches``, ``Start the old
    stack with the first profile's arguments``, ``Check the restored stack against the
    snapshot``, ``Remove the new stack``); a snapshot that cannot be read or lacks what is
    restored fails before anything changes.
    """
    started = time.time()
    args = [str(a) for a in profile_args or []]
    manifest = load_snapshot(host, options["rollback_snapshot_file"])
    service = options["rollback_service_name"]
    with _part("Remove the upgrade's drop-ins"):
        host.module(
            "cuda13_record",
            {"absent": [f"/etc/systemd/system/{service}.d/{name}" for name in options["rollback_dropins"]]},
        )
    with _part("Restore the CUDA alternatives"):
        left = _restore_alternatives(host, (manifest.get("cuda") or {}).get("alternatives") or {})
    if revert_apt is not None:
        with _part("Undo the toolkit step's apt changes"):
            revert_apt(host, options)
    if options.get("rollback_clear_dirs"):
        with _part("Clear the new stack's caches"):
            host.module("cuda13_record", {"absent": list(options["rollback_clear_dirs"])})
    served: dict[str, Any] = {}
    if not restart:
        args = []
    if restart:
        with _part("Start the old stack with the first profile's arguments"):
            served = serve(
                host,
                **serve_options(options, "rollback"),
                exec_start=manifest["service"]["exec_start"],
                args=args,
                check=False,
                what="the old stack, after the rollback",
                about="the first profile the rollback's re-check measures on the old stack",
                service_user=(manifest.get("service") or {}).get("user") or "",
                stack=stack_context(options, "old", manifest),
            )
    seconds = round(time.time() - started, 2)
    if not host.check_mode:
        with _part("Check the restored stack against the snapshot"):
            _check_restored(host, options, manifest, args)
    removed = []
    if options.get("rollback_remove_new_stack"):
        with _part("Remove the new stack"):
            removed = _remove_new_stack(host, options, manifest)
    return {
        "seconds": seconds,
        "alternatives_manual": left,
        "served": served,
        "removed": removed,
        "restarts": int(bool(served.get("restarted"))),
        "leftovers": list(served.get("leftovers") or []),
        "manifest": manifest,
    }


def _left_on_host(host: Host, options: Mapping[str, Any]) -> str:
    service = options["cuda13_service_name"]
    unit = host.module(
        "ansible.builtin.command",
        {"argv": ["systemctl", "show", "--property=ActiveState", "--property=DropInPaths", service]},
        check_mode=False,
        allow_failure=True,
    )
    cuda = host.module(
        "ansible.builtin.command",
        {"argv": ["readlink", "-f", "/usr/local/cuda"]},
        check_mode=False,
        allow_failure=True,
    )
    shown = dict(line.split("=", 1) for line in str(unit.get("stdout") or "").splitlines() if "=" in line)
    state = f"ActiveState={shown['ActiveState']}" if shown.get("ActiveState") else "ActiveState=unknown"
    return (
        f"Left on the host: service {service} {state}, its drop-ins {shown.get('DropInPaths') or 'none'}"
        f" (the switch drop-in {options['cuda13_switch_dropin']} is the pointer to the new stack),"
        f" /usr/local/cuda -> {cuda.get('stdout') or '?'}. Fix the cause, then run"
        f" playbooks/rollback.yml --limit {host.name}."
    )


def after_failure(
    host: Host,
    options: Mapping[str, Any],
    *,
    run: Mapping[str, Any],
    failed: Mapping[str, Any],
    failed_task: str,
    records: Mapping[str, Any],
    prompts: Mapping[str, Any] | None = None,
    revert_apt: Callable[[Host, Mapping[str, Any]], Any] | None = None,
    undo: bool = True,
) -> dict[str, Any]:
    """The upgrade's rescue (see the module docstring); with ``undo`` false, the stage's: the
    failure is noted and told, and nothing is undone (the service was never touched; the partial
    new stack stays beside the old one for the next stage or rollout to continue).

    ``run``: the host's run record (its current step is the one that failed; ``changed``: a step
    changed the host). ``failed``: the failed task's result; ``failed_task``: its name.
    ``records``: the steps' records so far (``switch``, ``baseline``, ``verify``, ``snapshot``).

    Returns ``{"status": "rolled_back" | "failed", "failed_step", "failed_task", "error", "diagnosis",
    "no_space", "kernel_log_read", "seconds", "alternatives_manual", "checks": {profile: decision},
    "measured": the re-check's phase record or None, "space_freed", "restarts", "leftovers",
    "service_restarted": bool, "serving_touched": why the service had to restart (:func:`serving_touched`),
    "" when it never left its old stack, "run"}``. A rollback of a host whose service never left its
    old stack restores files and links only (no restart, no re-check) and its error and line end
    with :data:`NOT_RESTARTED`.
    Never raises for a failed rollback: it is recorded (status ``failed``) with what it left.
    """
    step = str(run.get("failed_step") or current_step(run))
    error = _truncate(str(failed.get("msg") or failed.get("stderr") or ""), 2000)
    diagnosed = diagnosis.diagnose(
        failure_texts(failed), source=step, context=_failed_stack(options, step, records)
    ).to_dict()
    switch = records.get("switch") or {}
    verify = records.get("verify") or {}
    baseline = (records.get("baseline") or {}).get("baseline") or {}
    plan = (records.get("baseline") or {}).get("restart_plan") or {}
    out: dict[str, Any] = {
        "status": "failed",
        "failed_step": step,
        "failed_task": failed_task,
        "error": error,
        "diagnosis": diagnosed,
        "no_space": None,
        "kernel_log_read": verify.get("kernel_log_read"),
        "seconds": None,
        "alternatives_manual": [],
        "checks": {},
        "measured": None,
        "space_freed": None,
        "restarts": 0,
        "leftovers": [],
        "service_restarted": False,
        "serving_touched": "",
    }
    if switch.get("kernel_log_mark") and out["kernel_log_read"] is None and not host.check_mode:
        out["kernel_log_read"] = read_kernel_log(host, options, switch)
    written = [
        options["cuda13_new_venv"].rsplit("/", 1)[0] or "/",
        options["cuda13_new_sglang_src"].rsplit("/", 1)[0] or "/",
        "/var/cache/apt/archives",
    ]
    text = "\n".join(str(failed.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr"))
    no_space = nospace.diagnose_no_space(text, _df(host, written)) if not host.check_mode else None
    if no_space:
        out["no_space"] = no_space
        out["error"] = f"{no_space['cause']}; {no_space['remedy']}. The step said: {out['error']}"
    changed = bool(run.get("changed")) and undo
    cause = f" Cause: {diagnosed['cause']}. Fix: {diagnosed['remedy']}." if diagnosed.get("known") else ""
    if not undo:
        host.tell(
            f"staging failed at step '{step}' ({failed_task}): {out['error']} The service was not touched"
            f" and still runs {options['cuda13_old_venv']}. Fix the cause and run the stage again; the"
            " partial new stack stays beside the old one until then (playbooks/rollback.yml removes it)."
        )
        out["run"] = {**run, "failure": {k: out[k] for k in ("failed_step", "failed_task", "error")}}
        return out
    host.tell(
        f"step '{step}' failed ({failed_task}): {out['error']}{cause}"
        + (" The host goes back to its old stack." if changed else " Nothing on the host was changed.")
    )

    def freed_note() -> None:
        freed = free_space(host, options, written)
        out["space_freed"] = freed["free"]
        out["error"] += (
            f" Removed {options['cuda13_new_venv']}, {options['cuda13_new_sglang_src']} and apt's archives."
            f" Bytes free now: {json.dumps(freed['free'])}."
        )

    if no_space and step in BEFORE_SWITCH and not host.check_mode:
        freed_note()
    updated = dict(run)
    touched = serving_touched(run, failed, records, options) if changed else ""
    out["serving_touched"] = touched
    if changed and not host.check_mode:
        updated = begin_step(host, run, "rollback")
        recheck = (
            plan.get("rollback")
            if touched and options.get("cuda13_rollback_verify") and baseline.get("profiles")
            else None
        )
        try:
            restored = restore(
                host,
                options,
                profile_args=list((recheck or {}).get("entry_args") or []),
                revert_apt=revert_apt,
                restart=bool(touched),
            )
            updated["serving"] = options["cuda13_old_venv"]
            out["service_restarted"] = bool(restored["served"].get("restarted"))
            out.update(
                seconds=restored["seconds"],
                alternatives_manual=restored["alternatives_manual"],
                restarts=restored["restarts"],
                leftovers=restored["leftovers"],
            )
            if recheck:
                with _part("Measure the old stack again"):
                    measured = measure.phase(
                        host,
                        phase="rollback",
                        options=options,
                        profiles=list(options["cuda13_profiles"]),
                        venv=options["cuda13_old_venv"],
                        exec_start=restored["manifest"]["service"]["exec_start"],
                        run_id=str(run.get("run_id")),
                        plan=recheck,
                        service_user=(restored["manifest"].get("service") or {}).get("user") or "",
                        prompts=prompts,
                        stack=stack_context(options, "old", restored["manifest"]),
                    )
                out["measured"] = measured
                out["restarts"] += measured["restarts"]
                out["leftovers"] += measured["leftovers"]
                for profile in options["cuda13_profiles"]:
                    name = str(profile["name"])
                    out["checks"][name] = throughput.decide(
                        throughput.trial_metric(
                            throughput.normalize_trials(list(baseline["profiles"][name]["trials"])),
                            options.get("verify_throughput_metric", "output_tok_s"),
                        ),
                        throughput.trial_metric(
                            throughput.normalize_trials(list(measured["results"][name]["trials"])),
                            options.get("verify_throughput_metric", "output_tok_s"),
                        ),
                        profile=name,
                        tolerance_pct=float(options["verify_throughput_tolerance_pct"]),
                        max_trials=1,
                    ).to_dict()
            out["status"] = "rolled_back"
            if not touched:
                out["error"] += f" {NOT_RESTARTED}"
            if no_space and out["space_freed"] is None:
                freed_note()
        except (StepFailed, ModuleFailed) as exc:
            said = _truncate(" ".join(str(exc.msg).split()), 600)
            out["error"] = (
                f"{out['error']} Then the rollback itself failed at '{_where(exc)}': {said}. "
                + _left_on_host(host, options)
            )
            out["status"] = "failed"
    how = "rolled back" if out["status"] == "rolled_back" else "failed"
    host.tell(f"{how} at step '{step}': {out['error']}{cause}")
    out["run"] = {**updated, "failure": {k: out[k] for k in ("failed_step", "failed_task", "error")}}
    return out


def _where(exc: StepFailed) -> str:
    """The part of the rollback that failed, for the message: the part :func:`restore` named
    (``record["where"]``), else the module that failed."""
    where = exc.record.get("where")
    if where:
        return str(where)
    module = getattr(exc, "module", None)
    return str(module) if module else "the rollback"
