"""Exceptions raised by the cuda13_upgrade rules and parsers.

Every message follows one shape so that a user reading an Ansible failure knows
what was wrong, where it came from and what to do::

    <what is wrong>: <value as repr>. Option: <variable name>. Fix: <remedy>.

All classes derive from :class:`ValueError`, so callers that only care about
"bad input" can catch that, and a step (``cuda13_upgrade.steps``) can fail its task
with the same text.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Cuda13Error",
    "ParseError",
    "PreflightError",
    "UnknownReleaseError",
    "UsageError",
    "format_message",
]


def format_message(
    problem: str,
    value: Any,
    *,
    option: str | None = None,
    remedy: str | None = None,
) -> str:
    """Build the one-line message used by every exception of this package.

    Args:
        problem: what is wrong, without a trailing period (e.g. ``"driver
            version is malformed"``).
        value: the offending value; it is shown with ``repr`` so that empty
            strings and whitespace stay visible.
        option: the Ansible variable or function argument that carried the
            value, when there is one.
        remedy: what the user should do.

    Returns:
        ``"<problem>: <repr(value)>. Option: <option>. Fix: <remedy>."`` with
        the option and fix parts left out when not given.
    """
    parts = [f"{problem}: {value!r}."]
    if option:
        parts.append(f"Option: {option}.")
    if remedy:
        parts.append(f"Fix: {remedy.rstrip('.')}.")
    return " ".join(parts)


class Cuda13Error(ValueError):
    """Base class: a value that breaks one of the package's rules.

    Attributes:
        problem: what is wrong.
        value: the offending value.
        option: the option or argument name that carried it, or ``None``.
        remedy: what to do, or ``None``.
    """

    def __init__(
        self,
        problem: str,
        value: Any,
        *,
        option: str | None = None,
        remedy: str | None = None,
    ) -> None:
        self.problem = problem
        self.value = value
        self.option = option
        self.remedy = remedy
        super().__init__(format_message(problem, value, option=option, remedy=remedy))


class ParseError(Cuda13Error):
    """Tool output (nvidia-smi, nvcc, pip freeze) that does not have the expected shape.

    ``value`` is the first offending line (or the whole text when it is short),
    so the message quotes what the tool really printed.
    """


class PreflightError(Cuda13Error):
    """A host fact or setting that makes the upgrade unsafe or impossible."""


class UnknownReleaseError(PreflightError):
    """A CUDA toolkit release that the driver table of :mod:`cuda13_upgrade.versions` lacks."""


class UsageError(Exception):
    """A command line or setting the command cannot run with (exit status 2).
    The message names the option or variable at fault."""
