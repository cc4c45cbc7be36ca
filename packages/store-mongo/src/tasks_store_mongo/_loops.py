"""One client per event loop (private).

Both drivers bind a client to the event loop it first ran on, but a store object may be
shared by threads that each run their own loop (a sync web app, ``asyncio.run`` per
thread). The loop that opens the store uses the client it was opened with; a store that
opened its own client (from a URL) opens another one for each further loop, on first use
there, and closes it when that loop shuts down its async generators (``asyncio.run`` and
``anyio.run`` do) — or in ``aclose`` when that runs on the same loop. A client the
application passed in serves only the loop that opened the store.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from bson.codec_options import CodecOptions
from pymongo.write_concern import WriteConcern
from tasks_core.errors import InvalidInput

from tasks_store_mongo._driver import settle, write_concern_for

__all__ = ["Handles", "LoopClients"]

_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True, tzinfo=UTC)


@dataclass(frozen=True)
class Handles:
    """A client and the store's database and collections on it (with the store's write
    concern, ``_driver.write_concern_for``), and the lock the creates of this loop take
    turns on (see ``MongoStore.create``)."""

    client: Any
    db: Any
    tasks: Any
    counters: Any
    queues: Any
    queue_claims: Any
    write_concern: WriteConcern
    creators: asyncio.Lock = field(default_factory=asyncio.Lock)


class LoopClients:
    """The handles for the running event loop (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        *,
        database: str,
        namespace: str,
        factory: Callable[[], Any] | None,
        owns_client: bool,
    ) -> None:
        self._database = database
        self._namespace = namespace
        self._factory = factory
        self._owns_client = owns_client
        self._home = self._handles(client)
        self._home_loop: asyncio.AbstractEventLoop | None = None
        self._others: dict[
            asyncio.AbstractEventLoop, tuple[Handles, AsyncGenerator[None, None]]
        ] = {}
        self._lock = threading.Lock()

    def _handles(self, client: Any) -> Handles:
        concern = write_concern_for(client)
        db = client[self._database].with_options(codec_options=_CODEC, write_concern=concern)
        return Handles(
            client=client,
            db=db,
            tasks=db[f"{self._namespace}.tasks"],
            counters=db[f"{self._namespace}.counters"],
            queues=db[f"{self._namespace}.queues"],
            queue_claims=db[f"{self._namespace}.queue_claims"],
            write_concern=concern,
        )

    def current(self) -> Handles:
        """The handles for the running loop (after :meth:`enter` ran on it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._home
        if loop is self._home_loop:
            return self._home
        with self._lock:
            entry = self._others.get(loop)
        return self._home if entry is None else entry[0]

    def client(self) -> Any:
        """The client of the running loop (the opening one's outside any loop).

        Raises:
            InvalidInput: the running loop is not the opening one and the store has not
                been used on it yet (its client is opened by the first call there).
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._home.client
        if self._home_loop is None or loop is self._home_loop:
            return self._home.client
        with self._lock:
            entry = self._others.get(loop)
        if entry is None:
            raise InvalidInput(
                "This event loop has no client of the store yet: call the store once on "
                "it (any operation, e.g. await store.now()) before reading store.client"
            )
        return entry[0].client

    async def enter(self) -> None:
        """Make sure the running loop has a client (the first loop owns the home one).

        Raises:
            InvalidInput: another loop, and the client was passed in by the application.
        """
        loop = asyncio.get_running_loop()
        if self._home_loop is None:
            self._home_loop = loop
        if loop is self._home_loop:
            return
        with self._lock:
            if loop in self._others:
                return
            for stale in [other for other in self._others if other.is_closed()]:
                del self._others[stale]
        if self._factory is None:
            raise InvalidInput(
                "The MongoDB client passed to this store is bound to the event loop that "
                "opened it; open the store by URL to use it from other event loops"
            )
        client = self._factory()
        guard = _closed_with_loop(client)
        await guard.__anext__()  # registers with this loop's async-generator shutdown
        with self._lock:
            if loop not in self._others:
                self._others[loop] = (self._handles(client), guard)
                return
        await guard.aclose()  # another task of this loop was first

    async def aclose(self) -> None:
        """Close the clients this store opened that belong to the running loop; clients
        of other loops close when those loops shut down."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            entries = list(self._others.items())
            self._others.clear()
        for other, (_, guard) in entries:
            if other is loop:
                await guard.aclose()
        if not self._owns_client:
            return
        home = self._home_loop
        if home is None or home is loop:
            await settle(self._home.client.close())
        elif home.is_running():
            asyncio.run_coroutine_threadsafe(settle(self._home.client.close()), home)


async def _closed_with_loop(client: Any) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await settle(client.close())
