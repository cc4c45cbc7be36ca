"""The statements of the PostgreSQL hot path (:mod:`tasks_store_sql.postgres`) and what
they are built from, compiled once per namespace for asyncpg.

Each is a SQLAlchemy Core construct — no SQL is built from strings — compiled with the
asyncpg dialect into ``$n`` SQL and the order of its named parameters
(:class:`Statement`); asyncpg prepares it once per connection. The rules they keep: rows
locked before the clock is read (:func:`store_clock` in the projection over them), writes
guarded by ``row_version``, instants spelled as the codec spells them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.sql.compiler import SQLCompiler
from tasks_core.models import TaskStatus

from tasks_store_sql._candidates import claimable_rows
from tasks_store_sql._schema import Tables
from tasks_store_sql._stored import STORED_COLUMNS, stored_columns

__all__ = [
    "EVENT_COLUMNS",
    "MEMBER_COLUMNS",
    "MILLISECOND",
    "ROW_COLUMNS",
    "Statement",
    "Statements",
    "later",
    "many_queues",
    "oldest_claimable",
    "one_queue",
    "store_clock",
]

_DIALECT = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
_TEXT = postgresql.ARRAY(sa.Text)
_TIMESTAMP = postgresql.TIMESTAMP(timezone=True)
ROW_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("tenant", sa.Text()), ("queue", sa.Text()), ("status", sa.Text()),
    ("revision", sa.Integer()), ("run_id", sa.Text()), ("claim_token", sa.Text()),
    ("claim_generation", sa.Integer()), ("claim_expires_at", _TIMESTAMP),
    ("retry_at", _TIMESTAMP), ("created_at", _TIMESTAMP), ("run_at", _TIMESTAMP),
    ("available_at", _TIMESTAMP), ("neg_priority", sa.SmallInteger()),
    ("updated_at", _TIMESTAMP),
    ("expires_at", _TIMESTAMP), ("snapshot", sa.Text()), ("max_deliveries", sa.Integer()),
    ("final_event", sa.Text()),
    ("progress", sa.Text()), ("result", sa.Text()), ("error", sa.Text()),
    ("cancel_reason", sa.Text()), ("deliveries", sa.Integer()), ("input_requests", sa.Text()),
    ("claim_worker", sa.Text()), ("claim_until", _TIMESTAMP), ("claim_flags", sa.SmallInteger()),
    ("lease_generation", sa.Integer()), ("started_at", _TIMESTAMP), ("finished_at", _TIMESTAMP),
    ("owner", sa.Text()),
)
"""The projection columns (``_codec.projection``) and their types."""
EVENT_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("task_id", sa.Text()), ("event_id", sa.Text()), ("revision", sa.Integer()),
    ("kind", sa.Text()), ("committed_at", _TIMESTAMP), ("record", sa.Text()),
)
MEMBER_COLUMNS = ("tenant", "user_id", "task_id", "role")


@dataclass(frozen=True)
class Statement:
    """A statement compiled for asyncpg: its SQL and the order of its parameters."""

    sql: str
    order: tuple[str, ...]
    defaults: dict[str, Any]

    @classmethod
    def of(cls, statement: sa.ClauseElement) -> Statement:
        """Compile ``statement`` (named bind parameters become ``$n``)."""
        compiled = statement.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        return cls(str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params))

    def args(self, **values: Any) -> list[Any]:
        """The positional arguments for ``values`` (literals keep their compiled value)."""
        return [values[name] if name in values else self.defaults[name] for name in self.order]


SEPARATOR = "\x1f"
"""What joins the elements of a list parameter (:func:`joined`): a control character, which
no task id, event id, lease token or JSON text holds."""
NULL_ELEMENT = "null"
"""How a list parameter of a nullable column spells ``None``."""


def joined(
    name: str, type_: sa.types.TypeEngine[Any], *, nullable: bool = False
) -> sa.ColumnElement[Any]:
    """List parameter ``name`` as an array of ``type_``: sent as one text, its elements
    joined by :data:`SEPARATOR` (:func:`join_list`), split by the database. *Why:*
    asyncpg checks every element of an array parameter against three abstract base
    classes; one text costs a join. Elements are never empty; ``nullable`` reads
    :data:`NULL_ELEMENT` as ``NULL``."""
    text = sa.bindparam(name, type_=sa.Text)
    separator = sa.bindparam("separator", SEPARATOR, type_=sa.Text)
    if nullable:
        parts = sa.func.string_to_array(
            text, separator, sa.bindparam("null_element", NULL_ELEMENT, type_=sa.Text))
    else:
        parts = sa.func.string_to_array(text, separator)
    return sa.cast(parts, postgresql.ARRAY(type_))


def join_list(values: Iterable[str | int | datetime | None]) -> str:
    """The text of a list parameter (:func:`joined`): strings as they are (none may hold
    :data:`SEPARATOR`), integers in decimal, instants in ISO 8601 with their offset,
    ``None`` as :data:`NULL_ELEMENT`."""
    return SEPARATOR.join(
        NULL_ELEMENT if value is None
        else value.isoformat() if isinstance(value, datetime)
        else str(value)
        for value in values
    )


def _array(name: str, type_: sa.types.TypeEngine[Any]) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _now_param() -> sa.BindParameter[Any]:
    """``now``: the injected clock's instant, or ``NULL`` for the database's."""
    return sa.bindparam("now", type_=postgresql.TIMESTAMP(timezone=True))


def store_clock() -> sa.ColumnElement[Any]:
    """The store clock: ``now``, else ``clock_timestamp()`` (read where it is evaluated —
    in the projection over locked rows, after the locks)."""
    return sa.func.coalesce(_now_param(), sa.func.clock_timestamp())


def one_queue(t: sa.Table) -> sa.ColumnElement[bool]:
    """The row is in queue ``queue``."""
    return t.c.queue == sa.bindparam("queue")


def many_queues(t: sa.Table) -> sa.ColumnElement[bool]:
    """The row is in one of ``queues``."""
    return t.c.queue == sa.any_(_array("queues", _TEXT))


def oldest_claimable(
    columns: list[sa.ColumnElement[Any]], t: sa.Table, queue: sa.ColumnElement[bool],
    *where: sa.ColumnElement[bool],
) -> sa.Subquery:
    """``columns`` (with ``neg_priority``, ``available_at`` and ``id``) of the ``limit``
    first claimable rows of ``queue`` in claim order (as of the statement's start: the
    caller decides after the lock), locked, skipping rows other sessions hold
    (:func:`tasks_store_sql._candidates.claimable_rows`)."""
    start = sa.func.coalesce(_now_param(), sa.func.now())
    limit = sa.bindparam("limit", type_=sa.Integer)
    rows = claimable_rows(columns, t, [queue, *where], start, limit, lock=True)
    return (
        sa.select(rows)
        .order_by(rows.c.neg_priority, rows.c.available_at, rows.c.id)
        .limit(limit)
        .subquery("o")
    )


class Statements:
    """The hot-path statements of one namespace (see the module docstring), each built
    and compiled when first used: a store that a command opens for one call compiles
    what that call runs, not all of them."""

    def __init__(self, tables: Tables, channel: str, cancel_channel: str) -> None:
        self.tables = tables
        self.channel = channel
        self.cancel_channel = cancel_channel

    @functools.cached_property
    def lock(self) -> Statement:
        """Lock rows ``ids`` (id order); ``now``; their history entries of ``event_ids``
        (with the row's ``final_event``)."""
        t, ev = self.tables.tasks, self.tables.events
        ids, event_ids = _array("ids", _TEXT), _array("event_ids", _TEXT)
        locked = (
            sa.select(t.c.id, *stored_columns(t), t.c.claim_token, t.c.row_version,
                      t.c.final_event)
            .where(t.c.id == sa.any_(ids))
            .order_by(t.c.id)
            .with_for_update()
            .subquery("l")
        )
        seen = t.alias("s")
        before = sa.select(seen.c.row_version).where(seen.c.id == locked.c.id)
        history = (
            sa.select(ev.c.event_id, ev.c.record)
            .where(ev.c.task_id == locked.c.id, ev.c.event_id == sa.any_(event_ids))
            .offset(sa.literal_column("0"))
            .lateral("h")
        )  # OFFSET 0 keeps the subquery per locked row (by primary key) even in a plan
        # made while the events table was small: no plan reads other tasks' history.
        return Statement.of(
            sa.select(
                locked.c.id, *(locked.c[name] for name in STORED_COLUMNS),
                locked.c.claim_token, locked.c.row_version,
                before.scalar_subquery().label("seen"), store_clock().label("now"),
                history.c.event_id, history.c.record, locked.c.final_event,
            ).select_from(locked.outerjoin(history, sa.true()))
        )

    @functools.cached_property
    def read(self) -> Statement:
        """Task ``id``'s stored columns and lease token, unlocked, and ``now``."""
        t = self.tables.tasks
        return Statement.of(
            sa.select(*stored_columns(t), t.c.claim_token, store_clock().label("now"))
            .where(t.c.id == sa.bindparam("id", type_=sa.Text))
        )

    @functools.cached_property
    def events(self) -> Statement:
        """The history entries of ``event_ids`` of tasks ``ids`` (read after the locks)."""
        ev = self.tables.events
        return Statement.of(
            sa.select(ev.c.task_id, ev.c.event_id, ev.c.record).where(
                ev.c.task_id == sa.any_(_array("ids", _TEXT)),
                ev.c.event_id == sa.any_(_array("event_ids", _TEXT)),
            )
        )

    @functools.cached_property
    def cancelled(self) -> Statement:
        """Which of tasks ``ids`` are ``cancelled`` (a cancel wait on a new listening
        connection: :mod:`tasks_store_sql._wakeups`)."""
        t = self.tables.tasks
        return Statement.of(
            sa.select(t.c.id).where(
                t.c.id == sa.any_(_array("ids", _TEXT)),
                t.c.status == sa.bindparam("status", TaskStatus.CANCELLED.value,
                                           type_=sa.Text),
            )
        )

    @functools.cached_property
    def write(self) -> Statement:
        """Write rows, events and members and wake queues: see :meth:`_write`."""
        return Statement.of(self._write(self.tables, self.channel))

    @functools.cached_property
    def write_cancelling(self) -> Statement:
        """:attr:`write`, and notify the cancel channel of each of ``cancelled`` (a
        variant: the writes without a cancel — nearly all — run :attr:`write` as it was)."""
        return Statement.of(self._write(self.tables, self.channel, self.cancel_channel))

    @staticmethod
    def _write(
        tables: Tables, channel: str, cancel_channel: str | None = None
    ) -> sa.Select[Any]:
        """Write the rows of arrays ``ids``, ``versions`` (the row version they were read
        at) and one per column of :data:`ROW_COLUMNS` where their version is unchanged,
        record the events of arrays ``e_…`` (:data:`EVENT_COLUMNS`) and the members
        (JSON ``members``) of the rows written, and wake the queues ``wake``; with
        ``cancel_channel``, notify it of each task id of array ``cancelled`` as well.

        Arrays, not JSON, for the rows and events: a JSON document of them costs the
        worker more (encoding every instant, escaping every snapshot) than the driver's
        checks of array elements (bench/LOG.md)."""
        t, ev = tables.tasks, tables.events
        rows = sa.func.unnest(
            _array("ids", _TEXT), _array("versions", postgresql.ARRAY(sa.Integer)),
            *(_array(name, postgresql.ARRAY(type_)) for name, type_ in ROW_COLUMNS),
        ).table_valued("id", "version", *(name for name, _ in ROW_COLUMNS)).render_derived()
        updated = (
            sa.update(t)
            .where(t.c.id == rows.c.id, t.c.row_version == rows.c.version)
            .values(row_version=t.c.row_version + 1,
                    **{name: rows.c[name] for name, _ in ROW_COLUMNS})
            .returning(t.c.id)
            .cte("u")
        )
        written = sa.select(updated.c.id)
        events = sa.func.unnest(
            *(_array("e_" + name, postgresql.ARRAY(type_)) for name, type_ in EVENT_COLUMNS)
        ).table_valued(*(name for name, _ in EVENT_COLUMNS)).render_derived()
        recorded = (
            sa.insert(ev)
            .from_select(
                [name for name, _ in EVENT_COLUMNS],
                sa.select(*(events.c[name] for name, _ in EVENT_COLUMNS)).where(
                    events.c.task_id.in_(written)
                ),
            )
            .returning(ev.c.task_id)
            .cte("e")
        )
        queues = sa.func.unnest(_array("wake", _TEXT)).table_valued("queue").render_derived()
        notices = [_woken(channel, queues.c.queue)]
        if cancel_channel is not None:
            ids = sa.func.unnest(_array("cancelled", _TEXT)).table_valued("id").render_derived()
            notices.append(_woken(cancel_channel, ids.c.id, name="cancel_channel"))
        return sa.select(*_counts(updated, recorded, _granted(tables, written), *notices))


MILLISECOND = timedelta(milliseconds=1)


def later(
    instant: sa.ColumnElement[Any], milliseconds: sa.ColumnElement[Any]
) -> sa.ColumnElement[Any]:
    """``instant`` plus a number of ``milliseconds`` (a ``bigint``), exactly.

    Never ``timestamptz + interval`` of a ``timedelta``: asyncpg sends a day of it as
    ``1 day``, which PostgreSQL adds as a calendar day in the session's time zone — 23 or
    25 hours across a daylight-saving change. A millisecond times a count is an interval
    of seconds only, the same length in every zone.
    """
    return instant + milliseconds * sa.bindparam("millisecond", MILLISECOND, type_=sa.Interval)


def _json_rows(name: str, columns: list[tuple[str, sa.types.TypeEngine[Any]]]) -> Any:
    """The rows of JSON parameter ``name`` (an array of objects, sent as one text: no
    per-element encoding in the driver) with ``columns``."""
    document = sa.cast(sa.bindparam(name, type_=sa.Text), postgresql.JSON)
    return sa.func.json_to_recordset(document).table_valued(
        *(sa.column(column, type_) for column, type_ in columns)
    ).render_derived(name, with_types=True)


def _granted(tables: Tables, of: sa.Select[Any]) -> sa.CTE:
    """Insert the members of JSON parameter ``members`` (objects of
    :data:`MEMBER_COLUMNS`) whose task is among the ids ``of`` selects."""
    members = _json_rows("members", [(name, sa.Text()) for name in MEMBER_COLUMNS])
    return (
        sa.insert(tables.members)
        .from_select(list(MEMBER_COLUMNS),
                     sa.select(*(members.c[name] for name in MEMBER_COLUMNS)).where(
                         members.c.task_id.in_(of)))
        .returning(tables.members.c.task_id)
        .cte("m")
    )


def _woken(
    channel: str, payload: sa.ColumnElement[Any], *, name: str = "channel"
) -> sa.CTE:
    """``NOTIFY`` the store's ``channel`` (parameter ``name``) with each ``payload`` (a
    queue; a task id on the cancel channel)."""
    return sa.select(
        sa.func.pg_notify(sa.bindparam(name, channel, type_=sa.Text), payload)
    ).cte("n" if name == "channel" else "n_" + name)


def _counts(*ctes: sa.CTE) -> list[sa.ScalarSelect[Any]]:
    return [sa.select(sa.func.count()).select_from(cte).scalar_subquery() for cte in ctes]
