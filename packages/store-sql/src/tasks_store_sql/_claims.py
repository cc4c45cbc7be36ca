"""Claims and leases: ``claim``, ``claim_next``, ``renew``, ``report_progress``,
``release`` and ``worker_snapshot``.

``claim_next`` is the hot path: one transaction samples the clock, then locks the oldest
claimable rows with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL, MariaDB 10.6+) so it never
waits for another claimer, re-checks each row with :func:`tasks_core.rules.is_claimable`
and writes the claims back. SQLite serializes writers (``BEGIN IMMEDIATE``), so no row
locks are needed there. An exclusive queue is guarded by its own lock row, taken with
``SKIP LOCKED`` too: while another claimer holds it, or any task of the queue holds a live
lease, the queue yields nothing.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import reports, rules
from tasks_core.errors import InvalidInput, LeaseLost, StoreCorrupt, TaskNotFound, Unavailable
from tasks_core.events import EventRecord
from tasks_core.models import Claim, Lease, Snapshot, TaskStatus

from tasks_store_sql._base import StoreBase, TaskRow
from tasks_store_sql._db import CommitThenRaise

__all__ = ["ClaimOps"]

log = logging.getLogger("tasks_store_sql")
_PENDING = TaskStatus.PENDING.value


class ClaimOps(StoreBase):
    """Claim and lease operations (see the module docstring)."""

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound: unknown task.
            Unavailable: terminal, expired, waiting, leased, or past its delivery limit.
            Deferred: a retry is not due yet.
            InvalidInput: bad ``lease_for`` or ``worker_id``.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient database failure.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        if not isinstance(task_id, str):
            raise InvalidInput("task_id must be a string")
        await self._ensure_ready()
        if self._fast is not None:
            return await self._fast.claim(task_id, worker_id, lease_for)

        async def op(conn: AsyncConnection) -> Claim:
            row = await self._fetch(conn, task_id, lock=True)
            if row is None:
                raise TaskNotFound(task_id)
            now = await self._now(conn)
            snapshot = row.decode()
            rules.check_claimable(snapshot, now)
            claim = await self._start(conn, row, snapshot, worker_id, lease_for, now)
            if isinstance(claim, EventRecord):
                failed[:] = [claim]
                raise CommitThenRaise(
                    Unavailable(f"The task exceeded {snapshot.work.max_deliveries} deliveries")
                )
            return claim

        failed: list[EventRecord] = []  # the failure past the delivery limit, if any
        try:
            return await self._db.run(op, write=True)
        except Unavailable:
            if failed:  # raised after the commit: the failure is written
                reports.delivery_limit(task_id, failed[0])
            raise

    async def _start(
        self,
        conn: AsyncConnection,
        row: TaskRow,
        snapshot: Snapshot,
        worker_id: str,
        lease_for: float,
        now: datetime,
    ) -> Claim | EventRecord:
        """Claim ``row``, or fail it past its delivery limit (the failure's record)."""
        new, token, lease, failure = rules.start_claim(snapshot, worker_id, lease_for, now)
        if failure is not None:
            await self._save(conn, row, new, row.token)
            await self._record(conn, row.id, failure)
            return failure
        assert lease is not None
        await self._save(conn, row, new, token)
        return Claim(rules.present(new, now), lease)

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` oldest claimable tasks (see ``TaskStore.claim_next``).

        Raises:
            InvalidInput: bad ``lease_for``, ``worker_id``, ``limit`` or queue names.
            StoreUnavailable: transient database failure.
        """
        rules.check_lease_for(lease_for)
        rules.check_worker_id(worker_id)
        wanted = rules.check_queues(queues)
        exclusive_set = rules.check_queues(exclusive, allow_empty=True)
        rules.check_limit(limit, maximum=rules.MAX_BATCH)
        await self._ensure_ready()
        guarded = sorted(wanted & exclusive_set)
        if self._fast is not None and not guarded:
            return await self._fast.claim_next(worker_id, lease_for, sorted(wanted), limit)
        if guarded and self._db.kind != "sqlite":
            await self._ensure_queue_locks(guarded)

        async def op(
            conn: AsyncConnection,
        ) -> tuple[list[Claim], list[tuple[str, EventRecord]]]:
            now = await self._now(conn)
            open_queues = sorted(wanted - exclusive_set)
            free = [q for q in guarded if await self._queue_is_free(conn, q, now)]
            return await self._claim_oldest(
                conn, worker_id, lease_for, now, open_queues, free, limit
            )

        claims, failures = await self._db.run(op, write=True)
        for task_id, record in failures:
            reports.delivery_limit(task_id, record)
        return claims

    async def _claim_oldest(
        self,
        conn: AsyncConnection,
        worker_id: str,
        lease_for: float,
        now: datetime,
        open_queues: list[str],
        free: list[str],
        limit: int,
    ) -> tuple[list[Claim], list[tuple[str, EventRecord]]]:
        claims: list[Claim] = []
        seen: set[str] = set()
        free = list(free)
        saves: list[tuple[str, int, Snapshot, str | None]] = []
        failures: list[tuple[str, EventRecord]] = []
        while len(claims) < limit:
            batch: list[tuple[Any, TaskRow]] = []
            if open_queues:
                batch += await self._candidates(conn, open_queues, now, limit - len(claims), seen)
            for queue in free:
                batch += await self._candidates(conn, [queue], now, 1, seen)
            if not batch:
                break
            batch.sort(key=lambda item: item[0])
            for _, row in batch:
                if len(claims) >= limit:
                    break
                seen.add(row.id)
                try:
                    snapshot = row.decode()
                except StoreCorrupt:
                    reports.corrupt_skipped(log, row.id, "claim_next")
                    continue
                if snapshot.queue not in open_queues and snapshot.queue not in free:
                    continue  # an exclusive queue already served by this call
                if not rules.is_claimable(snapshot, now):
                    continue
                new, token, lease, failure = rules.start_claim(
                    snapshot, worker_id, lease_for, now
                )
                if failure is not None:  # past its delivery limit: failed, not served
                    saves.append((row.id, row.row_version, new, row.token))
                    failures.append((row.id, failure))
                    continue
                assert lease is not None
                saves.append((row.id, row.row_version, new, token))
                claims.append(Claim(rules.present(new, now), lease))
                if snapshot.queue in free:
                    free.remove(snapshot.queue)
        await self._save_rows(conn, saves)
        for task_id, record in failures:
            await self._record(conn, task_id, record)
        return claims, failures

    async def _candidates(
        self,
        conn: AsyncConnection,
        queues: list[str],
        now: datetime,
        limit: int,
        seen: set[str],
    ) -> list[tuple[Any, TaskRow]]:
        """Up to ``limit`` oldest claimable rows of ``queues``, locked, skipping rows
        other sessions hold; keyed by ``(created_at, id)``."""
        stmt = self._statements.candidates
        params = {"b_queues": queues, "b_now": now, "b_seen": sorted(seen), "b_limit": limit}
        rows = (await conn.execute(stmt, params)).all()
        return [((r[5], r[0]), TaskRow(*r[:5])) for r in rows]

    async def _queue_is_free(self, conn: AsyncConnection, queue: str, now: datetime) -> bool:
        """Take the exclusive queue's lock row (without waiting) and check that no task
        of the queue holds a live lease."""
        if self._db.kind != "sqlite":
            locks = self.tables.locks
            stmt = (
                sa.select(locks.c.name)
                .where(locks.c.name == _queue_lock(queue))
                .with_for_update(skip_locked=True)
            )
            if (await conn.execute(stmt)).first() is None:
                return False
        t = self.tables.tasks
        live = sa.select(t.c.id).where(t.c.queue == queue, t.c.claim_expires_at > now).limit(1)
        return (await conn.execute(live)).first() is None

    async def _ensure_queue_locks(self, queues: list[str]) -> None:
        """Create the lock rows of exclusive queues seen for the first time (own
        transaction; an existing row is never touched, so this never waits)."""
        missing = [q for q in queues if q not in self._queue_locks]
        if not missing:
            return
        locks = self.tables.locks

        async def op(conn: AsyncConnection) -> None:
            names = [_queue_lock(q) for q in missing]
            found = await conn.execute(sa.select(locks.c.name).where(locks.c.name.in_(names)))
            absent = sorted(set(names) - {r[0] for r in found})
            if not absent:
                return
            rows = [{"name": n, "value": 0} for n in absent]
            if self._db.kind == "postgresql":
                await conn.execute(postgresql.insert(locks).on_conflict_do_nothing(), rows)
            else:
                await conn.execute(sa.insert(locks).prefix_with("IGNORE"), rows)

        await self._db.run(op, write=True)
        self._queue_locks.update(missing)

    # -- leases --------------------------------------------------------------------------

    async def _leased(
        self, conn: AsyncConnection, lease: Lease
    ) -> tuple[TaskRow, Snapshot, datetime]:
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a Lease")
        row = await self._fetch(conn, lease.task_id, lock=True)
        if row is None:
            raise LeaseLost()
        now = await self._now(conn)
        return row, row.decode(), now

    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """Extend a live lease (see ``TaskStore.renew``).

        Raises:
            LeaseLost: not the exact live lease.
            InvalidInput: bad ``lease_for``.
            StoreCorrupt, StoreUnavailable: as for ``get``.
        """
        _check_lease_type(lease)
        await self._ensure_ready()
        if self._fast is not None:
            return await self._fast.renew(lease, lease_for)

        async def op(conn: AsyncConnection) -> Claim:
            row, snapshot, now = await self._leased(conn, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new, token, new_lease = rules.renew(snapshot, row.token, lease, lease_for, now)
            await self._save(conn, row, new, token)
            return Claim(rules.present(new, now), new_lease)

        return await self._db.run(op, write=True)

    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """Record progress for the lease holder (see ``TaskStore.report_progress``).

        Raises:
            LeaseLost: not the exact live lease.
            InvalidInput: ``value`` outside 0..100.
            StoreCorrupt, StoreUnavailable: as for ``get``.
        """
        _check_lease_type(lease)
        await self._ensure_ready()
        if self._fast is not None:
            return await self._fast.report_progress(lease, value, message)

        async def op(conn: AsyncConnection) -> Snapshot:
            row, snapshot, now = await self._leased(conn, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new = rules.report_progress(snapshot, row.token, lease, value, message, now)
            if new is not snapshot:
                await self._save(conn, row, new, row.token)
            return rules.present(new, now)

        return await self._db.run(op, write=True)

    async def release(self, lease: Lease) -> Snapshot:
        """Make the task claimable again at once (see ``TaskStore.release``).

        Raises:
            LeaseLost: not the exact lease (expiry is not checked).
            StoreCorrupt, StoreUnavailable: as for ``get``.
        """
        _check_lease_type(lease)
        await self._ensure_ready()
        if self._fast is not None:
            return await self._fast.release(lease)

        async def op(conn: AsyncConnection) -> Snapshot:
            row, snapshot, now = await self._leased(conn, lease)
            new = rules.release(snapshot, row.token, lease, now)
            await self._save(conn, row, new, row.token)
            await self._notify(conn, new.queue)
            return rules.present(new, now)

        return await self._db.run(op, write=True)

    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """The snapshot for the lease holder (see ``TaskStore.worker_snapshot``).

        Raises:
            LeaseLost: not the exact live lease.
            StoreCorrupt, StoreUnavailable: as for ``get``.
        """
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a Lease")
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> Snapshot:
            row = await self._fetch(conn, lease.task_id, lock=False)
            if row is None:
                raise LeaseLost()
            now = await self._now(conn)
            snapshot = row.decode()
            rules.check_lease(snapshot, row.token, lease, now)
            return rules.present(snapshot, now)

        return await self._db.run(op, write=False)


def _check_lease_type(lease: Lease) -> None:
    """Raises: TypeError: not a ``Lease``."""
    if not isinstance(lease, Lease):
        raise TypeError("lease must be a Lease")


def _queue_lock(queue: str) -> str:
    return f"queue:{queue}"
