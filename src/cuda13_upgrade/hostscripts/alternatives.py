"""Debian's alternatives system as the CUDA toolkit uses it: the link groups and their selections.

Standard library only: the host's side of the snapshot and of the toolkit step reads
them there; ``cuda13_upgrade.stack`` re-exports them for the control node.
"""

from __future__ import annotations

import re

_CUDA_GROUP_RE = re.compile(r"^cuda(-[0-9][0-9.]*)?$")


def parse_alternatives_selections(text: str) -> dict[str, dict[str, str]]:
    """Parse ``update-alternatives --get-selections`` (Debian's alternatives system).

    Each line is ``<name> <auto|manual> <current value>`` (dpkg's
    ``utils/update-alternatives.c`` prints ``%-30s %-8s %s``). Returns
    ``{name: {"status": "auto"|"manual", "value": path}}``. Raises
    ``ValueError`` naming the line when one has another shape or status.
    """
    out: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        if not raw.strip():
            continue
        fields = raw.split()
        if len(fields) != 3 or fields[1] not in ("auto", "manual"):
            raise ValueError(f"not an update-alternatives --get-selections line: {raw!r}")
        out[fields[0]] = {"status": fields[1], "value": fields[2]}
    return out


def cuda_alternatives_groups(text: str, named: list[str] | None = None) -> list[str]:
    """The CUDA toolkit's link groups on a host: the names of
    ``update-alternatives --get-selections`` that are ``cuda`` or
    ``cuda-<release>`` (``cuda-12``, ``cuda-12.8``; NVIDIA's packages register
    ``/usr/local/cuda`` and ``/usr/local/cuda-<major>``), plus the ``named``
    groups that exist there, sorted. Raises ``ValueError`` as
    :func:`parse_alternatives_selections`.
    """
    selections = parse_alternatives_selections(text)
    wanted = {name for name in selections if _CUDA_GROUP_RE.match(name)}
    wanted |= {name for name in (named or []) if name in selections}
    return sorted(wanted)
