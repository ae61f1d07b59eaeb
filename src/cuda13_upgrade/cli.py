"""The ``cuda13-upgrade`` command: run the package's playbooks through ansible-runner.

::

    cuda13-upgrade preflight -i inventory/blackwell
    cuda13-upgrade plan      -i inventory/blackwell [--json]
    cuda13-upgrade rollout   -i inventory/blackwell --limit gpu-node-03 -e cuda13_serial=1
    cuda13-upgrade report    --run-id 20250101T120000Z
    cuda13-upgrade status    -i inventory/blackwell --json
    cuda13-upgrade rollout   -i inventory/blackwell -u ops -K --vault-password-file ~/.vault-pass -v

Each playbook subcommand runs one playbook of the checkout (``rollout``:
``upgrade-cuda13.yml``; ``stage``, ``preflight``, ``verify``, ``rollback``:
``playbooks/<name>.yml``) with ``ansible_runner.run``, shows each host's
progress while it runs (:mod:`cuda13_upgrade.progress`: a live view on a
terminal, timestamped lines without one), then writes and prints the fleet report of
the run (``reports/<run id>/summary.md``, ``summary.json``, ``summary.png``,
see :mod:`cuda13_upgrade.report`) and exits with a status that a script can
act on (:func:`exit_status`). ``status`` runs no playbook: it reads the
inventory and the reports (:mod:`cuda13_upgrade.fleetstate`). ``plan`` runs
``playbooks/plan.yml`` (read-only) and prints what a rollout would do to each
host (:mod:`cuda13_upgrade.plan`). ``rollout`` and ``rollback`` change hosts:
on a terminal they show the plan (or the hosts and their last state) and ask
for confirmation; ``--yes`` runs without asking, and without a terminal
``--yes`` is required (:func:`confirm_command`).

The usual ansible-playbook flags (vault, become password, private key, user,
forks, tags, verbosity) are passed on (:func:`ansible_flags`); the passwords
``--ask-become-pass`` and ``--ask-vault-pass`` ask for are asked here, on the
terminal, and given to ansible-playbook's prompts by ansible-runner
(:func:`ask_secrets`). The sandbox's settings (host key checking off, its
podman configuration) apply to the sandbox's inventory only: host key
checking stays on for every other inventory (:func:`runner_envvars`).

The checkout is found from this file (``src/cuda13_upgrade/cli.py`` -> the
repository root) or from ``$CUDA13_UPGRADE_HOME``.
"""

from __future__ import annotations

import argparse
import getpass
import importlib.metadata
import json
import os
import re
import shlex
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from cuda13_upgrade import report, window
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.progress import (
    HostOutcome,
    Progress,
    RunProgress,
    extra_var,
    natural_key,
    progress_mode,
    serial_from_extra_vars,
)

EXIT_OK = 0
EXIT_HOSTS = 1
EXIT_USAGE = 2
EXIT_ANSIBLE = 3
EXIT_INTERRUPTED = 130

RUN_ID_FORMAT = "%Y%m%dT%H%M%SZ"
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Command:
    """A subcommand: the playbook it runs (relative to the checkout; None for
    ``report``), the result status of a host that did what the command is
    for, and the status of a host that ran without failing but left no result
    file (``"not reached"`` where the playbook writes results)."""

    name: str
    playbook: str | None
    ok_status: str
    no_result_status: str
    help: str


COMMANDS: dict[str, Command] = {
    "rollout": Command(
        "rollout",
        "upgrade-cuda13.yml",
        "kept",
        report.NOT_REACHED,
        "upgrade hosts to the CUDA 13 stack, keep it where it is not slower, roll back elsewhere; "
        "restarts the service into each profile on both stacks and sends load (drained with "
        "cuda13_drain_tasks when set)",
    ),
    "stage": Command(
        "stage",
        "playbooks/stage.yml",
        "staged",
        report.NOT_REACHED,
        "build and check the new stack beside the serving one on every host, outside the service window; "
        "no restart, no load",
    ),
    "plan": Command(
        "plan",
        "playbooks/plan.yml",
        "planned",
        "planned",
        "what a rollout would do to each host: batch, path, apt, wheels, space, restarts, refusals"
        " (read-only, like preflight)",
    ),
    "preflight": Command(
        "preflight",
        "playbooks/preflight.yml",
        "passed",
        "passed",
        "read-only checks of every host (driver, GPUs, disk, Python); no restart, no load",
    ),
    "verify": Command(
        "verify",
        "playbooks/verify.yml",
        "measured",
        "measured",
        "measure the decode throughput each host serves now, per profile; restarts the service into "
        "each profile and sends load (drained with cuda13_drain_tasks; without, refused unless "
        "-e cuda13_allow_undrained=true)",
    ),
    "rollback": Command(
        "rollback",
        "playbooks/rollback.yml",
        "rolled_back",
        report.NOT_REACHED,
        "put hosts back on the stack of their pre-upgrade snapshot; restarts the service once, sends no "
        "load (drained with cuda13_drain_tasks; without, refused unless -e cuda13_allow_undrained=true)",
    ),
    "report": Command(
        "report",
        None,
        "kept",
        report.NOT_REACHED,
        "print (and rewrite) the fleet report of a run; no connection to the hosts",
    ),
}


