"""The step ``wheels``: the cu130 Python stack in a new venv beside the serving one (action cuda13_wheels).

:func:`install` (``state: present``): the checks (the pins are a
list, the new venv is not the serving one), where pip takes the wheels from, the
venv's directory (0755: the service's user executes its python) and pip's
temporary directory (0700), then one of three installs with Ansible's ``pip``
module into the venv made with ``<cu130_wheels_python> -m venv``:

* a hash-pinned lock file from the control node (``cu130_wheels_lock_file``),
  copied to ``<venv>.requirements.lock`` and installed ``--require-hashes``;
* else the preflight's resolved set (``resolved``: pip's resolver in report mode,
  once per distinct target of the run, :mod:`cuda13_upgrade.steps.resolve`):
  every distribution at its resolved version, written to ``<venv>.resolved.txt``
  and installed without further resolving (``--no-deps``), ``--require-hashes``
  when every line has the index's sha256; SGLang itself is left to the sglang step;
* else the pins as written (``cu130_wheels_requirements``).

pip reads the fleet's artifact cache on the host alone when there is one
(``find_links``, or ``cu130_wheels_find_links``: ``--no-index --find-links``),
else the indexes. Its environment is ``cu130_wheels_pip_environment`` with
``TMPDIR`` at ``cu130_wheels_pip_tmpdir``; pip's output is hidden when that
environment is set.

Then, outside check mode, :func:`check` (``state: checked`` runs it alone: a
staged host's stack, or any venv): the stack probe with the venv's own Python
(module ``cuda13_stack_probe``) and the verdict
:func:`cuda13_upgrade.stack.stack_verdict`; an inconsistent stack is refused
with the verdict's problems and the diagnosis
(:func:`cuda13_upgrade.diagnosis.diagnose`) where one is known.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import diagnosis, stack
from cuda13_upgrade import resolve as rules
from cuda13_upgrade.steps.host import Host, ModuleFailed, StepFailed

#: The modules the probe imports (``stack_probe.py torch sgl_kernel flashinfer``).
PROBED = ["torch", "sgl_kernel", "flashinfer"]

#: What Ansible shows for a result whose task has ``no_log`` (pip's with an environment set).
HIDDEN = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"


def truthy(value: Any) -> bool:
    """An option's boolean as Ansible reads one (``true``, ``yes``, ``on``, ``1``, in any case)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return bool(value)


def requirements_of(options: Mapping[str, Any]) -> list[str]:
    """``cu130_wheels_requirements`` as a list.

    Raises:
        StepFailed: not a non-empty list (the role's first check, its message).
    """
    value = options.get("cu130_wheels_requirements")
    if not isinstance(value, list | tuple) or not value:
        raise StepFailed(
            "cu130_wheels_requirements must be a non-empty list of pinned requirements "
            f'(e.g. ["torch==2.9.1+cu130", ...]), got {json.dumps(value)}.'
        )
    return [str(v) for v in value]


def source_args(options: Mapping[str, Any], find_links: str = "") -> list[str]:
    """Where pip takes the wheels from: the find-links directory alone (``--no-index
    --find-links``) when there is one (``find_links``, else ``cu130_wheels_find_links``),
    else ``--index-url`` and each ``--extra-index-url=``."""
    links = str(find_links or options.get("cu130_wheels_find_links") or "")
    if links:
        return ["--no-index", "--find-links", links]
    return [
        "--index-url",
        str(options.get("cu130_wheels_index_url") or ""),
        *[f"--extra-index-url={url}" for url in options.get("cu130_wheels_extra_index_urls") or []],
    ]


def _changed(result: Mapping[str, Any]) -> bool:
    return bool(result.get("changed"))


def pip(
    host: Host,
    args: Mapping[str, Any],
    *,
    environment: Mapping[str, str],
    hidden: bool,
    changed: bool = False,
) -> dict[str, Any]:
    """Ansible's ``pip`` module with ``args`` and ``environment``; with ``hidden`` (an operator's
    pip environment is set, whose values may be in pip's output) a failure says only
    :data:`HIDDEN`."""
    try:
        return host.module("ansible.builtin.pip", dict(args), environment=dict(environment))
    except ModuleFailed as exc:
        if hidden:
            raise StepFailed(HIDDEN, {"changed": changed}) from None
        exc.record["changed"] = changed
        raise


def _directory(host: Host, path: str, mode: str) -> bool:
    return _changed(host.module("ansible.builtin.file", {"path": path, "state": "directory", "mode": mode}))


