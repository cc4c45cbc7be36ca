"""Fixtures: the test server, a store opener, the driver (both, for every backend test).

See ``mongo_server`` for how the server is found or started.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from mongo_server import ENV, Server, store_url
from tasks_store_mongo.plugin import drop_namespace, open_mongo


@pytest.fixture(scope="session")
def mongo_base_url() -> Iterator[str]:
    """The base URL of the test server (no database), started once per session."""
    given = os.environ.get(ENV)
    if given:
        yield given
        return
    server = Server().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def standalone() -> Iterator[str]:
    """A standalone SecantusDB (no replica set: no transactions, no change streams) of the
    module's own (base URL)."""
    server = Server(standalone=True).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def anyio_backend() -> str:
    """The store is an asyncio library."""
    return "asyncio"


@pytest.fixture(params=["pymongo", "motor"])
def driver(request: pytest.FixtureRequest) -> str:
    """Each backend test runs on both drivers."""
    return str(request.param)


@pytest.fixture
def namespace() -> str:
    """A fresh collection prefix for one test."""
    return "b" + secrets.token_hex(5)


@pytest.fixture
def url(mongo_base_url: str, driver: str) -> str:
    """The store URL of the test database with this test's driver."""
    return store_url(mongo_base_url, driver)


@pytest.fixture
async def open_store(url: str, namespace: str) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``await open_store(**options)``: a ``MongoStore`` on a client of its own, in this
    test's namespace (so two of them share the data across separate clients). Closed and
    dropped after the test."""
    opened: list[Any] = []

    async def open_(**options: Any) -> Any:
        options.setdefault("namespace", namespace)
        store = await open_mongo(options.pop("url", url), **options)
        opened.append(store)
        return store

    yield open_
    for store in reversed(opened):
        await store.aclose()
    await drop_namespace(url, namespace)