@dataclass
class Options:
    """The parsed and checked command line; paths are absolute."""

    command: str
    home: Path
    reports_dir: Path
    run_id: str | None
    inventory: str | None = None
    limit: str | None = None
    extra_vars: list[str] = field(default_factory=list)
    check: bool = False
    playbook: Path | None = None
    #: ansible-playbook's own flags, passed on as given (paths made absolute): see ansible_flags.
    vault_password_files: list[str] = field(default_factory=list)
    ask_vault_pass: bool = False
    ask_become_pass: bool = False
    private_key: str | None = None
    user: str | None = None
    forks: int | None = None
    tags: list[str] = field(default_factory=list)
    skip_tags: list[str] = field(default_factory=list)
    verbosity: int = 0
    #: status, plan: print JSON.
    json_output: bool = False
    #: rollout, rollback: run without asking for confirmation.
    yes: bool = False
    #: ansible-runner's ``passwords`` (prompt pattern -> answer), filled by ask_secrets; never printed.
    passwords: dict[str, str] = field(default_factory=dict, repr=False)


def home_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The checkout the playbooks run from: ``$CUDA13_UPGRADE_HOME``, else the
    repository root above this package (``src/cuda13_upgrade/cli.py``).

    Raises :class:`UsageError` when that directory has no ``ansible.cfg``.
    """
    env = os.environ if environ is None else environ
    configured = env.get("CUDA13_UPGRADE_HOME")
    home = Path(configured).expanduser().resolve() if configured else _package_home()
    if not (home / "ansible.cfg").is_file():
        where = "CUDA13_UPGRADE_HOME" if configured else "the package's location"
        raise UsageError(
            f"{home} (from {where}) is not a cuda13-upgrade checkout: it has no ansible.cfg; "
            "set CUDA13_UPGRADE_HOME to the directory that holds upgrade-cuda13.yml"
        )
    return home


def _package_home() -> Path:
    return Path(__file__).resolve().parents[2]


def version_text() -> str:
    """``cuda13-upgrade X.Y.Z (ansible-core A.B.C, ansible-runner D.E.F)`` from the installed
    distributions' metadata (``importlib.metadata``); "not installed" for one that is not."""

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"cuda13-upgrade {version('cuda13-upgrade')} "
        f"(ansible-core {version('ansible-core')}, ansible-runner {version('ansible-runner')})"
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def default_run_id(now: datetime | None = None) -> str:
    """A run identifier from the UTC time, e.g. ``20250101T120000Z``."""
    return (now or datetime.now(UTC)).strftime(RUN_ID_FORMAT)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cuda13-upgrade`` (argparse exits 2 on its own errors)."""
    parser = argparse.ArgumentParser(
        prog="cuda13-upgrade",
        description=(
            "Upgrade NVIDIA Blackwell inference hosts from the CUDA 12.8 stack to CUDA 13, "
            "gated on decode throughput, with rollback."
        ),
        epilog=(
            "Exit status: 0 every host of the run did what the command is for (kept the "
            "upgrade, passed preflight, ...); 1 a host failed, rolled back or was not "
            "reached; 2 usage error; 3 ansible failed before any host result; "
            "130 interrupted."
        ),
    )
    parser.add_argument("--version", action="version", version=version_text())
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--run-id",
        help=f"the run's identifier and report directory name (default: UTC time, "
        f"{RUN_ID_FORMAT.replace('%', '%%')}; for report: the latest run)",
    )
    common.add_argument(
        "--reports-dir",
        help="directory of the runs' reports (default: $CUDA13_REPORTS_DIR or <checkout>/reports)",
    )
    playbook_opts = argparse.ArgumentParser(add_help=False)
    playbook_opts.add_argument(
        "-i",
        "--inventory",
        required=True,
        help="inventory file or directory (e.g. inventory/blackwell)",
    )
    playbook_opts.add_argument("--limit", help="only these hosts (an Ansible host pattern)")
    playbook_opts.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="extra variables, key=value, JSON or @file; repeatable",
    )
    playbook_opts.add_argument(
        "--check", action="store_true", help="Ansible check mode: report, change nothing"
    )
    playbook_opts.add_argument(
        "--playbook",
        help="run this playbook instead of the subcommand's own (for tests and custom plays)",
    )
    ansible = playbook_opts.add_argument_group("ansible-playbook options, passed on")
    ansible.add_argument(
        "--vault-password-file",
        "--vault-pass-file",
        action="append",
        default=[],
        metavar="FILE",
        help="vault password file (or script); repeatable",
    )
    ansible.add_argument(
        "-J",
        "--ask-vault-pass",
        "--ask-vault-password",
        action="store_true",
        help="ask for the vault password (on a terminal)",
    )
    ansible.add_argument(
        "-K",
        "--ask-become-pass",
        "--ask-become-password",
        action="store_true",
        help="ask for the become (sudo) password (on a terminal)",
    )
    ansible.add_argument(
        "--private-key", "--key-file", metavar="FILE", help="SSH private key file to connect with"
    )
    ansible.add_argument("-u", "--user", help="connect as this user")
    ansible.add_argument("-f", "--forks", type=_positive_int, help="parallel processes")
    ansible.add_argument(
        "-t", "--tags", action="append", default=[], help="only plays and tasks tagged with these"
    )
    ansible.add_argument(
        "--skip-tags", action="append", default=[], help="only plays and tasks not tagged with these"
    )
    ansible.add_argument(
        "-v", "--verbose", action="count", default=0, dest="verbosity", help="more output (-vvv, -vvvv)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        parents = [common] if command.playbook is None else [playbook_opts, common]
        parsed = sub.add_parser(command.name, parents=parents, help=command.help, description=command.help)
        if command.name == "plan":
            parsed.add_argument(
                "--json", action="store_true", dest="json_output", help="print the plan as JSON"
            )
        if command.name in ("rollout", "plan"):
            parsed.add_argument(
                "--until",
                metavar="TIME",
                help="start no batch after TIME: HH:MM (the next such time on this machine's clock) or an "
                "ISO 8601 date and time such as 2026-12-01T06:00+01:00 (passed as -e cuda13_until=TIME); "
                "a batch already running finishes",
            )
        if command.name == "rollout":
            parsed.add_argument(
                "--ack-breaker",
                metavar="RUN_ID",
                help="acknowledge the rollbacks up to this run, which a tripped breaker names "
                "(passed as -e cuda13_breaker_ack=RUN_ID); rollbacks of later runs count again",
            )
        if command.name in _CONFIRMED:
            parsed.add_argument(
                "-y",
                "--yes",
                action="store_true",
                help="do not ask for confirmation (required without a terminal, e.g. in automation)",
            )
    status = sub.add_parser("status", help=STATUS_HELP, description=STATUS_HELP)
    status.add_argument(
        "-i", "--inventory", required=True, help="inventory file or directory (e.g. inventory/blackwell)"
    )
    status.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="extra variables as for the other subcommands; only cuda13_target_hosts is read",
    )
    status.add_argument(
        "--reports-dir",
        help="directory of the runs' reports (default: $CUDA13_REPORTS_DIR or <checkout>/reports)",
    )
    status.add_argument("--json", action="store_true", dest="json_output", help="print JSON")
    return parser


STATUS_HELP = (
    "each host's state from its last result under the reports directory "
    "(read-only: no playbook, no connection)"
)


def parse_args(argv: Sequence[str] | None = None, *, cwd: Path | None = None) -> Options:
    """Parse and check a command line (without the program name).

    Relative paths (inventory, ``-e @file``, ``--playbook``, ``--reports-dir``)
    are taken from ``cwd`` (default: the current directory) and made absolute,
    because ansible-playbook runs in the checkout. Raises ``SystemExit(2)``
    for what argparse rejects and :class:`UsageError` (naming the option) for
    a missing inventory, ``-e @file`` or ``--playbook`` file, a run id that is
    not a plain directory name, or a checkout without ``ansible.cfg``.
    """
    ns = build_parser().parse_args(argv)
    base = cwd or Path.cwd()
    home = home_dir()
    reports_env = os.environ.get("CUDA13_REPORTS_DIR")
    reports = ns.reports_dir or reports_env
    reports_dir = (base / reports).resolve() if reports else home / "reports"
    if getattr(ns, "run_id", None) is not None and not _RUN_ID_RE.match(ns.run_id):
        raise UsageError(
            f"--run-id {ns.run_id!r} is not a plain directory name "
            "(letters, digits, '.', '_', '-'; at most 128)"
        )
    if ns.command == "status":
        return Options(
            command="status",
            home=home,
            reports_dir=reports_dir,
            run_id=None,
            inventory=_inventory(ns.inventory, base),
            extra_vars=[_extra_vars(value, base) for value in ns.extra_vars],
            json_output=ns.json_output,
        )
    options = Options(command=ns.command, home=home, reports_dir=reports_dir, run_id=ns.run_id)
    if COMMANDS[ns.command].playbook is None:
        return options
    options.inventory = _inventory(ns.inventory, base)
    options.limit = ns.limit
    options.extra_vars = [_extra_vars(value, base) for value in ns.extra_vars]
    until = getattr(ns, "until", None)
    if until is not None:
        try:
            window.parse_until(until, datetime.now(UTC), option="--until")
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        options.extra_vars.append(json.dumps({"cuda13_until": until}))
    ack = getattr(ns, "ack_breaker", None)
    if ack is not None:
        if not _RUN_ID_RE.match(ack):
            raise UsageError(f"--ack-breaker {ack!r} is not a run id (a directory name under the reports)")
        options.extra_vars.append(f"cuda13_breaker_ack={ack}")
    options.check = ns.check
    options.vault_password_files = [
        _existing_file(value, base, "--vault-password-file") for value in ns.vault_password_file
    ]
    options.ask_vault_pass = ns.ask_vault_pass
    options.ask_become_pass = ns.ask_become_pass
    if ns.private_key:
        options.private_key = _existing_file(ns.private_key, base, "--private-key")
    options.user = ns.user
    options.forks = ns.forks
    options.tags = list(ns.tags)
    options.skip_tags = list(ns.skip_tags)
    options.verbosity = ns.verbosity
    options.json_output = bool(getattr(ns, "json_output", False))
    options.yes = bool(getattr(ns, "yes", False))
    if ns.playbook:
        playbook = (base / ns.playbook).resolve()
        if not playbook.is_file():
            raise UsageError(f"--playbook: no such file: {playbook}")
        options.playbook = playbook
    if options.run_id is None:
        options.run_id = default_run_id()
    return options


def _inventory(value: str, base: Path) -> str:
    path = (base / value).expanduser()
    if path.exists():
        return str(path.resolve())
    if "," in value:  # an Ansible host list: "node-a,node-b,"
        return value
    raise UsageError(f"-i/--inventory: no such file or directory: {path}")


def _existing_file(value: str, base: Path, option: str) -> str:
    path = (base / value).expanduser()
    if not path.is_file():
        raise UsageError(f"{option}: no such file: {path}")
    return str(path.resolve())


def _extra_vars(value: str, base: Path) -> str:
    if not value.startswith("@"):
        return value
    path = (base / value[1:]).expanduser()
    if not path.is_file():
        raise UsageError(f"-e/--extra-vars: no such file: {path}")
    return "@" + str(path.resolve())


def playbook_path(options: Options) -> Path:
    """The playbook a subcommand runs: ``--playbook``, else the command's own
    file in the checkout. Raises :class:`UsageError` when the checkout lacks it."""
    if options.playbook is not None:
        return options.playbook
    relative = COMMANDS[options.command].playbook
    if relative is None:
        raise UsageError(f"{options.command} runs no playbook")
    path = options.home / relative
    if not path.is_file():
        raise UsageError(
            f"'{options.command}' needs {relative}, which this checkout ({options.home}) does "
            "not have yet; pass --playbook PATH to run another playbook"
        )
    return path


def exit_status(
    rows: Iterable[Mapping[str, Any]],
    runner_rc: int | None,
    ok_statuses: Iterable[str] = ("kept",),
) -> int:
    """The exit status of a run from its fleet report rows and ansible-playbook's status.

    ``rows``: :func:`cuda13_upgrade.report.summary_rows` rows (only ``status``
    is read), one per host of the run. ``runner_rc``: ansible-playbook's exit
    status (None: unknown, taken as 0). ``ok_statuses``: the statuses of a
    host that did what the command is for (``kept`` for a rollout,
    ``passed`` for preflight, ``rolled_back`` for a rollback).

    Returns 3 when no host has a result ("not reached" everywhere, or no
    hosts) and ansible-playbook failed: it failed before any host (syntax
    error, a failed control-node play); 1 when there is no host at all, when
    a host's status is not in ``ok_statuses`` (failed, rolled back,
    unreachable, not reached), or when every host is fine but
    ansible-playbook still failed (e.g. in the report play); else 0.
    """
    ok = set(ok_statuses)
    statuses = [str(row.get("status")) for row in rows]
    rc = runner_rc or 0
    if all(s == report.NOT_REACHED for s in statuses) and rc != 0:
        return EXIT_ANSIBLE
    if not statuses or any(s not in ok for s in statuses) or rc != 0:
        return EXIT_HOSTS
    return EXIT_OK


# --- running ---------------------------------------------------------------------------


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
    #: The operator interrupted the run (SIGINT); ``steps``: each host's last step then.
    interrupted: bool = False
    steps: dict[str, str] = field(default_factory=dict)


class _Interrupt:
    """While a run lasts, SIGINT (Ctrl-C) is passed on to ansible-playbook as
    SIGINT, so that it stops its tasks and exits on its own terms (ansible-runner
    would SIGKILL its process group); before ansible-playbook has sent its first
    event (its pid is not known yet) the runner is cancelled. Outside the main
    thread nothing is installed."""

    def __init__(self, progress: Progress, stream: TextIO) -> None:
        self.progress = progress
        self.stream = stream
        self.count = 0
        self._previous: Any = None

    def __enter__(self) -> _Interrupt:
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        pid = self.progress.pid
        print(
            f"interrupt: stopping ansible-playbook{f' (pid {pid})' if pid else ''}; then each host's "
            "step is recorded and this run's locks are released",
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
    and filter plugins), ``ANSIBLE_HOST_KEY_CHECKING=True`` (ansible-runner
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


def recorded_outcomes(
    run_dir: Path, hosts: list[str], outcomes: Mapping[str, dict[str, Any]], started: float
) -> dict[str, dict[str, Any]]:
    """``run.json``'s ``outcomes``: per host of the run, ``{"status": S}`` from the
    result file it wrote during this run (:func:`cuda13_upgrade.report.result_status`:
    ``"kept"``, ``"already kept"``, ``"rolled_back"`` ...), else what the runner saw
    of it (:func:`host_outcomes`: failed, unreachable, or the command's status for
    a host without a result, e.g. "not reached"). A result file that cannot be
    read leaves the runner's outcome."""
    recorded: dict[str, dict[str, Any]] = {}
    for host in hosts:
        path = run_dir / host / "result.json"
        try:
            if path.stat().st_mtime >= started:
                result = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(result, dict):
                    recorded[host] = {"status": report.result_status(result)}
                    continue
        except (OSError, ValueError):
            pass
        if host in outcomes:
            recorded[host] = outcomes[host]
    return recorded


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _run_hosts(run_dir: Path, run: RunResult, started: float) -> list[str]:
    """Hosts of this run, in natural order (``gpu-node-2`` before ``gpu-node-10``):
    those the runner saw in a play not only for localhost (the rollout's
    preflight play sees every host of the run, also those of batches it will
    not reach) and those with a result file written during this run.

    ``summary.json`` is not a source: ``playbooks/report.yml`` lists the whole
    target group there, ignoring ``--limit``.
    """
    hosts = list(run.hosts)
    for path in sorted(run_dir.glob("*/result.json")):
        if path.stat().st_mtime >= started:
            hosts.append(path.parent.name)
    return sorted(set(hosts), key=natural_key)


