"""Two processes sharing one SQLite file: every task runs exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from tasks_core import NewTask, Owner, TaskQuery, TaskStatus, Work
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from tasks_core import Completed, NewTask, Owner, Work
    from tasks_store_sql import SQLStore

    async def main(url, name):
        store = await SQLStore.open(url, busy_timeout=30)
        try:
            for n in range(20):
                await store.create(NewTask(id=f"{name}-{n:02d}", tenant="default",
                                           owner=Owner("alice"), work=Work(name="job")))
            done = []
            while batch := await store.claim_next(name, 60, queues=["default"], limit=2):
                for claim in batch:
                    event = Completed(event_id=f"done-by-{name}", result=name)
                    await store.transition(claim.snapshot.id, 0, event, claim.lease)
                    done.append(claim.snapshot.id)
            print(json.dumps(done))
        finally:
            await store.aclose()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_two_processes_on_one_sqlite_file_run_every_task_once(tmp_path: Path) -> None:
    """Two worker processes creating and draining tasks in one SQLite file at the same
    time MUST complete every task exactly once, each with exactly one event.

    Troubleshooting: SQLite serializes writers across processes through file locks; use
    WAL, ``BEGIN IMMEDIATE`` for every write transaction and a busy timeout, so that a
    claim reads and writes under one lock.
    """
    url = f"sqlite:///{tmp_path}/shared.db"
    store = await SQLStore.open(url)
    try:
        for n in range(40):
            await store.create(
                NewTask(id=f"main-{n:02d}", tenant="default", owner=Owner("alice"),
                        work=Work(name="job"))
            )
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", WORKER, url, name,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )
            for name in ("p1", "p2")
        ]
        outputs = [await asyncio.wait_for(p.communicate(), 120) for p in procs]
        for proc, (_, err) in zip(procs, outputs, strict=True):
            assert 0 == proc.returncode, err.decode()[-2000:]
        done = [task for out, _ in outputs for task in json.loads(out)]
        assert {} == {k: n for k, n in Counter(done).items() if n > 1}
        tasks = await store.list(TaskQuery(tenant=None, limit=1000))
        assert 80 == len(tasks) == len(done)
        assert {TaskStatus.COMPLETED} == {t.status for t in tasks}
        for task in tasks:
            assert 1 == len(await store.history(task.id, tenant=None))
    finally:
        await store.aclose()


CREATOR = textwrap.dedent(
    """
    import asyncio, sys
    from tasks_core import NewTask, Owner, Work
    from tasks_store_sql import SQLStore

    async def main(url):
        store = await SQLStore.open(url, busy_timeout=30)
        try:
            await store.create(NewTask(id="from-elsewhere", tenant="default",
                                       owner=Owner("alice"), work=Work(name="job")))
        finally:
            await store.aclose()

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_wait_on_a_sqlite_file_wakes_when_another_process_creates_a_task(
    tmp_path: Path,
) -> None:
    """``wait_for_work`` on a SQLite file MUST return ``True`` when another process
    commits a task after the wait's baseline — long before its timeout — and the task is
    then claimable here; with nothing committed since it MUST return ``False`` at its
    timeout (the store's own commits count too: any commit may free work).

    Troubleshooting: the store watches the file's change counter (``PRAGMA
    data_version``) from a connection of its own, which only counts other connections'
    commits; the counter a waiter compares with is the last one any wait saw.
    """
    url = f"sqlite:///{tmp_path}/shared.db"
    store = await SQLStore.open(url)
    try:
        assert store.capabilities.wakeups
        assert await store.wait_for_work(["default"], 0) is False  # the baseline
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", CREATOR, url)
        waited = asyncio.get_running_loop().time()
        assert await store.wait_for_work(["default"], 60) is True
        assert asyncio.get_running_loop().time() - waited < 60
        assert 0 == await process.wait()
        [claim] = await store.claim_next("here", 30, queues=["default"])
        assert "from-elsewhere" == claim.snapshot.id
        await store.wait_for_work(["default"], 0)  # the claim's own commit counts once
        assert await store.wait_for_work(["default"], 0.05) is False
    finally:
        await store.aclose()
