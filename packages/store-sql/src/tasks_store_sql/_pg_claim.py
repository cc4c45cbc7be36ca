"""PostgreSQL's ``claim_next`` as one statement: ``rules.start_claim`` in SQL.

The statement locks the oldest claimable rows of the queues (``SKIP LOCKED``), reads the
store clock in the projection over the locked rows (after the locks), and writes each
claim that ``rules.start_claim`` would decide — generation, token, lease expiry,
``recovered``, deliveries, ``started_at`` kept, retry and progress cleared,
``updated_at`` — in the same statement, which is its own transaction (one round trip).

Only the claim's keys of the stored JSON are rewritten (:data:`CLAIM_CHANGES`); every
other value is copied byte for byte (``json_each``/``json_object_agg``, never ``jsonb``,
which stores numbers as ``numeric`` and writes ``1e20`` back as an integer). A row the
statement cannot claim exactly as the rules would — past its delivery limit, a claim key
missing, its TTL passed by the time it was locked — is returned unclaimed for the claim
decided in Python (``FastPath._claim_locked``). ``test_pg_claim.py`` holds the statement
to ``rules.start_claim`` field by field.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from tasks_store_sql._pg_statements import Statement, oldest_claimable, store_clock
from tasks_store_sql._schema import Tables

__all__ = ["CLAIM_CHANGES", "claim_statement"]

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
_JSON = postgresql.JSON
_TEXTS = postgresql.ARRAY(sa.Text)


def _text(name: str, value: str | None = None) -> sa.BindParameter[str]:
    return sa.bindparam(name, value, type_=sa.Text)


def _instant(value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """``value`` (a ``timestamptz``) as the JSON string a snapshot stores for it."""
    utc = sa.func.timezone(_text("utc", "UTC"), value)
    return sa.func.to_json(sa.func.to_char(utc, _text("instant_format", _INSTANT_FORMAT)))


def _locked(tables: Tables, queue: sa.ColumnElement[bool]) -> sa.CTE:
    """The candidates, locked; ``now`` read after the locks (milliseconds) and ``rank``
    in claim order."""
    t = tables.tasks
    found = oldest_claimable(
        [t.c.id, t.c.snapshot, t.c.claim_expires_at, t.c.updated_at, t.c.expires_at,
         t.c.created_at],
        t, queue,
    )
    now = sa.func.date_trunc(_text("unit", "milliseconds"), store_clock())
    rank = sa.func.row_number().over(order_by=(found.c.created_at, found.c.id))
    return sa.select(
        found.c.id, found.c.snapshot, found.c.claim_expires_at, found.c.updated_at,
        found.c.expires_at, now.label("now"), rank.label("rank"),
    ).cte("c").prefix_with("MATERIALIZED")


def _read(snapshot: sa.ColumnElement[Any]) -> sa.FromClause:
    """What the claim reads from the stored JSON, in one pass: ``lease_generation``,
    ``deliveries``, ``max_deliveries`` and the JSON text of ``started_at`` (``NULL``
    where a key is missing)."""
    each = sa.func.json_each(sa.cast(snapshot, _JSON)).table_valued("key", "value")

    def field(name: str) -> sa.ColumnElement[Any]:
        return sa.func.max(sa.cast(each.c.value, sa.Text)).filter(
            each.c.key == _text(f"key_{name}", name)
        )

    max_deliveries = sa.cast(field("work"), _JSON).op("->>")(
        _text("key_max_deliveries", "max_deliveries")
    )
    return sa.select(
        sa.cast(field("lease_generation"), sa.Integer).label("lease_generation"),
        sa.cast(field("deliveries"), sa.Integer).label("deliveries"),
        sa.cast(max_deliveries, sa.Integer).label("max_deliveries"),
        field("started_at").label("started_at"),
    ).select_from(each).lateral("j")


def _rebuilt(plan: sa.Subquery) -> sa.FromClause:
    """The claimed snapshot's JSON text (the claim's keys replaced, the rest verbatim) and
    how many of the claim's keys the stored JSON had (all of them, or no claim)."""
    kept = sa.func.json_each(sa.cast(plan.c.snapshot, _JSON)).table_valued("key", "value")

    def key(name: str) -> sa.ColumnElement[bool]:
        return kept.c.key == _text(f"set_{name}", name)

    null: sa.ColumnElement[Any] = sa.literal_column("'null'")
    started = sa.case(
        (sa.func.coalesce(plan.c.started_at, null) == null, _instant(plan.c.now)),
        else_=sa.cast(plan.c.started_at, _JSON),
    )
    claim = sa.func.json_build_object(
        _text("k_worker_id", "worker_id"), _text("worker"),
        _text("k_generation", "generation"), plan.c.generation,
        _text("k_expires_at", "expires_at"), _instant(plan.c.lease_expires_at),
        _text("k_ended", "ended"), sa.false(),
        _text("k_recovered", "recovered"), plan.c.claim_expires_at.is_not(None),
    )  # recovered: the previous lease never ended (its expiry is still recorded)
    value = sa.case(
        (key("claim"), claim),
        (key("lease_generation"), sa.func.to_json(plan.c.generation)),
        (key("deliveries"), sa.func.to_json(plan.c.deliveries + 1)),
        (key("started_at"), started),
        (key("retry_at"), sa.cast(sa.null(), _JSON)),
        (key("progress"), sa.cast(sa.null(), _JSON)),
        (key("updated_at"), _instant(plan.c.touched)),
        else_=kept.c.value,
    )
    changed = sa.bindparam("changed", list(CLAIM_CHANGES), type_=_TEXTS)
    return sa.select(
        sa.cast(sa.func.json_object_agg(kept.c.key, value), sa.Text).label("snapshot"),
        sa.func.count().filter(kept.c.key == sa.any_(changed)).label("changes"),
    ).select_from(kept).lateral("n")


def claim_statement(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
    """The claim of up to ``limit`` tasks of ``queue`` for ``worker`` (see the module
    docstring); parameters ``now``, ``limit``, ``worker``, ``lease`` (an interval),
    ``tokens`` (one per rank) and the queue's.

    Returns one row per locked candidate, oldest first: ``id``, ``now`` and, for the rows
    claimed, the new ``snapshot`` text and ``claim_token`` (``NULL`` for a row left
    alone). Stored text that is not a JSON object, or a counter that is not an integer,
    fails the statement before it writes anything (``DataError``).
    """
    t = tables.tasks
    locked = _locked(tables, queue)
    read = _read(locked.c.snapshot)
    plan = sa.select(
        locked,
        (read.c.lease_generation + 1).label("generation"),
        read.c.deliveries, read.c.max_deliveries, read.c.started_at,
        (locked.c.now + sa.bindparam("lease", type_=sa.Interval)).label("lease_expires_at"),
        sa.func.greatest(locked.c.now, locked.c.updated_at).label("touched"),
    ).select_from(locked.join(read, sa.true())).subquery("d")
    rebuilt = _rebuilt(plan)
    tokens = sa.func.unnest(sa.bindparam("tokens", type_=_TEXTS)).table_valued(
        "token", with_ordinality="rank"
    ).render_derived()
    decided = (
        sa.select(plan, rebuilt.c.snapshot.label("new_snapshot"), rebuilt.c.changes,
                  tokens.c.token)
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
    return Statement.of(
        sa.select(decided.c.id, decided.c.now, claimed.c.snapshot, claimed.c.claim_token)
        .select_from(decided.outerjoin(claimed, claimed.c.id == decided.c.id))
        .order_by(decided.c.rank)
    )
