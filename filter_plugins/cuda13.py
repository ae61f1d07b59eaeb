"""The filters the playbooks use: ``cuda13_failure_message`` and ``cuda13_deprecated_alias``.

Each filter is documented beside this file (``cuda13_failure_message.yml``,
``cuda13_deprecated_alias.yml``), as ansible-core and community.general document
a plugin file that holds several filters: ``ansible-doc -t filter
cuda13_failure_message`` reads it. The rules live in the ``cuda13_upgrade``
package (``pip install -e .``); a filter checks the types of what it is given
and calls it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from cuda13_upgrade import hostresult
except ImportError as exc:  # Ansible shows this message in its "Skipping plugin" warning
    checkout = Path(__file__).resolve().parents[1]
    raise ImportError(
        f"{Path(__file__).name} needs the cuda13_upgrade package, which the Python that runs "
        f"Ansible ({sys.executable}) cannot import ({exc}): install it there, "
        f"{sys.executable} -m pip install -e {checkout}"
    ) from exc


def _type_error(name: str, what: str, expected: str, value: Any) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {what} must be {expected}, got {type(value).__name__}: {value!r}")


def cuda13_failure_message(result: Any) -> str:
    """The message a host that did not keep the upgrade ends with (hostresult.failure_message).

    ``result``: the host's result record (``cuda13_result``). Raises AnsibleFilterError
    naming the value when it is not a dict.
    """
    if not isinstance(result, Mapping):
        raise _type_error(
            "cuda13_failure_message", "input", "the host's result record (cuda13_result, a dict)", result
        )
    return hostresult.failure_message(result)


def cuda13_deprecated_alias(value: Any, old: Any, new: Any) -> Any:
    """``value`` as it is, with a deprecation warning that ``old`` is read (use ``new``).

    The options record was named ``nvidia_driver_check_options`` before it was
    ``cuda13_options``; the old name keeps working for one release
    (roles/upgrade_host/vars/main.yml) and says so when something reads it.
    Raises AnsibleFilterError naming ``old`` or ``new`` when it is not a name.
    """
    for what, name in (("old", old), ("new", new)):
        if not isinstance(name, str) or not name:
            raise _type_error("cuda13_deprecated_alias", what, "a variable name", name)
    from ansible.utils.display import Display

    Display().deprecated(
        msg=f"the variable {old} is the options record's former name",
        version="0.3.0",
        help_text=f"Read {new} instead; {old} goes in cuda13-upgrade 0.3.0.",
    )
    return value


class FilterModule:
    """The cuda13_* filters the playbooks use."""

    def filters(self) -> dict[str, Any]:
        return {
            "cuda13_failure_message": cuda13_failure_message,
            "cuda13_deprecated_alias": cuda13_deprecated_alias,
        }
