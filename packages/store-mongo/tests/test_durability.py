"""Durability: everything a store wrote survives a server restart (storage directory,
server stopped and started again)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mongo_server import ENV, Server, secantusd, store_url
from tasks_contract_tests._kit import ALICE, LEASE_S, access, new_task
from tasks_core import (
    Completed,
    InputRequested,
    InputResponsesAccepted,
    ManualClock,
    TaskQuery,
    TaskStatus,
)
from tasks_store_mongo.plugin import open_mongo

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        bool(os.environ.get(ENV)), reason=f"restarts a server of its own; {ENV} is set"
    ),
    pytest.mark.skipif(
        shutil.which(secantusd()) is None and not Path(secantusd()).exists(),
        reason="secantusd-py is not installed",
    ),
]


async def test_tasks_leases_and_history_survive_a_server_restart(
    tmp_path: Path, driver: str
) -> None:
    """After the server restarts from its storage directory, every snapshot and history
    MUST read back exactly, the lease MUST still be valid (its token was stored) and
    ``claim_next`` MUST carry on in order."""
    clock = ManualClock()
    server = Server(str(tmp_path / "data")).start()
    try:
        url = store_url(server.url, driver)
        store = await open_mongo(url, clock=clock, namespace="durable")
        answered = await store.create(new_task(input={"n": 2**70, "$k": [1.5, None]}))
        _, lease = await store.claim(answered.id, "w1", LEASE_S)
        await store.transition(
            answered.id, 0, InputRequested(event_id="ask", key="ok", request={"q": 1}), lease
        )
        await store.transition(
            answered.id, 1, InputResponsesAccepted(event_id="yes", responses={"ok": True}),
            access(ALICE),
        )
        done = await store.create(new_task(retention_s=3600))
        _, done_lease = await store.claim(done.id, "w1", LEASE_S)
        await store.transition(done.id, 0, Completed(event_id="fin", result=[1, 2]), done_lease)
        waiting = [await store.create(new_task()) for _ in range(2)]
        before = await store.list(TaskQuery(tenant=None))
        histories = {s.id: await store.history(s.id, tenant=None) for s in before}
        await store.aclose()

        server.stop()
        server.start()

        store = await open_mongo(url, clock=clock, namespace="durable")
        try:
            assert before == await store.list(TaskQuery(tenant=None))
            assert histories == {s.id: await store.history(s.id, tenant=None) for s in before}
            renewed = await store.renew(lease, LEASE_S)
            assert TaskStatus.RUNNING == renewed.snapshot.status
            claimed = await store.claim_next("w2", LEASE_S, queues=["default"], limit=5)
            assert [t.id for t in waiting] == [c.snapshot.id for c in claimed]
            assert 4 == (await store._counters.find_one({"_id": "tasks"}))["n"]
        finally:
            await store.aclose()
    finally:
        server.stop()
