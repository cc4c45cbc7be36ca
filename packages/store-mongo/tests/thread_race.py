"""Test support: stores racing from separate threads, each with its own event loop,
client and store, released together — the race the standalone server's single-document
checks (``_scopes``, ``_alone_limits``) must win exactly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from mongo_server import DATABASE
from tasks_store_mongo import MongoStore
from tasks_store_mongo._driver import open_client, settle


def race_in_threads(
    threads: int, cls: type[MongoStore], base: str, driver: str, namespace: str,
    act: Callable[[MongoStore], Awaitable[None]], **options: Any,
) -> None:
    """Open ``threads`` stores of ``cls`` on ``namespace`` (each connected before the
    race), release them together at a barrier, run ``act(store)`` in each, and return
    once every thread has ended."""
    barrier = threading.Barrier(threads)

    async def one() -> None:
        client = open_client(base, driver)  # type: ignore[arg-type]
        try:
            store = await cls.open(client, database=DATABASE, namespace=namespace, **options)
            await store.now()  # connected before the race starts
            await asyncio.to_thread(barrier.wait)
            await act(store)
        finally:
            await settle(client.close())

    racers = [threading.Thread(target=asyncio.run, args=(one(),)) for _ in range(threads)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
