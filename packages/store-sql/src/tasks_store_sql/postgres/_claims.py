"""PostgreSQL's claims and leases on asyncpg: ``claim_next`` in up to two tiers,
``claim``, ``renew``, ``report_progress`` and ``release`` in one lock and one write each,
and ``worker_snapshot`` in one read.

``claim_next`` of shared queues runs (1) the claim statement
(:func:`._claim_sql.claim_statement`); when it left a candidate alone, (2) the SQL
store's own claim decided by :mod:`tasks_core.storekit` (:meth:`_claim_locked`,
inherited), which fails a task past its delivery limit and skips corrupt records. A
statement is its own transaction at READ COMMITTED; candidates ranked past ``start`` are
held. ``claim_next`` with limited queues (``limits``, ``exclusive``) is the SQL store's.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
from datetime import datetime
from typing import Any

from tasks_core import rules
from tasks_core.errors import LeaseLost, StoreCorrupt, TaskNotFound
from tasks_core.models import Claim, Lease, Snapshot, built
from tasks_core.storekit import ClaimRequest, Started, claim_one

from tasks_store_sql import _codec
from tasks_store_sql._batch import Loaded
from tasks_store_sql._claims import ClaimOrder
from tasks_store_sql._stored import STORED_COLUMNS, Stored
from tasks_store_sql.postgres._base import PostgresBase
from tasks_store_sql.postgres._statements import MILLISECOND, join_list

__all__ = ["PostgresClaims"]

log = logging.getLogger("tasks_store_sql")


class PostgresClaims(PostgresBase):
    """Claims and leases of PostgreSQL on asyncpg (see the module docstring)."""

    async def _claim_next(self, request: ClaimRequest) -> builtins.list[Claim]:
        """``claim_next`` in tiers (see the module docstring); claims in claim order, the
        ones past ``start`` held. The statements do not guard limited queues (lock rows,
        counts, the claim log): such a call is the SQL store's."""
        if request.limited:
            return await super()._claim_next(request)
        names, limit = sorted(request.queues), request.limit
        start = limit if request.start is None else request.start
        worker_id, lease_for = request.worker_id, request.lease_for
        claims, left_alone = await self._claim_statement(worker_id, lease_for, names, limit,
                                                         start)
        if left_alone and len(claims) < limit:  # for the rules to decide
            claims += await self._claim_locked(dataclasses.replace(
                request, limit=limit - len(claims), start=_unstarted(start, claims)))
            claims.sort(key=lambda keyed: keyed[0])  # claim order as they were candidates
        return [claim for _, claim in claims]

    async def _claim_locked(
        self, request: ClaimRequest
    ) -> builtins.list[tuple[ClaimOrder, Claim]]:
        """The third tier: the SQL store's ``claim_next`` (:mod:`tasks_core.storekit`
        decides; failures past the delivery limit reported once committed)."""
        return await self._claim_keyed(request)

    async def _claim_statement(
        self, worker_id: str, lease_for: float, names: list[str], limit: int, start: int,
    ) -> tuple[list[tuple[ClaimOrder, Claim]], bool]:
        """The claims the claim statement writes (candidates ranked past ``start`` held),
        each with its claim order as a candidate, and whether it left a candidate
        alone."""
        one = len(names) == 1
        statement = self.claim_sql(one=one)
        args = statement.args(
            now=self._now_arg(),
            limit=limit,
            start=start,
            worker=worker_id,
            lease=rules.check_lease_for(lease_for) // MILLISECOND,
            tokens=join_list(rules.new_lease_tokens(limit)),
            **({"queue": names[0]} if one else {"queues": names}),
        )

        async def op(driver: Any) -> list[Any]:
            return list(await driver.fetch(statement.sql, *args))

        records = await self._db.run_driver(op, single_statement=True)
        claims: list[tuple[ClaimOrder, Claim]] = []
        left_alone = False
        width = len(STORED_COLUMNS)
        for record in sorted(records, key=lambda found: found[0]):  # by rank
            _, task_id, now, *values = record
            stored = Stored(*values[:width])
            token, version, neg_priority, available = values[width:]
            if token is None:  # (a claimed row has its new token)
                left_alone = True
                continue
            claim = self._claimed(task_id, now, stored, token, version, worker_id)
            if claim is not None:
                claims.append(((neg_priority, available, task_id), claim))
        return claims, left_alone

    def _claimed(
        self, task_id: str, now: datetime, stored: Stored, token: str, version: int,
        worker_id: str,
    ) -> Claim | None:
        """The claim the claim statement wrote (``None``, logged, for a record that does
        not decode: it keeps the lease the statement gave it, and costs only itself). The
        decoded snapshot is kept, with the row's version, for the completion of this run
        (:mod:`._complete_sql`, else the lock that reads this row again)."""
        try:
            snapshot = _codec.decode_snapshot(task_id, stored)
        except StoreCorrupt:
            log.warning("claim_next claimed task %r, whose record is corrupt; left to its "
                        "lease", task_id)
            return None
        self.decoded.keep(task_id, stored, snapshot, version)
        claim = snapshot.claim
        assert claim is not None  # the statement wrote it
        lease = built(  # (the worker id was checked, the token made by the rules)
            Lease, task_id=task_id, worker_id=worker_id, token=token,
            generation=snapshot.lease_generation, expires_at=claim.expires_at)
        return Claim(rules.present(snapshot, rules.tick(now)), lease)

    async def _claim_started(self, task_id: str, worker_id: str, lease_for: float) -> Started:
        """``claim`` on the driver: the row locked with the clock, decided by
        :func:`tasks_core.storekit.claim_one`, written — the failure past the delivery
        limit too (the caller raises once committed)."""

        async def op(driver: Any) -> Started:
            loaded, now = await self._lock(driver, [task_id], [])
            row = loaded.get(task_id)
            if row is None or now is None:
                raise TaskNotFound(task_id)
            started = claim_one(row.snapshot, worker_id, lease_for, now)
            row.put(started.snapshot, row.token if started.token is None else started.token)
            failed = [] if started.failure is None else [(task_id, started.failure)]
            await self._write(driver, [row], failed)
            return started

        return await self._db.run_driver(op)

    # -- leases --------------------------------------------------------------------------

    async def _leased_row(self, driver: Any, lease: Lease) -> tuple[Loaded, Snapshot, datetime]:
        loaded, now = await self._lock(driver, [lease.task_id], [])
        row = loaded.get(lease.task_id)
        if row is None or now is None:
            raise LeaseLost()
        return row, row.snapshot, now

    async def _worker_snapshot(self, lease: Lease) -> Snapshot:
        """``worker_snapshot`` on the driver: one read, its own transaction (a worker reads
        a claim it held a while again before it starts it: once per task when a worker
        holds many)."""

        async def op(driver: Any) -> Snapshot:
            statement = self.sql.read
            row = await driver.fetchrow(
                statement.sql, *statement.args(now=self._now_arg(), id=lease.task_id))
            if row is None:
                raise LeaseLost()
            *values, token, now = row
            now = rules.tick(now)
            snapshot = _codec.decode_snapshot(lease.task_id, Stored(*values))
            rules.check_lease(snapshot, token, lease, now)
            return rules.present(snapshot, now)

        return await self._db.run_driver(op, single_statement=True)

    async def _renew(self, lease: Lease, lease_for: float) -> Claim:
        """``renew`` on the driver: one lock, one write."""

        async def op(driver: Any) -> Claim:
            row, snapshot, now = await self._leased_row(driver, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new, token, new_lease = rules.renew(snapshot, row.token, lease, lease_for, now)
            row.put(new, token)
            await self._write(driver, [row])
            return Claim(rules.present(new, now), new_lease)

        return await self._db.run_driver(op)

    async def _report_progress(
        self, lease: Lease, value: float, message: str | None
    ) -> Snapshot:
        """``report_progress`` on the driver: one lock, one write."""

        async def op(driver: Any) -> Snapshot:
            row, snapshot, now = await self._leased_row(driver, lease)
            rules.check_lease(snapshot, row.token, lease, now)
            new = rules.report_progress(snapshot, row.token, lease, value, message, now)
            if new is not snapshot:
                row.put(new, row.token)
                await self._write(driver, [row])
            return rules.present(new, now)

        return await self._db.run_driver(op)

    async def _release(self, lease: Lease) -> Snapshot:
        """``release`` on the driver: one lock, one write (with the wakeup)."""

        async def op(driver: Any) -> Snapshot:
            row, snapshot, now = await self._leased_row(driver, lease)
            new = rules.release(snapshot, row.token, lease, now)
            row.put(new, row.token)
            await self._write(driver, [row], wake=[new.queue])
            return rules.present(new, now)

        return await self._db.run_driver(op)


def _unstarted(start: int, claims: list[tuple[ClaimOrder, Claim]]) -> int:
    """How many of ``start`` the claims of an earlier tier left to start: a tier ranks
    the candidates it leaves alone too, so those before its claims keep a start."""
    started = sum(1 for _, claim in claims if claim.snapshot.claim is not None
                  and not claim.snapshot.claim.held)
    return max(0, start - started)