def _not_serving(host: Host, venv: str, old: str) -> None:
    """Refuse a new venv that is the serving one (the role's second check, by the host's realpath)."""
    paths = host.module("cuda13_venv_read", {"realpath": [venv, old]}, check_mode=False)["realpath"]
    if paths.get(venv) == paths.get(old):
        raise StepFailed(
            f"cu130_wheels_venv={venv} is the serving venv (cuda13_old_venv={old}); "
            "the new stack needs its own venv."
        )


def install(
    host: Host,
    options: Mapping[str, Any],
    *,
    resolved: Sequence[Mapping[str, Any]] = (),
    find_links: str = "",
    compute_capabilities: Sequence[str] = (),
    driver_version: str = "",
    gpu_names: Sequence[str] = (),
) -> dict[str, Any]:
    """Install the cu130 wheels into ``cu130_wheels_venv`` and check the stack (see the module docstring).

    Args:
        host: the host.
        options: the options record (``cu130_wheels_*``, ``cuda13_old_venv``).
        resolved: the preflight's resolved set (:func:`cuda13_upgrade.resolve.resolved_set`), or
            empty to install the pins.
        find_links: the artifact cache's directory on the host (``cuda13_upgrade.steps.artifacts``);
            empty for ``cu130_wheels_find_links``.
        compute_capabilities: the GPUs' (the preflight's); ``cu130_wheels_compute_capabilities``
            wins when it is non-empty.
        driver_version: the driver nvidia-smi reports, named when torch cannot reach the GPUs.
        gpu_names: the GPUs' names nvidia-smi reports (the preflight's), for the forward-compatibility check.

    Returns:
        ``{"stack": the probe's record or None (check mode), "verdict": the stack verdict or
        None, "resolved_target": the resolved set installed ([] for the pins or the lock
        file), "changed": bool, "installed": "lock_file" | "resolved" | "requirements"}``.

    Raises:
        StepFailed: the pins are not a list, the new venv is the serving one, pip failed,
            the lock file cannot be read, or the stack is inconsistent (:func:`check`).
    """
    requirements = requirements_of(options)
    venv = str(options["cu130_wheels_venv"])
    _not_serving(host, venv, str(options.get("cuda13_old_venv") or ""))
    sources = source_args(options, find_links)
    extra = [str(a) for a in options.get("cu130_wheels_pip_extra_args") or []]
    tmpdir = str(options["cu130_wheels_pip_tmpdir"])
    operator_env = {str(k): str(v) for k, v in (options.get("cu130_wheels_pip_environment") or {}).items()}
    environment = {**operator_env, "TMPDIR": tmpdir}
    hidden = bool(operator_env)
    base = {"virtualenv": venv, "virtualenv_command": f"{options['cu130_wheels_python']} -m venv"}
    # The venv first, 0755: the service's user (User= of the unit) executes its python. The
    # file module gives every directory it creates the mode it is given, so pip's 0700
    # temporary directory, by default inside the venv, would otherwise make the venv itself
    # 0700 and the unit fail with status=203/EXEC, "Permission denied" (molecule host-user).
    changed = _directory(host, venv, "0755")
    changed = _directory(host, tmpdir, "0700") or changed
    lock_file = str(options.get("cu130_wheels_lock_file") or "")
    resolved = [dict(d) for d in resolved or []]
    if lock_file:
        installed, target = "lock_file", []
        try:
            with open(lock_file, encoding="utf-8") as handle:
                content = handle.read()
        except OSError as exc:
            raise StepFailed(
                f"cannot read cu130_wheels_lock_file={lock_file}: {exc}", {"changed": changed}
            ) from exc
        dest = f"{venv}.requirements.lock"
        written = host.module(
            "cuda13_record", {"files": [{"path": dest, "content": content, "mode": "0644"}]}
        )
        changed = _changed(written) or changed
        args = {
            **base,
            "requirements": dest,
            "extra_args": shlex.join(["--isolated", "--require-hashes", *sources, *extra]),
        }
    elif resolved:
        installed, target = "resolved", resolved
        try:
            content = rules.resolved_requirements(resolved, ["sglang"])
        except ValueError as exc:
            raise StepFailed(f"the resolved target cannot be installed: {exc}", {"changed": changed}) from exc
        dest = f"{venv}.resolved.txt"
        written = host.module(
            "cuda13_record", {"files": [{"path": dest, "content": content, "mode": "0644"}]}
        )
        changed = _changed(written) or changed
        hashes = ["--require-hashes"] if " --hash=sha256:" in content else []
        args = {
            **base,
            "requirements": dest,
            "extra_args": shlex.join(["--isolated", "--no-deps", *sources, *hashes, *extra]),
        }
    else:
        installed, target = "requirements", []
        args = {**base, "name": requirements, "extra_args": shlex.join(["--isolated", *sources, *extra])}
    changed = _changed(pip(host, args, environment=environment, hidden=hidden, changed=changed)) or changed
    record: dict[str, Any] = {
        "stack": None,
        "verdict": None,
        "resolved_target": target,
        "changed": changed,
        "installed": installed,
    }
    if host.check_mode:
        return record
    try:
        checked = check(
            host,
            options,
            compute_capabilities=compute_capabilities,
            driver_version=driver_version,
            gpu_names=gpu_names,
        )
    except StepFailed as exc:
        exc.record.update(resolved_target=target, changed=changed, installed=installed)
        raise
    return {**record, "stack": checked["stack"], "verdict": checked["verdict"]}


