"""The command line of ``cuda13-upgrade``: its subcommands, their options, and the checkout.

:func:`parse_args` parses and checks a command line into :class:`Options` (paths
made absolute); :data:`COMMANDS` names each subcommand's playbook and the result
status of a host that did what it is for; :func:`home_dir` finds the checkout
the playbooks run from.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cuda13_upgrade import window
from cuda13_upgrade.errors import UsageError
from cuda13_upgrade.hostresult import NOT_REACHED

RUN_ID_FORMAT = "%Y%m%dT%H%M%SZ"

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Command:
    """A subcommand: the playbook it runs (relative to the checkout; None for
    ``report``), the result status of a host that did what the command is
    for (and ``also_ok``, other such statuses), and the status of a host that
    ran without failing but left no result file (``"not reached"`` where the
    playbook writes results)."""

    name: str
    playbook: str | None
    ok_status: str
    no_result_status: str
    help: str
    #: Other result statuses of a host that did what the command is for.
    also_ok: tuple[str, ...] = ()

    @property
    def ok_statuses(self) -> tuple[str, ...]:
        """``ok_status`` and ``also_ok``: the statuses :func:`exit_status` takes as done."""
        return (self.ok_status, *self.also_ok)


COMMANDS: dict[str, Command] = {
    "rollout": Command(
        "rollout",
        "upgrade-cuda13.yml",
        "kept",
        NOT_REACHED,
        "upgrade hosts to the CUDA 13 stack, keep it where it is not slower, roll back elsewhere; "
        "restarts the service into each profile on both stacks and sends load (drained with "
        "cuda13_drain_tasks when set)",
    ),
    "driver": Command(
        "driver",
        "playbooks/driver.yml",
        "driver_kept",
        NOT_REACHED,
        "the driver window alone: move each host below the CUDA 13 driver floor to cuda13_driver_target, "
        "measured on both drivers by the gate and rolled back where slower or failing; the stack is left "
        "as it is (a later rollout upgrades it); drains, restarts the service and sends load",
        # A host already at or above the floor needs no move; a kept stack needs none either.
        also_ok=("driver_current", "kept"),
    ),
    "stage": Command(
        "stage",
        "playbooks/stage.yml",
        "staged",
        NOT_REACHED,
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
        NOT_REACHED,
        "put hosts back on the stack of their pre-upgrade snapshot; restarts the service once, sends no "
        "load (drained with cuda13_drain_tasks; without, refused unless -e cuda13_allow_undrained=true)",
    ),
    "report": Command(
        "report",
        None,
        "kept",
        NOT_REACHED,
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
    repository root above this package (``src/cuda13_upgrade/cli/parser.py``).

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
    return Path(__file__).resolve().parents[3]


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


#: Commands that ask for confirmation before they run (confirm_command).
CONFIRMED = ("rollout", "driver", "rollback")


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
            "reached; 2 usage error (also: no hosts in the target group); 3 ansible failed before "
            "any host result; 4 the breaker refused the rollout; 130, 143, 129 interrupted by "
            "SIGINT, SIGTERM, SIGHUP."
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
        if command.name in ("rollout", "driver", "plan"):
            parsed.add_argument(
                "--until",
                metavar="TIME",
                help="start no batch after TIME: HH:MM (the next such time on this machine's clock) or an "
                "ISO 8601 date and time such as 2026-12-01T06:00+01:00 (passed as -e cuda13_until=TIME); "
                "a batch already running finishes",
            )
        if command.name in ("rollout", "driver"):
            parsed.add_argument(
                "--ack-breaker",
                metavar="RUN_ID",
                help="acknowledge the rollbacks up to this run, which a tripped breaker names "
                "(passed as -e cuda13_breaker_ack=RUN_ID); rollbacks of later runs count again",
            )
        if command.name in CONFIRMED:
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
    if ns.command == "driver":
        options.extra_vars.append(json.dumps({"cuda13_driver_only": True}))
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
