"""ansible-playbook through ansible-runner, for ``cuda13-upgrade``'s subcommands.

:func:`run_playbook` runs a playbook of the checkout with ``ansible_runner.run``
in a throwaway private data dir, with its environment (:func:`runner_envvars`),
ansible-playbook's own flags (:func:`ansible_flags`) and the answers to its
password prompts (:func:`ask_secrets`), shows each host's progress
(:mod:`cuda13_upgrade.progress`), passes Ctrl-C on to ansible-playbook, and
returns what it saw (:class:`RunResult`; per host, :func:`host_outcomes`).
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cuda13_upgrade.cli.parser import Command, Options
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.progress import HostOutcome, Progress, RunProgress, progress_mode, serial_from_extra_vars


@dataclass
class RunResult:
    """ansible-playbook's ``rc`` and runner ``status`` ("successful", "failed",
    "canceled", ...), the hosts of the run in first-seen order, what the
    runner saw of each host, and the run's output (stdout, with ANSI colours
    off; stderr, usually empty)."""

    rc: int
    status: str
    hosts: list[str]
    outcomes: dict[str, HostOutcome]
    stdout: str
    stderr: str
    doing: list[str] = field(default_factory=list)  # per host, when the run was canceled
    batches: dict[str, int] = field(default_factory=dict)  # host -> batch of the serial play
    #: The run was interrupted (SIGINT, SIGTERM or SIGHUP); ``steps``: each host's last step then.
    interrupted: bool = False
    steps: dict[str, str] = field(default_factory=dict)
    #: The first signal that interrupted the run (``signal.SIGINT`` ...), None when none did.
    signum: int | None = None


#: The signals a run handles as Ctrl-C: SIGINT, and SIGTERM and SIGHUP (a CI cancel, ``timeout``,
#: ``systemctl stop``, a closed terminal), each passed on to ansible-playbook as SIGINT.
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Interrupt:
    """While a run lasts, SIGINT (Ctrl-C), SIGTERM and SIGHUP are passed on to
    ansible-playbook as SIGINT, so that it stops its tasks and exits on its own
    terms (ansible-runner would SIGKILL its process group; ansible-playbook has
    no handler of its own for SIGTERM or SIGHUP and would die at once, with no
    line and no record); before ansible-playbook has sent its first event (its
    pid is not known yet) the runner is cancelled. ``signum``: the first signal
    received (the command's exit status is 128 + it). Outside the main thread
    nothing is installed."""

    def __init__(self, progress: Progress, stream: TextIO) -> None:
        self.progress = progress
        self.stream = stream
        self.count = 0
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupt:
        for signum in INTERRUPT_SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        pid = self.progress.pid
        name = signal.Signals(signum).name
        print(
            f"interrupt: {name} received; stopping ansible-playbook{f' (pid {pid})' if pid else ''}; then "
            "each host's step is recorded and this run's locks are released",
            file=self.stream,
            flush=True,
        )
        if pid:
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def cancel(self) -> bool:
        """ansible-runner's ``cancel_callback``: stop at once only while no pid is known."""
        return self.count > 0 and not self.progress.pid


def sandbox_inventory(inventory: str | None, home: Path) -> bool:
    """Whether ``inventory`` is the checkout's sandbox inventory: ``inventory/sandbox``
    or a file in it (resolved, so a relative path or a link to it counts). A host
    list (``a,b,``) or any other path is not."""
    if not inventory or not Path(inventory).exists():
        return False
    sandbox = (home / "inventory" / "sandbox").resolve()
    path = Path(inventory).resolve()
    return path == sandbox or sandbox in path.parents


def runner_envvars(home: Path, run_id: str, reports_dir: Path, *, sandbox: bool = False) -> dict[str, str]:
    """Environment of ansible-playbook: the checkout's ``ansible.cfg`` (its roles
    and plugins), ``ANSIBLE_HOST_KEY_CHECKING=True`` (ansible-runner
    would otherwise set it to False; an ``ANSIBLE_HOST_KEY_CHECKING`` of the
    caller's environment is kept), the run id
    and reports directory the playbooks read (``CUDA13_RUN_ID``,
    ``CUDA13_REPORTS_DIR``), and ``PATH`` starting with this interpreter's
    ``bin`` so the venv's ansible-playbook runs. With ``sandbox``
    (:func:`sandbox_inventory`) also ``CONTAINERS_CONF``, the sandbox's podman
    configuration that its hosts' ssh ProxyCommand (``podman exec``) needs; the
    sandbox inventory turns host key checking off for its own hosts
    (``inventory/sandbox/group_vars/sandbox/connection.yml``). Whatever else
    the caller's environment holds is passed on by ansible-runner."""
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    env = {
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),
        "CUDA13_RUN_ID": run_id,
        "CUDA13_REPORTS_DIR": str(reports_dir),
        "ANSIBLE_NOCOLOR": "1",
        # ansible-runner turns host key checking off unless this is set
        # (ansible_runner/config/_base.py); the operator's own setting is kept.
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING", "True"),
        "PATH": bin_dir + (os.pathsep + path if path else ""),
    }
    if sandbox:
        env["CONTAINERS_CONF"] = str(home / "sandbox" / "containers.conf")
    return env


