"""A cancel made by another process — a web server's, here the test's own — reaches a
worker process: a running handler hears it as ``user`` before its timeout where the store
pushes cancels (PostgreSQL with asyncpg, a SQLite file), and a claim the worker holds ahead
never starts, on every database.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tasks_core import App, Owner, TaskStatus
from tasks_store_sql import SQLStore, migrate

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
WAIT_S = 60.0
"""The longest any line of the worker is waited for (a failure, not a pause)."""

WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from tasks_core import App, RunCancelled, TaskContext
    from tasks_store_sql import SQLStore

    def say(**line):
        print(json.dumps(line), flush=True)

    async def main(url, namespace, options):
        store = await SQLStore.open(url, namespace=namespace)
        app = App(store=store)
        release = asyncio.Event()

        @app.task(name="long", timeout=5.0)
        async def long(ctx: TaskContext) -> None:
            say(started=ctx.task_id)
            try:
                await ctx.sleep(60)
            except RunCancelled as exc:
                say(stopped=ctx.task_id, reason=exc.reason.value)
                raise

        @app.task(name="gated")
        async def gated(ctx: TaskContext) -> None:
            say(started=ctx.task_id)
            await release.wait()

        async with app:
            async with app.worker(concurrency=1, reap_interval=None, **json.loads(options)):
                say(ready=True)
                while (line := await asyncio.to_thread(sys.stdin.readline)) == "release\\n":
                    release.set()

    asyncio.run(main(*sys.argv[1:]))
    """
)


class Worker:
    """A worker process and the lines it said."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def said(self, key: str) -> dict[str, Any]:
        """The next line of the worker that holds ``key``."""
        assert self.process.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.process.stdout.readline(), WAIT_S)
            if not raw:
                _, err = await self.process.communicate()
                pytest.fail(f"the worker ended: {err.decode()[-2000:]}")
            line: dict[str, Any] = json.loads(raw)
            if key in line:
                return line

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command}\n".encode())


@pytest.fixture
async def app(db_url: str, fresh_namespace: str) -> AsyncIterator[App]:
    """The canceller: an ``App`` of the test's process on the namespace."""
    await migrate(db_url, namespace=fresh_namespace)
    store = await SQLStore.open(db_url, namespace=fresh_namespace)
    try:
        async with App(store=store) as client:
            yield client
    finally:
        await store.aclose()


async def _worker(db_url: str, namespace: str, **options: Any) -> AsyncIterator[Worker]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, db_url, namespace, json.dumps(options),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    worker = Worker(process)
    try:
        await worker.said("ready")
        yield worker
    finally:
        if process.returncode is None:
            worker.tell("stop")
            try:
                await asyncio.wait_for(process.communicate(), WAIT_S)
            except TimeoutError:
                process.kill()
                await process.wait()


async def test_a_cancel_from_another_process_stops_a_running_handler_before_its_timeout(
    app: App, db_url: str, fresh_namespace: str
) -> None:
    """With the default lease (a heartbeat every 10 s), a cancel made by another process
    MUST reach the running handler as ``user`` before its 5-second timeout fires, where
    the store pushes cancels."""
    if not (await app.open()).capabilities.cancel_wakeups:
        pytest.skip("this database has no cancel push: a cancel arrives at the heartbeat")
    async for worker in _worker(db_url, fresh_namespace):
        task = await app.submit("long", None, ALICE)
        assert {"started": task.id} == await worker.said("started")
        await app.cancel(task.id, ALICE)
        assert {"stopped": task.id, "reason": "user"} == await worker.said("stopped")
    snapshot = await app.get(task.id, ALICE)
    assert (TaskStatus.CANCELLED, "user") == (snapshot.status, snapshot.cancel_reason)


async def test_a_claim_held_ahead_and_cancelled_by_another_process_never_starts(
    app: App, db_url: str, fresh_namespace: str
) -> None:
    """A worker process holding a task's claim ahead (``prefetch``) while its one slot is
    busy MUST never start that task once another process cancelled it: the next task
    starts in its place."""
    async for worker in _worker(db_url, fresh_namespace, prefetch=4, poll_interval=0.05):
        first = await app.submit("gated", None, ALICE)
        assert {"started": first.id} == await worker.said("started")
        held = await app.submit("gated", None, ALICE)
        await _until_claimed(app, held.id)
        await app.cancel(held.id, ALICE)
        await asyncio.sleep(0.05)  # held for poll_interval: read again before a start
        last = await app.submit("gated", None, ALICE)
        await _until_claimed(app, last.id)
        worker.tell("release")
        assert {"started": last.id} == await worker.said("started")
    assert TaskStatus.CANCELLED == (await app.get(held.id, ALICE)).status


async def _until_claimed(app: App, task_id: str) -> None:
    """Wait until ``task_id`` holds a live lease, started or held ahead (bounded),
    re-reading on every change."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if (await app.get(task_id, ALICE)).status in (TaskStatus.RUNNING,
                                                         TaskStatus.CLAIMED):
                return
            await asyncio.sleep(0.01)  # a poll of the store: the change is another process's
