"""Worker processes sharing one database: the runtime's workers (claims in flight, group
commit, wakeups or polling) race each other over real connections while tasks are
submitted, and every task runs exactly once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
from tasks_core import App, Owner, TaskContext, TaskStatus
from tasks_store_sql import SQLStore, migrate

pytestmark = pytest.mark.anyio

ALICE = Owner("alice")
TASKS = 300
WORKERS = 3

WORKER = textwrap.dedent(
    """
    import asyncio, json, sys
    from tasks_core import App, TaskContext
    from tasks_store_sql import SQLStore

    async def main(url, namespace):
        store = await SQLStore.open(url, namespace=namespace)
        app = App(store=store)
        ran = []

        @app.task(name="job")
        async def job(ctx: TaskContext, n: int) -> int:
            ran.append(ctx.task_id)
            await asyncio.sleep(0)  # let this worker's other runs interleave
            return n

        async with app:
            async with app.worker(concurrency=8, reap_interval=None, poll_interval=0.05):
                print("ready", flush=True)
                await asyncio.to_thread(sys.stdin.readline)  # the test says when to stop
        print(json.dumps(ran), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def test_worker_processes_sharing_a_database_run_every_task_once(
    db_url: str, fresh_namespace: str
) -> None:
    """Three worker processes (concurrency 8 each) serving one namespace while 300 tasks
    are submitted MUST run every task exactly once: one run, one delivery, one
    ``completed`` event, the handler's result stored."""
    await migrate(db_url, namespace=fresh_namespace)
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", WORKER, db_url, fresh_namespace,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for _ in range(WORKERS)
    ]
    try:
        for proc in workers:
            assert proc.stdout is not None
            if await asyncio.wait_for(proc.stdout.readline(), 60) != b"ready\n":
                _, err = await proc.communicate()
                pytest.fail(err.decode()[-2000:])
        store = await SQLStore.open(db_url, namespace=fresh_namespace)
        app = App(store=store)

        @app.task(name="job")
        async def job(ctx: TaskContext, n: int) -> int:
            raise AssertionError("runs in the worker processes only")

        try:
            async with app:
                ids = [(await app.submit("job", {"n": n}, ALICE)).id for n in range(TASKS)]
                finished = [await app.wait(task_id, ALICE, timeout=120) for task_id in ids]
                histories = [await store.history(task_id, tenant=None) for task_id in ids]
        finally:
            await store.aclose()
        outputs = []
        for proc in workers:
            out, err = await asyncio.wait_for(proc.communicate(b"stop\n"), 60)
            assert 0 == proc.returncode, err.decode()[-2000:]
            outputs.append(json.loads(out.decode().splitlines()[-1]))
    finally:
        for proc in workers:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    runs = Counter(task_id for ran in outputs for task_id in ran)
    assert {} == {task_id: n for task_id, n in runs.items() if n != 1}
    assert set(ids) == set(runs)
    assert [TaskStatus.COMPLETED] * TASKS == [s.status for s in finished]
    assert list(range(TASKS)) == [s.result for s in finished]
    assert [1] * TASKS == [s.deliveries for s in finished]
    assert [["completed"]] * TASKS == [[e.kind for e in h] for h in histories]
