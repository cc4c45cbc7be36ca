"""Durability against a server crash: a write the store acknowledged — a ``create`` that
returned, a completion ``transition`` that returned — MUST read back after the server is
killed (SIGKILL: no shutdown, no flush) and started again (docs/mongodb.md, "Durability").

Where it runs, and what it proves:

- **SecantusDB, standalone, on disk** (started here): every write of the store is a
  single-document write, which SecantusDB journals (fsync) when the write concern says
  ``j: true``. The test kills the server right after the last acknowledged write. Its
  teeth: with the concern relaxed (``?w=1&journal=false``) the same kill loses
  acknowledged writes (``test_the_kill_loses_writes_the_store_did_not_journal``).
- **SecantusDB as a replica set cannot keep the promise**, whatever the store sends: it
  ignores the write concern of ``commitTransaction`` (its commits are fsynced only with
  ``--sync-on-commit``), and a create on a replica set is a transaction. Not run here.
- **A genuine mongod** (``TASKS_TEST_MONGO_URL``): a test cannot kill a server it did not
  start, so ``TASKS_TEST_MONGO_KILL`` names a shell command that kills it hard and starts
  it again (``docker kill -s KILL mongo && docker start mongo``, say); the test runs it
  between the acknowledged writes and the read, then waits for the server to answer.
  Without that command it skips.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mongo_server import ENV, Server, secantusd, store_url
from pymongo import MongoClient
from pymongo.errors import PyMongoError
from tasks_contract_tests._kit import LEASE_S, new_task
from tasks_core import Completed, TaskNotFound, TaskStatus
from tasks_store_mongo.plugin import drop_namespace, open_mongo

pytestmark = pytest.mark.anyio

KILL_ENV = "TASKS_TEST_MONGO_KILL"
HAS_SECANTUS = shutil.which(secantusd()) is not None or Path(secantusd()).exists()
needs_secantus = pytest.mark.skipif(
    not HAS_SECANTUS or bool(os.environ.get(ENV)),
    reason=f"kills a SecantusDB of its own ({ENV} set, or secantusd-py not installed)",
)
RELAXED = "&w=1&journal=false"
CREATES = 8


@dataclass
class Acknowledged:
    """What the store acknowledged before the kill."""

    completed: str = ""
    created: list[str] = field(default_factory=list)


async def acknowledge(store: Any) -> Acknowledged:
    """A task created, claimed and completed, then ``CREATES`` more tasks created: the
    last acknowledged writes before the kill are creates, the one before them a
    completion."""
    done = Acknowledged()
    first = await store.create(new_task())
    _, lease = await store.claim(first.id, "w1", LEASE_S)
    await store.transition(first.id, 0, Completed(event_id="fin", result={"n": 7}), lease)
    done.completed = first.id
    for _ in range(CREATES):
        done.created.append((await store.create(new_task())).id)
    return done


async def lost(store: Any, done: Acknowledged) -> list[str]:
    """What of ``done`` does not read back as acknowledged (empty: nothing lost)."""
    missing = []
    try:
        snapshot = await store.get(done.completed, tenant=None)
        history = await store.history(done.completed, tenant=None)
        if (snapshot.status, snapshot.result) != (TaskStatus.COMPLETED, {"n": 7}):
            missing.append(f"completion of {done.completed}: {snapshot.status}")
        elif ["completed"] != [r.kind for r in history]:
            missing.append(f"history of {done.completed}")
    except TaskNotFound:
        missing.append(f"task {done.completed}")
    for task_id in done.created:
        try:
            await store.get(task_id, tenant=None)
        except TaskNotFound:
            missing.append(f"task {task_id}")
    return missing


async def _kill_round(tmp: Path, driver: str, options: str) -> list[str]:
    """One standalone SecantusDB on disk: acknowledged writes, SIGKILL, restart, read."""
    server = Server(str(tmp / "data"), standalone=True).start()
    try:
        url = store_url(server.url, driver) + options
        store = await open_mongo(url, namespace="crash")
        try:
            done = await acknowledge(store)
            server.kill()
        finally:
            await store.aclose()
        server.start()
        store = await open_mongo(url, namespace="crash")
        try:
            return await lost(store, done)
        finally:
            await store.aclose()
    finally:
        server.stop()


@needs_secantus
async def test_acknowledged_writes_survive_a_server_kill(tmp_path: Path, driver: str) -> None:
    """With the store's default write concern, a completion and the creates acknowledged
    right before a SIGKILL of the server MUST all read back after its restart, in each
    of three rounds."""
    for n in range(3):
        assert [] == await _kill_round(tmp_path / str(n), driver, "")


@needs_secantus
async def test_the_kill_loses_writes_the_store_did_not_journal(
    tmp_path: Path, driver: str
) -> None:
    """The kill above MUST be able to lose writes: with ``?w=1&journal=false`` some
    acknowledged write MUST be missing after the restart, within five rounds."""
    for n in range(5):
        if await _kill_round(tmp_path / str(n), driver, RELAXED):
            return
    pytest.fail("five kills lost no unjournaled write: the crash test above has no teeth")


def _answers(url: str, seconds: float) -> None:
    """Wait until the server of ``url`` answers ``ping`` (at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with MongoClient(url, serverSelectionTimeoutMS=1000) as client:
                client.admin.command("ping")
                return
        except PyMongoError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.skipif(
    not (os.environ.get(ENV) and os.environ.get(KILL_ENV)),
    reason=f"needs a genuine mongod ({ENV}) and a command that kills and restarts it "
    f"({KILL_ENV}); SecantusDB as a replica set does not journal transaction commits",
)
async def test_acknowledged_writes_survive_a_kill_of_a_genuine_server(
    mongo_base_url: str, driver: str, namespace: str
) -> None:
    """Against the server of ``TASKS_TEST_MONGO_URL``: the writes acknowledged before
    ``TASKS_TEST_MONGO_KILL`` ran MUST all read back once the server answers again."""
    url = store_url(mongo_base_url, driver)
    store = await open_mongo(url, namespace=namespace)
    try:
        done = await acknowledge(store)
    finally:
        await store.aclose()
    killed = await asyncio.create_subprocess_shell(os.environ[KILL_ENV])
    assert 0 == await asyncio.wait_for(killed.wait(), 300), f"{KILL_ENV} failed"
    await asyncio.to_thread(_answers, mongo_base_url, 120)
    store = await open_mongo(url, namespace=namespace)
    try:
        assert [] == await lost(store, done)
    finally:
        await store.aclose()
        await drop_namespace(url, namespace)
