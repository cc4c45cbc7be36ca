"""The claimable rows of a queue, oldest first: three disjoint branches, each read
through the partial index made for it.

A claimable row is ``pending``, not expired, and either **fresh** — no lease, no retry
pending (``ix_tasks_claim``, in claim order); **lapsed** — a lease that expired without
ending (``ix_tasks_lease``); or **due** — a retry whose time has come
(``ix_tasks_retry``). Each branch takes its ``limit`` oldest rows (locked, skipping rows
other sessions hold, where the dialect locks rows) and the caller keeps the ``limit``
oldest of their union: the rows, in the order, of one scan of every pending row — without
walking past a queue's running tasks and tasks waiting for a retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from tasks_store_sql._schema import pending, unclaimed

__all__ = ["claimable_rows"]


def claimable_rows(
    columns: Sequence[sa.ColumnElement[Any]],
    t: sa.Table,
    where: Sequence[sa.ColumnElement[bool]],
    now: sa.ColumnElement[Any],
    limit: sa.BindParameter[Any],
    *,
    lock: bool,
) -> sa.Subquery:
    """``columns`` of up to ``3 * limit`` claimable rows (at ``now``, also meeting
    ``where``): each branch's ``limit`` oldest. The caller orders by ``(created_at, id)``
    and keeps ``limit``; ``columns`` must carry what it orders by."""
    c = t.c
    branches = (
        unclaimed(c),
        sa.and_(pending(c.status), c.claim_expires_at <= now,
                sa.or_(c.retry_at.is_(None), c.retry_at <= now)),
        sa.and_(pending(c.status), c.claim_expires_at.is_(None), c.retry_at <= now),
    )
    selects = []
    for number, claimable in enumerate(branches):
        branch = (
            sa.select(*columns)
            .where(claimable, sa.or_(c.expires_at.is_(None), c.expires_at > now), *where)
            .order_by(c.created_at, c.id)
            .limit(limit)
        )
        if lock:
            branch = branch.with_for_update(skip_locked=True)
        selects.append(sa.select(branch.subquery(f"b{number}")))
    return sa.union_all(*selects).subquery("claimable")