def inconsistent_message(venv: str, verdict: Mapping[str, Any], expected_cuda_major: int) -> str:
    """The check's refusal: the verdict's problems, and the diagnosis's cause and fix where known."""
    problems = list(verdict.get("problems") or [])
    found = diagnosis.diagnose(
        problems,
        source="import",
        context={"torch_version": verdict.get("torch") or "", "target_cuda": str(expected_cuda_major)},
    )
    known = f"Cause: {found.cause}. Fix: {found.remedy}." if found.known else ""
    return f"The new stack in {venv} is inconsistent: {'; '.join(problems)} {known}".rstrip()


def check(
    host: Host,
    options: Mapping[str, Any],
    *,
    compute_capabilities: Sequence[str] = (),
    driver_version: str = "",
    gpu_names: Sequence[str] = (),
) -> dict[str, Any]:
    """Probe the stack of ``cu130_wheels_venv`` with its own Python and conclude.

    The probe (module ``cuda13_stack_probe``, run in check mode too) reads what real
    wheels carry: torch.__version__ and torch.version.cuda, each wheel's labels or the
    CUDA libraries its shared objects load, the kernel's own torch pin, pip check,
    every import's whole text, torch's arch list, the files two distributions write with
    different contents, and each libcuda the service's loader could take instead of the
    driver's (the venv, the ``LD_LIBRARY_PATH`` of ``cuda13_service_name`` and of
    ``stack_switch_environment``, the loader's configuration); the verdict is
    :func:`cuda13_upgrade.stack.stack_verdict` with ``cu130_wheels_expected_cuda_major``,
    ``cu130_wheels_driver_library_optional``, the compute capabilities
    (``cu130_wheels_compute_capabilities`` when non-empty, else ``compute_capabilities``),
    ``driver_version`` and ``gpu_names``. The verdict's summary is told to the operator.

    Returns:
        ``{"stack": the probe's record, "verdict": the verdict, "resolved_target": None,
        "changed": False}``.

    Raises:
        StepFailed: ``"The new stack in <venv> is inconsistent: <problems> Cause: ... Fix: ..."``
        (:func:`inconsistent_message`), the record carrying ``stack`` and ``verdict``.
    """
    venv = str(options["cu130_wheels_venv"])
    expected = int(options.get("cu130_wheels_expected_cuda_major") or 13)
    capabilities = [str(c) for c in options.get("cu130_wheels_compute_capabilities") or []] or [
        str(c) for c in compute_capabilities or []
    ]
    library_path = str((options.get("stack_switch_environment") or {}).get("LD_LIBRARY_PATH") or "")
    probe = host.module(
        "cuda13_stack_probe",
        {
            "modules": PROBED,
            "service": str(options.get("cuda13_service_name") or ""),
            "library_path": [d for d in library_path.split(":") if d],
        },
        python=f"{venv}/bin/python",
        check_mode=False,
    )["probe"]
    verdict = stack.stack_verdict(
        probe,
        expected,
        driver_library_optional=truthy(options.get("cu130_wheels_driver_library_optional")),
        compute_capabilities=capabilities,
        driver_version=str(driver_version) if driver_version else None,
        gpu_names=[str(n) for n in gpu_names or []],
    )
    host.tell(f"{venv}: {verdict['summary']}")
    record = {"stack": probe, "verdict": verdict, "resolved_target": None, "changed": False}
    if not verdict["consistent"]:
        raise StepFailed(inconsistent_message(venv, verdict, expected), record)
    return record
