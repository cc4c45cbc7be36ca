"""Periodic schedules: what ``@app.periodic`` declares, and the arithmetic of its ticks.

A :class:`Schedule` is a cron expression read by the ``cronsim`` library in an IANA time
zone (no cron parsing here), or a fixed interval of whole milliseconds counted from the
Unix epoch. Rules: every option is checked where the schedule is declared
(``InvalidInput``, nothing registered); ticks are pure functions of an instant the caller
passes in (the store's clock, never this process's); a tick's task id is
:meth:`Schedule.task_id`, ``"::periodic:<name>:<tick, UTC ISO ms>"``, which no keyed submit
can build (key-built ids never begin with ``::``) and no random id equals. docs/runtime.md
("Periodic tasks") says what the scheduler does with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from tasks_core._errors_base import InvalidInput
from tasks_core._json import check_json
from tasks_core.authority import DEFAULT_TENANT, SEPARATOR, System, check_name
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S, Seconds, as_seconds, check_duration
from tasks_core.sizes import check_limit

__all__ = ["MAX_CATCH_UP", "MIN_EVERY_S", "PERIODIC_PRINCIPAL", "TICK_PREFIX", "Schedule"]

MIN_EVERY_S = 1.0
"""The shortest ``every=``, in seconds."""

MAX_CATCH_UP = 1000
"""The largest ``catch_up=``: at most this many missed ticks run after a downtime."""

PERIODIC_PRINCIPAL = System(DEFAULT_TENANT)
"""Who creates the ticks: System of tenant ``default``. A tick's task has no owner (so only
``System`` — or anyone of the tenant under ``visibility="tenant"`` — sees it) and counts
against no owner's ``max_runs_per_owner``."""

