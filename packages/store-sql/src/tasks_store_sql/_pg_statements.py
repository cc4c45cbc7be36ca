"""The statements of the PostgreSQL hot path (:mod:`tasks_store_sql._pg`), compiled once
per namespace for asyncpg.

Each is a SQLAlchemy Core construct — no SQL is built from strings — compiled with the
asyncpg dialect into ``$n`` SQL and the order of its named parameters
(:class:`Statement`); asyncpg prepares it once per connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.sql.compiler import SQLCompiler

from tasks_store_sql._schema import COUNTER, Tables, active, pending

__all__ = [
    "CLAIM_CHANGES",
    "EVENT_COLUMNS",
    "MEMBER_COLUMNS",
    "ROW_COLUMNS",
    "Statement",
    "Statements",
]

_DIALECT = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
_TEXT = postgresql.ARRAY(sa.Text)
_INT = postgresql.ARRAY(sa.Integer)
_TIME = postgresql.ARRAY(postgresql.TIMESTAMP(timezone=True))
ROW_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("tenant", _TEXT), ("queue", _TEXT), ("status", _TEXT), ("revision", _INT),
    ("run_id", _TEXT), ("claim_token", _TEXT), ("claim_generation", _INT),
    ("claim_expires_at", _TIME), ("retry_at", _TIME), ("created_at", _TIME),
    ("updated_at", _TIME), ("expires_at", _TIME), ("snapshot", _TEXT),
)
"""The projection columns (``_codec.projection``) and their array types."""
EVENT_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[Any]], ...] = (
    ("task_id", _TEXT), ("event_id", _TEXT), ("revision", _INT), ("kind", _TEXT),
    ("committed_at", _TIME), ("record", _TEXT),
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


def _array(name: str, type_: sa.types.TypeEngine[Any]) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _now_param() -> sa.BindParameter[Any]:
    return sa.bindparam("now", type_=postgresql.TIMESTAMP(timezone=True))


class Statements:
    """The hot-path statements of one namespace (see the module docstring)."""

    def __init__(self, tables: Tables, channel: str) -> None:
        t, ev = tables.tasks, tables.events
        ids, event_ids = _array("ids", _TEXT), _array("event_ids", _TEXT)
        clock = sa.func.coalesce(_now_param(), sa.func.clock_timestamp())
        locked = (
            sa.select(t.c.id, t.c.snapshot, t.c.claim_token, t.c.row_version)
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
        self.lock = Statement.of(
            sa.select(
                locked.c.id, locked.c.snapshot, locked.c.claim_token, locked.c.row_version,
                before.scalar_subquery().label("seen"), clock.label("now"),
                history.c.event_id, history.c.record,
            ).select_from(locked.outerjoin(history, sa.true()))
        )
        """Lock rows ``ids`` (id order); ``now``; their history entries of ``event_ids``."""
        self.events = Statement.of(
            sa.select(ev.c.task_id, ev.c.event_id, ev.c.record).where(
                ev.c.task_id == sa.any_(ids), ev.c.event_id == sa.any_(event_ids)
            )
        )
        """The history entries of ``event_ids`` of tasks ``ids`` (read after the locks)."""
        one_queue = t.c.queue == sa.bindparam("queue")
        many_queues = t.c.queue == sa.any_(_array("queues", _TEXT))
        self.candidates_one = self._candidates(tables, one_queue)
        self.candidates_many = self._candidates(tables, many_queues)
        self.claim_one = Statement.of(_claim(tables, one_queue))
        self.claim_many = Statement.of(_claim(tables, many_queues))
        self.write = Statement.of(self._write(tables, channel))
        self.isolation = Statement.of(sa.select(sa.func.current_setting(
            sa.bindparam("setting", "default_transaction_isolation", type_=sa.Text)
        )))
        """The isolation level a statement outside a transaction runs at."""
        self._creation(tables, channel)

    def _creation(self, tables: Tables, channel: str) -> None:
        """The statements of ``create``."""
        t, locks = tables.tasks, tables.locks
        held = (
            sa.select(locks.c.value)
            .where(locks.c.name == COUNTER)
            .with_for_update()
            .subquery("k")
        )
        clock = sa.func.coalesce(_now_param(), sa.func.clock_timestamp())
        taken = sa.exists(sa.select(t.c.id).where(t.c.id == sa.bindparam("id")))
        self.counter = Statement.of(sa.select(held.c.value, clock.label("now"), taken))
        """Lock the creators' row; the number of stored tasks, ``now`` after the lock, and
        whether the id was taken as of the statement's start (a hint: ``insert`` still
        refuses an id taken since)."""
        self.existing = Statement.of(
            sa.select(t.c.id, t.c.snapshot, t.c.claim_token, t.c.row_version)
            .where(t.c.id == sa.bindparam("id"))
            .with_for_update()
        )
        now = _now_param()
        capped = (
            sa.select(t.c.id)
            .where(
                t.c.tenant == sa.bindparam("tenant"),
                active(t.c.status),
                sa.or_(t.c.expires_at.is_(None), t.c.expires_at > now),
                t.c.id != sa.bindparam("id"),
            )
            .limit(sa.bindparam("cap", type_=sa.Integer))
            .subquery("a")
        )
        self.active = Statement.of(sa.select(sa.func.count()).select_from(capped))
        """Active tasks of ``tenant`` other than ``id`` at ``now``, counted up to ``cap``."""
        inserted = (
            postgresql.insert(t)
            .values(id=sa.bindparam("id"), row_version=0,
                    **{name: sa.bindparam(name, type_=type_.item_type)  # type: ignore[attr-defined]
                       for name, type_ in ROW_COLUMNS})
            .on_conflict_do_nothing(index_elements=[t.c.id])
            .returning(t.c.id)
            .cte("t")
        )
        done = sa.exists(sa.select(inserted.c.id))
        counted = (
            sa.update(locks)
            .where(locks.c.name == COUNTER, done)
            .values(value=locks.c.value + 1)
            .returning(locks.c.value)
            .cte("c")
        )
        members = sa.func.unnest(
            *(_array("m_" + name, _TEXT) for name in MEMBER_COLUMNS)
        ).table_valued(*MEMBER_COLUMNS).render_derived()
        granted = (
            sa.insert(tables.members)
            .from_select(list(MEMBER_COLUMNS),
                         sa.select(*(members.c[name] for name in MEMBER_COLUMNS)).where(done))
            .returning(tables.members.c.task_id)
            .cte("m")
        )
        woken = sa.select(
            sa.func.pg_notify(sa.bindparam("channel", channel, type_=sa.Text),
                              sa.bindparam("queue", type_=sa.Text))
        ).where(done).cte("n")
        self.insert = Statement.of(
            sa.select(*(sa.select(sa.func.count()).select_from(cte).scalar_subquery()
                        for cte in (inserted, counted, granted, woken)))
        )
        """Insert a new task with its members, count it, wake its queue — or nothing at
        all when the id is taken (counts 0)."""
        forget = sa.delete(tables.events).where(tables.events.c.task_id == sa.bindparam("id"))
        self.forget_events = Statement.of(forget)
        self.forget_members = Statement.of(
            sa.delete(tables.members).where(tables.members.c.task_id == sa.bindparam("id"))
        )

    @staticmethod
    def _candidates(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
        """The oldest claimable rows, locked, skipping rows other sessions hold."""
        t = tables.tasks
        start = sa.func.coalesce(_now_param(), sa.func.now())  # filter; decided after lock
        found = (
            sa.select(t.c.id, t.c.snapshot, t.c.claim_token, t.c.row_version, t.c.created_at)
            .where(
                queue,
                pending(t.c.status),
                sa.or_(t.c.claim_expires_at.is_(None), t.c.claim_expires_at <= start),
                sa.or_(t.c.retry_at.is_(None), t.c.retry_at <= start),
                sa.or_(t.c.expires_at.is_(None), t.c.expires_at > start),
                sa.not_(t.c.id == sa.any_(_array("skip", _TEXT))),
            )
            .order_by(t.c.created_at, t.c.id)
            .limit(sa.bindparam("limit", type_=sa.Integer))
            .with_for_update(skip_locked=True)
            .subquery("c")
        )
        clock = sa.func.coalesce(_now_param(), sa.func.clock_timestamp())
        return Statement.of(sa.select(found, clock.label("now")))

    @staticmethod
    def _write(tables: Tables, channel: str) -> sa.Select[Any]:
        t, ev, mem = tables.tasks, tables.events, tables.members
        rows = sa.func.unnest(
            _array("ids", _TEXT), _array("versions", _INT),
            *(_array(name, type_) for name, type_ in ROW_COLUMNS),
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
            *(_array("e_" + name, type_) for name, type_ in EVENT_COLUMNS)
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
        members = sa.func.unnest(
            *(_array("m_" + name, _TEXT) for name in MEMBER_COLUMNS)
        ).table_valued(*MEMBER_COLUMNS).render_derived()
        granted = (
            sa.insert(mem)
            .from_select(
                list(MEMBER_COLUMNS),
                sa.select(*(members.c[name] for name in MEMBER_COLUMNS)).where(
                    members.c.task_id.in_(written)
                ),
            )
            .returning(mem.c.task_id)
            .cte("m")
        )
        queues = sa.func.unnest(_array("wake", _TEXT)).table_valued("queue").render_derived()
        woken = sa.select(
            sa.func.pg_notify(sa.bindparam("channel", channel, type_=sa.Text), queues.c.queue)
        ).cte("n")

        def count(cte: sa.CTE) -> sa.ScalarSelect[Any]:
            return sa.select(sa.func.count()).select_from(cte).scalar_subquery()

        return sa.select(count(updated), count(recorded), count(granted), count(woken))


CLAIM_CHANGES = (
    "claim",
    "lease_generation",
    "deliveries",
    "started_at",
    "retry_at",
    "progress",
    "updated_at",
)
"""The snapshot keys a claim writes (``rules.start_claim``); every other key of the stored
JSON is copied through as it is, byte for byte."""
_INSTANT_FORMAT = 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'
"""How the JSON of a snapshot spells an instant (pydantic's UTC form)."""


def _instant(value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``value`` (a ``timestamptz``) as the JSON string a snapshot stores for it."""
    utc = sa.func.timezone(sa.bindparam("utc", "UTC", type_=sa.Text), value)
    return sa.func.to_json(
        sa.func.to_char(utc, sa.bindparam("instant_format", _INSTANT_FORMAT, type_=sa.Text))
    )


def _claim(tables: Tables, queue: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The whole of ``claim_next`` in one statement (run outside a transaction): lock the
    oldest claimable rows of the queues (``SKIP LOCKED``), read the clock after the locks,
    and apply ``rules.start_claim`` to each row under its delivery limit — the claim's
    keys of the stored JSON replaced (:data:`CLAIM_CHANGES`), every other value kept
    verbatim (``json_each``, never ``jsonb``: numbers and escapes read back exactly).

    Returns one row per locked candidate, oldest first: ``id``, ``now`` and, for the rows
    claimed, the new ``snapshot`` text and ``claim_token`` (``NULL`` for a row left alone:
    past its delivery limit, expired since the statement began, or unreadable). Tokens
    come from ``tokens`` by rank. A snapshot that is not JSON at all, or holds a counter
    that is not an integer, fails the statement (``DataError``): nothing is written.
    """
    t = tables.tasks
    start = sa.func.coalesce(_now_param(), sa.func.now())  # filter; decided after lock
    found = (
        sa.select(
            t.c.id,
            t.c.snapshot,
            t.c.claim_expires_at,
            t.c.updated_at,
            t.c.expires_at,
            t.c.created_at,
        )
        .where(
            queue,
            pending(t.c.status),
            sa.or_(t.c.claim_expires_at.is_(None), t.c.claim_expires_at <= start),
            sa.or_(t.c.retry_at.is_(None), t.c.retry_at <= start),
            sa.or_(t.c.expires_at.is_(None), t.c.expires_at > start),
        )
        .order_by(t.c.created_at, t.c.id)
        .limit(sa.bindparam("limit", type_=sa.Integer))
        .with_for_update(skip_locked=True)
        .subquery("f")
    )
    clock = sa.func.coalesce(_now_param(), sa.func.clock_timestamp())
    locked = (
        sa.select(
            found.c.id,
            found.c.snapshot,
            found.c.claim_expires_at,
            found.c.updated_at,
            found.c.expires_at,
            sa.func.date_trunc(sa.bindparam("unit", "milliseconds", type_=sa.Text), clock).label(
                "now"
            ),
            sa.func.row_number().over(order_by=(found.c.created_at, found.c.id)).label("rank"),
        )
        .cte("c")
        .prefix_with("MATERIALIZED")
    )
    each = sa.func.json_each(sa.cast(locked.c.snapshot, postgresql.JSON)).table_valued(
        "key", "value"
    )

    def field(name: str) -> sa.ColumnElement[Any]:
        """The JSON text of top-level key ``name`` (``NULL`` when missing)."""
        return sa.func.max(sa.cast(each.c.value, sa.Text)).filter(
            each.c.key == sa.bindparam(f"key_{name}", name, type_=sa.Text)
        )

    read = (
        sa.select(
            sa.cast(field("lease_generation"), sa.Integer).label("lease_generation"),
            sa.cast(field("deliveries"), sa.Integer).label("deliveries"),
            sa.cast(
                sa.cast(field("work"), postgresql.JSON).op("->>")(
                    sa.bindparam("key_max_deliveries", "max_deliveries", type_=sa.Text)
                ),
                sa.Integer,
            ).label("max_deliveries"),
            field("started_at").label("started_at"),
        )
        .select_from(each)
        .lateral("j")
    )
    lease = sa.bindparam("lease", type_=sa.Interval)
    plan = (
        sa.select(
            locked,
            (read.c.lease_generation + 1).label("generation"),
            read.c.deliveries,
            read.c.max_deliveries,
            read.c.started_at,
            (locked.c.now + lease).label("lease_expires_at"),
            sa.func.greatest(locked.c.now, locked.c.updated_at).label("touched"),
        )
        .select_from(locked.join(read, sa.true()))
        .subquery("d")
    )
    kept = sa.func.json_each(sa.cast(plan.c.snapshot, postgresql.JSON)).table_valued("key", "value")

    def key(name: str) -> sa.ColumnElement[bool]:
        return kept.c.key == sa.bindparam(f"set_{name}", name, type_=sa.Text)

    null: sa.ColumnElement[Any] = sa.literal_column("'null'")
    started = sa.case(
        (sa.func.coalesce(plan.c.started_at, null) == null, _instant(plan.c.now)),
        else_=sa.cast(plan.c.started_at, postgresql.JSON),
    )
    claim_info = sa.func.json_build_object(
        sa.bindparam("k_worker_id", "worker_id", type_=sa.Text),
        sa.bindparam("worker", type_=sa.Text),
        sa.bindparam("k_generation", "generation", type_=sa.Text),
        plan.c.generation,
        sa.bindparam("k_expires_at", "expires_at", type_=sa.Text),
        _instant(plan.c.lease_expires_at),
        sa.bindparam("k_ended", "ended", type_=sa.Text),
        sa.false(),
        sa.bindparam("k_recovered", "recovered", type_=sa.Text),
        plan.c.claim_expires_at.is_not(None),
    )
    value = sa.case(
        (key("claim"), claim_info),
        (key("lease_generation"), sa.func.to_json(plan.c.generation)),
        (key("deliveries"), sa.func.to_json(plan.c.deliveries + 1)),
        (key("started_at"), started),
        (key("retry_at"), sa.cast(sa.null(), postgresql.JSON)),
        (key("progress"), sa.cast(sa.null(), postgresql.JSON)),
        (key("updated_at"), _instant(plan.c.touched)),
        else_=kept.c.value,
    )
    changed = sa.bindparam("changed", list(CLAIM_CHANGES), type_=_TEXT)
    rebuilt = (
        sa.select(
            sa.cast(sa.func.json_object_agg(kept.c.key, value), sa.Text).label("snapshot"),
            sa.func.count().filter(kept.c.key == sa.any_(changed)).label("changes"),
        )
        .select_from(kept)
        .lateral("n")
    )
    tokens = (
        sa.func.unnest(sa.bindparam("tokens", type_=_TEXT))
        .table_valued("token", with_ordinality="rank")
        .render_derived()
    )
    decided = (
        sa.select(plan, rebuilt.c.snapshot.label("new_snapshot"), rebuilt.c.changes, tokens.c.token)
        .select_from(plan.join(rebuilt, sa.true()).join(tokens, tokens.c.rank == plan.c.rank))
        .cte("v")
        .prefix_with("MATERIALIZED")
    )
    claimed = (
        sa.update(t)
        .where(
            t.c.id == decided.c.id,
            decided.c.deliveries < decided.c.max_deliveries,
            sa.or_(decided.c.expires_at.is_(None), decided.c.expires_at > decided.c.now),
            decided.c.changes == len(CLAIM_CHANGES),
        )
        .values(
            row_version=t.c.row_version + 1,
            claim_token=decided.c.token,
            claim_generation=decided.c.generation,
            claim_expires_at=decided.c.lease_expires_at,
            retry_at=sa.null(),
            updated_at=decided.c.touched,
            snapshot=decided.c.new_snapshot,
        )
        .returning(t.c.id, t.c.snapshot, t.c.claim_token)
        .cte("u")
    )
    return (
        sa.select(decided.c.id, decided.c.now, claimed.c.snapshot, claimed.c.claim_token)
        .select_from(decided.outerjoin(claimed, claimed.c.id == decided.c.id))
        .order_by(decided.c.rank)
    )
