"""The GPU server's side of a host for the steps' unit tests (tests/test_*_step.py), over FakeHost.

The steps that serve and measure (``cuda13_upgrade.steps.serve``, ``.switch``, ``.baseline``,
``.measure``, ``.verify``) reach systemd and the GPU server through the host modules
``cuda13_service`` and ``cuda13_bench``, and write under ``/etc/systemd/system``. :class:`Server`
answers for them on this machine: the drop-ins are written for real (``set_dropin`` of
``hostscripts/service_cycle.py``, ``cuda13_record``'s own function), with ``/etc/systemd/system``
moved under the test's ``tmp_path``; the server runs the arguments of its last start (a main
process whose ``/proc/<pid>/cmdline`` is the service's command with them), and the benchmark
answers for the profile whose arguments it runs, as tests/servedouble.py does for the playbook
tests. Every call is logged (:attr:`Server.log`).
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from fakehost import FakeHost
from test_steps import _options

from cuda13_upgrade.hostscripts import completion_bench, service_cycle, statedir

#: Where systemd's units live on a host.
SYSTEMD = "/etc/systemd/system"
OLD_VENV = "/opt/ml-env"
NEW_VENV = "/opt/ml-env-cu130"
# The service's own command (tests/fixtures/tools/systemctl-cat-sglang.txt), on each stack.
OLD_EXEC = f"{OLD_VENV}/bin/python -m sglang.launch_server --model-path /models/Kimi-K2.5-INT4 --tp 8 --host 127.0.0.1 --port 30000"
NEW_EXEC = OLD_EXEC.replace(OLD_VENV, NEW_VENV, 1)


def options(tmp_path: Path, **given: Any) -> dict[str, Any]:
    """Every option's value as ``cuda13_options`` holds it (tests/test_steps.py's ``_options``), with
    the values the roles template from others (``stack_switch_*``, ``stack_snapshot_*``) and the
    state, the caches and the throughput files under ``tmp_path``."""
    derived = {
        "stack_switch_old_venv": OLD_VENV,
        "stack_switch_new_venv": NEW_VENV,
        "stack_switch_cuda_home": "/usr/local/cuda-13.0",
        "stack_switch_service_name": "sglang.service",
        "stack_switch_dropin_name": "50-cuda13-upgrade.conf",
        "stack_switch_profile_dropin": "60-cuda13-profile.conf",
        "stack_switch_server_url": "http://127.0.0.1:30000",
        "stack_switch_health_timeout": 900,
        "stack_switch_cache_root": str(tmp_path / "cache"),
        "stack_switch_stack_name": "cu130",
        "stack_snapshot_dir": str(tmp_path / "state" / "snapshots"),
        "stack_snapshot_venv": OLD_VENV,
        "stack_snapshot_sglang_src": "/opt/sglang",
        "stack_snapshot_service_name": "sglang.service",
        "stack_snapshot_cache_dirs": [],
        "verify_throughput_dir": str(tmp_path / "throughput"),
    }
    return _options(tmp_path, **{**derived, **given})


class StepHost(FakeHost):
    """FakeHost whose handlers can tell the check mode of the call they answer (``effective_check``:
    the play's, or the ``check_mode`` the step passed)."""

    effective_check = False

    def module(self, name, args=None, *, python=None, check_mode=None, environment=None, allow_failure=False):
        self.effective_check = self.check_mode if check_mode is None else check_mode
        return super().module(
            name,
            args,
            python=python,
            check_mode=check_mode,
            environment=environment,
            allow_failure=allow_failure,
        )


def _validated(spec: dict, args: dict) -> dict:
    """``args`` checked and completed by the module's own argument spec, as AnsibleModule does."""
    validated = ArgumentSpecValidator(spec).validate(args)
    assert not validated.error_messages, validated.error_messages
    return validated.validated_parameters


def _cmdline(argv: list[str]) -> str:
    return base64.b64encode("".join(a + "\0" for a in argv).encode()).decode()


class Server:
    """One host's service and benchmark (see the module docstring).

    ``root``: the directory that stands for ``/``'s ``etc/systemd/system``. ``profiles``:
    ``{name: {"args": the profile's arguments on the stack served, "trials": [trial, ...] (the
    first ``min_trials``, then one more per run), "probe": [output], "load": {}, "soak": {},
    "fail_trials": runs of trials that fail first, "fail_msg": their message, "fail": {mode: the
    message every run of that mode fails with}}}``. ``running``:
    the arguments the server runs as the test starts (None: it does not run). ``exec_start``:
    the command it runs them with. ``start_error``, ``generated``, ``leftovers``, ``journal``:
    what a start comes to (the cycle of hostscripts/service_cycle.py).
    """

    def __init__(
        self,
        root: Path,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        running: list[str] | None = None,
        exec_start: str = OLD_EXEC,
        start_error: str | None = None,
        generated: bool = True,
        leftovers: list[dict] | None = None,
        journal: list[str] | None = None,
        watch: Mapping[str, Any] | None = None,
        driver_version: str = "580.95.05",
    ) -> None:
        self.root = root
        self.driver_version = driver_version
        self.profiles = {name: dict(answer) for name, answer in (profiles or {}).items()}
        self.running = None if running is None else list(running)
        self.exec_start = exec_start
        self.start_error = start_error
        self.generated = generated
        self.leftovers = list(leftovers or [])
        self.journal = list(journal or [])
        self.watch = dict(watch) if watch is not None else None
        self.log: list[tuple[str, Any]] = []
        self.directories: list[dict] = []
        self.alternatives: list[dict] = []
        self._trials: dict[tuple, int] = {}
        self._failed: dict[str, int] = {}
        self.host: StepHost | None = None

    def fake(self, name: str = "gpu-node-01", *, check_mode: bool = False, **handlers: Any) -> StepHost:
        """A host whose service, benchmark, drop-ins, directories and alternatives are this server's."""
        self.host = StepHost(
            name,
            check_mode=check_mode,
            handlers={
                "cuda13_service": self.service,
                "cuda13_bench": self.bench,
                "cuda13_record": self.record,
                "ansible.builtin.file": self.file,
                "community.general.alternatives": self.alternative,
                "ansible.builtin.command": self.command,
                **handlers,
            },
        )
        return self.host

    # --- the file system: /etc/systemd/system under root -------------------------------------

    def path(self, path: str) -> str:
        """``path`` as this machine has it: ``/etc/systemd/system/...`` under ``root``."""
        if path == SYSTEMD or path.startswith(SYSTEMD + "/"):
            return str(self.root) + path
        return path

    def unit_file(self, path: str) -> Path:
        """The file a host path of ``/etc/systemd/system`` names on this machine."""
        return Path(self.path(path))

    def _check(self) -> bool:
        return bool(self.host and self.host.effective_check)

    def record(self, args: dict) -> dict:
        """cuda13_record's own function, on the moved paths."""
        moved = {
            "files": [{**item, "path": self.path(item["path"])} for item in args.get("files") or []],
            "absent": [self.path(p) for p in args.get("absent") or []],
            "read": [self.path(p) for p in args.get("read") or []],
        }
        result = statedir.record_module(_validated(statedir.RECORD_SPEC, moved), self._check())
        back = {self.path(p): p for p in args.get("read") or []}
        result["read"] = {back[p]: found for p, found in result["read"].items()}
        return result

    def command(self, args: dict) -> dict:
        """The host's nvidia-smi, asked for the driver version (the baseline records it): one
        line per GPU, as ``--query-gpu=driver_version --format=csv,noheader`` prints it."""
        argv = list(args.get("argv") or [])
        if argv != ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]:
            raise AssertionError(f"Server: no command {argv!r} on this host")
        return {"rc": 0, "stdout": f"{self.driver_version}\n" * 8, "stderr": ""}

    def file(self, args: dict) -> dict:
        """ansible.builtin.file with ``state: directory``: made on the moved path, owner recorded."""
        assert args["state"] == "directory", args
        self.directories.append(args)
        path = Path(self.path(args["path"]))
        changed = not path.is_dir()
        if changed and not self._check():
            path.mkdir(parents=True)
        return {"changed": changed, "path": args["path"]}

    def alternative(self, args: dict) -> dict:
        self.alternatives.append(args)
        return {"changed": True}

    # --- the service ---------------------------------------------------------------------------

    def serving(self) -> str | None:
        """The profile whose arguments the server runs, None when none does."""
        for name, answer in self.profiles.items():
            if self.running is not None and list(answer["args"]) == self.running:
                return name
        return None

    def service(self, args: dict) -> dict:
        """cuda13_service: the profile drop-in for real (moved), then the restart as asked."""
        args = _validated(service_cycle.SERVICE_SPEC, args)
        dropin_changed = False
        if args["restart"] != "never" and args.get("dropin_path"):
            dropin_changed = service_cycle.set_dropin(
                self.path(args["dropin_path"]), args.get("dropin_content"), check_mode=self._check()
            )
        if self._check():
            return {"changed": dropin_changed, "dropin_changed": dropin_changed, "cycle": None, "ok": True}
        restarted = args["restart"] == "always" or (
            args["restart"] == "when-changed"
            and (
                args["changed"]
                or dropin_changed
                or self.running != list(args["args"])
                or self.exec_start != args["exec_start"]
            )
        )
        self.log.append(("restart" if restarted else "serve", list(args["args"])))
        start_error = None
        if restarted:
            start_error = self.start_error
            if start_error is not None:
                self.running = None  # stopped, and not started again
            else:
                self.running = list(args["args"])
                self.exec_start = args["exec_start"] or self.exec_start
        argv = shlex.split(self.exec_start) + list(self.running or []) if self.running is not None else []
        cycle = {
            "unit": args["unit"],
            "restart": args["restart"],
            "restarted": restarted,
            "release": (
                {
                    "free": True,
                    "waited_s": 0.4,
                    "leftovers": self.leftovers,
                    "signalled": {},
                    "still_running": [],
                }
                if restarted
                else None
            ),
            "start_error": start_error,
            "ready": (
                {"generated": self.generated, "endpoint": "/health_generate", "waited_s": 0.1, "last": "200"}
                if args["url"] and start_error is None
                else None
            ),
            "journal": self.journal,
            "main_pid": 4300 if argv else 0,
            "cmdline_b64": _cmdline(argv),
        }
        return {"changed": restarted or dropin_changed, "dropin_changed": dropin_changed, "cycle": cycle}

    # --- the benchmark ----------------------------------------------------------------------------

    def bench(self, args: dict) -> dict:
        """cuda13_bench, for the profile the server runs."""
        args = _validated(completion_bench.BENCH_SPEC, args)
        mode = args["mode"]
        if mode == "watch":
            self.log.append(("watch", args["watch_seconds"]))
            return {"changed": False, "bench": {"url": args["url"], "watch": self.watch}}
        name = self.serving()
        self.log.append((mode, name))
        if name is None:
            return {"failed": True, "msg": f"the server runs {self.running!r}, no profile's arguments"}
        answer = self.profiles[name]
        if mode in (answer.get("fail") or {}):
            return {"failed": True, "msg": answer["fail"][mode]}
        if mode == "trials":
            failed = self._failed.get(name, 0)
            if failed < int(answer.get("fail_trials") or 0):
                self._failed[name] = failed + 1
                return {"failed": True, "msg": answer.get("fail_msg") or "the benchmark failed"}
            key = (args["append"], args["series"])
            done = self._trials.get(key, 0)
            done = max(done + 1, int(args["min_trials"] or 1)) if done else int(args["min_trials"] or 1)
            self._trials[key] = done
            return {"changed": False, "bench": {"trials": list(answer["trials"][:done])}}
        if mode == "probe":
            return {"changed": False, "bench": {"outputs": list(answer.get("probe") or [])}}
        return {
            "changed": False,
            "bench": {"load": answer.get("load") or {}, "soak": answer.get("soak") or {}},
        }

    def restarts(self) -> list[list[str]]:
        """The arguments of each restart, in order."""
        return [args for what, args in self.log if what == "restart"]


def trials(rate: float, n: int = 7) -> list[dict]:
    """``n`` decode trials around ``rate`` tok/s (the spread of tests/test_gate_decide_playbook.py's)."""
    spread = (0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0, 0.998, 1.002, 1.0)
    return [{"output_tok_s": rate * spread[i % len(spread)]} for i in range(n)]
