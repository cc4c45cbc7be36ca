"""``create_many`` of MongoStore (capability ``batch_create``: a replica set or a sharded
cluster): a batch of new tasks in one multi-document transaction, all or nothing.

The transaction reads the documents holding any of the batch's ids, lets ``storekit``
decide, counts the batch into the ``tasks`` counter at once (conditionally: past
``max_tasks`` it matches nothing), writes each tenant's counter document and counts its
active tasks (two batches of one tenant always conflict: no write skew), then inserts
every document with one ``insert_many``. A standalone server has no transactions: the
capability is off there and the call raises ``CapabilityNotSupported``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from pymongo.errors import DuplicateKeyError, PyMongoError
from tasks_core import storekit
from tasks_core.errors import CapabilityNotSupported, CapacityExceeded, StoreUnavailable
from tasks_core.models import NewTask, Snapshot

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, MongoBase, operation
from tasks_store_mongo._driver import application_session

__all__ = ["MongoBulk"]


class MongoBulk(MongoBase):
    """``create_many`` (see the module docstring)."""

    @operation
    async def create_many(
        self, news: Sequence[NewTask], *, transaction: Any = None
    ) -> builtins.list[Snapshot]:
        """Store every task of ``news`` at one instant in one transaction, or none (see
        ``TaskStore.create_many``); ``transaction`` as for ``create``.

        Raises:
            CapabilityNotSupported: a standalone server (no transactions); nothing stored.
            InvalidInput: a bad batch, or ``transaction`` as for ``create``.
            TaskExists, CapacityExceeded: nothing stored.
            StoreCorrupt: a document holding one of the ids fails validation.
            StoreUnavailable: transient failure (with ``transaction``: MongoDB aborted
                the application's transaction; run it again); nothing stored.
        """
        if not self.capabilities.batch_create:
            raise CapabilityNotSupported(
                "MongoStore creates a batch atomically only on a replica set or a sharded "
                "cluster (capability 'batch_create' is off)")
        batch = storekit.check_create_many(news)
        session = (None if transaction is None
                   else application_session(self.driver, self._client, transaction))
        if not batch:
            return []
        for tenant in storekit.tenant_counts(batch):
            await self._ensure_tenant(tenant)
        if session is not None:
            try:
                return await self._create_batch(batch, session)
            except DuplicateKeyError:
                raise StoreUnavailable("A task of the batch was created concurrently; run "
                                       "your transaction again") from None
            except PyMongoError as exc:
                if exc.has_error_label("TransientTransactionError"):
                    raise StoreUnavailable("MongoDB aborted your transaction (it conflicted "
                                           "with another write); run it again") from exc
                raise
        for attempt in range(CAS_ATTEMPTS):
            try:
                async with self._creators:  # creates take turns (see ``create``)
                    created: list[Snapshot] = await self._atomically(
                        lambda session: self._create_batch(batch, session))
                return created
            except DuplicateKeyError:  # created meanwhile: the next read names it
                await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create_batch(self, batch: Sequence[NewTask], session: Any) -> list[Snapshot]:
        """The reads, checks and writes of ``create_many`` in the transaction of
        ``session``; every check comes before the first write.

        Raises:
            TaskExists, CapacityExceeded: nothing written.
        """
        ids = [new.id for new in batch]
        found = [doc async for doc in self._tasks.find(
            {"_id": {"$in": ids}}, NO_HISTORY, session=session)]
        now = await self._now()
        taken = {doc["_id"]: _codec.decode_task(doc["_id"], doc) for doc in found}
        storekit.refuse_taken(batch, taken, now)
        counter = await self._counters.find_one({"_id": "tasks"}, session=session)
        stored = int(counter["n"]) if counter is not None else 0
        storekit.check_stored_room(len(batch), stored, self.limits)
        cap = self.limits.max_active_tasks_per_scope
        for tenant, count in storekit.tenant_counts(batch).items():
            if cap is None:
                break
            await self._counters.update_one(
                {"_id": f"tenant:{tenant}"}, {"$inc": {"v": 1}}, session=session)
            active = await self._tasks.count_documents(
                {"tenant": tenant, "status": {"$in": list(_codec.ACTIVE_STATUSES)},
                 "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]},
                session=session, limit=cap)
            if active + count > cap:
                raise CapacityExceeded("max_active_tasks_per_scope")
        result = await self._counters.update_one(
            {"_id": "tasks", "n": {"$lte": self.limits.tasks_cap - len(batch)}},
            {"$inc": {"n": len(batch)}}, session=session)
        if result.matched_count != 1:
            raise CapacityExceeded("max_tasks")
        snapshots = storekit.new_snapshots(batch, now)
        await self._tasks.insert_many([_codec.new_document(s) for s in snapshots],
                                      ordered=True, session=session)
        return snapshots
