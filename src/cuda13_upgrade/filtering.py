"""What the filter plugins (``filter_plugins/*.py``) share: the package's errors as Ansible's.

A filter calls the package; the ``ValueError`` it raises for a value that breaks
a rule (every :class:`~cuda13_upgrade.errors.Cuda13Error` is one) and a
:class:`~cuda13_upgrade.errors.UsageError` become an ``AnsibleFilterError``
whose message is the filter's name, a colon and the package's message (which
names the value, the option and the remedy), with the cause chained. The
filter's own type checks raise ``AnsibleFilterError`` themselves and pass
through unchanged.

Only the filter plugins import this module, under Ansible; ``ansible.errors``
is imported when a filter fails, so the rest of the package needs no Ansible.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from cuda13_upgrade.errors import UsageError

__all__ = ["ansible_filters", "filter_error"]


def filter_error(name: str, exc: BaseException) -> Exception:
    """``AnsibleFilterError("<name>: <exc>")``, for the caller to raise ``from exc``."""
    from ansible.errors import AnsibleFilterError

    return AnsibleFilterError(f"{name}: {exc}")


def _wrapped(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def filter_(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (ValueError, UsageError) as exc:
            raise filter_error(name, exc) from exc

    return filter_


def ansible_filters(filters: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``FilterModule.filters()``'s mapping, each function wrapped under its filter name.

    Args:
        filters: ``{filter name: function}``.

    Returns:
        ``{filter name: wrapper}``; the wrapper returns what the function
        returns and raises ``AnsibleFilterError("<filter name>: <message>")``
        from a ``ValueError`` or ``UsageError`` (see the module docstring).
    """
    return {name: _wrapped(name, func) for name, func in filters.items()}
