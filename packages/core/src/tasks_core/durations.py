"""Durations: the one check of every duration and interval the runtime is given.

Rule: a duration is a real number of seconds (never a ``bool`` or a string) or a
``timedelta`` (:data:`Seconds`), finite and within its option's bounds, kept as a float.
Every option of the public API, the worker and the CLI passes through
:func:`check_duration` where it is given, before anything starts or is written; a refusal
is :class:`~tasks_core.errors.InvalidInput` naming the option and its bounds. Bounds: a
lease at most :data:`tasks_core.rules.MAX_LEASE_S`; timeouts, retry delays and waits at
most :data:`MAX_WAIT_S`; ``ttl`` and ``retention`` at most :data:`MAX_KEEP_S`; a repeated
wait at least :data:`MIN_INTERVAL_S`, so no setting makes a busy loop. An instant
(``run_at``) passes :func:`check_instant`: an aware datetime within :data:`MAX_KEEP_S`.
"""

from __future__ import annotations

import math
import numbers
from datetime import UTC, datetime, timedelta
from typing import Literal, TypeAlias, overload

from tasks_core._errors_base import InvalidInput

__all__ = ["MAX_BATCH_WINDOW_S", "MAX_KEEP_S", "MAX_WAIT_S", "MIN_INTERVAL_S", "Seconds",
           "as_seconds", "check_duration", "check_instant", "check_wait_timeout", "parse_instant"]

MAX_WAIT_S = 366 * 86400
"""The longest timeout, retry delay, wait or interval, in seconds (a leap year)."""

MAX_KEEP_S = 10 * MAX_WAIT_S
"""The longest ``ttl`` or ``retention``, in seconds (ten leap years)."""

MIN_INTERVAL_S = 0.001
"""The shortest interval of a wait the runtime repeats (a poll, a reap, a progress write,
a lease and so its heartbeats), in seconds."""

MAX_BATCH_WINDOW_S = 1.0
"""The longest ``batch_window`` of a worker, in seconds."""

Seconds: TypeAlias = float | numbers.Real | timedelta
"""A duration as the public API takes it: a real number of seconds (an ``int``, a
``float``, a ``Fraction``…), or a ``timedelta`` (``delay=30``,
``delay=timedelta(minutes=5)``)."""


@overload
def as_seconds(value: Seconds) -> float: ...


@overload
def as_seconds(value: None) -> None: ...


def as_seconds(value: Seconds | None) -> float | None:
    """A duration as a number of seconds: a ``timedelta``'s total seconds, another real
    number as a ``float``, anything else (a ``bool`` too) as it is — unchecked:
    :func:`check_duration` checks it where it is given."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    return float(value)


@overload
def check_duration(value: object, what: str, *, high: float, low: float = 0.0,
                   allow_zero: bool = False, allow_none: Literal[False] = False) -> float: ...


@overload
def check_duration(value: object, what: str, *, high: float, low: float = 0.0,
                   allow_zero: bool = False, allow_none: Literal[True]) -> float | None: ...


def check_duration(value: object, what: str, *, high: float, low: float = 0.0,
                   allow_zero: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as seconds (a ``float``), once it is a real number or a ``timedelta``,
    finite and in range: at least ``low`` and at most ``high`` — and, where ``low`` is
    ``0``, above it unless ``allow_zero``. ``None`` passes only with ``allow_none``.

    Args:
        value: what the caller gave.
        what: the option's name, as the caller knows it (``"lease_for"``, ``"--lease"``).
        high: the largest value allowed.
        low: the smallest value allowed.
        allow_zero: ``0`` is allowed (with ``low`` at ``0``).
        allow_none: ``None`` is allowed (and returned).

    Raises:
        InvalidInput: naming ``what`` and its bounds.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        value = as_seconds(value)
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidInput(f"{what} must be a number of seconds (or a timedelta) in "
                           f"{_span(low, high, allow_zero)}, not "
                           f"{'None' if value is None else 'a ' + type(value).__name__}")
    try:
        seconds = float(value)
    except (OverflowError, ValueError, TypeError):
        seconds = math.nan
    if not math.isfinite(seconds):
        raise InvalidInput(f"{what} must be a finite number of seconds in "
                           f"{_span(low, high, allow_zero)}, not {_given(value)}")
    if not (low <= seconds <= high) or (seconds == 0 and low == 0 and not allow_zero):
        raise InvalidInput(f"{what} must be in {_span(low, high, allow_zero)} seconds, not "
                           f"{_given(value)}")
    return seconds or 0.0  # -0.0 is 0


def _span(low: float, high: float, allow_zero: bool) -> str:
    """The interval in the usual notation: ``(0, 60]``, ``[0, 60]``, ``[0.001, 60]``."""
    opening = "(" if low == 0 and not allow_zero else "["
    return f"{opening}{_number(low)}, {_number(high)}]"


def _number(seconds: float) -> str:
    """A bound: a whole number as digits (``31622400``), else its shortest exact spelling
    (``0.001``)."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def _given(value: object) -> str:
    """A refused value as the caller gave it, never rounded (so it cannot read as the
    bound it missed): an integer as digits (``31622401``), a float as its shortest exact
    spelling (``31622401.0``, ``1e+308``, ``nan``, ``inf``), another real number as
    ``str`` (``1/2``); an integer past Python's digit limit described instead."""
    try:
        if isinstance(value, numbers.Integral):
            return str(int(value))
        if isinstance(value, float):
            return repr(float(value))
        return str(value)
    except ValueError:
        return "an integer too long to print"


