"""Whether a failed step failed for want of disk space.

pip, apt/dpkg and git report a full filesystem with the C library's text for
``ENOSPC``, ``"No space left on device"`` (``strerror(28)`` on glibc; pip
prints ``ERROR: Could not install packages due to an OSError: [Errno 28] No
space left on device``, as in pypa/pip#5816), or for ``EDQUOT``, ``"Disk
quota exceeded"``. Some steps lose that text: ``python -m venv`` runs
ensurepip with its output captured and says only that ensurepip "returned
non-zero exit status 1". So the rule also looks at the free space left on the
filesystems the step writes: one that is (nearly) full after the failure
explains it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any

#: Texts of a full filesystem or quota (strerror of ENOSPC and EDQUOT).
NO_SPACE_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), "[Errno 28]")

#: A filesystem with less than this many bytes free is taken as full (1 MiB).
FULL_BELOW_BYTES = 1 << 20


def parse_df_avail(text: str, paths: list[str]) -> dict[str, int | None]:
    """Parse ``df --output=avail --block-size=1 PATH...``: a header line, then
    one line per path in the order given. Returns ``{path: free bytes}``
    (None for a path df printed no number for). Raises ``ValueError`` when
    the text is not df's answer for that many paths."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != "Avail":
        raise ValueError(f"not df --output=avail output: {text.strip()[:200]!r}")
    values = lines[1:]
    if len(values) != len(paths):
        raise ValueError(f"df printed {len(values)} values for {len(paths)} paths: {text.strip()[:200]!r}")
    return {path: int(v) if v.isdigit() else None for path, v in zip(paths, values, strict=True)}


def diagnose_no_space(
    text: str,
    free_bytes: Mapping[str, int | None] | None = None,
    *,
    full_below: int = FULL_BELOW_BYTES,
) -> dict[str, Any] | None:
    """Diagnose a failure for want of disk space.

    ``text``: the failed task's message and output. ``free_bytes``: bytes free
    after the failure on the filesystem of each path the step writes (e.g.
    the new venv's parent), as :func:`parse_df_avail` returns them.

    Returns None when nothing points at space; else ``{"cause", "remedy",
    "full_paths"}``: the cause in words (naming the text seen or the full
    paths), the remedy, and the paths whose filesystem has less than
    ``full_below`` bytes free.
    """
    free_bytes = free_bytes or {}
    full = sorted(p for p, free in free_bytes.items() if free is not None and free < full_below)
    seen = next((t for t in NO_SPACE_TEXTS if t in (text or "")), None)
    if seen is None and not full:
        return None
    where = f" (full: {', '.join(full)})" if full else ""
    said = f"the step reported '{seen}'" if seen else "the filesystem it writes is full"
    return {
        "cause": f"the step ran out of disk space: {said}{where}",
        "remedy": (
            "free space on the filesystem of the new venv and SGLang tree (or point cuda13_new_venv "
            "and cuda13_new_sglang_src at a larger one; the preflight checks "
            "nvidia_driver_check_required_disk_gib), then run again"
        ),
        "full_paths": full,
    }
