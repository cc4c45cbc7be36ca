"""``MongoStore.client``: the driver client the store uses on the running event loop,
read-only — what an application starts the session of ``create(transaction=session)`` on
when the store opened its own client from a URL (the outbox pattern)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from tasks_contract_tests._kit import new_task
from tasks_core import App, InvalidInput, Owner, TaskNotFound, TaskQuery
from tasks_store_mongo._driver import open_client, settle

pytestmark = pytest.mark.anyio

Opener = Callable[..., Awaitable[Any]]
ALICE = Owner("alice")


async def test_the_client_of_a_url_store_carries_the_outbox_transaction(
    open_store: Opener,
) -> None:
    """A store opened from a URL MUST expose the client it opened, and a transaction on
    a session of that client MUST carry ``App.submit(..., transaction=session)``: the
    task exists after the commit, not after an abort."""
    store = await open_store()
    if not store.capabilities.transactional_submit:
        pytest.skip("transactions need a replica set")
    app = App(store=store)
    outbox = store.client[store.database][f"{store.namespace}.orders"]
    ids = []
    for commit in (False, True):
        session = await settle(store.client.start_session())  # motor: a coroutine
        try:
            await settle(session.start_transaction())
            await outbox.insert_one({"_id": int(commit)}, session=session)
            ids.append((await app.submit("ship", {}, ALICE, transaction=session)).id)
            if commit:
                await settle(session.commit_transaction())
            else:
                await settle(session.abort_transaction())
        finally:
            await settle(session.end_session())
    with pytest.raises(TaskNotFound):
        await app.get(ids[0], ALICE)
    assert ids[1] == (await app.get(ids[1], ALICE)).id
    assert [{"_id": 1}] == await outbox.find({}).to_list(None)
    await store.client[store.database].drop_collection(outbox.name)


async def test_the_client_is_the_one_passed_in_and_read_only(
    open_store: Opener, mongo_base_url: str, driver: str
) -> None:
    """A store given ``client=`` MUST report that very client, and ``client`` MUST NOT be
    assignable."""
    own = open_client(mongo_base_url, driver)  # type: ignore[arg-type]
    try:
        store = await open_store(client=own)
        assert store.client is own
        with pytest.raises(AttributeError):
            store.client = own
    finally:
        await settle(own.close())


async def test_another_event_loop_reads_its_own_client_after_its_first_call(
    open_store: Opener,
) -> None:
    """On an event loop other than the opening one, ``client`` MUST raise
    ``InvalidInput`` until the store was called there, then MUST be that loop's own
    client (not the opening loop's), one that reads the store's tasks."""
    store = await open_store()
    task = await store.create(new_task())
    home = store.client
    seen: list[Any] = []

    async def elsewhere() -> None:
        try:
            store.client  # noqa: B018 - the read is what is tested
        except InvalidInput as exc:
            seen.append(exc)
        await store.now()
        client = store.client
        doc = await client[store.database][f"{store.namespace}.tasks"].find_one(
            {"_id": task.id}, {"_id": 1}
        )
        seen.append((client is home, doc))

    thread = threading.Thread(target=asyncio.run, args=(elsewhere(),))
    thread.start()
    thread.join()
    assert isinstance(seen[0], InvalidInput)
    assert (False, {"_id": task.id}) == seen[1]
    assert [task.id] == [s.id for s in await store.list(TaskQuery(tenant=None))]
