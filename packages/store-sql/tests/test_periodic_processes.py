"""Periodic tasks across worker processes sharing one database (SQLite file, PostgreSQL):
every scheduler of every worker creates each tick once and misses none; a scheduler down
for several ticks runs only the latest missed ones (``catch_up``) when it comes back.
Ticks and waits are on the database's clock, never on this process's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from tasks_core import TaskQuery, TaskStatus
from tasks_core.periodic import TICK_PREFIX, Schedule
from tasks_store_sql import SQLStore, migrate

pytestmark = pytest.mark.anyio

RUN_S = 20.0
"""How long (store clock) the schedulers of the exactly-once test run together."""
DOWN_TICKS = 5
"""How many ticks the scheduler of the downtime test misses."""
WAIT_S = 120.0
"""Upper bound of every wait here: a bound for a broken build, never a timing."""

WORKER = textwrap.dedent(
    """
    import asyncio, json, logging, sys
    from tasks_core import App, TaskContext
    from tasks_store_sql import SQLStore

    async def main(url, namespace, options):
        logging.basicConfig(stream=sys.stderr, format="%(name)s: %(message)s")
        logging.getLogger("tasks_core.periodic").setLevel(logging.DEBUG)
        store = await SQLStore.open(url, namespace=namespace)
        app = App(store=store)
        ran = []

        @app.periodic(every=1, **options)
        async def tick(ctx: TaskContext) -> None:
            ran.append(ctx.task_id)

        async with app:
            async with app.worker(concurrency=4, reap_interval=None, poll_interval=0.05):
                print("ready", flush=True)
                await asyncio.to_thread(sys.stdin.readline)  # the test says when to stop
        print(json.dumps(ran), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One SQLite file, or the PostgreSQL test database (skipped when unreachable)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tasks.db"
    postgres: str = request.getfixturevalue("postgres_url")
    return postgres


class Db(NamedTuple):
    """The workers' database: URL, namespace, and this process's store on it."""

    url: str
    namespace: str
    store: SQLStore


@pytest.fixture
async def db(url: str) -> AsyncIterator[Db]:
    """A namespace of this test's own (dropped afterwards) and a store on it."""
    from tasks_store_sql.plugin import drop_namespace

    namespace = f"periodic_{os.getpid()}"
    await drop_namespace(url, namespace)
    await migrate(url, namespace=namespace)
    opened = await SQLStore.open(url, namespace=namespace)
    try:
        yield Db(url, namespace, opened)
    finally:
        await opened.aclose()
        await drop_namespace(url, namespace)


class Worker:
    """A worker process of ``WORKER``."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.ran: list[str] = []

    @classmethod
    async def start(cls, db: Db, **options: Any) -> Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", WORKER, db.url, db.namespace, json.dumps(options),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        worker = cls(process)
        assert process.stdout is not None
        if await asyncio.wait_for(process.stdout.readline(), WAIT_S) != b"ready\n":
            await worker.stop()
        return worker

    async def first_pass(self) -> datetime:
        """The store instant of this worker's first scheduler pass (its debug log)."""
        assert self.process.stderr is not None
        while True:
            line = (await asyncio.wait_for(self.process.stderr.readline(), WAIT_S)).decode()
            if not line:
                await self.stop()
            if "periodic: pass at " in line:
                return datetime.fromisoformat(line.split("pass at ")[1].strip())

    async def stop(self) -> None:
        """Stop and read what ran; fail with the worker's stderr if it did not stop well."""
        out, err = await asyncio.wait_for(self.process.communicate(b"stop\n"), WAIT_S)
        if self.process.returncode != 0 or not out.strip():
            pytest.fail(err.decode()[-3000:])
        self.ran = json.loads(out.decode().splitlines()[-1])

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


async def _ticks(store: SQLStore) -> dict[str, Any]:
    """Every tick task in the store, by id."""
    found: dict[str, Any] = {}
    query = TaskQuery(tenant=None, limit=1000)
    while True:
        page = await store.list(query)
        found.update((s.id, s) for s in page if s.id.startswith(TICK_PREFIX))
        if len(page) < query.limit:
            return found
        query = query.model_copy(update={"after": page[-1].id})


async def _until(store: SQLStore, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Re-read the ticks until ``check`` holds (bounded by ``WAIT_S``)."""
    async with asyncio.timeout(WAIT_S):
        while not check(ticks := await _ticks(store)):
            await _next_change(store)
    return ticks


async def _next_change(store: SQLStore) -> None:
    """Until a task is created (the store's wakeup), at most a twentieth of a second."""
    if store.capabilities.wakeups:
        await store.wait_for_work(["default"], 0.05)
    else:
        await asyncio.sleep(0.05)


async def _store_time_passes(store: SQLStore, until: datetime) -> None:
    """Wait until the store's clock reads ``until`` or later (this process's clock may
    run at another pace: read the store's again after each wait)."""
    for _ in range(100):
        now = await store.now()
        if now >= until:
            return
        await asyncio.sleep((until - now).total_seconds())
    pytest.fail("the store's clock does not move")


def _schedule(**options: Any) -> Schedule:
    """The workers' schedule, as the test computes its ticks."""
    return Schedule(name="tick", task="tick", every=1, **options)


async def test_worker_processes_create_each_tick_once_and_miss_none(db: Db) -> None:
    """Three worker processes, each running the scheduler of ``every=1``, for ``RUN_S``
    seconds of store time: the ticks stored MUST be exactly the schedule's ticks from the
    first to the last — as many as the seconds between them, none missed, none twice —
    from the first worker's first pass on; none after the store's last instant; and each
    MUST run once, in exactly one worker. (``catch_up=3``: a tick stays creatable for three
    seconds, so a second in which every process stalls on a loaded machine misses
    nothing.)"""
    schedule, store = _schedule(catch_up=3), db.store
    workers: list[Worker] = []
    try:
        for _ in range(3):
            workers.append(await Worker.start(db, catch_up=3))
        passes = [await worker.first_pass() for worker in workers]
        await _store_time_passes(store, min(passes) + timedelta(seconds=RUN_S))
        last = schedule.latest(await store.now())
        assert last is not None
        await _until(store, lambda t: schedule.task_id(last) in t and all(
            s.status == TaskStatus.COMPLETED for i, s in t.items() if _tick(i) <= last))
        for worker in workers:
            await worker.stop()
        ended = await store.now()
    finally:
        for worker in workers:
            worker.kill()
    ticks = await _ticks(store)
    instants = sorted(_tick(i) for i in ticks)
    first, newest = instants[0], instants[-1]
    between = round((newest - first) / timedelta(seconds=1)) + 1
    assert between == len(ticks)
    assert sorted(schedule.task_id(t) for t in schedule.recent(newest, between)) == sorted(ticks)
    assert first <= schedule.latest(min(passes)) <= last <= newest <= ended
    runs = Counter(task_id for worker in workers for task_id in worker.ran)
    assert {} == {task_id: n for task_id, n in runs.items() if n != 1}
    assert {i for i, s in ticks.items() if s.status == TaskStatus.COMPLETED} == set(runs)
    assert RUN_S <= between


@pytest.mark.parametrize("catch_up", [1, 3])
async def test_a_scheduler_down_for_ticks_runs_only_the_latest_missed(
    db: Db, catch_up: int
) -> None:
    """A scheduler down for ``DOWN_TICKS`` ticks MUST, on its first pass back, create only
    the ``catch_up`` latest ticks at or before that pass's store instant — the older
    missed ticks never exist — and then go on creating every tick."""
    schedule, store = _schedule(catch_up=catch_up), db.store
    worker = await Worker.start(db, catch_up=catch_up)
    try:
        await _until(store, bool)
        await worker.stop()
        before = await _ticks(store)
        latest = max(_tick(i) for i in before)
        await _store_time_passes(store, latest + timedelta(seconds=DOWN_TICKS + 0.5))
        worker = await Worker.start(db, catch_up=catch_up)
        back = await worker.first_pass()
        following = schedule.following(back)
        assert following is not None
        ticks = await _until(store, lambda t: schedule.task_id(following) in t)
        await worker.stop()
    finally:
        worker.kill()
    missed = [t for t in schedule.recent(back, DOWN_TICKS + catch_up) if t > latest]
    assert len(missed) >= DOWN_TICKS
    created = {i for i in set(ticks) - set(before) if _tick(i) <= following}
    caught = [*schedule.recent(back, catch_up), following]
    assert sorted(schedule.task_id(t) for t in caught) == sorted(created)
    assert set(before) <= set(ticks)


def _tick(task_id: str) -> datetime:
    """The tick of a task id of the workers' schedule."""
    tick = _schedule().tick_of(task_id)
    assert tick is not None
    return tick
