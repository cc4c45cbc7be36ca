"""Clocks. Every instant in a store comes from the store's clock; tests inject one.

A store's authoritative time is its own (database time for SQL, server time for Mongo).
Every store also accepts ``clock=`` — any object with ``now() -> datetime`` (timezone-aware,
UTC) — and then uses it instead, so tests are deterministic.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock", "utc"]


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime (naive values are taken as UTC)."""
    if value.tzinfo is UTC:  # (what drivers and this module hand out: nothing to do)
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@runtime_checkable
class Clock(Protocol):
    """A source of aware UTC instants."""

    def now(self) -> datetime:
        """Return the current instant (aware, UTC)."""
        ...


class SystemClock:
    """The process wall clock."""

    def now(self) -> datetime:
        """Return the current wall-clock instant."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to; thread-safe.

    It starts on a whole second and moves in whole milliseconds so that stores with
    millisecond precision (MongoDB) read back exactly what they were given.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start) if start else datetime(2030, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the current manual instant."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds`` (rounded to milliseconds) and return the new instant.

        Raises:
            ValueError: if ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError("a clock never goes back")
        with self._lock:
            self._now += timedelta(milliseconds=round(seconds * 1000))
            return self._now
