"""The statements of the SQL store's common path (SQLite, MariaDB/MySQL — and PostgreSQL
outside its own statements), built once per namespace with bound parameters.

SQLAlchemy compiles a statement once per dialect and caches it; what costs on every call
is building the statement object and its cache key. Building them here, once, leaves only
the parameters to each call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tasks_store_sql._candidates import claimable_rows, waiting_rows
from tasks_store_sql._schema import Tables
from tasks_store_sql._stored import stored_columns

__all__ = ["Prebuilt", "projected"]


def projected(tasks: sa.Table) -> list[str]:
    """The columns ``_codec.projection`` gives: every one but ``id`` and ``row_version``."""
    return [c.name for c in tasks.columns if c.name not in ("id", "row_version")]



@dataclass(frozen=True)
class Prebuilt:
    """The prebuilt statements; parameters are named in each attribute's docstring."""

    fetch: sa.Select[Any]
    """The row of ``b_id``."""
    fetch_locked: sa.Select[Any]
    """The row of ``b_id``, locked for update (where the dialect locks rows)."""
    fetch_of_tenant: sa.Select[Any]
    """The row of ``b_id`` if tenant ``b_tenant``'s: another tenant's is never read."""
    lock_rows: sa.Select[Any]
    """``(id, *stored, claim_token, row_version, final_event)`` of the rows of ``b_ids``
    (a list; ``stored``: ``_stored.STORED_COLUMNS``), locked in id order."""
    find_events: sa.Select[Any]
    """``(task_id, event_id, record)`` of events ``b_event_ids`` of tasks ``b_ids``."""
    save: sa.Update
    """Every projection column (:func:`projected`, bound as ``p_<column>``),
    ``row_version = b_next``, where ``id = b_id`` and ``row_version = b_version``."""
    candidates: sa.Select[Any]
    """The first claimable rows in claim order, ``(neg_priority, available_at, id)``, of
    queues ``b_queues`` at ``b_now``, but ``b_seen``, at most ``b_limit``, with
    ``neg_priority`` and ``available_at`` as stored (locked, skipping locked rows, where
    the dialect can)."""
    next_available: sa.Select[Any]
    """The earliest ``available_at`` after ``b_now`` of a task of ``b_queues`` waiting
    for it (``_candidates.waiting_rows``)."""

    @classmethod
    def build(
        cls, tables: Tables, columns: Sequence[sa.ColumnElement[Any]], *, lock: bool
    ) -> Prebuilt:
        """The statements of ``tables``; ``lock``: the dialect has row locks."""
        t, ev = tables.tasks, tables.events
        fetch = sa.select(*columns).where(t.c.id == sa.bindparam("b_id"))
        ids: sa.BindParameter[Any] = sa.bindparam("b_ids", expanding=True)
        lock_rows = (
            sa.select(t.c.id, *stored_columns(t), t.c.claim_token, t.c.row_version,
                      t.c.final_event)
            .where(t.c.id.in_(ids))
            .order_by(t.c.id)
        )
        now = sa.bindparam("b_now", type_=t.c.created_at.type)
        # The sort key as stored, not through ``Instant``: a hand-damaged value must cost
        # only its own record (SQLite keeps text: its order is the time order).
        available_key = sa.type_coerce(t.c.available_at, sa.String).label("available_key")
        limit = sa.bindparam("b_limit", type_=sa.Integer)
        queues = t.c.queue.in_(sa.bindparam("b_queues", expanding=True))
        rows = claimable_rows(
            [*columns, t.c.neg_priority, available_key, t.c.available_at], t,
            [queues, t.c.id.not_in(sa.bindparam("b_seen", expanding=True))],
            now, limit, lock=lock,
        )
        candidates = (
            # the columns, then neg_priority and available_key
            sa.select(*list(rows.c)[: len(columns) + 2])
            .order_by(rows.c.neg_priority, rows.c.available_at, rows.c.id)
            .limit(limit)
        )
        return cls(
            fetch=fetch,
            fetch_locked=fetch.with_for_update() if lock else fetch,
            fetch_of_tenant=fetch.where(t.c.tenant == sa.bindparam("b_tenant")),
            lock_rows=lock_rows.with_for_update() if lock else lock_rows,
            find_events=sa.select(ev.c.task_id, ev.c.event_id, ev.c.record).where(
                ev.c.task_id.in_(sa.bindparam("b_ids", expanding=True)),
                ev.c.event_id.in_(sa.bindparam("b_event_ids", expanding=True)),
            ),
            save=(
                sa.update(t)
                .where(t.c.id == sa.bindparam("b_id"),
                       t.c.row_version == sa.bindparam("b_version"))
                .values(row_version=sa.bindparam("b_next"),
                        **{name: sa.bindparam("p_" + name) for name in projected(t)})
            ),
            candidates=candidates,
            next_available=waiting_rows(t, [queues], now),
        )
