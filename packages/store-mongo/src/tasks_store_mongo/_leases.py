"""Lease holders' writes (private): ``renew``, ``report_progress``, ``release`` and
``worker_snapshot``.

Each reads the task document, checks the lease is exactly the stored one
(``rules.check_lease``: its token kept beside the snapshot, live unless released) and
writes what :mod:`tasks_core.rules` decides by compare-and-set (see ``_base``), reading
again when another writer won. A release sets ``_wake``: the task is claimable at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tasks_core import rules
from tasks_core.errors import LeaseLost
from tasks_core.models import Claim, Lease, Snapshot

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, MongoBase, operation

__all__ = ["MongoLeases"]


class MongoLeases(MongoBase):
    """``renew``, ``report_progress``, ``release`` and ``worker_snapshot``."""

    async def _leased(
        self, lease: Lease, *, live: bool = True
    ) -> tuple[dict[str, Any], Snapshot, datetime]:
        """Read the leased task and check ``lease`` is exactly its lease (and live)."""
        if not isinstance(lease, Lease):
            raise TypeError("lease must be a Lease")
        doc = await self._load(lease.task_id)
        if doc is None:
            raise LeaseLost()
        now = await self._now()
        snapshot = _codec.decode_task(lease.task_id, doc)
        rules.check_lease(
            snapshot, _codec.token_of(lease.task_id, doc), lease, now, require_live=live
        )
        return doc, snapshot, now

    @operation
    async def renew(self, lease: Lease, lease_for: float) -> Claim:
        """Extend a live lease (see ``TaskStore.renew``).

        Raises:
            LeaseLost, InvalidInput, StoreCorrupt, StoreUnavailable.
        """
        for attempt in range(CAS_ATTEMPTS):
            doc, snapshot, now = await self._leased(lease)
            token = _codec.token_of(lease.task_id, doc)
            new, new_token, new_lease = rules.renew(snapshot, token, lease, lease_for, now)
            if await self._cas(doc, self._update(new, token=new_token)):
                return Claim(rules.present(new, now), new_lease)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @operation
    async def report_progress(self, lease: Lease, value: float, message: str | None) -> Snapshot:
        """Record progress (see ``TaskStore.report_progress``).

        Raises:
            LeaseLost, InvalidInput, StoreCorrupt, StoreUnavailable.
        """
        for attempt in range(CAS_ATTEMPTS):
            doc, snapshot, now = await self._leased(lease)
            token = _codec.token_of(lease.task_id, doc)
            new = rules.report_progress(snapshot, token, lease, value, message, now)
            if new is snapshot or await self._cas(doc, self._update(new)):
                return rules.present(new, now)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @operation
    async def release(self, lease: Lease) -> Snapshot:
        """Make the task claimable again at once (see ``TaskStore.release``).

        Raises:
            LeaseLost, StoreCorrupt, StoreUnavailable.
        """
        for attempt in range(CAS_ATTEMPTS):
            doc, snapshot, now = await self._leased(lease, live=False)
            new = rules.release(snapshot, _codec.token_of(lease.task_id, doc), lease, now)
            if await self._cas(doc, self._update(new, wake=True)):
                return rules.present(new, now)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @operation
    async def worker_snapshot(self, lease: Lease) -> Snapshot:
        """The snapshot for the lease holder (see ``TaskStore.worker_snapshot``).

        Raises:
            LeaseLost, StoreCorrupt, StoreUnavailable.
        """
        _, snapshot, now = await self._leased(lease)
        return rules.present(snapshot, now)