TICK_PREFIX = f"{SEPARATOR}periodic:"
"""Every tick id begins with it: ``"::"`` (never the start of a key-built id) and a word
and a colon (never in a random id: :mod:`tasks_core.random_ids`)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_SECOND = timedelta(seconds=1)
_YEAR = timedelta(days=366)
_DST_MARGIN = timedelta(hours=3)
"""cronsim (like Debian cron) treats time zone shifts under three hours specially."""
_CRON_HORIZON = timedelta(days=366 * 51)
"""cronsim looks 50 years ahead for a match; no walk starts further back than this."""


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule of a task.

    Attributes:
        name: the schedule's name (validated like a queue name; unique in the app).
        task: the registered name of the task each tick runs.
        cron: a cron expression (five fields, or six with seconds first; ``cronsim``'s
            syntax), read in ``tz``; or ``None`` with ``every``.
        every: seconds between ticks (at least :data:`MIN_EVERY_S`, rounded to whole
            milliseconds); the ticks are the multiples of it since the Unix epoch.
        tz: the IANA time zone of ``cron`` (default ``UTC``; refused with ``every``).
        queue: the queue of the ticks' tasks.
        input: the fixed keyword arguments of every tick (JSON), or ``None``.
        catch_up: after a downtime, at most this many missed ticks run (the latest ones),
            in ``1..MAX_CATCH_UP``.

    Raises:
        InvalidInput: both or neither of ``cron`` and ``every``, a bad cron expression (or
            one that never matches), an unknown time zone, a bad ``every`` (see
            :func:`~tasks_core.durations.check_duration`), name, queue, input or
            ``catch_up``.
    """

    name: str
    task: str
    cron: str | None = None
    every: Seconds | None = None
    tz: str | None = None
    queue: str = "default"
    input: Mapping[str, Any] | None = field(default=None, compare=False)
    catch_up: int = 1

    def __post_init__(self) -> None:
        check_name(self.name, what="schedule name")
        check_name(self.queue, what="queue")
        if (self.cron is None) == (self.every is None):
            raise InvalidInput("a periodic task takes cron=... or every=..., exactly one")
        check_limit(self.catch_up, maximum=MAX_CATCH_UP, what="catch_up")
        if self.input is not None:
            if not isinstance(self.input, Mapping):
                raise InvalidInput("input must be a dict of the handler's keyword arguments")
            object.__setattr__(self, "input", dict(self.input))
            try:
                check_json(self.input, what="input")
            except ValueError as exc:
                raise InvalidInput(str(exc)) from None
        if self.every is not None:
            if self.tz is not None:
                raise InvalidInput("tz applies to cron schedules; every= counts UTC seconds")
            seconds = check_duration(self.every, "every", low=MIN_EVERY_S, high=MAX_WAIT_S)
            object.__setattr__(self, "every", seconds)
            return
        zone = _zone(self.tz)
        if not isinstance(self.cron, str):
            raise InvalidInput("cron must be a string such as '*/5 * * * *'")
        try:
            next(CronSim(self.cron, datetime.now(zone)))
        except (CronSimError, ValueError) as exc:
            raise InvalidInput(f"cron {self.cron!r} is not a valid expression: {exc}") from None
        except StopIteration:
            raise InvalidInput(f"cron {self.cron!r} matches no instant in 50 years") from None

    # -- ticks ---------------------------------------------------------------------------

    @property
    def period(self) -> timedelta | None:
        """The interval of an ``every=`` schedule, whole milliseconds (``None``: cron)."""
        if self.every is None:
            return None
        return timedelta(milliseconds=max(1, round(as_seconds(self.every) * 1000)))

    @property
    def zone(self) -> ZoneInfo:
        """The time zone of the cron expression."""
        return _zone(self.tz)

    def latest(self, now: datetime) -> datetime | None:
        """The latest tick at or before ``now`` (aware UTC); ``None`` when there is none
        (a cron expression with no match in the 50 years before ``now``)."""
        ticks = self.recent(now, 1)
        return ticks[0] if ticks else None

    def recent(self, now: datetime, count: int) -> list[datetime]:
        """Up to ``count`` ticks at or before ``now``, the latest first (aware UTC)."""
        if count < 1:
            return []
        period = self.period
        if period is not None:
            last = (now - _EPOCH) // period
            return [_EPOCH + (last - i) * period for i in range(count)]
        # cronsim's reverse walk loses a start's DST fold, so it only sizes the span;
        # the ticks are its forward walk's, which agrees with itself from any start.
        start = now.astimezone(self.zone).replace(microsecond=0) + _SECOND
        guess = list(islice(_cron(self, start, reverse=True), count))
        span = (now - guess[-1] if len(guess) == count else _YEAR) + _DST_MARGIN
        while True:
            ticks = list(self._forward(now - span, now))
            if len(ticks) >= count or span > _CRON_HORIZON:
                return ticks[::-1][:count]
            span *= 2

    def following(self, now: datetime) -> datetime | None:
        """The first tick after ``now`` (aware UTC); ``None`` when there is none in 50
        years."""
        period = self.period
        if period is not None:
            return _EPOCH + ((now - _EPOCH) // period + 1) * period
        return next(self._forward(now, None), None)

    def task_id(self, tick: datetime) -> str:
        """The id of ``tick``'s task: :data:`TICK_PREFIX`, the name, ``:``, the tick as a
        UTC ISO instant with milliseconds (``2030-01-01T09:00:00.000Z``)."""
        return f"{TICK_PREFIX}{self.name}:{_iso(tick)}"

    def tick_of(self, task_id: str) -> datetime | None:
        """The tick whose task id is ``task_id`` (a handler reads its own with
        ``app.schedules[name].tick_of(ctx.task_id)``); ``None`` for any other id."""
        prefix = f"{TICK_PREFIX}{self.name}:"
        if not task_id.startswith(prefix) or not task_id.endswith("Z"):
            return None
        try:
            tick = datetime.strptime(task_id[len(prefix):], "%Y-%m-%dT%H:%M:%S.%fZ")
        except ValueError:
            return None
        tick = tick.replace(tzinfo=UTC)
        return tick if self.task_id(tick) == task_id else None

    def retention_for(self, tick: datetime, retention: float | None) -> float | None:
        """The retention of ``tick``'s task: the task's own (``retention``), but at least
        until ``catch_up + 1`` ticks after it, at most ``MAX_KEEP_S`` — so a finished tick
        outlives the ticks a restarted scheduler reads back. ``None`` (kept until
        deleted) stays ``None``."""
        if retention is None:
            return None
        period = self.period
        if period is not None:
            needed = (self.catch_up + 1) * period.total_seconds()
        else:
            later = list(islice(self._forward(tick, None), self.catch_up + 1))
            short = len(later) <= self.catch_up
            needed = MAX_KEEP_S if short else (later[-1] - tick).total_seconds()
        return float(min(MAX_KEEP_S, max(retention, math.ceil(needed))))

    def _forward(self, after: datetime, until: datetime | None) -> Iterator[datetime]:
        """The cron ticks after ``after`` up to ``until`` (``None``: no end), in order."""
        for tick in _cron(self, after.astimezone(self.zone), reverse=False):
            if until is not None and tick > until:
                return
            if tick > after:  # (a start in a DST fold is read an hour early)
                yield tick

    def describe(self) -> str:
        """``cron 0 9 * * mon-fri (Europe/Paris)`` or ``every 300s`` (the interval as
        :attr:`period` rounds it, in digits)."""
        if self.period is not None:
            seconds = self.period.total_seconds()
            return f"every {int(seconds) if seconds.is_integer() else seconds}s"
        return f"cron {self.cron} ({self.tz or 'UTC'})"


def _zone(name: str | None) -> ZoneInfo:
    """The ``ZoneInfo`` of an IANA name (``None``: UTC).

    Raises:
        InvalidInput: not a string, or no such zone.
    """
    if name is None:
        return ZoneInfo("UTC")
    if not isinstance(name, str) or not name:
        raise InvalidInput("tz must be an IANA time zone name such as 'Europe/Paris'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(f"tz {name!r} is not a known IANA time zone") from None


def _cron(schedule: Schedule, start: datetime, *, reverse: bool) -> Iterator[datetime]:
    """cronsim's ticks from ``start`` (exclusive), as aware UTC instants."""
    for tick in CronSim(schedule.cron or "", start, reverse=reverse):
        yield tick.astimezone(UTC)


def _iso(tick: datetime) -> str:
    instant = tick.astimezone(UTC)
    return instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"
