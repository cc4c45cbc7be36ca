"""``MongoStore``: the MongoDB store, on PyMongo's ``AsyncMongoClient`` or motor.

One class of one private module per group of operations, all on ``_base``'s plumbing:
``_records`` (create, read, delete, reap), ``_bulk`` (create_many), ``_claims``,
``_transitions``, ``_leases``, ``_wakeups`` and ``_cancels``. Every single-task operation
is a compare-and-set on the task's one document; capacity counters, limited claims,
``create_many`` and ``transition_many`` use a multi-document transaction on a replica set
(a standalone server keeps the limits exact by single-document conditional updates:
``_scopes``, ``_alone_limits``). Every write is ``{w: "majority", j: true}`` unless the
client's own write concern says otherwise; time is the server's unless a ``clock`` is
injected. docs/mongodb.md has the capability matrix, URLs, the write concern and why
each operation is atomic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tasks_store_mongo._base import operation
from tasks_store_mongo._bulk import MongoBulk
from tasks_store_mongo._cancels import MongoCancels
from tasks_store_mongo._capabilities import MAX_CAPABILITIES
from tasks_store_mongo._claims import MongoClaims
from tasks_store_mongo._counts import MongoCounts
from tasks_store_mongo._driver import check_write_concern
from tasks_store_mongo._leases import MongoLeases
from tasks_store_mongo._records import MongoRecords
from tasks_store_mongo._transitions import MongoTransitions
from tasks_store_mongo._wakeups import MongoWakeups

__all__ = ["MongoStore"]


class MongoStore(
    MongoRecords, MongoBulk, MongoClaims, MongoTransitions, MongoLeases, MongoWakeups,
    MongoCancels, MongoCounts,
):
    """The MongoDB store. Open it with :meth:`open` (or ``tasks_core.open_store(url)``).

    Capabilities per deployment (:attr:`capabilities`):

    =================  ===========  =================================================
    capability         value        why
    =================  ===========  =================================================
    durable            yes          every write is ``{w: "majority", j: true}`` unless
                                    the URL (or client) names ``w``/``j``/``fsync``
    multi_process      yes          every operation is atomic on the server
    wakeups            replica set  change streams (``_wakeups``); a standalone server
                                    raises, workers poll with backoff
    cancel_wakeups     replica set  a change stream of cancels (``_cancels``); a
                                    standalone server raises (workers learn at their
                                    heartbeat)
    exclusive_queues   yes          a transaction on a per-queue document; on a
                                    standalone server a compare-and-set of that document
                                    recording the claims in flight (``_alone_limits``)
    queue_limits       yes          the same transaction counts live leases and a claims
                                    log (``_queue_limits``); standalone: the same
                                    compare-and-set, its recent claims kept in it
    batch_transitions  replica set  one transaction, each item by its own
                                    compare-and-set; a standalone server raises
    batch_create       replica set  ``create_many``: one transaction, one
                                    ``insert_many``; a standalone server raises
    transactional_     replica set  ``create(transaction=session)``: the application's
    submit                          ``ClientSession`` (of the store's client, in a
                                    transaction it started); the task exists iff it
                                    commits. A standalone server raises
    counts             yes          one aggregation on the server (``_counts``)
    =================  ===========  =================================================
    """

    CAPABILITIES = MAX_CAPABILITIES
    """The most a deployment offers (replica set); see :attr:`capabilities`."""

    @classmethod
    async def open(cls, client: Any, **options: Any) -> MongoStore:
        """Open a store on ``client`` (which the store will not close).

        Args:
            client: a PyMongo ``AsyncMongoClient`` or a motor ``AsyncIOMotorClient``.
            **options: ``database``, ``namespace``, ``clock``, ``limits``, ``max_tasks``,
                ``max_active_tasks_per_scope``, ``create`` (``False``: open only a store
                that exists, creating no collection or index).

        Raises:
            InvalidInput: a bad client or option.
            SchemaMismatch: ``create=False`` and no store of this layout in the namespace.
            StoreUnavailable: the server cannot be reached.
        """
        store = cls(client, **options)
        await store.setup()
        return store

    @operation
    async def setup(self) -> None:
        """Probe the deployment; create collections and indexes (idempotent; with
        ``create=False`` only check that they are there).

        Raises:
            InvalidInput: the server refuses the store's write concern (nothing created).
            SchemaMismatch: ``create=False`` and no store of this layout in the namespace.
            StoreUnavailable: the server cannot be reached.
        """
        await check_write_concern(self._tasks)
        await self._setup()

    # -- time --------------------------------------------------------------------------

    @operation
    async def now(self) -> datetime:
        """The store clock (whole milliseconds): the server's, or the injected one.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        return await self._now()
