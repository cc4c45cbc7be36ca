"""The plumbing of ``MongoStore`` (private): collections, server time, compare-and-set.

Every write of a task document is a compare-and-set: ``update_one({_id, _w: tag read},
...)`` that also sets a fresh ``_w``. The store reads the document, samples the clock
*after* the read, computes the new state with :mod:`tasks_core.rules`, and writes it back
only if nobody wrote in between; a miss means another writer won, so the operation reads
again and re-decides (a bounded loop). That makes each single-task operation atomic
without a transaction.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from pymongo.errors import OperationFailure
from tasks_core import reports, rules
from tasks_core.clock import Clock, utc
from tasks_core.errors import (
    CapacityExceeded,
    InvalidInput,
    SchemaMismatch,
    StoreCorrupt,
    StoreUnavailable,
)
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot, StoreCapabilities, StoreLimits
from tasks_core.plugins import check_create

from tasks_store_mongo import _codec
from tasks_store_mongo._capabilities import capabilities_for
from tasks_store_mongo._driver import Driver, driver_of, in_transaction, translate
from tasks_store_mongo._loops import LoopClients
from tasks_store_mongo._url import DEFAULT_DATABASE, DEFAULT_NAMESPACE, check_namespace

__all__ = ["CAS_ATTEMPTS", "KEEP", "NO_HISTORY", "MongoBase", "operation"]

log = logging.getLogger("tasks_store_mongo")

CAS_ATTEMPTS = 100
"""How often one operation re-reads after losing a compare-and-set before giving up with
``StoreUnavailable`` (each miss means another writer made progress)."""
KEEP: Any = object()
"""Leave the lease token as it is."""
NO_HISTORY = {"_history": 0}
LAYOUT = 3
"""The document layout and indexes of this version (2: ``_avail``, the claim index by
available instant; 3: ``_prio``, the claim index by priority first, the
``next_available`` index); ``_setup`` upgrades a namespace of an earlier one."""

S = TypeVar("S", bound="MongoBase")
P = ParamSpec("P")
R = TypeVar("R")


def operation(fn: Callable[Concatenate[S, P], Awaitable[R]],
              ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Decorate a public store method: driver errors are translated (the one point, see
    ``_driver.translate``) and the running event loop gets its client first."""

    @functools.wraps(fn)
    async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with translate():
            await self._loops.enter()
            return await fn(self, *args, **kwargs)

    return wrapper


