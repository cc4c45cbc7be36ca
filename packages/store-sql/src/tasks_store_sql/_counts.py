"""``counts`` on the SQL path, every dialect (capability ``counts``): a tenant's tasks by
queue and status in one statement (one consistent read), from indexes.

Most rows read as their stored status: counted by ``(queue, status)`` from the counts
index (``tenant, queue, status``; index-only on PostgreSQL and SQLite). Beside the counts
come the rows that may read otherwise — expired (the expiry index), leased (the lease
index), unleased pending with ``run_at`` ahead (the waiting index), of every tenant so
that each arm reads its own index, kept by tenant here — each taken out of its stored
count and counted as ``rules.present`` reads it. Only live leases' documents are decoded
(``claimed`` or ``running`` is in the document only).
"""

from __future__ import annotations

import builtins
from collections import Counter
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import rules
from tasks_core.errors import CapabilityNotSupported, StoreCorrupt
from tasks_core.models import TaskStatus

from tasks_store_sql import _codec
from tasks_store_sql._base import StoreBase
from tasks_store_sql._schema import pending, waiting
from tasks_store_sql._stored import Stored, stored_columns

__all__ = ["CountOps"]

COUNTS, ROW = "n", "r"
"""The two kinds of result rows: a stored count, and a row that may read otherwise."""


class CountOps(StoreBase):
    """``counts`` (see the module docstring)."""

    async def counts(
        self, *, tenant: str | None
    ) -> builtins.dict[tuple[str, TaskStatus], int]:
        """How many tasks of ``tenant`` read each status in each queue (see
        ``TaskStore.counts``); a corrupt document under a live lease counts as stored.

        Raises:
            CapabilityNotSupported: the capability is off.
            InvalidInput: ``tenant`` is neither a string nor ``None``.
            StoreUnavailable: transient failure.
        """
        if not self.capabilities.counts:
            raise CapabilityNotSupported("this store does not count tasks (capability 'counts')")
        rules.check_tenant(tenant)
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> dict[tuple[str, TaskStatus], int]:
            now = await self._now(conn)
            rows = (await conn.execute(self._counting(tenant, now))).all()
            tally: Counter[tuple[str, TaskStatus]] = Counter()
            seen: set[str] = set()
            for kind, task_id, owner, queue, status, number, expires, lease, run_at, *doc in rows:
                stored = (queue, TaskStatus(status))
                if kind == COUNTS:
                    tally[stored] += number
                    continue
                if (tenant is not None and owner != tenant) or task_id in seen:
                    continue  # another tenant's (filtered here: see _counting), or again
                seen.add(task_id)
                tally[stored] -= 1
                if expires is None or expires > now:
                    read = None if doc[0] is None else Stored(*doc)
                    tally[(queue, _presented(task_id, stored[1], lease, run_at, read, now))] += 1
            return {key: number for key, number in tally.items() if number > 0}

        return await self._db.run(op, write=False)

    def _counting(self, tenant: str | None, now: datetime) -> sa.CompoundSelect[Any]:
        """The stored counts by queue and status of ``tenant``, and every row of any tenant
        that may read otherwise: a tenant's condition there would lead SQLite to read
        the tenant's every row through the counts index instead of the three small ones
        (the caller keeps the rows of ``tenant``)."""
        t = self.tables.tasks
        scope = [] if tenant is None else [t.c.tenant == tenant]
        counted = (
            sa.select(sa.literal(COUNTS).label("kind"), sa.cast(sa.null(), t.c.id.type),
                      t.c.tenant, t.c.queue, t.c.status, sa.func.count().label("number"),
                      sa.cast(sa.null(), t.c.expires_at.type),
                      sa.cast(sa.null(), t.c.claim_expires_at.type),
                      sa.cast(sa.null(), t.c.run_at.type),
                      *(sa.cast(sa.null(), c.type) for c in stored_columns(t)))
            .where(*scope)
            .group_by(t.c.tenant, t.c.queue, t.c.status)
        )
        leased = sa.and_(pending(t.c.status), t.c.claim_expires_at > now)
        row = sa.select(sa.literal(ROW), t.c.id, t.c.tenant, t.c.queue, t.c.status,
                        sa.literal(1), t.c.expires_at, t.c.claim_expires_at, t.c.run_at,
                        *(sa.case((leased, c), else_=sa.null()) for c in stored_columns(t)))
        return sa.union_all(  # one arm per index (a row in two arms is read twice)
            counted,
            row.where(t.c.expires_at <= now),
            row.where(t.c.claim_expires_at.is_not(None)),
            row.where(waiting(t.c), t.c.run_at > now),
        )


def _presented(task_id: str, stored: TaskStatus, lease: datetime | None,
               run_at: datetime | None, doc: Stored | None, now: datetime) -> TaskStatus:
    """The status a visible row reads at ``now`` (``rules.present`` on its columns; the
    document decides ``claimed`` against ``running``)."""
    if stored != TaskStatus.PENDING:
        return stored
    if lease is not None and lease > now:
        if doc is None:
            return stored
        try:
            return rules.present(_codec.decode_snapshot(task_id, doc), now).status
        except StoreCorrupt:
            return stored
    if run_at is not None and run_at > now:
        return TaskStatus.SCHEDULED
    return TaskStatus.PENDING
