"""Sizes: the one check of every count and size the runtime is given.

Rule: a size is an integer (any ``numbers.Integral`` — an ``IntEnum``, a NumPy integer —
never a ``bool``, a float or a string), within its option's bounds, and is kept as a plain
``int``. Every size of the public API, the worker, a store call and the CLI passes through
:func:`check_limit` where it is given (``attempts`` and ``max_deliveries`` by
:func:`check_attempts` and :func:`check_deliveries`), the models keeping the same bounds as
strict ints: a validator there would run at every decode of every task. A refusal is
:class:`~tasks_core.errors.InvalidInput` naming the option, its bounds and the value.
"""

from __future__ import annotations

import numbers
import reprlib
from typing import TypeVar

from tasks_core._errors_base import InvalidInput

__all__ = ["MAX_ATTEMPTS", "MAX_DELIVERIES", "MAX_PORT", "check_attempts", "check_deliveries",
           "check_limit", "integral"]

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
    (``...``), a float called one (``1e3`` on a command line reads ``1000.0``: not an
    integer, though it looks one), an integer past Python's digit limit or a bool (JSON's
    ``true`` is Python's ``True``) described instead, as :mod:`tasks_core.durations` does."""
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, float):
        return f"the float {value!r}"
    try:
        return reprlib.repr(value)
    except ValueError:
        return "an integer too long to print"


MAX_ATTEMPTS = 10_000
"""The most runs a retry policy allows (``attempts``)."""

MAX_DELIVERIES = 100_000
"""The largest ``max_deliveries``."""


def check_attempts(attempts: object) -> int:
    """A retry policy's ``attempts`` given to ``RetryPolicy.fixed``/``exponential``: a
    count in ``1..MAX_ATTEMPTS`` (:func:`~tasks_core.sizes.check_limit`).

    Raises:
        InvalidInput: ``attempts must be an integer in 1..10000, not …``.
    """
    return check_limit(attempts, maximum=MAX_ATTEMPTS, what="attempts")


def check_deliveries(max_deliveries: object) -> int:
    """A ``max_deliveries`` given to ``@app.task`` or ``submit``: a count in
    ``1..MAX_DELIVERIES`` (:func:`~tasks_core.sizes.check_limit`).

    Raises:
        InvalidInput: ``max_deliveries must be an integer in 1..100000, not …``.
    """
    return check_limit(max_deliveries, maximum=MAX_DELIVERIES, what="max_deliveries")
