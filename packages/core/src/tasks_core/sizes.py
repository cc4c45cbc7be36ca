"""Sizes: the one check of every count and size the runtime is given.

Rule: a size is an integer (any ``numbers.Integral`` — an ``IntEnum``, a NumPy integer —
never a ``bool``, a float or a string), within its option's bounds, and is kept as a plain
``int``. Every size of the public API, the worker, a store call and the CLI passes through
:func:`check_limit` where it is given; a count the API hands to a model
(``RetryPolicy.fixed(attempts=…)``, ``max_deliveries``) through :func:`integral` first, the
model keeping its bounds. The stored models take strict ints only: a validator there would
run at every decode of every task. A refusal is :class:`~tasks_core.errors.InvalidInput`
naming the option, its bounds and the value.
"""

from __future__ import annotations

import numbers
import reprlib
from typing import TypeVar

from tasks_core._errors_base import InvalidInput

__all__ = ["MAX_PORT", "check_limit", "integral"]

_T = TypeVar("_T")

MAX_PORT = 65535
"""The largest TCP port (a port is a size: ``check_limit(port, minimum=0, maximum=MAX_PORT)``)."""


def integral(value: _T) -> _T | int:
    """``value`` as a plain ``int`` when it is an integer (not a bool); anything else as it
    is, for the check that follows to refuse."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return value
    return int(value)


def check_limit(
    limit: object, *, maximum: int | None = None, minimum: int = 1, what: str = "limit"
) -> int:
    """Validate a size — a count of tasks, runs or processes (``claim_next``: 1..1000;
    ``reap``: at least 1; the CLI's ``--limit``, ``--scan``…), a priority: an integer
    (see the module docstring), at least ``minimum`` (1 unless given) and at most
    ``maximum`` when given, returned as a plain ``int``. The message names ``what`` and
    shows the value as given.

    Raises:
        InvalidInput: not an integer in range.
    """
    value = integral(limit)
    if (not isinstance(value, int) or isinstance(value, bool) or value < minimum
            or (maximum is not None and value > maximum)):
        span = (f"an integer in {minimum}..{maximum}" if maximum is not None
                else "a positive integer" if minimum == 1 else f"an integer from {minimum}")
        raise InvalidInput(f"{what} must be {span}, not {_shown(limit)}")
    return value


def _shown(value: object) -> str:
    """A refused value, never rounded: its ``repr``, a long one elided in the middle
    (``...``), an integer past Python's digit limit described instead."""
    try:
        return reprlib.repr(value)
    except ValueError:
        return "an integer too long to print"
