"""The step ``switch``: the service moved to the new stack with one drop-in (action ``cuda13_switch``).

Before it the kernel log is marked: the driver's Xid lines the new stack causes
are those logged after this mark (:mod:`cuda13_upgrade.xid`). Then the new
stack's cache directories (owned by the unit's user, so that a server run as a
service user can write its JIT products), the switch drop-in - the new venv's
command, ``CUDA_HOME`` and the caches; written whole to a temporary file and
renamed, one atomic change of one file - and ``/usr/local/cuda`` pointed at
the new toolkit (the ``cuda`` alternatives group, manual mode). Last the
service starts on the new stack straight into the first profile the verify
measures (a restart when a drop-in changed or the main process does not run
it yet).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cuda13_upgrade import stack
from cuda13_upgrade.steps.host import Host, StepFailed
from cuda13_upgrade.steps.serve import MANAGED, serve, serve_options, stack_context

#: The new stack's cache directories under ``<stack_switch_cache_root>/<stack name>``.
CACHES = ("triton", "flashinfer", "torch_extensions", "torchinductor")


def dropin(options: Mapping[str, Any], exec_start: str, *, managed: str = MANAGED) -> str:
    """The switch drop-in's text for the new stack's command ``exec_start``."""
    cache = f"{options['stack_switch_cache_root']}/{options['stack_switch_stack_name']}"
    lines = [
        f"# {managed}",
        f"# cuda13-upgrade: runs {options['stack_switch_service_name']} on the CUDA"
        f" {options['cuda13_toolkit_release']} stack.",
        "# Remove this file (playbooks/rollback.yml does) to return to the stack in",
        f"# {options['stack_switch_old_venv']}.",
        "[Service]",
        f"Environment=CUDA_HOME={options['stack_switch_cuda_home']}",
        f"Environment=TRITON_CACHE_DIR={cache}/triton",
        f"Environment=FLASHINFER_WORKSPACE_BASE={cache}/flashinfer",
        f"Environment=TORCH_EXTENSIONS_DIR={cache}/torch_extensions",
        f"Environment=TORCHINDUCTOR_CACHE_DIR={cache}/torchinductor",
        *(
            f"Environment={shlex.quote(f'{k}={v}')}"
            for k, v in (options.get("stack_switch_environment") or {}).items()
        ),
        "ExecStart=",
        f"ExecStart={exec_start}",
    ]
    return "\n".join(lines) + "\n"


def switch(
    host: Host,
    options: Mapping[str, Any],
    *,
    manifest: Mapping[str, Any],
    profile_args: Sequence[str] = (),
    mark_kernel_log: bool = True,
) -> dict[str, Any]:
    """Switch the service to the new stack (see the module docstring).

    ``manifest``: the pre-upgrade snapshot (its ``service``: ``exec_start``, ``user``, ``group``).
    ``profile_args``: the first profile's arguments on the new stack (the restart plan's
    ``switch_args``). ``mark_kernel_log``: mark the kernel log first (the gate reads it).

    Returns ``{"exec_start": the new stack's command, "dropin_changed", "kernel_log_mark": the mark
    or None, "served": the start's outcome, "restarts", "leftovers"}``. Raises StepFailed
    when the service's command is not run from ``stack_switch_old_venv`` (before any change)
    and when the new stack does not serve.
    """
    unit = manifest.get("service") or {}
    try:
        exec_start = stack.rewrite_exec_start(
            unit.get("exec_start") or "", options["stack_switch_old_venv"], options["stack_switch_new_venv"]
        )
    except ValueError as exc:
        # A command not run from the old venv (a wrapper such as /usr/bin/env): refused before any change.
        raise StepFailed(f"{host.name}: {exc}. The switch changed nothing on the host.") from exc
    mark = None
    if mark_kernel_log and not host.check_mode:
        mark = host.module(
            "cuda13_kernel_log",
            {"action": "mark", "command": options["cuda13_kernel_log_command"]},
            allow_failure=True,
        ).get("log")
    cache = f"{options['stack_switch_cache_root']}/{options['stack_switch_stack_name']}"
    for name in CACHES:
        host.module(
            "ansible.builtin.file",
            {
                "path": f"{cache}/{name}",
                "state": "directory",
                "owner": unit.get("user") or "root",
                "group": unit.get("group") or "root",
                "mode": "0755",
            },
        )
    service = options["stack_switch_service_name"]
    host.module(
        "ansible.builtin.file",
        {"path": f"/etc/systemd/system/{service}.d", "state": "directory", "mode": "0755"},
    )
    written = host.module(
        "cuda13_record",
        {
            "files": [
                {
                    "path": f"/etc/systemd/system/{service}.d/{options['stack_switch_dropin_name']}",
                    "content": dropin(options, exec_start),
                    "mode": "0644",
                }
            ]
        },
    )
    dropin_changed = bool(written.get("changed"))
    if options.get("stack_switch_set_cuda_alternative", True):
        if host.check_mode:
            host.tell(
                f"Would point /usr/local/cuda at {options['stack_switch_cuda_home']}"
                " (alternatives group cuda, manual mode)."
            )
        else:
            host.module(
                "community.general.alternatives",
                {
                    "name": "cuda",
                    "path": options["stack_switch_cuda_home"],
                    "link": "/usr/local/cuda",
                    "state": "selected",
                },
            )
    try:
        served = serve(
            host,
            **serve_options(options, "stack_switch"),
            exec_start=exec_start,
            venv=options["stack_switch_new_venv"],
            args=list(profile_args),
            restart="when-changed",
            changed=dropin_changed,
            check=False,
            what=f"the new stack in {options['stack_switch_new_venv']}",
            about="the first profile the verify measures on the new stack",
            service_user=unit.get("user") or "",
            stack={**stack_context(options, "new"), "venv": options["stack_switch_new_venv"]},
        )
    except StepFailed as exc:
        # The rescue reads the kernel log since the mark: a GPU that fell off the bus stops the new server.
        raise StepFailed(exc.msg, {**exc.record, "kernel_log_mark": mark, "exec_start": exec_start}) from exc
    return {
        "exec_start": exec_start,
        "dropin_changed": dropin_changed,
        "kernel_log_mark": mark,
        "served": served,
        "restarts": int(bool(served.get("restarted"))),
        "leftovers": list(served.get("leftovers") or []),
    }
