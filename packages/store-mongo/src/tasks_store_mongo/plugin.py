"""The ``tasks`` plugin of tasks-store-mongo: serves ``mongodb://`` (and ``mongodb+srv://``,
``mongo://``).

The driver is imported only when a store is opened, never at plugin discovery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tasks_core.errors import InvalidInput
from tasks_core.plugins import StoreSpec, hookimpl

from tasks_store_mongo._capabilities import MAX_CAPABILITIES

if TYPE_CHECKING:
    from tasks_store_mongo.store import MongoStore

__all__ = ["OPTIONS", "drop_namespace", "open_mongo", "tasks_stores"]

OPTIONS = frozenset(
    {"clock", "limits", "max_tasks", "max_active_tasks_per_scope", "namespace", "client",
     "create"}
)
_COLLECTIONS = ("tasks", "counters", "queues", "queue_claims")


async def open_mongo(url: str, **options: Any) -> MongoStore:
    """Open a ``MongoStore`` for ``url`` (see the URL format in ``_url``).

    With ``client=`` (an ``AsyncMongoClient`` or ``AsyncIOMotorClient``) the URL gives only
    the database and namespace, and the store never closes that client; otherwise the store
    opens a client with the URL's ``driver`` and closes it in ``aclose``.

    ``create=False`` opens only a namespace that holds a store of this layout, creating no
    collection or index.

    Raises:
        InvalidInput: another scheme, an unknown option, a bad driver or namespace.
        SchemaMismatch: ``create=False`` and no store of this layout in the namespace.
        StoreUnavailable: the server cannot be reached.
    """
    from tasks_store_mongo._driver import open_client, settle
    from tasks_store_mongo._url import parse_url
    from tasks_store_mongo.store import MongoStore

    parsed = parse_url(url)
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InvalidInput(f"Unknown MongoStore option(s): {', '.join(unknown)}")
    client = options.pop("client", None)
    owns = client is None

    def factory() -> Any:
        return open_client(parsed.client_url, parsed.driver)

    if owns:
        client = factory()
    options.setdefault("namespace", parsed.namespace)
    try:
        store = MongoStore(
            client,
            database=parsed.database,
            owns_client=owns,
            client_factory=factory if owns else None,
            **options,
        )
        await store.setup()
    except BaseException:
        if owns:
            await settle(client.close())
        raise
    return store


async def drop_namespace(url: str, namespace: str) -> None:
    """Drop the collections of ``namespace`` in the URL's database (test support)."""
    from tasks_store_mongo._driver import open_client, settle, translate
    from tasks_store_mongo._url import check_namespace, parse_url

    parsed = parse_url(url)
    check_namespace(namespace)
    client = open_client(parsed.client_url, parsed.driver)
    try:
        with translate():
            db = client[parsed.database]
            for name in _COLLECTIONS:
                await db.drop_collection(f"{namespace}.{name}")
    finally:
        await settle(client.close())


async def _corrupt(store: MongoStore, task_id: str) -> None:
    await store._corrupt(task_id)


class _Transaction:
    """An application transaction on a session of the store's client (test support:
    ``StoreSpec.begin_transaction``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def commit(self) -> None:
        await self._end(commit=True)

    async def rollback(self) -> None:
        await self._end(commit=False)

    async def _end(self, *, commit: bool) -> None:
        from tasks_store_mongo._driver import settle

        session = self.handle
        if session.has_ended:
            return
        if session.in_transaction:
            await settle(session.commit_transaction() if commit
                         else session.abort_transaction())
        await settle(session.end_session())


async def _begin_transaction(store: MongoStore, started: bool) -> _Transaction:
    """A session of ``store``'s client, inside a transaction when ``started``."""
    from tasks_store_mongo._driver import settle

    session = await settle(store.client.start_session())
    if started:
        await settle(session.start_transaction())
    return _Transaction(session)


@hookimpl
def tasks_stores() -> StoreSpec:
    """Declare the MongoDB store."""
    return StoreSpec(
        name="mongodb",
        schemes=("mongodb", "mongo"),
        factory=open_mongo,
        capabilities=MAX_CAPABILITIES,
        distribution="tasks-store-mongo",
        # A namespace is a collection prefix: it is empty until used, so creating one is
        # dropping whatever an earlier run left under that name.
        create_namespace=drop_namespace,
        drop_namespace=drop_namespace,
        corrupt=_corrupt,
        begin_transaction=_begin_transaction,
    )
