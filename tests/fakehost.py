"""A :class:`cuda13_upgrade.steps.host.Host` for unit tests: the host modules' own functions, run here.

The steps of ``cuda13_upgrade.steps`` reach their host only through ``Host.module``.
``FakeHost`` runs the package's own host modules (``library/cuda13_*.py``) by calling
the function each of them calls (``hostscripts/*.py``: their argument spec checked
and completed with Ansible's validator, as ``AnsibleModule`` does), on this machine,
so a test points them at temporary directories. Modules that touch what a test
machine lacks (systemd, apt, the GPU, Ansible's own modules) are answered by the
test: ``FakeHost(handlers={"cuda13_service": lambda args: {...}})``. Every call is
recorded in ``calls`` as ``(module, args, python)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from cuda13_upgrade.hostscripts import (
    aptstate,
    completion_bench,
    driver_facts,
    kernel_log,
    pip_resolve,
    preflight_facts,
    service_cycle,
    snapshot,
    stack_digest,
    stack_probe,
    statedir,
    venv_read,
)
from cuda13_upgrade.steps.host import ModuleFailed

#: The package's host modules: name -> (argument spec, function(params, check_mode) -> result).
MODULES: dict[str, tuple[dict, Callable[[dict, bool], dict]]] = {
    "cuda13_apt_read": (aptstate.APT_READ_SPEC, aptstate.apt_read_module),
    "cuda13_apt_simulate": (aptstate.APT_SIMULATE_SPEC, aptstate.apt_simulate_module),
    "cuda13_record": (statedir.RECORD_SPEC, statedir.record_module),
    "cuda13_lock_dir": (statedir.LOCK_SPEC, statedir.lock_module),
    "cuda13_state_read": (stack_digest.STATE_SPEC, stack_digest.state_module),
    "cuda13_service": (service_cycle.SERVICE_SPEC, service_cycle.service_module),
    "cuda13_bench": (completion_bench.BENCH_SPEC, completion_bench.bench_module),
    "cuda13_kernel_log": (kernel_log.KERNEL_LOG_SPEC, kernel_log.kernel_log_module),
    "cuda13_stack_probe": (stack_probe.PROBE_SPEC, stack_probe.probe_module),
    "cuda13_resolve": (pip_resolve.RESOLVE_SPEC, pip_resolve.resolve_module),
    "cuda13_venv_read": (venv_read.VENV_READ_SPEC, venv_read.venv_read_module),
    "cuda13_snapshot_read": (snapshot.SNAPSHOT_SPEC, snapshot.snapshot_module),
    "cuda13_host_facts": (preflight_facts.FACTS_SPEC, preflight_facts.facts_module),
    "cuda13_driver_facts": (driver_facts.FACTS_SPEC, driver_facts.facts_module),
}


class FakeHost:
    """See the module docstring. ``check_mode`` as the play's --check."""

    def __init__(
        self,
        name: str = "gpu-node-01",
        *,
        check_mode: bool = False,
        handlers: Mapping[str, Callable[[dict], dict]] | None = None,
    ) -> None:
        self.name = name
        self.check_mode = check_mode
        self.handlers = dict(handlers or {})
        self.calls: list[tuple[str, dict, str | None]] = []
        self.told: list[str] = []

    def module(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        python: str | None = None,
        check_mode: bool | None = None,
        environment: Mapping[str, str] | None = None,
        allow_failure: bool = False,
    ) -> dict[str, Any]:
        args = dict(args or {})
        self.calls.append((name, args, python))
        check = self.check_mode if check_mode is None else check_mode
        if name in self.handlers:
            result = dict(self.handlers[name](args) or {})
        elif name in MODULES:
            spec, function = MODULES[name]
            validated = ArgumentSpecValidator(spec).validate(args)
            if validated.error_messages:
                raise AssertionError(f"{name}: bad arguments {args!r}: {validated.error_messages}")
            result = dict(function(validated.validated_parameters, check))
        else:
            raise AssertionError(f"FakeHost: no handler for the module {name} (args {args!r})")
        if result.get("failed") and not allow_failure:
            raise ModuleFailed(name, result)
        return result

    def tell(self, line: str) -> None:
        self.told.append(line)

    def called(self, name: str) -> list[dict]:
        """The arguments of each call of the module ``name``, in order."""
        return [args for module, args, _ in self.calls if module == name]
