"""``MongoStore``: the MongoDB store, on PyMongo's ``AsyncMongoClient`` or motor.

Capability matrix:

=================  ===========  =====================================================
capability         value        why
=================  ===========  =====================================================
durable            yes          the server keeps everything (per its write concern)
multi_process      yes          every operation is atomic on the server
wakeups            replica set  change streams; a standalone server has none
                                (``wait_for_work`` raises; workers poll with backoff)
cancel_wakeups     replica set  a change stream of cancels, each wait resumed where
                                the last stopped (``_cancels``); a standalone server
                                raises (workers learn at their heartbeat)
exclusive_queues   replica set  a multi-document transaction on a per-queue document;
                                a standalone server raises ``CapabilityNotSupported``
batch_transitions  no           ``transition_many`` raises ``CapabilityNotSupported``;
                                the runtime writes terminal events one by one
transactional_     no           ``create(transaction=…)`` raises
submit                          ``CapabilityNotSupported`` (a client session is not
                                taken yet)
=================  ===========  =====================================================

URL format::

    mongodb://[user:pass@]host[:port][,host…]/[database][?driver=pymongo|motor]
              [&namespace=PREFIX][&any driver option]

``database`` defaults to ``tasks``; ``namespace`` (the collection prefix, default
``tasks``) names the collections ``PREFIX.tasks``, ``PREFIX.counters`` and
``PREFIX.queues``; ``driver`` picks PyMongo's async client (default) or motor (deprecated
upstream since May 2026; ``pip install 'tasks-store-mongo[motor]'``). ``mongodb+srv://``
works the same. Or pass ``client=`` an ``AsyncMongoClient``/``AsyncIOMotorClient`` you own:
the store then never closes it.

Atomicity (docs/mongodb.md says it per operation): every single-task operation is a
compare-and-set on the task's one document (see ``_base``); ``create``, ``delete`` and
``reap`` also keep the capacity counters, in one multi-document transaction on a replica
set; exclusive claims take a per-queue document in a transaction. Time is the server's
(``hello.localTime``, sampled per operation) unless a ``clock`` is injected.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError, PyMongoError
from tasks_core import rules
from tasks_core.authority import Access
from tasks_core.durations import check_wait_timeout
from tasks_core.errors import (
    CapabilityNotSupported,
    InvalidInput,
    LeaseLost,
    TaskExists,
    TaskNotFound,
    TasksError,
    Unavailable,
)
from tasks_core.events import Event, EventRecord, Transition
from tasks_core.models import Claim, Lease, NewTask, Snapshot, TaskQuery, TaskStatus

from tasks_store_mongo import _codec
from tasks_store_mongo._base import CAS_ATTEMPTS, NO_HISTORY, operation
from tasks_store_mongo._cancels import MongoCancels
from tasks_store_mongo._capabilities import MAX_CAPABILITIES
from tasks_store_mongo._claims import MongoClaims
from tasks_store_mongo._driver import settle

__all__ = ["MongoStore"]

_MAX_WAIT_MS = 250


class _Retry(Exception):
    """A compare-and-set inside ``create``/``delete`` lost: read again."""


class MongoStore(MongoClaims, MongoCancels):
    """The MongoDB store. Open it with :meth:`open` (or ``tasks_core.open_store(url)``)."""

    CAPABILITIES = MAX_CAPABILITIES
    """The most a deployment offers (replica set); see :attr:`capabilities`."""

    @classmethod
    async def open(cls, client: Any, **options: Any) -> MongoStore:
        """Open a store on ``client`` (which the store will not close).

        Args:
            client: a PyMongo ``AsyncMongoClient`` or a motor ``AsyncIOMotorClient``.
            **options: ``database``, ``namespace``, ``clock``, ``limits``, ``max_tasks``,
                ``max_active_tasks_per_scope``.

        Raises:
            InvalidInput: a bad client or option.
            StoreUnavailable: the server cannot be reached.
        """
        store = cls(client, **options)
        await store.setup()
        return store

    @operation
    async def setup(self) -> None:
        """Probe the deployment; create collections and indexes (idempotent).

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        await self._setup()

    # -- creation and reads --------------------------------------------------------------

    @operation
    async def now(self) -> datetime:
        """The store clock (whole milliseconds): the server's, or the injected one.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        return await self._now()

    @operation
    async def create(
        self, new: NewTask, *, replace: Snapshot | None = None, transaction: Any = None
    ) -> Snapshot:
        """Store ``new`` at revision 0 with the capacity checks (see ``TaskStore.create``).

        Raises:
            TaskExists, RevisionConflict, Unavailable, TaskNotFound, CapacityExceeded,
            InvalidInput, StoreCorrupt, StoreUnavailable.
            CapabilityNotSupported: ``transaction`` given (not offered yet).
        """
        if transaction is not None:
            raise CapabilityNotSupported("MongoStore does not write inside an application's "
                                         "transaction (capability 'transactional_submit' "
                                         "is off)")
        if not isinstance(new, NewTask):
            raise InvalidInput("create() takes a NewTask")
        if replace is not None and not isinstance(replace, Snapshot):
            raise InvalidInput("replace must be a Snapshot")
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
            current = await self._load(new.id)
            if current is not None:
                now = await self._now()
                raise TaskExists(rules.present(_codec.decode_task(new.id, current), now))
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create(self, new: NewTask, replace: Snapshot | None, session: Any) -> Snapshot:
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
        if current is None:
            await self._reserve_slot(session)
            counted = True
        try:
            await self._check_active(new.tenant, new.id, now, session)
            snapshot = rules.new_snapshot(new, now, replace=previous)
            doc = _codec.new_document(snapshot)
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
            raise
        return snapshot

    @operation
    async def get(self, task_id: str, *, tenant: str | None) -> Snapshot:
        """The current snapshot (see ``TaskStore.get``).

        Raises:
            TaskNotFound, StoreCorrupt, StoreUnavailable.
        """
        doc = await self._load(task_id)
        now = await self._now()
        return rules.present(self._visible(task_id, doc, tenant, now), now)

    def _visible(
        self, task_id: str, doc: dict[str, Any] | None, tenant: str | None, now: datetime
    ) -> Snapshot:
        if doc is None:
            raise TaskNotFound(task_id)
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
            stored = {
                TaskStatus.PENDING if s == TaskStatus.RUNNING else s for s in query.statuses
            }
            conditions.append({"status": {"$in": sorted(s.value for s in stored)}})
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
            TaskNotFound, StoreCorrupt, StoreUnavailable.
        """
        doc = await self._load(task_id, history=True)
        now = await self._now()
        self._visible(task_id, doc, tenant, now)
        assert doc is not None
        return [
            _codec.decode_record(task_id, entry) for entry in _codec.history_of(task_id, doc)
        ]

    # -- transitions ---------------------------------------------------------------------

    @operation
    async def transition(
        self,
        task_id: str,
        expected_revision: int,
        event: Event,
        authority: Lease | Access,
    ) -> Transition:
        """Apply ``event`` atomically (see ``TaskStore.transition``).

        Raises:
            TaskNotFound, LeaseLost, AuthorizationError, EventIdReused, RevisionConflict,
            InvalidInput, StoreCorrupt, StoreUnavailable.
        """
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
        for attempt in range(CAS_ATTEMPTS):
            doc = await self._load(task_id, history=True)
            if doc is None:
                raise TaskNotFound(task_id)
            now = await self._now()
            position = _codec.find_event(task_id, doc, event.event_id)
            decision = rules.decide_transition(
                _codec.decode_task(task_id, doc),
                _codec.token_of(task_id, doc),
                None if position is None
                else functools.partial(_codec.record_at, task_id, doc, position),
                expected_revision,
                event,
                authority,
                now,
            )
            if decision.write is None:
                return decision.transition
            new, record = decision.write
            update = self._update(new, record=record, wake=new.status == TaskStatus.PENDING)
            if await self._cas(doc, update):
                return decision.transition
            await self._contended(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def transition_many(
        self, items: Sequence[rules.BatchItem]
    ) -> builtins.list[Transition | TasksError]:
        """Not offered (capability ``batch_transitions`` is off): each task is its own
        document, so a batch would be one transaction per call on a replica set and
        nothing at all on a standalone server; the runtime writes one by one instead.

        Raises:
            CapabilityNotSupported: always.
        """
        raise CapabilityNotSupported(
            "MongoStore has no batch_transitions; call transition() per task"
        )

    # -- leases --------------------------------------------------------------------------

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
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput("limit must be a positive integer")
        now = await self._now()

        async def body(session: Any) -> builtins.list[str]:
            cursor = self._tasks.find(
                {"expires_at": {"$lte": now}},
                NO_HISTORY,
                sort=[("expires_at", 1), ("_id", 1)],  # the ``expiry`` index: oldest first
                session=session,
            )
            reaped: builtins.list[str] = []
            try:
                async for doc in cursor:
                    snapshot = self._decoded_or_none(doc, "reap")
                    if snapshot is None or not snapshot.expired(now):
                        continue
                    result = await self._tasks.delete_one(
                        {"_id": snapshot.id, "_w": doc.get("_w")}, session=session
                    )
                    if result.deleted_count == 1:
                        reaped.append(snapshot.id)
                        if len(reaped) >= limit:
                            break
            finally:
                await settle(cursor.close())
            await self._free_slots(len(reaped), session)
            return reaped

        reaped: builtins.list[str] = await self._atomically(body)
        return reaped

    # -- wakeups -------------------------------------------------------------------------

    @operation
    async def wait_for_work(self, queues: Sequence[str], timeout: float) -> bool:
        """Wait for a change that may make work claimable on ``queues`` (a create, a
        release, an answer, a retry scheduled), read from a change stream, or for
        ``timeout`` seconds (see ``TaskStore.wait_for_work``).

        Raises:
            CapabilityNotSupported: a standalone server (no change streams).
            InvalidInput: bad queues or timeout.
            StoreUnavailable: transient failure.
        """
        if not self.capabilities.wakeups:
            raise CapabilityNotSupported("wakeups need a MongoDB replica set (change streams)")
        wanted = sorted(rules.check_queues(queues))
        timeout = check_wait_timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pipeline = [{"$match": _wake_filter(wanted)}]
        await_ms = max(1, int(min(timeout * 1000, _MAX_WAIT_MS)))
        try:
            stream = await settle(
                self._tasks.watch(
                    pipeline, full_document="updateLookup", max_await_time_ms=await_ms
                )
            )
            try:
                while not self._closed:
                    if await stream.try_next() is not None:
                        return True
                    if loop.time() >= deadline:
                        return False
            finally:
                await settle(stream.close())
        except PyMongoError:
            if self._closed:
                return True
            raise
        return True


def _wake_filter(queues: list[str]) -> dict[str, Any]:
    """Change events that may make work claimable on ``queues``: a new task or run, or an
    update that set ``_wake`` (answered, released, retry scheduled)."""
    return {
        "fullDocument.queue": {"$in": queues},
        "$or": [
            {"operationType": {"$in": ["insert", "replace"]}, "fullDocument._ready": True},
            {
                "operationType": "update",
                "updateDescription.updatedFields._wake": {"$exists": True},
            },
        ],
    }