#: The values of ``ANSIBLE_HOST_KEY_CHECKING`` that turn checking off, as ansible-core's
#: ``boolean()`` reads them (``ansible.module_utils.parsing.convert_bool``, case-insensitive).
_OFF_VALUES = ("false", "f", "no", "n", "off", "0")


def host_key_checking_off(environ: Mapping[str, str] | None = None) -> str | None:
    """The caller's ``ANSIBLE_HOST_KEY_CHECKING=VALUE`` (as given) when it turns host key
    checking off (``False``, ``0``, ``no``, ``off``, ...; any case), else None.
    :func:`runner_envvars` keeps the caller's value, so it holds for the whole run."""
    env = os.environ if environ is None else environ
    value = env.get("ANSIBLE_HOST_KEY_CHECKING")
    if value is not None and value.strip().lower() in _OFF_VALUES:
        return f"ANSIBLE_HOST_KEY_CHECKING={value}"
    return None


def host_key_warning(setting: str) -> str:
    """The warning line the command prints when the caller's environment (``setting``, from
    :func:`host_key_checking_off`) turns host key checking off."""
    return (
        f"warning: host key checking is off for this run: {setting} in the caller's environment, so no "
        "host's SSH key is checked against known_hosts (a replaced or spoofed host is not noticed). "
        "Unset it and add the hosts' keys to ~/.ssh/known_hosts (ssh-keyscan) to check them."
    )


#: ansible-playbook's prompts (ansible-core's CLI.ask_passwords and its vault prompt),
#: as ansible-runner's ``passwords`` patterns: "BECOME password: " (or "SUDO password: "
#: without the agnostic prompt), "Vault password: ".
BECOME_PROMPT = r"^[A-Z]+ password.*:\s*?$"

VAULT_PROMPT = r"^Vault password:\s*?$"


def ansible_flags(options: Options) -> list[str]:
    """The ansible-playbook flags of ``options`` to pass on, in ansible-playbook's
    spelling: ``--vault-password-file`` (each), ``--ask-vault-pass``,
    ``--ask-become-pass``, ``--private-key``, ``--user``, ``--forks``, ``--tags``
    and ``--skip-tags`` (each), ``-v`` repeated as ``-vvv``."""
    args: list[str] = []
    for path in options.vault_password_files:
        args += ["--vault-password-file", path]
    if options.ask_vault_pass:
        args.append("--ask-vault-pass")
    if options.ask_become_pass:
        args.append("--ask-become-pass")
    if options.private_key:
        args += ["--private-key", options.private_key]
    if options.user:
        args += ["--user", options.user]
    if options.forks:
        args += ["--forks", str(options.forks)]
    for tags in options.tags:
        args += ["--tags", tags]
    for tags in options.skip_tags:
        args += ["--skip-tags", tags]
    if options.verbosity:
        args.append("-" + "v" * min(options.verbosity, 6))
    return args


def ask_secrets(
    options: Options,
    *,
    stdin: TextIO | None = None,
    ask: Callable[[str], str] | None = None,
) -> dict[str, str]:
    """Ask, on the terminal, for the passwords ``-K`` and ``--ask-vault-pass`` want;
    returns ansible-runner's ``passwords`` (:data:`BECOME_PROMPT` and
    :data:`VAULT_PROMPT` to the answers), empty when neither flag is given.

    ansible-playbook runs under ansible-runner without a terminal, so it cannot
    ask itself. Raises :class:`UsageError` when stdin is not a terminal (a job
    without one gives the passwords another way: ``--vault-password-file``, and
    ``ansible_become_password`` in a vault-encrypted file)."""
    if not (options.ask_become_pass or options.ask_vault_pass):
        return {}
    stream = stdin if stdin is not None else sys.stdin
    if not (stream is not None and stream.isatty()):
        flag = "-K/--ask-become-pass" if options.ask_become_pass else "--ask-vault-pass"
        raise UsageError(
            f"{flag} needs a terminal to ask on; without one, pass --vault-password-file and keep "
            "ansible_become_password in a vault-encrypted group_vars file"
        )
    ask = ask or getpass.getpass
    secrets: dict[str, str] = {}
    if options.ask_become_pass:
        secrets[BECOME_PROMPT] = ask("BECOME password: ")
    if options.ask_vault_pass:
        secrets[VAULT_PROMPT] = ask("Vault password: ")
    return secrets


def runner_cmdline(
    limit: str | None, extra_vars: Sequence[str], check: bool, flags: Sequence[str] = ()
) -> str:
    """The ansible-playbook options runner passes on (``cmdline``), shell-quoted:
    ``--limit``, each ``-e``, ``--check``, then ``flags`` (:func:`ansible_flags`)."""
    args: list[str] = []
    if limit:
        args += ["--limit", limit]
    for value in extra_vars:
        args += ["-e", value]
    if check:
        args.append("--check")
    args += flags
    return shlex.join(args)