def run_command(options: Options, stream: TextIO | None = None) -> int:
    """Run a playbook subcommand end to end: the playbook, ``run.json``,
    the ansible log, the fleet report; returns the exit status."""
    out = stream if stream is not None else sys.stdout
    command = COMMANDS[options.command]
    playbook = playbook_path(options)
    assert options.inventory is not None and options.run_id is not None
    run_dir = options.reports_dir / options.run_id
    print(
        f"cuda13-upgrade {command.name}: {playbook.name} on {options.inventory}"
        + (f" --limit {options.limit}" if options.limit else "")
        + (" (check mode)" if options.check else "")
        + f", run {options.run_id}",
        file=out,
        flush=True,
    )
    # asked once: a confirmation's plan run (confirm_command) asked already
    options.passwords = options.passwords or ask_secrets(options)
    started = datetime.now(UTC).timestamp() - 1.0
    run = run_playbook(
        playbook,
        options.inventory,
        home=options.home,
        run_id=options.run_id,
        reports_dir=options.reports_dir,
        limit=options.limit,
        extra_vars=options.extra_vars,
        check=options.check,
        flags=ansible_flags(options),
        passwords=options.passwords,
        stream=out,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / f"ansible-{command.name}.log"
    log.write_text(run.stdout + (("\n" + run.stderr) if run.stderr else ""), encoding="utf-8")
    hosts = _run_hosts(run_dir, run, started)
    record = {
        "command": command.name,
        "playbook": str(playbook),
        "inventory": options.inventory,
        "limit": options.limit,
        "check": options.check,
        "runner_rc": run.rc,
        "runner_status": run.status,
        "ok_status": command.ok_status,
        "hosts": hosts,
        "outcomes": recorded_outcomes(run_dir, hosts, host_outcomes(run, command), started),
        "started_at": datetime.fromtimestamp(started + 1.0, UTC).isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "batches": run.batches,
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if run.interrupted or run.status == "canceled":
        if run.doing:
            print("interrupted; what each host was doing:", file=sys.stderr)
            print("\n".join(f"  {line}" for line in run.doing), file=sys.stderr)
        return _after_interrupt(options, command, run, hosts, log, out)
    rows = _show_report(run_dir, hosts, out) if hosts else []
    status = exit_status(rows, run.rc, [command.ok_status])
    if status == EXIT_ANSIBLE:
        print(
            f"ansible-playbook failed (rc {run.rc}) before any host had a result:\n"
            f"{_tail(run.stderr or run.stdout)}\n(full output: {log})",
            file=sys.stderr,
        )
    elif not hosts:
        print(f"no host of the inventory was targeted (full output: {log})", file=sys.stderr)
    return status


#: Commands that ask for confirmation before they run (confirm_command).
_CONFIRMED = ("rollout", "rollback")

#: Commands whose playbooks take the hosts' locks (action cuda13_lock).
_LOCKING = ("rollout", "stage", "rollback")


def _after_interrupt(
    options: Options, command: Command, run: RunResult, hosts: list[str], log: Path, out: TextIO
) -> int:
    """After Ctrl-C: run ``playbooks/interrupted.yml`` on the run's hosts (each
    host's step recorded in its result, this run's locks released), print
    where each host was, and return 130."""
    assert options.inventory is not None and options.run_id is not None
    steps = {h: run.steps.get(h, "not started") for h in hosts}
    cleanup = options.home / "playbooks" / "interrupted.yml"
    released = ""
    if command.name in _LOCKING and hosts and not options.check and cleanup.is_file():
        print("== Recording the interrupted hosts and releasing their locks", file=out, flush=True)
        extra = json.dumps({"cuda13_interrupted_steps": steps})
        done = run_playbook(
            cleanup,
            options.inventory,
            home=options.home,
            run_id=options.run_id,
            reports_dir=options.reports_dir,
            limit=",".join(hosts),
            extra_vars=[*options.extra_vars, extra],
            # The operator's tags would skip the clean-up's own tasks.
            flags=ansible_flags(replace(options, tags=[], skip_tags=[])),
            passwords=options.passwords,
            stream=out,
        )
        released = (
            " Their locks are released."
            if done.rc == 0
            else f" Releasing their locks failed (rc {done.rc}): see the lines above."
        )
    where = "; ".join(f"{h} during {s}" for h, s in steps.items()) or "before any host"
    print(
        f"interrupted: {where}.{released} Run the same command again to continue (Ansible's output: {log})",
        file=sys.stderr,
    )
    return EXIT_INTERRUPTED


def _show_report(run_dir: Path, hosts: list[str] | None, out: TextIO) -> list[dict[str, Any]]:
    summary = report.fleet_summary(run_dir, hosts)
    print("", file=out)
    print(summary["markdown"], file=out, end="")
    files = summary["files"]
    print(f"\nreport: {files['markdown']}", file=out)
    print(f"        {files['json']}", file=out)
    if files.get("metrics"):
        print(f"        {files['metrics']}", file=out)
    if files["chart"]:
        print(f"        {files['chart']}", file=out)
    else:
        print(f"        ({summary.get('chart_error') or summary.get('chart_note')})", file=out)
    print(f"run:    {run_dir / 'run.json'}", file=out, flush=True)
    return summary["rows"]


def latest_run(reports_dir: Path) -> Path | None:
    """The run directory under ``reports_dir`` written last (by the newest
    mtime of its ``run.json``, ``summary.json`` or result files), or None."""
    best: tuple[float, str] | None = None
    found: Path | None = None
    if not reports_dir.is_dir():
        return None
    for run in reports_dir.iterdir():
        if not run.is_dir():
            continue
        files = [run / "run.json", run / "summary.json", *run.glob("*/result.json")]
        times = [f.stat().st_mtime for f in files if f.exists()]
        if times and (best is None or (max(times), run.name) > best):
            best, found = (max(times), run.name), run
    return found


def report_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``report`` subcommand: rewrite and print the report of a run;
    the exit status is :func:`exit_status` of its rows, with the ansible
    status and command recorded in ``run.json`` (rollout's when absent)."""
    out = stream if stream is not None else sys.stdout
    if options.run_id is not None:
        run_dir = options.reports_dir / options.run_id
        if not run_dir.is_dir():
            raise UsageError(f"--run-id {options.run_id}: no such run under {options.reports_dir}")
    else:
        latest = latest_run(options.reports_dir)
        if latest is None:
            raise UsageError(
                f"no runs under {options.reports_dir} (--reports-dir); pass --run-id or --reports-dir"
            )
        run_dir = latest
    record = report.load_run_record(run_dir)
    rows = _show_report(run_dir, None, out)
    command = COMMANDS.get(str(record.get("command")), COMMANDS["rollout"])
    ok = record.get("ok_status") or command.ok_status
    return exit_status(rows, record.get("runner_rc"), [ok])


def target_group(extra_vars: Iterable[str]) -> str:
    """The hosts a run acts on: ``cuda13_target_hosts`` as ``-e`` gives it, else
    ``blackwell``. The playbooks' plays take ``hosts: "{{ cuda13_target_hosts |
    default('blackwell') }}"``, a play keyword Ansible templates without a host,
    so only an extra variable changes it."""
    value = extra_var(extra_vars, "cuda13_target_hosts")
    return str(value) if value else "blackwell"


def status_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``status`` subcommand: each host of the target group with its state
    from the newest record under the reports directory
    (:func:`cuda13_upgrade.fleetstate.host_states`), as a table or as JSON
    (``{"inventory", "group", "reports_dir", "hosts": [...]}``). Reads the
    inventory and the reports, nothing else; returns 0."""
    from cuda13_upgrade import fleetstate

    out = stream if stream is not None else sys.stdout
    assert options.inventory is not None
    group = target_group(options.extra_vars)
    # The inventory plugins the runs enable (the checkout's ansible.cfg, as runner_envvars sets it).
    os.environ["ANSIBLE_CONFIG"] = str(options.home / "ansible.cfg")
    hosts = fleetstate.inventory_hosts(options.inventory, group)
    states = fleetstate.host_states(options.reports_dir, hosts)
    if options.json_output:
        document = {
            "inventory": options.inventory,
            "group": group,
            "reports_dir": str(options.reports_dir),
            "hosts": states,
        }
        print(json.dumps(document, indent=2), file=out)
    else:
        text = fleetstate.render_text(
            states, inventory=options.inventory, group=group, reports_dir=options.reports_dir
        )
        print(text, file=out, end="")
    return EXIT_OK


def run_plan(options: Options, out: TextIO) -> tuple[int, dict[str, Any] | None]:
    """Run ``playbooks/plan.yml`` (read-only) for ``options``' inventory, limit and
    extra variables, with its run id, and read the plan it wrote
    (``<reports>/<run id>/plan.json``, :func:`cuda13_upgrade.plan.rollout_plan`).

    Returns ``(status, plan)``: 0 with the plan when no host is refused, 1 with
    the plan when one is, 3 and None when the playbook wrote no plan (its
    output's tail is printed, the whole of it is in ``ansible-plan.log``).
    """
    assert options.inventory is not None
    run_id = options.run_id or default_run_id()
    own = options.home / str(COMMANDS["plan"].playbook)
    playbook = playbook_path(options) if options.command == "plan" else own
    options.passwords = options.passwords or ask_secrets(options)
    run = run_playbook(
        playbook,
        options.inventory,
        home=options.home,
        run_id=run_id,
        reports_dir=options.reports_dir,
        limit=options.limit,
        extra_vars=options.extra_vars,
        flags=ansible_flags(options),
        passwords=options.passwords,
        stream=out,
    )
    run_dir = options.reports_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "ansible-plan.log"
    log.write_text(run.stdout + (("\n" + run.stderr) if run.stderr else ""), encoding="utf-8")
    try:
        the_plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        the_plan = None
    if run.rc != 0 or not isinstance(the_plan, dict):
        print(
            f"the plan could not be made (ansible-playbook rc {run.rc}):\n"
            f"{_tail(run.stderr or run.stdout)}\n(full output: {log})",
            file=sys.stderr,
        )
        return EXIT_ANSIBLE, None
    return (EXIT_HOSTS if the_plan["summary"]["refused"] else EXIT_OK), the_plan


def plan_command(options: Options, stream: TextIO | None = None) -> int:
    """The ``plan`` subcommand: :func:`run_plan`, then the plan as text
    (:func:`cuda13_upgrade.plan.render_text`) or, with ``--json``, as JSON on
    stdout (the progress then goes to stderr). Returns :func:`run_plan`'s status."""
    from cuda13_upgrade import plan

    out = stream if stream is not None else sys.stdout
    status, the_plan = run_plan(options, sys.stderr if options.json_output else out)
    if the_plan is None:
        return status
    if options.json_output:
        print(json.dumps(the_plan, indent=2), file=out)
    else:
        print("", file=out)
        print(plan.render_text(the_plan), file=out, end="")
        print(f"\nplan: {options.reports_dir / the_plan['run_id'] / 'plan.json'}", file=out)
    return status


def _isatty(handle: Any) -> bool:
    try:
        return bool(handle.isatty())
    except (AttributeError, OSError, ValueError):
        return False


def ask(question: str, stdin: TextIO, out: TextIO) -> bool:
    """Ask ``question`` on the terminal; True only for an answer of "y" or "yes"."""
    print(f"{question} [y/N] ", file=out, end="", flush=True)
    answer = stdin.readline()
    if not answer:
        print("", file=out)
    return answer.strip().lower() in ("y", "yes")


def confirm_command(
    options: Options, stream: TextIO | None = None, stdin: TextIO | None = None
) -> int | None:
    """Before ``rollout`` or ``rollback`` changes hosts: show what it will do and
    ask. Returns None to go on, or the exit status to end with.

    Not asked with ``--yes``, in check mode, or for other commands. Without a
    terminal on ``stdin`` the command is refused (:class:`UsageError`: pass
    ``--yes``). ``rollout`` first runs the plan (:func:`run_plan`, same run id:
    ``plan.json`` stays in the run's report directory) and prints it; a plan in
    which the rollout would stop at its preflight ends here (1), nothing asked.
    ``rollback`` lists the hosts it takes with their last state
    (:func:`cuda13_upgrade.fleetstate.host_states`). Declined: 1, nothing changed.
    """
    if options.command not in _CONFIRMED or options.yes or options.check:
        return None
    out = stream if stream is not None else sys.stdout
    stdin = stdin if stdin is not None else sys.stdin
    if not _isatty(stdin):
        raise UsageError(
            f"{options.command} changes hosts and asks for confirmation on a terminal, and there is none: "
            f"pass --yes to {options.command} without asking (automation), or run 'cuda13-upgrade plan' first"
        )
    assert options.inventory is not None
    if options.command == "rollout":
        from cuda13_upgrade import plan

        status, the_plan = run_plan(options, out)
        if the_plan is None:
            return status
        print("", file=out)
        print(plan.render_text(the_plan), file=out, end="")
        summary = the_plan["summary"]
        if summary["stops"]:
            print("\nThe rollout would stop at its preflight; nothing was changed.", file=out)
            return EXIT_HOSTS
        question = f"Roll out the CUDA 13 stack to {summary['changes']} of {summary['hosts']} hosts now?"
    else:
        from cuda13_upgrade import fleetstate

        group = target_group(options.extra_vars)
        os.environ["ANSIBLE_CONFIG"] = str(options.home / "ansible.cfg")
        hosts = fleetstate.inventory_hosts(options.inventory, group, options.limit)
        for state in fleetstate.host_states(options.reports_dir, hosts):
            print(f"  {state['host']}: {state['decision']}", file=out)
        question = (
            f"Roll back {len(hosts)} host{'' if len(hosts) == 1 else 's'} to their pre-upgrade snapshot "
            "(each host's service restarts on its old stack)?"
        )
    if ask(question, stdin, out):
        return None
    print("Not confirmed; nothing was changed.", file=out)
    return EXIT_HOSTS


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cuda13-upgrade``; returns the exit status (see
    :func:`exit_status`): 2 for a :class:`UsageError`, 1 when a result file or
    ``run.json`` of the run cannot be read (the message names the file)."""
    try:
        options = parse_args(argv)
        if options.command == "report":
            return report_command(options)
        if options.command == "status":
            return status_command(options)
        if options.command == "plan":
            return plan_command(options)
        declined = confirm_command(options)
        if declined is not None:
            return declined
        return run_command(options)
    except UsageError as exc:
        print(f"cuda13-upgrade: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a damaged result or run.json
        print(f"cuda13-upgrade: error: {exc}", file=sys.stderr)
        return EXIT_HOSTS


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
