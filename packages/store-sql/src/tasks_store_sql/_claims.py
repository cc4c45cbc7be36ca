"""Claims and leases on the SQL path: ``claim``, ``claim_next``, ``renew``,
``report_progress``, ``release`` and ``worker_snapshot``.

The claim is decided by :mod:`tasks_core.storekit`; this module fetches and writes.
``claim_next`` reads the clock, then locks the first claimable rows per
``ClaimScan.fetches()`` group with ``FOR UPDATE SKIP LOCKED`` (never waiting for another
claimer; SQLite's ``BEGIN IMMEDIATE`` serializes writers instead), offers them to the scan
in claim order and writes its decisions in the same transaction. A limited queue
(``limits``; ``exclusive``: ``max_running=1``) is guarded by its own lock row, which its
claimers take in turn (never the claimers of other queues), under which its live leases
and recent claims are counted and its claims logged (:mod:`._queue_limits`).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from tasks_core import reports, rules
from tasks_core.errors import LeaseLost, StoreCorrupt, TaskNotFound
from tasks_core.models import Claim, Lease, Snapshot
from tasks_core.storekit import (
    ClaimRequest,
    ClaimScan,
    QueueLimits,
    Started,
    check_claim,
    check_claim_next,
    claim_one,
    claim_result,
)

from tasks_store_sql._base import TaskRow
from tasks_store_sql._queue_limits import count_at, count_queues, log_claims, queue_lock
from tasks_store_sql._reads import ReadOps

__all__ = ["ClaimOps", "ClaimOrder"]

log = logging.getLogger("tasks_store_sql")

ClaimOrder = tuple[int, datetime, str]
"""A candidate's place in the order the SQL store serves them: ``(neg_priority,
available_at, id)`` (``storekit.claim_order``)."""


class ClaimOps(ReadOps):
    """Claim and lease operations (see the module docstring)."""

    async def claim(self, task_id: str, worker_id: str, lease_for: float) -> Claim:
        """Claim exactly ``task_id`` (see ``TaskStore.claim``).

        Raises:
            TaskNotFound: unknown task.
            Unavailable: terminal, expired, waiting, leased, or past its delivery limit
                (then the failure is committed first, and reported once).
            Deferred: a retry is not due yet.
            InvalidInput: bad ``lease_for`` or ``worker_id``.
            StoreCorrupt: the record fails validation.
            StoreUnavailable: transient database failure.
        """
        check_claim(task_id, worker_id, lease_for)
        await self._ensure_ready()
        return claim_result(await self._claim_started(task_id, worker_id, lease_for))

    async def _claim_started(self, task_id: str, worker_id: str, lease_for: float) -> Started:
        """``claim`` decided and committed (PostgreSQL overrides)."""

        async def op(conn: AsyncConnection) -> Started:
            row = await self._fetch(conn, task_id, lock=True)
            if row is None:
                raise TaskNotFound(task_id)
            now = await self._now(conn)
            started = claim_one(row.decode(), worker_id, lease_for, now)
            await self._save(conn, row, started.snapshot, _token(started, row.token))
            if started.failure is not None:
                await self._record(conn, row.id, started.failure)
            return started

        return await self._db.run(op, write=True)

    async def claim_next(
        self,
        worker_id: str,
        lease_for: float,
        *,
        queues: Sequence[str],
        limit: int = 1,
        exclusive: Collection[str] = (),
        start: int | None = None,
        limits: Mapping[str, QueueLimits] | None = None,
    ) -> builtins.list[Claim]:
        """Claim up to ``limit`` first claimable tasks (see ``TaskStore.claim_next``);
        those past the first ``start`` are held ahead of a free slot; a queue of
        ``limits`` (or ``exclusive``) within its room.

        Raises:
            InvalidInput: bad ``lease_for``, ``worker_id``, ``limit``, ``start``,
                ``limits`` or queue names.
            StoreUnavailable: transient database failure.
        """
        request = check_claim_next(worker_id, lease_for, queues, limit, exclusive, start,
                                   limits)
        await self._ensure_ready()
        return await self._claim_next(request)

    async def _claim_next(self, request: ClaimRequest) -> builtins.list[Claim]:
        """``claim_next`` of checked arguments, in one transaction; the failures past the
        delivery limit reported once committed (PostgreSQL overrides, and falls back to
        :meth:`_claim_keyed`)."""
        return [claim for _, claim in await self._claim_keyed(request)]

    async def _claim_keyed(
        self, request: ClaimRequest
    ) -> builtins.list[tuple[ClaimOrder, Claim]]:
        """The claims of :meth:`_claim_next`, each with the claim order of its task as it
        was a candidate (a claim clears ``retry_at``: its snapshot no longer tells)."""
        guarded = sorted(request.limited)
        if guarded:
            await self._ensure_queue_locks(guarded)

        async def op(conn: AsyncConnection) -> tuple[ClaimScan, dict[str, ClaimOrder]]:
            counts = await count_queues(conn, self.tables, request,
                                        lock=self._db.kind != "sqlite")
            now = await self._now(conn)  # after the locks
            await count_at(conn, self.tables, request, counts, now)
            scan = ClaimScan(request, now, counts.busy, running=counts.running,
                             recent=counts.recent)
            keys = await self._scan(conn, scan)
            await log_claims(conn, self.tables, scan, counts)
            return scan, keys

        scan, keys = await self._db.run(op, write=True)
        scan.report()
        return [(keys[claim.snapshot.id], claim) for claim in scan.claims]

    async def _scan(self, conn: AsyncConnection, scan: ClaimScan) -> dict[str, ClaimOrder]:
        """Offer the first candidates to ``scan`` until it is done or none are left, then
        write its decisions (corrupt records are skipped, nothing written to them); the
        claim order of each task offered."""
        seen: set[str] = set()
        keys: dict[str, ClaimOrder] = {}
        saves: list[tuple[str, int, Snapshot, str | None, str | None]] = []
        failures: list[Started] = []
        while not scan.done:
            batch: list[tuple[Any, TaskRow]] = []
            for queues, most in scan.fetches():
                batch += await self._candidates(conn, queues, scan.now, most, seen)
            if not batch:
                break
            batch.sort(key=lambda item: item[0])
            for _, row in batch:
                if scan.remaining <= 0:
                    break
                seen.add(row.id)
                try:
                    snapshot = row.decode()
                except StoreCorrupt:
                    reports.corrupt_skipped(log, row.id, "claim_next")
                    continue
                keys[row.id] = (-snapshot.priority, rules.available_at(snapshot), row.id)
                started = scan.offer(snapshot)
                if started is None:
                    continue
                saves.append((row.id, row.row_version, started.snapshot,
                              _token(started, row.token), None))
                if started.failure is not None:
                    failures.append(started)
        await self._save_rows(conn, saves)
        for failed in failures:
            assert failed.failure is not None
            await self._record(conn, failed.snapshot.id, failed.failure)
        return keys

    async def _candidates(
        self,
        conn: AsyncConnection,
        queues: list[str],
        now: datetime,
        limit: int,
        seen: set[str],
    ) -> list[tuple[Any, TaskRow]]:
        """Up to ``limit`` first claimable rows of ``queues``, locked, skipping rows
        other sessions hold; keyed by ``(neg_priority, available_at, id)`` (as stored)."""
        stmt = self._statements.candidates
        params = {"b_queues": queues, "b_now": now, "b_seen": sorted(seen), "b_limit": limit}
        rows = (await conn.execute(stmt, params)).all()
        width = len(self._task_columns())  # then neg_priority and available_key
        return [((r[width], r[width + 1], r[0]), TaskRow.of(r)) for r in rows]

    async def next_available(self, queues: Sequence[str]) -> datetime | None:
        """The earliest available instant after the store's ``now`` of a task of
        ``queues`` that waits for it (see ``TaskStore.next_available``): one read of the
        waiting index, a range per queue.

        Raises:
            InvalidInput: bad queue names.
            StoreUnavailable: transient database failure.
        """
        wanted = sorted(rules.check_queues(queues))
        await self._ensure_ready()

        async def op(conn: AsyncConnection) -> datetime | None:
            now = await self._now(conn)
            params = {"b_queues": wanted, "b_now": now}
            found: datetime | None = (
                await conn.execute(self._statements.next_available, params)).scalar()
            return found

        return await self._db.run(op, write=False)

    async def _ensure_queue_locks(self, queues: list[str]) -> None:
        """Create the lock rows of limited queues seen for the first time (own
        transaction; an existing row is never touched, so this never waits)."""
        missing = [q for q in queues if q not in self._queue_locks]
        if not missing:
            return
        locks = self.tables.locks

        async def op(conn: AsyncConnection) -> None:
            names = [queue_lock(q) for q in missing]
            found = await conn.execute(sa.select(locks.c.name).where(locks.c.name.in_(names)))
            absent = sorted(set(names) - {r[0] for r in found})
            if not absent:
                return
            rows = [{"name": n, "value": 0} for n in absent]
            if self._db.kind == "postgresql":
                await conn.execute(postgresql.insert(locks).on_conflict_do_nothing(), rows)
            elif self._db.kind == "sqlite":
                await conn.execute(sqlite.insert(locks).on_conflict_do_nothing(), rows)
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
        return await self._renew(lease, lease_for)

    async def _renew(self, lease: Lease, lease_for: float) -> Claim:
        """``renew`` once checked (PostgreSQL overrides)."""

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
        return await self._report_progress(lease, value, message)

    async def _report_progress(
        self, lease: Lease, value: float, message: str | None
    ) -> Snapshot:
        """``report_progress`` once checked (PostgreSQL overrides)."""

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
        return await self._release(lease)

    async def _release(self, lease: Lease) -> Snapshot:
        """``release`` once checked (PostgreSQL overrides)."""

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
        return await self._worker_snapshot(lease)

    async def _worker_snapshot(self, lease: Lease) -> Snapshot:
        """``worker_snapshot`` in a transaction of the SQL path (PostgreSQL overrides)."""

        async def op(conn: AsyncConnection) -> Snapshot:
            row = await self._fetch(conn, lease.task_id, lock=False)
            if row is None:
                raise LeaseLost()
            now = await self._now(conn)
            snapshot = row.decode()
            rules.check_lease(snapshot, row.token, lease, now)
            return rules.present(snapshot, now)

        return await self._db.run(op, write=False)


def _token(started: Started, stored: str | None) -> str | None:
    """The lease token to write for ``started``: its new one, or on a failure the stored
    one."""
    return stored if started.token is None else started.token


def _check_lease_type(lease: Lease) -> None:
    """Raises: TypeError: not a ``Lease``."""
    if not isinstance(lease, Lease):
        raise TypeError("lease must be a Lease")

