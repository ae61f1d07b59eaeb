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
see :mod:`cuda13_upgrade.summary`) and exits with a status that a script can
act on (:func:`cuda13_upgrade.cli.commands.exit_status`). ``status`` runs no
playbook: it reads the inventory and the reports (:mod:`cuda13_upgrade.fleetstate`).
``plan`` runs ``playbooks/plan.yml`` (read-only) and prints what a rollout would
do to each host (:mod:`cuda13_upgrade.plan`). ``rollout`` and ``rollback`` change
hosts: on a terminal they show the plan (or the hosts and their last state) and
ask for confirmation; ``--yes`` runs without asking, and without a terminal
``--yes`` is required (:func:`cuda13_upgrade.cli.commands.confirm_command`).

The usual ansible-playbook flags (vault, become password, private key, user,
forks, tags, verbosity) are passed on (:func:`cuda13_upgrade.cli.runner.ansible_flags`);
the passwords ``--ask-become-pass`` and ``--ask-vault-pass`` ask for are asked
here, on the terminal, and given to ansible-playbook's prompts by ansible-runner
(:func:`cuda13_upgrade.cli.runner.ask_secrets`). The sandbox's settings (host key
checking off, its podman configuration) apply to the sandbox's inventory only:
host key checking stays on for every other inventory
(:func:`cuda13_upgrade.cli.runner.runner_envvars`).

The checkout is found from this package (``src/cuda13_upgrade/cli/`` -> the
repository root) or from ``$CUDA13_UPGRADE_HOME``.

The modules: :mod:`cuda13_upgrade.cli.parser` (the command line, the subcommands
and the checkout), :mod:`cuda13_upgrade.cli.runner` (ansible-playbook through
ansible-runner: its environment, flags, passwords, Ctrl-C and what it saw of
each host), :mod:`cuda13_upgrade.cli.commands` (each subcommand, end to end, and
the exit status); :func:`main` here dispatches to them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cuda13_upgrade.cli.commands import (
    EXIT_HOSTS,
    EXIT_USAGE,
    confirm_command,
    plan_command,
    report_command,
    run_command,
    status_command,
)
from cuda13_upgrade.cli.parser import parse_args
from cuda13_upgrade.errors import UsageError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cuda13-upgrade``; returns the exit status (see
    :func:`cuda13_upgrade.cli.commands.exit_status`): 2 for a :class:`UsageError`, 1 when
    a result file or ``run.json`` of the run cannot be read (the message names the file)."""
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