def check_wait_timeout(timeout: object) -> float:
    """A store wait's ``timeout`` (``wait_for_work``, ``wait_for_cancels``): seconds in
    ``[0, MAX_WAIT_S]``, zero included — the one check every store makes.

    Raises:
        InvalidInput: anything else (a bool, a string, NaN, an infinity, a negative).
    """
    return check_duration(timeout, "timeout", high=MAX_WAIT_S, allow_zero=True)


@overload
def check_instant(value: object, what: str, *,
                  allow_none: Literal[False] = False) -> datetime: ...


@overload
def check_instant(value: object, what: str, *, allow_none: Literal[True]) -> datetime | None: ...


def check_instant(value: object, what: str, *, allow_none: bool = False) -> datetime | None:
    """``value`` as an aware UTC datetime, once it is a ``datetime`` with a time zone and
    within :data:`MAX_KEEP_S` of this process's clock (a sanity bound: the store, not the
    caller, decides when the instant has come). ``None`` passes only with ``allow_none``.

    Raises:
        InvalidInput: naming ``what``: not a datetime, naive, or out of range.
    """
    if value is None and allow_none:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{what} must be a datetime with a time zone, not "
                           f"{'None' if value is None else 'a ' + type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be an aware datetime (with a time zone), not naive")
    try:
        instant = value.astimezone(UTC)
        far = abs(instant - datetime.now(UTC)) > timedelta(seconds=MAX_KEEP_S)
    except (OverflowError, ValueError):
        far = True
    if far:
        raise InvalidInput(f"{what} must lie within {MAX_KEEP_S // 86400} days of now, "
                           f"not {value.isoformat()}")
    return instant


def parse_instant(text: str, what: str) -> datetime:
    """An ISO 8601 instant with a time zone written on a command line
    (``2026-12-24T09:00Z``, ``2026-12-24T10:00+01:00``; RFC 3339's lowercase ``z`` too),
    checked by :func:`check_instant`.

    Raises:
        InvalidInput: naming ``what``: not ISO 8601, a date or time that does not exist
            (``2027-02-30``, ``25:00``: said so), without a time zone, or out of range.
    """
    try:
        value = datetime.fromisoformat(text[:-1] + "Z" if text.endswith("z") else text)
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        if isinstance(exc, ValueError) and not reason.startswith("Invalid isoformat"):
            raise InvalidInput(f"{what} is not a real instant ({reason}): {text!r}") from None
        raise InvalidInput(f"{what} must be an ISO 8601 instant with a time zone, e.g. "
                           f"2026-12-24T09:00Z, not {text!r}") from None
    return check_instant(value, what)
