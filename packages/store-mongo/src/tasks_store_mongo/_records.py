"""Task documents created, read and removed (private): ``create``, ``get``, ``list``,
``history``, ``delete`` and ``reap``.

The rules decide (:mod:`tasks_core.rules`); this module reads and writes. ``create``,
``delete`` and ``reap`` also keep the capacity counters (``max_tasks``,
``max_active_tasks_per_scope``), in one multi-document transaction on a replica set — for
``create(transaction=session)``, the application's transaction on its session; a
replaced or deleted document is matched on its write tag like any compare-and-set (see
``_base``). Reads never return an expired task or one of another tenant.
"""

from __future__ import annotations

import builtins
import logging
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError, PyMongoError
from tasks_core import rules
from tasks_core.errors import (
    CapabilityNotSupported,
    InvalidInput,
    StoreUnavailable,
    TaskExists,
    TaskNotFound,
    Unavailable,
)
from tasks_core.events import EventRecord
from tasks_core.models import NewTask, Snapshot, TaskQuery

from tasks_store_mongo import _codec, _scopes
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, MongoBase, operation
from tasks_store_mongo._driver import application_session, settle

__all__ = ["MongoRecords"]

log = logging.getLogger("tasks_store_mongo")


class _Retry(Exception):
    """A compare-and-set inside ``create``/``delete`` lost: read again."""


