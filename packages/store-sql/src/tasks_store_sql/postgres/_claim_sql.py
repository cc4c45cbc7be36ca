"""PostgreSQL's ``claim_next`` as one statement: ``rules.start_claim`` in SQL.

The statement locks the first claimable rows (claim order) (``SKIP LOCKED``), reads the
store clock over the locked rows, and writes each claim ``rules.start_claim`` would
decide — columns only (the head of the snapshot: :mod:`tasks_store_sql._stored`), never
the body — in one statement that is its own transaction. A row it cannot claim exactly
as the rules would (past its delivery limit, or without one stored; a TTL passed by the
time it was locked) is returned unclaimed, for the claim decided in Python.
``test_pg_claim_rules.py`` holds it to ``rules.start_claim`` field by field.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tasks_store_sql._schema import Tables
from tasks_store_sql._stored import HELD, RECOVERED, stored_columns
from tasks_store_sql.postgres._statements import (
    Statement,
    joined,
    later,
    oldest_claimable,
    store_clock,
)

__all__ = ["claim_statement"]


def _int(name: str, value: int) -> sa.BindParameter[int]:
    return sa.bindparam(name, value, type_=sa.SmallInteger)


def _locked(tables: Tables, queue: sa.ColumnElement[bool]) -> sa.CTE:
    """The candidates, locked; ``now`` read after the locks (milliseconds), ``rank`` in
    claim order (``neg_priority``, ``available_at``, ``id``), and ``neg_priority`` and
    ``available_at`` as they were (the claim order the caller merges tiers by)."""
    t = tables.tasks
    found = oldest_claimable(
        [t.c.id, t.c.claim_expires_at, t.c.updated_at, t.c.expires_at, t.c.max_deliveries,
         t.c.deliveries, t.c.neg_priority, t.c.available_at],
        t, queue,
    )
    now = sa.func.date_trunc(sa.bindparam("unit", "milliseconds", type_=sa.Text),
                             store_clock())
    rank = sa.func.row_number().over(
        order_by=(found.c.neg_priority, found.c.available_at, found.c.id))
    return sa.select(found, now.label("now"), rank.label("rank")).cte("c").prefix_with(
        "MATERIALIZED")


def _decided(locked: sa.CTE) -> sa.Subquery:
    """Each candidate with its token (one per rank), the lease's end and the new
    ``updated_at`` (never earlier than the stored one)."""
    tokens = sa.func.unnest(joined("tokens", sa.Text())).table_valued(
        "token", with_ordinality="rank").render_derived()
    return (
        sa.select(
            locked, tokens.c.token,
            later(locked.c.now, sa.bindparam("lease", type_=sa.BigInteger)).label("until"),
            sa.func.greatest(locked.c.now, locked.c.updated_at).label("touched"),
        )
        .select_from(locked.join(tokens, tokens.c.rank == locked.c.rank))
        .subquery("d")
    )


def _claimable(decided: sa.Subquery) -> sa.ColumnElement[bool]:
    """The claim is the rules' own: the delivery limit not reached, the TTL not passed at
    the clock read after the lock (``NULL`` — not true — without a stored limit)."""
    return sa.and_(
        decided.c.deliveries < decided.c.max_deliveries,
        sa.or_(decided.c.expires_at.is_(None), decided.c.expires_at > decided.c.now),
    )


def claim_statement(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
    """The claim of up to ``limit`` tasks of ``queue`` for ``worker``; parameters ``now``,
    ``limit``, ``start`` (ranks past it are held ahead of a slot), ``worker``, ``lease``
    (milliseconds), ``tokens`` (one per rank, joined:
    :func:`~tasks_store_sql.postgres._statements.join_list`) and the queue's.

    It writes what ``rules.start_claim`` writes: the lease (token, generation, the
    claim's worker, end and flags — ``recovered`` when it takes over a lease that never
    ended, ``held`` past ``start``), one more delivery, ``started_at`` kept once set,
    retry and progress cleared, ``updated_at``; ``available_at`` becomes ``run_at``, else
    the creation (a claim clears ``retry_at``: ``rules.available_at``).

    Returns one row per locked candidate, in no order: ``rank`` (claim order, from 1),
    ``id``, ``now``, for the rows claimed the stored columns
    (``_stored.STORED_COLUMNS``), ``claim_token`` and ``row_version`` (each ``NULL`` for
    a row left alone), and ``neg_priority`` and ``available_at`` before the claim.
    """
    t = tables.tasks
    locked = _locked(tables, queue)
    decided = _decided(locked)
    ok = _claimable(decided)
    recovered = sa.case((decided.c.claim_expires_at.is_not(None), _int("recovered", RECOVERED)),
                        else_=_int("fresh", 0))
    held = sa.case((decided.c.rank > sa.bindparam("start", type_=sa.BigInteger),
                    _int("held", HELD)), else_=_int("started", 0))
    claimed = (
        sa.update(t)
        .where(t.c.id == decided.c.id, ok)
        .values(
            row_version=t.c.row_version + 1,
            claim_token=decided.c.token,
            claim_generation=t.c.lease_generation + 1,
            claim_expires_at=decided.c.until,
            claim_worker=sa.bindparam("worker", type_=sa.Text),
            claim_until=decided.c.until,
            claim_flags=recovered + held,
            lease_generation=t.c.lease_generation + 1,
            deliveries=t.c.deliveries + 1,
            started_at=sa.func.coalesce(t.c.started_at, decided.c.now),
            retry_at=sa.null(),
            progress=sa.null(),
            available_at=sa.func.coalesce(t.c.run_at, t.c.created_at),
            updated_at=decided.c.touched,
        )
        .returning(decided.c.rank, t.c.id, decided.c.now, *stored_columns(t),
                   t.c.claim_token, t.c.row_version, decided.c.neg_priority,
                   decided.c.available_at)
        .cte("u")
    )
    nothing: list[Any] = [sa.null()] * (len(stored_columns(t)) + 2)
    left_alone = sa.select(decided.c.rank, decided.c.id, decided.c.now, *nothing,
                           decided.c.neg_priority, decided.c.available_at,
                           ).where(ok.is_not(sa.true()))
    return Statement.of(sa.union_all(sa.select(claimed), left_alone))
