"""The statements of PostgreSQL's ``create`` (:mod:`tasks_store_sql.postgres._creates`):
the creators' lock with the clock, the checks of the transaction that decides, and the
statements that create a group of new tasks at once: one while a count is kept, one while
nothing is counted.

They keep the creators' rules: while a count is kept, the creators' lock row is taken
before the clock is read and before anything is counted or inserted; a create stays within
``max_tasks`` and each tenant's bound (:mod:`tasks_store_sql._scopes`); while nothing is
counted, a create's lock on ``tasks`` comes before it reads the mode; a taken id inserts
nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from tasks_store_sql._counting import add_to_count, row_exclusive_lock, share_lock
from tasks_store_sql._schema import COUNTER, SCOPE_PREFIX, UNCOUNTED, Tables, active
from tasks_store_sql._stored import stored_columns
from tasks_store_sql.postgres._statements import (
    _DIALECT,
    ROW_COLUMNS,
    Statement,
    Statements,
    _counts,
    _granted,
    _json_rows,
    _now_param,
    _woken,
    later,
    store_clock,
)

__all__ = ["NEW_COLUMNS", "CreateStatements"]


class CreateStatements(Statements):
    """The hot-path statements with those of ``create`` (each built when first used)."""

    @functools.cached_property
    def create(self) -> Statement:
        """New tasks in one statement with the creators' lock, while a count is kept: see
        :func:`_created`."""
        return Statement.of(_created(self.tables, self.channel))

    @functools.cached_property
    def create_uncounted(self) -> Statement:
        """New tasks in one statement, while nothing is counted: see
        :func:`_created_uncounted`."""
        return Statement.of(_created_uncounted(self.tables, self.channel))

    @functools.cached_property
    def counter(self) -> Statement:
        """The creators' row, locked while it holds a count: its value (the number of
        stored tasks, or ``UNCOUNTED``), ``now`` after the lock, and whether the id was
        taken as of the statement's start (a hint: ``insert`` still refuses an id taken
        since). No row: nothing."""
        t = self.tables.tasks
        mode, held = (row.subquery(name) for row, name in zip(
            _creators_row(self.tables), ("k0", "k"), strict=True))
        taken = sa.exists(sa.select(t.c.id).where(t.c.id == sa.bindparam("id")))
        return Statement.of(
            sa.select(sa.func.coalesce(held.c.value, mode.c.value), store_clock().label("now"),
                      taken)
            .select_from(mode.outerjoin(held, sa.true()))
        )

    @functools.cached_property
    def share_lock(self) -> str:
        """Lock ``tasks`` in ``SHARE`` mode (:mod:`tasks_store_sql._counting`)."""
        return str(share_lock(self.tables).compile(dialect=_DIALECT))

    @functools.cached_property
    def row_exclusive_lock(self) -> str:
        """Lock ``tasks`` in ``ROW EXCLUSIVE`` mode (:mod:`tasks_store_sql._counting`)."""
        return str(row_exclusive_lock(self.tables).compile(dialect=_DIALECT))

    @functools.cached_property
    def count_stored(self) -> Statement:
        """Set the creators' row to the number of stored tasks."""
        locks, tasks = self.tables.locks, self.tables.tasks
        stored = sa.select(sa.func.count()).select_from(tasks).scalar_subquery()
        return Statement.of(sa.update(locks).where(locks.c.name == COUNTER).values(value=stored))

    @functools.cached_property
    def existing(self) -> Statement:
        """The row of ``id``, locked (as ``_batch.Loaded.of`` reads it)."""
        t = self.tables.tasks
        return Statement.of(
            sa.select(t.c.id, *stored_columns(t), t.c.claim_token, t.c.row_version)
            .where(t.c.id == sa.bindparam("id"))
            .with_for_update()
        )

    @functools.cached_property
    def active(self) -> Statement:
        """Active tasks of ``tenant`` other than ``id`` at ``now``, counted up to ``cap``."""
        t = self.tables.tasks
        capped = (
            sa.select(t.c.id)
            .where(
                t.c.tenant == sa.bindparam("tenant"),
                active(t.c.status),
                sa.or_(t.c.expires_at.is_(None), t.c.expires_at > _now_param()),
                t.c.id != sa.bindparam("id"),
            )
            .limit(sa.bindparam("cap", type_=sa.BigInteger))
            .subquery("a")
        )
        return Statement.of(sa.select(sa.func.count()).select_from(capped))

    @functools.cached_property
    def bound(self) -> Statement:
        """The bound row ``name`` of a tenant (:mod:`tasks_store_sql._scopes`)."""
        locks = self.tables.locks
        return Statement.of(
            sa.select(locks.c.value).where(locks.c.name == sa.bindparam("name", type_=sa.Text))
        )

    @functools.cached_property
    def store_bound(self) -> Statement:
        """Store the bound row ``name``."""
        locks = self.tables.locks
        upsert = postgresql.insert(locks).values(
            name=sa.bindparam("name", type_=sa.Text),
            value=sa.bindparam("value", type_=sa.BigInteger),
        )
        return Statement.of(upsert.on_conflict_do_update(
            index_elements=[locks.c.name], set_={"value": upsert.excluded.value}
        ))

    @functools.cached_property
    def raise_bound(self) -> Statement:
        """Raise the bound row ``name`` by one, if there is one."""
        locks = self.tables.locks
        return Statement.of(
            sa.update(locks)
            .where(locks.c.name == sa.bindparam("name", type_=sa.Text))
            .values(value=locks.c.value + 1)
        )

    @functools.cached_property
    def insert(self) -> Statement:
        """Insert a new task with its members, count it, wake its queue — or nothing at
        all when the id is taken (counts 0)."""
        columns = [sa.bindparam(name, type_=type_) for name, type_ in ROW_COLUMNS]
        one = sa.select(sa.bindparam("id", type_=sa.Text), sa.literal(0, sa.Integer), *columns)
        return Statement.of(sa.select(*_counts(*_inserted(
            self.tables, self.channel,
            ["id", "row_version", *(name for name, _ in ROW_COLUMNS)], one,
        ))))

    @functools.cached_property
    def forget_events(self) -> Statement:
        """Delete the history of task ``id`` (a replaced run)."""
        events = self.tables.events
        return Statement.of(sa.delete(events).where(events.c.task_id == sa.bindparam("id")))

    @functools.cached_property
    def forget_members(self) -> Statement:
        """Delete the members of task ``id`` (a replaced run)."""
        members = self.tables.members
        return Statement.of(sa.delete(members).where(members.c.task_id == sa.bindparam("id")))