class MongoBase:
    """Collections, clock, capacity counters and the compare-and-set write."""

    def __init__(
        self,
        client: Any,
        *,
        database: str = DEFAULT_DATABASE,
        namespace: str | None = None,
        clock: Clock | None = None,
        limits: StoreLimits | None = None,
        max_tasks: int | None = None,
        max_active_tasks_per_scope: int | None = None,
        owns_client: bool = False,
        client_factory: Callable[[], Any] | None = None,
        create: bool = True,
    ) -> None:
        self._makes_missing = check_create(create)
        self.driver: Driver = driver_of(client)
        if not isinstance(database, str) or not database:
            raise InvalidInput("database must be a non-empty string")
        self.limits = StoreLimits.resolve(
            limits, max_tasks=max_tasks, max_active_tasks_per_scope=max_active_tasks_per_scope
        )
        self.namespace = DEFAULT_NAMESPACE if namespace is None else check_namespace(namespace)
        self.database = database
        self._loops = LoopClients(
            client,
            database=database,
            namespace=self.namespace,
            factory=client_factory,
            owns_client=owns_client,
        )
        self._clock = clock
        self._caps = capabilities_for(replica_set=False)
        self._transactions = False
        self._closed = False
        self._tenants: set[str] = set()  # tenants whose counter document exists
        self._queue_docs: set[str] = set()  # queues whose document exists
        self.transaction_retries = 0
        """Transactions retried after a ``TransientTransactionError`` (diagnostics)."""
        # Cancel wakeups (see ``_cancels``): where the last cancel stream stopped, and the
        # cancels read that no waiter watched, oldest first; shared by every event loop.
        self._cancels_after: Mapping[str, Any] | None = None
        self._unreported: OrderedDict[str, None] = OrderedDict()
        self._unreported_lock = threading.Lock()

    @property
    def capabilities(self) -> StoreCapabilities:
        """Frozen capabilities for this deployment (see the module docstring)."""
        return self._caps

    @property
    def client(self) -> Any:
        """The driver client the store uses on the running event loop (read-only): the
        one passed in, or the one a store opened from a URL made for this loop. Start
        the ``ClientSession`` for ``create(transaction=session)`` on it; the store owns a
        client it opened (do not close it).

        Raises:
            InvalidInput: on an event loop the store has not been used on yet, other
                than the one that opened it (call the store once there first).
        """
        return self._loops.client()

    # The client and collections of the running event loop (see ``_loops``).

    @property
    def _client(self) -> Any:
        return self._loops.current().client

    @property
    def _db(self) -> Any:
        return self._loops.current().db

    @property
    def _tasks(self) -> Any:
        return self._loops.current().tasks

    @property
    def _counters(self) -> Any:
        return self._loops.current().counters

    @property
    def _creators(self) -> asyncio.Lock:
        return self._loops.current().creators

    @property
    def _queues(self) -> Any:
        return self._loops.current().queues

    @property
    def _queue_claims(self) -> Any:
        return self._loops.current().queue_claims

    # -- setup ---------------------------------------------------------------------------

    async def _setup(self) -> None:
        """Probe the deployment, create collections and indexes (idempotent)."""
        hello = await self._db.command("hello")
        replica_set = "setName" in hello or hello.get("msg") == "isdbgrid"
        self._transactions = replica_set
        self._caps = capabilities_for(replica_set=replica_set)
        existing = set(await self._db.list_collection_names())
        if not self._makes_missing:
            await self._check_existing(existing)
            return
        for collection in (self._tasks, self._counters, self._queues, self._queue_claims):
            if collection.name not in existing:
                await self._create_collection(collection.name)
        await self._upgrade_layout()
        # next_available wants the earliest _avail past now whatever the priority, an
        # order the claim_next index (priority first) cannot give without a sort
        await self._tasks.create_index(
            [("queue", 1), ("_ready", 1), ("_avail", 1), ("_id", 1)], name="next_available"
        )
        await self._tasks.create_index(
            [("queue", 1), ("claim.expires_at", 1)], name="live_leases_by_queue"
        )
        await self._tasks.create_index(
            [("tenant", 1), ("status", 1), ("expires_at", 1)], name="active_by_tenant"
        )
        await self._tasks.create_index([("expires_at", 1), ("_id", 1)], name="expiry")
        await self._tasks.create_index([("tenant", 1), ("_id", 1)], name="listing")
        # standalone servers: a tenant's tasks its active counter holds (``_scopes``)
        await self._tasks.create_index([("_scope", 1)], name="scope_marks", sparse=True)
        await self._queue_claims.create_index([("q", 1), ("at", 1)], name="window")
        if await self._counters.find_one({"_id": "tasks"}) is None:
            count = await self._tasks.count_documents({})
            await self._counters.update_one(
                {"_id": "tasks"}, {"$setOnInsert": {"n": count}}, upsert=True
            )

    async def _check_existing(self, existing: set[str]) -> None:
        """``create=False``: the namespace must hold a store of this layout; nothing is
        written.

        Raises:
            SchemaMismatch: a collection is missing, or the layout is an earlier one.
        """
        where = f"namespace {self.namespace!r} of database {self.database!r}"
        missing = [c.name for c in (self._tasks, self._counters, self._queues,
                                    self._queue_claims) if c.name not in existing]
        if missing:
            raise SchemaMismatch(f"{where} holds no tasks store (no {', '.join(missing)}): "
                                 "create=False never makes one; open it once without "
                                 "create=False (or run a worker) to make it")
        if await self._counters.find_one({"_id": "layout", "v": {"$gte": LAYOUT}}) is None:
            raise SchemaMismatch(f"{where} has an earlier layout: open it once without "
                                 "create=False to upgrade it")

    async def _upgrade_layout(self) -> None:
        """Bring documents and the ``claim_next`` index to this version's layout, once
        per namespace (the ``layout`` counter document records it): documents written
        before ``_avail`` or ``_prio`` existed get them from their stored fields (one
        server-side update each, each document atomically), then an index of another key
        named ``claim_next`` (by creation, or by available instant without the priority:
        this store's earlier versions) is replaced."""
        upgraded = await self._counters.find_one({"_id": "layout", "v": {"$gte": LAYOUT}})
        if upgraded is None:
            await self._tasks.update_many(
                {"_avail": {"$exists": False}},
                [{"$set": {"_avail": _codec.AVAILABLE_FROM_FIELDS}}],
            )
            await self._tasks.update_many(
                {"_prio": {"$exists": False}},
                [{"$set": {"_prio": _codec.PRIORITY_FROM_FIELDS}}],
            )
        try:
            await self._create_claim_index()
        except OperationFailure as exc:
            if exc.code not in (85, 86):  # IndexOptionsConflict, IndexKeySpecsConflict
                raise
            log.info("replacing the claim_next index of an earlier version in %s",
                     self.namespace)
            await self._drop_index("claim_next")
            await self._create_claim_index()
        if upgraded is None:
            await self._counters.update_one(
                {"_id": "layout"}, {"$max": {"v": LAYOUT}}, upsert=True
            )

    async def _create_claim_index(self) -> None:
        """The ``claim_next`` index: equality on queue and availability, then claim order
        (``storekit.claim_order``: minus the priority, available instant, id), then
        ``_ready_at``. With ``_avail <= now`` the scan of a queue skips, per priority
        value, the tasks not yet available: it reads the head of each queue."""
        await self._tasks.create_index(
            [("queue", 1), ("_ready", 1), ("_prio", 1), ("_avail", 1), ("_id", 1),
             ("_ready_at", 1)],
            name="claim_next",
        )

    async def _drop_index(self, name: str) -> None:
        try:
            await self._tasks.drop_index(name)
        except OperationFailure as exc:
            if exc.code != 27:  # IndexNotFound: another process dropped it first
                raise

    async def _create_collection(self, name: str) -> None:
        from pymongo.errors import CollectionInvalid, OperationFailure

        try:
            await self._db.create_collection(name)
        except CollectionInvalid:
            pass  # another process created it first
        except OperationFailure as exc:
            if exc.code != 48:  # NamespaceExists
                raise

    # -- plumbing ------------------------------------------------------------------------

    async def _now(self) -> datetime:
        """Store time: the injected clock, else the server's clock (``hello.localTime``),
        sampled per operation, after the document was read."""
        if self._clock is not None:
            return rules.tick(self._clock.now())
        hello = await self._db.command("hello")
        return rules.tick(utc(hello["localTime"]))

    async def _load(self, task_id: str, *, history: bool = False, session: Any = None,
                    tenant: str | None = None) -> dict[str, Any] | None:
        """The document of ``task_id`` (with its history when ``history``), or ``None``;
        with ``tenant``, only that tenant's (or a damaged one's, reported by the caller):
        another tenant's document is never read, so it answers as a missing id."""
        if not isinstance(task_id, str):
            raise InvalidInput("task_id must be a string")
        query: dict[str, Any] = {"_id": task_id}
        if tenant is not None:
            query["$or"] = [{"tenant": tenant}, {"tenant": {"$not": {"$type": "string"}}}]
        doc: dict[str, Any] | None = await self._tasks.find_one(
            query, None if history else NO_HISTORY, session=session)
        return doc

    def _update(
        self,
        snapshot: Snapshot,
        *,
        token: Any = KEEP,
        record: EventRecord | None = None,
        wake: bool = False,
    ) -> dict[str, Any]:
        """The update document writing ``snapshot`` (and appending ``record``)."""
        fields = _codec.encode_fields(snapshot)
        tag = _codec.new_tag()
        fields["_w"] = tag
        if token is not KEEP:
            fields["_token"] = token
        if wake:
            fields["_wake"] = tag
        update: dict[str, Any] = {"$set": fields}
        if record is not None:
            update["$push"] = {"_history": _codec.encode_record(record)}
        return update

    async def _cas(
        self, doc: Mapping[str, Any], update: dict[str, Any], *, session: Any = None
    ) -> bool:
        """Apply ``update`` only if ``doc`` is still the stored version."""
        result = await self._tasks.update_one(
            {"_id": doc["_id"], "_w": doc.get("_w")}, update, session=session
        )
        return bool(result.matched_count == 1)

    def _decoded_or_none(self, doc: dict[str, Any], where: str) -> Snapshot | None:
        task_id = doc.get("_id")
        try:
            return _codec.decode_task(task_id if isinstance(task_id, str) else "?", doc)
        except StoreCorrupt:
            reports.corrupt_skipped(log, task_id, where)
            return None

    async def _contended(self, attempt: int) -> None:
        if attempt + 1 >= CAS_ATTEMPTS:
            raise StoreUnavailable("The task is too contended right now; retry later")
        await asyncio.sleep(0)

    async def _atomically(self, body: Any) -> Any:
        """Run ``body(session)`` in a transaction on a replica set, else with ``None``."""
        if not self._transactions:
            return await body(None)
        handles = self._loops.current()
        return await in_transaction(
            handles.client, body, write_concern=handles.write_concern,
            on_retry=self._count_retry,
        )

    def _count_retry(self) -> None:
        self.transaction_retries += 1

    # -- capacity ------------------------------------------------------------------------

    async def _reserve_slot(self, session: Any) -> None:
        """Count one more stored task against ``max_tasks`` (the ``tasks`` counter).

        Raises:
            CapacityExceeded: the store is full.
        """
        result = await self._counters.update_one(
            {"_id": "tasks", "n": {"$lt": self.limits.tasks_cap}},
            {"$inc": {"n": 1}},
            session=session,
        )
        if result.matched_count != 1:
            raise CapacityExceeded("max_tasks")

    async def _free_slots(self, count: int, session: Any) -> None:
        if count:
            await self._counters.update_one(
                {"_id": "tasks"}, {"$inc": {"n": -count}}, session=session
            )

    async def _check_active(
        self, tenant: str, task_id: str, now: datetime, session: Any
    ) -> None:
        """Refuse a create when the tenant already has ``max_active_tasks_per_scope``
        active (non-terminal, non-expired) tasks, ``task_id`` itself left out — inside the
        create's transaction (a replica set; a standalone server counts with ``_scopes``).

        The tenant's counter document is written first, so two creates in one tenant
        always conflict (one retries and counts again): no write skew.

        Off (``None``, the default): nothing is read or written.

        Raises:
            CapacityExceeded: the tenant is full.
        """
        cap = self.limits.max_active_tasks_per_scope
        if cap is None:
            return
        if session is not None:
            await self._counters.update_one(
                {"_id": f"tenant:{tenant}"}, {"$inc": {"v": 1}}, session=session
            )
        active = await self._tasks.count_documents(
            {
                "tenant": tenant,
                "status": {"$in": list(_codec.ACTIVE_STATUSES)},
                "_id": {"$ne": task_id},
                "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}],
            },
            session=session,
            limit=cap,
        )
        if active >= cap:
            raise CapacityExceeded("max_active_tasks_per_scope")

    async def _ensure_tenant(self, tenant: str) -> None:
        """Create the tenant's counter document outside any transaction (an upsert racing
        inside two transactions would be a duplicate key, not a retryable conflict)."""
        if (not self._transactions or tenant in self._tenants
                or self.limits.max_active_tasks_per_scope is None):
            return
        key = f"tenant:{tenant}"
        if await self._counters.find_one({"_id": key}, {"_id": 1}) is None:
            await self._counters.update_one(
                {"_id": key}, {"$setOnInsert": {"v": 0}}, upsert=True
            )
        self._tenants.add(tenant)

    # -- lifecycle -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the client if this store opened it (never one the application passed)."""
        if self._closed:
            return
        self._closed = True
        await self._loops.aclose()

    async def _corrupt(self, task_id: str) -> None:
        """Damage the stored document of ``task_id`` (contract-suite support only)."""
        await self._tasks.update_one(
            {"_id": task_id}, {"$set": {"revision": "not a number \x00 tasks-corrupt-secret"}}
        )