def ansible_playbook_path(path: str) -> str:
    """The ``ansible-playbook`` that ansible-runner will run: the first on ``path`` (the
    ``PATH`` of :func:`runner_envvars`, this interpreter's ``bin`` first).

    Raises UsageError (exit status 2) when there is none: ``pip install`` of this package
    brings ansible-runner but not Ansible (pyproject.toml: ``ansible`` is in the ``dev``
    extra), and ansible-runner would otherwise fail with a bare "command not found".
    """
    found = shutil.which("ansible-playbook", path=path)
    if found is None:
        raise UsageError(
            "ansible-playbook was not found (searched "
            f"{path or '(empty PATH)'}). The cuda13-upgrade command runs Ansible, which "
            "'pip install -e .' does not install: install it into the same environment with "
            "pip install -e '.[dev]' (or pip install 'ansible>=12,<13'), or put ansible-playbook "
            "on PATH. Nothing on any host was changed."
        )
    return found


def run_playbook(
    playbook: Path,
    inventory: str,
    *,
    home: Path,
    run_id: str,
    reports_dir: Path,
    limit: str | None = None,
    extra_vars: Sequence[str] = (),
    check: bool = False,
    flags: Sequence[str] = (),
    passwords: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    runner: Callable[..., Any] | None = None,
) -> RunResult:
    """Run ``playbook`` with ansible-runner in a throwaway private data dir.

    ``project_dir`` is the checkout (``home``), so relative paths of the
    playbooks and ``ansible.cfg`` resolve as with ``ansible-playbook`` run
    there; progress goes to ``stream``
    (:class:`cuda13_upgrade.progress.RunProgress`; Ctrl-C prints what each
    host was doing, then the interrupt goes on). ``runner``
    replaces ``ansible_runner.run`` (tests). ``flags``: ansible-playbook's own
    (:func:`ansible_flags`); ``passwords``: answers to its prompts
    (:func:`ask_secrets`). The environment is :func:`runner_envvars`, with the
    sandbox's settings only for the sandbox's inventory. Ansible's own failures
    are in the result (``rc``), not raised; ansible-runner's own errors are raised.
    """
    if runner is None:
        import ansible_runner

        ansible_playbook_path(runner_envvars(home, run_id, reports_dir)["PATH"])
        runner = ansible_runner.run

    progress = RunProgress(stream, live=progress_mode(stream), serial=serial_from_extra_vars(extra_vars))
    interrupt = _Interrupt(progress, stream if stream is not None else sys.stdout)
    with interrupt, tempfile.TemporaryDirectory(prefix="cuda13-upgrade-") as private, progress:
        try:
            result = runner(
                private_data_dir=private,
                project_dir=str(home),
                playbook=str(playbook),
                inventory=inventory,
                cmdline=runner_cmdline(limit, extra_vars, check, flags),
                envvars=runner_envvars(home, run_id, reports_dir, sandbox=sandbox_inventory(inventory, home)),
                passwords=dict(passwords or {}),
                event_handler=progress,
                cancel_callback=interrupt.cancel,
                quiet=True,
            )
        except KeyboardInterrupt:
            progress.stop()
            print("interrupted; what each host was doing:", file=sys.stderr)
            print("\n".join(f"  {line}" for line in progress.interrupted_lines()), file=sys.stderr)
            raise
        stdout = _read(getattr(result, "stdout", None))
        stderr = _read(getattr(result, "stderr", None))
    progress.flush()
    rc = result.rc if isinstance(result.rc, int) else 1
    return RunResult(
        rc=rc,
        status=str(result.status),
        hosts=progress.hosts,
        outcomes=progress.outcomes,
        stdout=stdout,
        stderr=stderr,
        doing=progress.interrupted_lines() if interrupt.count > 0 or str(result.status) == "canceled" else [],
        batches={view.host: view.batch for view in progress.views.values() if view.batch},
        interrupted=interrupt.count > 0,
        steps=dict(progress.last_step),
        signum=interrupt.signum,
    )


def _read(handle: Any) -> str:
    if handle is None:
        return ""
    try:
        return handle.read()
    except (OSError, ValueError):
        return ""


def host_outcomes(run: RunResult, command: Command) -> dict[str, dict[str, Any]]:
    """Per host of the run, the result a host without a result file gets in
    the report: ``unreachable``/``failed`` (with the failed play or role, task
    and message), else ``command.no_result_status``."""
    outcomes: dict[str, dict[str, Any]] = {}
    for host in run.hosts:
        seen = run.outcomes.get(host) or HostOutcome()
        if seen.unreachable or seen.failed:
            # An unreachable host ran no rescue and wrote no result: the step
            # it was in is the last one its run record named (cuda13_host_run).
            outcomes[host] = {
                "status": "unreachable" if seen.unreachable else "failed",
                "failed_step": (seen.step if seen.unreachable else None) or seen.role or seen.play,
                "failed_task": seen.task,
                "error": seen.message,
            }
        else:
            outcomes[host] = {"status": command.no_result_status}
    return outcomes
