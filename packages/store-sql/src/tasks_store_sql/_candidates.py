"""The claimable rows of a queue in claim order, ``(neg_priority, available_at, id)``:
two disjoint branches, each read through the partial index made for it.

A claimable row is ``pending``, not expired, its ``available_at`` (``rules.available_at``:
a retry's ``retry_at``, a delayed task's ``run_at``, else its creation) come, and either
**unleased** — no lease (``ix_tasks_claim``, in claim order: fresh tasks, due retries and
due delayed tasks in one range) — or **lapsed** — a lease that expired without ending
(``ix_tasks_lease``). Each branch takes its ``limit`` first rows (locked, skipping rows
other sessions hold, where the dialect locks rows) and the caller keeps the ``limit``
first of their union in claim order: the rows, in the order, of one scan of every pending
row — without walking past a queue's running tasks (``neg_priority`` is minus the
priority, ``storekit.claim_order``'s first key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from tasks_store_sql._schema import pending, unclaimed, waiting

__all__ = ["claimable_rows", "waiting_rows"]


def claimable_rows(
    columns: Sequence[sa.ColumnElement[Any]],
    t: sa.Table,
    where: Sequence[sa.ColumnElement[bool]],
    now: sa.ColumnElement[Any],
    limit: sa.BindParameter[Any],
    *,
    lock: bool,
) -> sa.Subquery:
    """``columns`` of up to ``2 * limit`` claimable rows (at ``now``, also meeting
    ``where``): each branch's ``limit`` first. The caller orders by ``(neg_priority,
    available_at, id)`` and keeps ``limit``; ``columns`` must carry what it orders by."""
    c = t.c
    branches = (
        unclaimed(c),
        sa.and_(pending(c.status), c.claim_expires_at <= now),
    )
    selects = []
    for number, claimable in enumerate(branches):
        branch = (
            sa.select(*columns)
            .where(claimable, c.available_at <= now,
                   sa.or_(c.expires_at.is_(None), c.expires_at > now), *where)
            .order_by(c.neg_priority, c.available_at, c.id)
            .limit(limit)
        )
        if lock:
            branch = branch.with_for_update(skip_locked=True)
        selects.append(sa.select(branch.subquery(f"b{number}")))
    return sa.union_all(*selects).subquery("claimable")


def waiting_rows(
    t: sa.Table, where: Sequence[sa.ColumnElement[bool]], now: sa.ColumnElement[Any]
) -> sa.Select[Any]:
    """The earliest ``available_at`` after ``now`` of a row that waits for it (pending, no
    lease: a delayed task or a retry; also meeting ``where``), ``NULL`` for none — read in
    the waiting index (``_schema.waiting``), one range per queue past ``now``, whatever
    the priority."""
    c = t.c
    return sa.select(sa.func.min(c.available_at)).where(
        waiting(c), c.available_at > now, *where)