def _creators_row(tables: Tables) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The creators' row's value, read (the mode: a count or ``UNCOUNTED``), and locked
    (only while it holds a count: otherwise no row, and no lock)."""
    locks = tables.locks
    read = sa.select(locks.c.value).where(locks.c.name == COUNTER)
    return read, read.where(locks.c.value != UNCOUNTED).with_for_update()


def _inserted(
    tables: Tables, channel: str, names: list[str], rows: sa.Select[Any]
) -> tuple[sa.CTE, ...]:
    """Insert the tasks ``rows`` selects (columns ``names``) with their members (JSON
    parameter ``members``: those of tasks not inserted left out), add them to the
    creators' count (if there is one: ``_counting``) and wake their queues; a task whose
    id is taken is left out (``ON CONFLICT DO NOTHING``). The CTEs of the rows inserted
    (``id``, ``queue``), counted, granted and notified."""
    t, locks = tables.tasks, tables.locks
    inserted = (
        postgresql.insert(t)
        .from_select(names, rows)
        .on_conflict_do_nothing(index_elements=[t.c.id])
        .returning(t.c.id, t.c.queue)
        .cte("t")
    )
    added = sa.select(sa.func.count()).select_from(inserted).scalar_subquery()
    counted = (
        add_to_count(tables, added)
        .where(sa.exists(sa.select(inserted.c.id)))
        .returning(locks.c.value)
        .cte("c")
    )
    queues = sa.select(inserted.c.queue).distinct().subquery("q")
    return (inserted, counted, _granted(tables, sa.select(inserted.c.id)),
            _woken(channel, queues.c.queue))


NEW_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("tenant", sa.Text()), ("queue", sa.Text()), ("status", sa.Text()),
    ("revision", sa.Integer()), ("run_id", sa.Text()), ("max_deliveries", sa.Integer()),
    ("neg_priority", sa.SmallInteger()), ("owner", sa.Text()),
)
"""The columns of a new task that :func:`_created` takes as they are; the lease and
retry columns of a new task are ``NULL``, and it computes the instants and the text."""


def _scopes(tables: Tables, rows: Any, locked: sa.CTE) -> sa.CTE:
    """Each tenant of ``rows``: ``n``, its tasks among them; ``stored``, its stored bound
    (``NULL``: none); and ``active``, how many active tasks it has at most —
    ``min(bound, stored tasks)`` (:mod:`tasks_store_sql._scopes`).

    The bound rows are locked after the creators' row (``locked`` is joined below the
    lock), so they are read as last written: a statement reads other rows as of its
    start, before it waited for the creators' lock. Nothing is counted here for the same
    reason: a tenant that needs counting is left to the transaction, whose count is a
    statement of its own, after the lock."""
    locks = tables.locks
    prefix = sa.bindparam("scope_prefix", SCOPE_PREFIX, type_=sa.Text)
    group = (
        sa.select(rows.c.tenant, sa.func.count().label("n"))
        .group_by(rows.c.tenant)
        .cte("g")
    )  # read twice, evaluated once: the tasks' JSON is parsed once here
    bounds = (
        sa.select(locks.c.name, locks.c.value)
        .select_from(locks.join(locked, sa.true()))
        .where(locks.c.name.in_(sa.select(prefix + group.c.tenant)))
        .with_for_update(of=locks)
        .cte("b0")
    )
    return (
        sa.select(
            group.c.tenant, group.c.n, bounds.c.value.label("stored"),
            sa.func.least(bounds.c.value, locked.c.value).label("active"),  # skips a NULL
        )
        .select_from(group.join(locked, sa.true()).outerjoin(
            bounds, bounds.c.name == prefix + group.c.tenant))
        .cte("s")
        .prefix_with("MATERIALIZED")
    )


def _bounds_stored(tables: Tables, scopes: sa.CTE, inserted: sa.CTE) -> sa.CTE:
    """Store each tenant's bound once tasks were inserted: its active
    tasks at most, plus its new ones. A bound row written since the statement began (by a
    creator it waited for, unseen by :func:`_scopes`) is replaced by that sum too, which
    still bounds the tenant: its ``active`` was then the number of stored tasks."""
    locks = tables.locks
    name = sa.bindparam("scope_prefix", SCOPE_PREFIX, type_=sa.Text) + scopes.c.tenant
    upsert = postgresql.insert(locks).from_select(
        ["name", "value"],
        sa.select(name, scopes.c.active + scopes.c.n).where(
            sa.exists(sa.select(inserted.c.id))),
    )
    return (
        upsert.on_conflict_do_update(index_elements=[locks.c.name],
                                     set_={"value": upsert.excluded.value})
        .returning(locks.c.name)
        .cte("b")
    )


def _created(tables: Tables, channel: str) -> sa.Select[Any]:
    """``create`` of new tasks in one statement, its own transaction, while a count is
    kept (``_counting``): lock the creators' row, read the clock after the lock (whole
    milliseconds), and insert only while the store stays within both capacity limits with
    every task of the group: the stored tasks number at most ``most`` (``max_tasks`` less
    the tasks inserted), and each tenant of the group has room for its tasks below
    ``max_active`` by its bound (:func:`_scopes`; a tenant that would need counting leaves
    the group to the transaction); the count and the tenants' bounds are stored with the
    tasks. While nothing is counted it inserts nothing (the transaction starts the count,
    or :func:`_created_uncounted` creates).

    The tasks come as :func:`_new_rows` takes them. Returns the ids inserted (``NULL`` for
    none), the clock (``NULL``, nothing written: past ``most``, uncounted or without the
    creators' row), the creators' row's value as the statement began (the mode: a count
    or ``UNCOUNTED``; ``NULL`` without the row), and the counted, granted, notified and
    bounds-stored counts.
    """
    mode, held = (row.cte(name) for row, name in zip(
        _creators_row(tables), ("k0", "k"), strict=True))
    locked = (
        sa.select(_clock().label("now"), held.c.value)
        .where(held.c.value <= sa.bindparam("most", type_=sa.BigInteger))
        .cte("l")
        .prefix_with("MATERIALIZED")
    )  # evaluated once, after the lock
    rows = _new_rows()
    scopes = _scopes(tables, rows, locked)
    full = sa.exists(sa.select(scopes.c.tenant).where(
        scopes.c.active + scopes.c.n > sa.bindparam("max_active", type_=sa.BigInteger)))
    clocked = sa.select(locked.c.now).where(~full).cte("r").prefix_with("MATERIALIZED")
    inserted, *rest = _inserted(tables, channel, *_at_clock(rows, clocked))
    return _answer(inserted, clocked, mode, *rest, _bounds_stored(tables, scopes, inserted))


def _created_uncounted(tables: Tables, channel: str) -> sa.Select[Any]:
    """``create`` of new tasks in one statement, its own transaction, while nothing is
    counted (``_counting``) — for a store without a capacity limit: no lock on the
    creators' row, no count, no bound. It reads the row's mode, and inserts only while
    that is ``UNCOUNTED``; its insert holds ``ROW EXCLUSIVE`` on ``tasks`` before its
    snapshot, so a count being started (``SHARE``) either waits for it or is seen by it.

    The tasks come as :func:`_new_rows` takes them. Returns the ids inserted (``NULL`` for
    none), the clock (``NULL``, nothing written: counted, or without the creators' row),
    the mode (as :func:`_created`), and the granted and notified counts.
    """
    mode = _creators_row(tables)[0].cte("k0")
    clocked = (
        sa.select(_clock().label("now"))
        .where(mode.c.value == UNCOUNTED)
        .cte("r")
        .prefix_with("MATERIALIZED")
    )
    inserted, _counted, *rest = _inserted(tables, channel, *_at_clock(_new_rows(), clocked))
    return _answer(inserted, clocked, mode, *rest)  # (a CTE not selected is not sent)


def _answer(inserted: sa.CTE, clocked: sa.CTE, mode: sa.CTE, *written: sa.CTE) -> sa.Select[Any]:
    """What a create statement returns: the ids ``inserted`` (``NULL`` for none), the
    clock of ``clocked`` (``NULL``: nothing written), the creators' row's ``mode``, and
    the rows each CTE of ``written`` wrote."""
    return sa.select(
        sa.select(sa.func.array_agg(inserted.c.id)).scalar_subquery(),
        sa.select(clocked.c.now).scalar_subquery(),
        sa.select(mode.c.value).scalar_subquery(),
        *_counts(*written),
    )


def _clock() -> sa.ColumnElement[Any]:
    """The store's clock in whole milliseconds."""
    return sa.func.date_trunc(sa.bindparam("unit", "milliseconds", type_=sa.Text), store_clock())


def _new_rows() -> Any:
    """The new tasks of JSON parameter ``rows``: objects with ``n`` (their order), ``id``,
    the columns :data:`NEW_COLUMNS`, ``ttl`` and ``delay`` (milliseconds after the clock
    of the expiry and of ``run_at``, or ``null``) and ``body``, the snapshot's text as
    stored (it holds no instant: ``_stored.ROW_KEYS``); their members come as
    :func:`_inserted` takes them."""
    return _json_rows("rows", [("n", sa.Integer()), ("id", sa.Text()), *NEW_COLUMNS,
                               ("ttl", sa.BigInteger()), ("delay", sa.BigInteger()),
                               ("body", sa.Text())])


def _at_clock(rows: Any, clocked: sa.CTE) -> tuple[list[str], sa.Select[Any]]:
    """The columns and the values of ``rows`` (:func:`_new_rows`) inserted at
    ``clocked``'s ``now`` (none without a row there): ``created_at`` and ``updated_at``
    the clock, ``run_at`` and ``expires_at`` shifted from it, ``available_at`` the
    ``run_at``, else the clock."""
    run_at = later(clocked.c.now, rows.c.delay)  # NULL without a delay
    values = sa.select(
        rows.c.id, sa.literal(0, sa.Integer), *(rows.c[name] for name, _ in NEW_COLUMNS),
        clocked.c.now, clocked.c.now, run_at, sa.func.coalesce(run_at, clocked.c.now),
        later(clocked.c.now, rows.c.ttl), rows.c.body,
    ).select_from(rows.join(clocked, sa.true())).order_by(rows.c.n)
    names = ["id", "row_version", *(name for name, _ in NEW_COLUMNS),
             "created_at", "updated_at", "run_at", "available_at", "expires_at", "snapshot"]
    return names, values
