"""Numbers from option values and records: one reading of "a finite number" for the whole project.

YAML and JSON give a number as an int, a float or a string; a bool is not one (``True`` would read
as 1), and neither is a value no float holds (``1000…0`` with 400 digits, which YAML reads as an
int) or one that is not finite (``.inf``, ``.nan``, JSON's ``1e999``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_number"]


def finite_number(value: Any, *, strings: bool = True) -> float | None:
    """``value`` as a finite float, or None: an int or float (not a bool), or with ``strings`` a
    string that :func:`float` reads (blanks around it allowed: ``" 30 "``). None for anything
    else, for an int too large for a float, and for infinities and NaN."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif strings and isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None