class MongoRecords(MongoBase):
    """``create``, ``get``, ``list``, ``history``, ``delete`` and ``reap``."""

    @operation
    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        """Store ``new`` at revision 0 with the capacity checks (see ``TaskStore.create``).

        Args:
            new: the task.
            replace: the current snapshot of a finished or expired task to replace.
            transaction: the application's client session (PyMongo ``AsyncClientSession``
                or motor ``AsyncIOMotorClientSession``) of the store's own client, inside
                a transaction the application started (what ``App.submit(...,
                transaction=session)`` passes): the task, its replacement and the
                counters are written in that transaction, so they exist if and only if
                the application commits. Its commit's write concern is the
                application's. Every other create conflicts with it until it ends (they
                all write the ``tasks`` counter): keep that transaction short.

        Raises:
            TaskExists, RevisionConflict, Unavailable, TaskNotFound, CapacityExceeded,
            StoreCorrupt: as always; with ``transaction``, nothing written in it.
            InvalidInput: a bad ``new`` or ``replace``; ``transaction`` not a session of
                the store's client in a transaction in progress (nothing written).
            CapabilityNotSupported: ``transaction`` given on a standalone server (no
                transactions); nothing written.
            StoreUnavailable: transient failure; with ``transaction``: MongoDB aborted
                the application's transaction (a write conflict): run it again.
        """
        if transaction is not None and not self.capabilities.transactional_submit:
            raise CapabilityNotSupported(
                "MongoStore writes inside an application's transaction only on a replica "
                "set or a sharded cluster (capability 'transactional_submit' is off)"
            )
        if not isinstance(new, NewTask):
            raise InvalidInput("create() takes a NewTask")
        if replace is not None and not isinstance(replace, Snapshot):
            raise InvalidInput("replace must be a Snapshot")
        if transaction is not None:
            session = application_session(self.driver, self._client, transaction)
            await self._ensure_tenant(new.tenant)
            return await self._create_in(new, replace, session)
        await self._ensure_tenant(new.tenant)
        for attempt in range(CAS_ATTEMPTS):
            try:
                # Every create writes the tasks counter and its tenant's (the exact limits
                # need the conflict), so creates only ever run one after another; this
                # loop's take turns here instead of aborting each other's transactions.
                async with self._creators:
                    snapshot: Snapshot = await self._atomically(
                        lambda session: self._create(new, replace, session)
                    )
                return snapshot
            except DuplicateKeyError:
                pass
            except _Retry:
                await self._contended(attempt)
                continue
            # Created concurrently: report the task that won.
            await self._raise_exists(new.id)
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create_in(self, new: NewTask, replace: Snapshot | None, session: Any) -> Snapshot:
        """``create`` inside the application's transaction on ``session``: no retries
        (the transaction is the application's to run again), a refusal writes nothing in
        it (the counter reserved is given back in the same transaction)."""
        try:
            return await self._create(new, replace, session, own=False)
        except DuplicateKeyError:
            await self._raise_exists(new.id)
            raise StoreUnavailable(
                "The task was created and removed concurrently; run your transaction again"
            ) from None
        except _Retry:
            raise StoreUnavailable(
                "The task changed while your transaction ran; run your transaction again"
            ) from None
        except PyMongoError as exc:
            if exc.has_error_label("TransientTransactionError"):
                raise StoreUnavailable(
                    "MongoDB aborted your transaction (it conflicted with another write); "
                    "run it again"
                ) from exc
            raise

    async def _raise_exists(self, task_id: str) -> None:
        """Raise ``TaskExists`` with the stored task, read outside any transaction (the
        one that won committed); return if there is none."""
        current = await self._load(task_id)
        if current is not None:
            now = await self._now()
            raise TaskExists(rules.present(_codec.decode_task(task_id, current), now))

    async def _create(
        self, new: NewTask, replace: Snapshot | None, session: Any, *, own: bool = True
    ) -> Snapshot:
        """The reads, checks and writes of ``create``; ``own``: ``session`` (if any) is a
        transaction of the store's, which a refusal aborts — else the application's,
        where the counter reserved is given back before the refusal propagates."""
        current = await self._load(new.id, session=session)
        now = await self._now()
        previous = None
        if current is not None:
            previous = _codec.decode_task(new.id, current)
            if replace is None:
                raise TaskExists(rules.present(previous, now))
        if replace is not None:
            if previous is None:
                raise TaskNotFound(new.id)
            rules.check_replace(previous, replace, now)
        counted = False
        marked: str | None = None  # the tenant whose standalone counter took a unit
        if current is None:
            await self._reserve_slot(session)
            counted = True
        try:
            if self._transactions:
                await self._check_active(new.tenant, new.id, now, session)
            elif self.limits.max_active_tasks_per_scope is not None:
                await self._reserve_active(new.tenant, now)
                marked = new.tenant
            snapshot = rules.new_snapshot(new, now, replace=previous)
            doc = _codec.new_document(snapshot)
            if marked is not None:
                doc[_scopes.MARK] = marked
            if current is None:
                await self._tasks.insert_one(doc, session=session)
            else:
                result = await self._tasks.replace_one(
                    {"_id": new.id, "_w": current.get("_w")}, doc, session=session
                )
                if result.matched_count != 1:
                    raise _Retry()
        except BaseException:
            if counted and session is None:  # no transaction to roll the counter back
                await self._free_slots(1, None)
            elif counted and not own:  # the application's transaction goes on
                await self._give_back(session)
            if marked is not None:
                await _scopes.give_back(self._counters, marked)
            raise
        if current is not None and current.get(_scopes.MARK) is not None:
            await _scopes.give_back(self._counters, current[_scopes.MARK], session=session)
        return snapshot

    async def _reserve_active(self, tenant: str, now: datetime) -> None:
        """Take a unit of ``tenant``'s active-task counter (standalone; see ``_scopes``).

        Raises:
            CapacityExceeded: the tenant has ``max_active_tasks_per_scope`` active tasks.
        """
        if tenant not in self._tenants:
            await _scopes.ensure(self._counters, self._tasks, tenant, now)
            self._tenants.add(tenant)
        cap = self.limits.max_active_tasks_per_scope
        assert cap is not None
        await _scopes.reserve(self._counters, self._tasks, tenant, cap, now)

    async def _give_back(self, session: Any) -> None:
        """Undo the slot reserved in the application's transaction; if MongoDB aborted
        that transaction already, nothing of it will commit anyway."""
        try:
            await self._free_slots(1, session)
        except PyMongoError:
            log.debug("the application's transaction is aborted; no counter to give back")

    @operation
    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot (see ``TaskStore.get``).

        Raises:
            InvalidInput, TaskNotFound, StoreCorrupt, StoreUnavailable.
        """
        rules.check_tenant(tenant)
        doc = await self._load(task_id, tenant=tenant)
        now = await self._now()
        return rules.present(self._visible(task_id, doc, tenant, now), now)

    def _visible(
        self, task_id: str, doc: dict[str, Any] | None, tenant: str | None, now: datetime
    ) -> Snapshot:
        stored_tenant = None if doc is None else doc.get("tenant")
        if doc is None or (tenant is not None and isinstance(stored_tenant, str)
                           and stored_tenant != tenant):
            raise TaskNotFound(task_id)  # another tenant's: decided before decoding
        # (a tenant that is not a string is damage: whose the task is cannot be told)
        snapshot = _codec.decode_task(task_id, doc)
        if (tenant is not None and snapshot.tenant != tenant) or snapshot.expired(now):
            raise TaskNotFound(task_id)
        return snapshot

    @operation
    async def list(self, query: TaskQuery) -> list[Snapshot]:
        """Matching tasks by id (see ``TaskStore.list``); corrupt records are skipped.

        Raises:
            StoreUnavailable.
        """
        if not isinstance(query, TaskQuery):
            raise InvalidInput("list() takes a TaskQuery")
        now = await self._now()
        conditions: list[dict[str, Any]] = [
            {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}
        ]
        if query.tenant is not None:
            conditions.append({"tenant": query.tenant})
        if query.after is not None:
            conditions.append({"_id": {"$gt": query.after}})
        if query.queue is not None:
            conditions.append({"queue": query.queue})
        if query.statuses is not None:
            stored = {s.stored.value for s in query.statuses}  # rules.matches tells the rest
            conditions.append({"status": {"$in": sorted(stored)}})
        if query.principal is not None:
            who = {"user_id": query.principal.user_id, "tenant": query.principal.tenant}
            conditions.append(
                {
                    "$or": [
                        {"owner.user_id": who["user_id"], "owner.tenant": who["tenant"]},
                        {"watchers": {"$elemMatch": who}},
                    ]
                }
            )
        cursor = self._tasks.find({"$and": conditions}, NO_HISTORY, sort=[("_id", 1)])
        cursor.batch_size(query.limit + 1)
        page: list[Snapshot] = []
        try:
            async for doc in cursor:
                snapshot = self._decoded_or_none(doc, "a listing")
                if snapshot is not None and rules.matches(snapshot, query, now):
                    page.append(rules.present(snapshot, now))
                    if len(page) >= query.limit:
                        break
        finally:
            await settle(cursor.close())
        return page

    @operation
    async def history(self, task_id: str, *, tenant: str | None) -> builtins.list[EventRecord]:
        """Applied events of the current run (see ``TaskStore.history``).

        Raises:
            InvalidInput, TaskNotFound, StoreCorrupt, StoreUnavailable.
        """
        rules.check_tenant(tenant)
        doc = await self._load(task_id, history=True, tenant=tenant)
        now = await self._now()
        self._visible(task_id, doc, tenant, now)
        assert doc is not None
        return [
            _codec.decode_record(task_id, entry) for entry in _codec.history_of(task_id, doc)
        ]

    # -- administration ------------------------------------------------------------------

    @operation
    async def delete(self, task_id: str, *, expected_revision: int) -> None:
        """Remove a terminal task with its history (see ``TaskStore.delete``).

        Raises:
            TaskNotFound, RevisionConflict, Unavailable, StoreCorrupt, StoreUnavailable.
        """

        async def body(session: Any) -> None:
            doc = await self._load(task_id, session=session)
            if doc is None:
                raise TaskNotFound(task_id)
            now = await self._now()
            snapshot = _codec.decode_task(task_id, doc)
            rules.check_revision(snapshot, expected_revision, now)
            if not snapshot.terminal:
                raise Unavailable("Only a terminal task can be deleted")
            result = await self._tasks.delete_one(
                {"_id": task_id, "_w": doc.get("_w")}, session=session
            )
            if result.deleted_count != 1:
                raise _Retry()
            await self._free_slots(1, session)
            if doc.get(_scopes.MARK) is not None:
                await _scopes.give_back(self._counters, doc[_scopes.MARK], session=session)

        for attempt in range(CAS_ATTEMPTS):
            try:
                await self._atomically(body)
                return
            except _Retry:
                await self._contended(attempt)

    @operation
    async def reap(self, limit: int = 1000) -> builtins.list[str]:
        """Delete up to ``limit`` expired tasks with their history (see
        ``TaskStore.reap``); a corrupt record is skipped.

        Raises:
            InvalidInput, StoreUnavailable.
        """
        rules.check_limit(limit)
        now = await self._now()

        async def body(session: Any) -> builtins.list[str]:
            cursor = self._tasks.find(
                {"expires_at": {"$lte": now}},
                NO_HISTORY,
                sort=[("expires_at", 1), ("_id", 1)],  # the ``expiry`` index: oldest first
                session=session,
            )
            reaped: builtins.list[str] = []
            marks: dict[str, int] = {}  # the units of marked documents reaped, by tenant
            try:
                async for doc in cursor:
                    snapshot = self._decoded_or_none(doc, "reap")
                    if snapshot is None or not rules.gone(snapshot, now):
                        continue
                    result = await self._tasks.delete_one(
                        {"_id": snapshot.id, "_w": doc.get("_w")}, session=session
                    )
                    if result.deleted_count == 1:
                        reaped.append(snapshot.id)
                        if doc.get(_scopes.MARK) is not None:
                            tenant = doc[_scopes.MARK]
                            marks[tenant] = marks.get(tenant, 0) + 1
                        if len(reaped) >= limit:
                            break
            finally:
                await settle(cursor.close())
            await self._free_slots(len(reaped), session)
            for tenant, count in marks.items():
                await _scopes.give_back(self._counters, tenant, count, session)
            return reaped

        reaped: builtins.list[str] = await self._atomically(body)
        return reaped
