"""Benchmark of the hot path — submit, claim, run, terminal event — through the runtime.

    nox -s bench                               # memory, SQLite and PostgreSQL
    nox -s bench -- --tasks 20000 --stores postgresql
    python packages/store-sql/bench/bench.py --help

For each store (in a throw-away namespace or file, removed afterwards):

- ``enqueue 1x1``: ``app.submit`` one after another (the first fifth of ``--tasks``);
- ``enqueue xN``: the rest submitted ``--batch`` at a time, concurrently (there is no
  bulk submit: this is many clients at once);
- ``burn-down``: one ``Worker`` at ``--concurrency`` (8) — and ``--prefetch`` (``auto``,
  the worker's default; ``0`` never claims ahead) — runs every submitted no-op async
  handler; tasks/s from its start until its drain returned (every completion written),
  then checked: every task completed, exactly once, recorded in its history;
- ``CPU per task``: CPU time of the burn-down per task, of the bench's own process (the
  worker) and of the rest of the machine (``cpu.py``) — steadier than rates, which drift
  with the machine's load; pgqueuer's is measured the same way;
- ``commits/task`` (PostgreSQL): the ``pg_stat_database.xact_commit`` delta of the
  burn-down divided by the tasks — the database is measured only while nothing else of
  the bench is connected, so use a database of its own (``--postgres-url``);
- ``latency``: an idle worker, tasks submitted at a steady ``--rate``; milliseconds from
  the call of ``submit`` to the handler's start (p50/p90/p99/max). ``other app``: the
  submitter is a second ``App`` with its own store instance, so the worker learns of the
  task from the store (PostgreSQL ``LISTEN``/``NOTIFY``; polling on SQLite); ``same app``:
  the submitter's ``App`` runs the worker (in-process wakeup); ``other process``: the
  submitter is a separate process (``submitter.py``), as a web server and a worker are
  deployed (SQL stores; stamps on the system-wide monotonic clock).

On PostgreSQL the peer is measured too, in the same run (``peers.py``): pgqueuer's own
burn-down of as many no-op jobs, with its defaults, on the same server — the issue's
"at least pgqueuer's rate" read directly rather than scaled from another machine. The
machine's speed drifts within a run, so ``--rounds`` (3) repeats the pair — our
burn-down of fresh tasks, then pgqueuer's — back to back and reports each pair's ratio
and their median: one pair alone can land on either side of the drift.
Last, ``no store``: the same burn-down on a store that does no work (``floor.py``) — the
runtime's own CPU per task, which a store's figure less it shows what the store costs.

Every figure is also given as a ratio to baselines measured in the same run (see
``baselines.py``), right before and right after that store's burn-down (their mean: the
load of a shared machine drifts): PostgreSQL and SQLite against their own database's
single-row ``UPDATE`` commit loop and ``UPDATE … WHERE revision + INSERT event``
transaction; memory against PostgreSQL's, for scale. The defaults (5,000 tasks) finish in
about two to three minutes; the issue's figures are for ``--tasks 10000``. The issue's target is
printed beside them: burn-down at least pgqueuer's (4,200/s where the bare ``UPDATE`` did
7,300/s: a ratio of 0.575), at most 0.5 commits per task, and an idle worker starting a
task within 3 ms (p50) of its submit.
After the rounds, on PostgreSQL: how late an idle worker starts delayed tasks past their
``run_at``, and fresh ones past their creation, submitted among them (``delay_latency.py``;
``--delay-latency``: only that); then the database bytes and WAL a finished task leaves,
against pgqueuer's (``footprint.py``, ``--rounds`` pairs of ``--tasks``), and burn-downs
by 1, 2 and 4 worker processes against as many of pgqueuer's (``processes.py``).
``--cancel-latency`` measures instead how soon a running handler learns of a cancel made
by another process (``cancel_latency.py``).
Last of all, the submit rates against their references (``submits.py``; ``--submits``:
only those): PostgreSQL's ``submit`` and ``submit_many`` against pgqueuer's ``enqueue``
(``submit`` also from 1, 2 and 4 processes at once against as many of pgqueuer's),
the burn-down with mixed priorities against without and against pgqueuer, and SQLite's and
MariaDB's ``submit_many`` against a bare multi-row ``INSERT`` loop of the same rows.
Then MongoDB against PostgreSQL, its write concern on and off (``mongo.py``;
``--mongo-url``, which ``nox -s bench`` sets to a SecantusDB it starts; ``--mongo``: only
that).
A benchmark, never a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import cpu
import floor
import peers
from baselines import CreateDatabase, database_commits, postgres_baselines, sqlite_baselines
from tasks_core import App, Owner, TaskContext, TaskQuery, TaskStatus, TaskStore
from tasks_core.runtime._worker_gc import tune_for_serving

A = TypeVar("A")
B = TypeVar("B")

POSTGRES_URL = os.environ.get(
    "TASKS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/tasks_bench"
)
MARIADB_URL = os.environ.get("TASKS_BENCH_MARIADB_URL", "mysql://root@127.0.0.1:3306/tasks_test")
STORES = ("memory", "sqlite", "postgresql")
PGQUEUER_RATIO = 4200 / 7300
"""The fastest Python peer's burn-down as a multiple of the bare UPDATE commit rate."""
TARGET_COMMITS = 0.5
TARGET_P50_MS = 3.0
OWNER = Owner("bench")


def stamp_now() -> float:
    """Seconds on the system-wide monotonic clock: comparable across the processes of the
    ``other process`` latency mode (``perf_counter`` only promises differences within
    one process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class Result:
    """The figures of one store."""

    store: str
    enqueue_single: float = 0.0
    enqueue_batched: float = 0.0
    burn_down: float = 0.0
    commits_per_task: float | None = None
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    checked: str = ""
    baselines: list[dict[str, float]] = field(default_factory=list)
    cpu_per_task: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Target:
    """How to open one store (twice, for two apps) and remove it afterwards."""

    name: str
    open: Callable[[], Awaitable[TaskStore]]
    second: Callable[[TaskStore], Awaitable[TaskStore]]
    close: Callable[[TaskStore], Awaitable[None]]
    dsn: str | None = None  # PostgreSQL: where to count commits
    release: Callable[[], None] = lambda: None  # drop what the store keeps in this process
    url: str | None = None  # how another process opens the store (None: it cannot)
    namespace: str | None = None


class Probe:
    """The handlers' shared counters: how many ran, when each stamped one started."""

    def __init__(self) -> None:
        self.ran = 0
        self.goal = 0
        self.done = asyncio.Event()
        self.starts: dict[int, float] = {}

    def expect(self, goal: int) -> None:
        self.ran, self.goal = 0, goal
        self.done.clear()
        self.starts.clear()
        if goal == 0:
            self.done.set()

    def hit(self) -> None:
        self.ran += 1
        if self.ran >= self.goal:
            self.done.set()


def make_app(store: TaskStore, probe: Probe) -> App:
    """An app on ``store`` with the two bench handlers."""
    app = App(store=store)

    @app.task(name="noop")
    async def noop(ctx: TaskContext) -> None:
        probe.hit()

    @app.task(name="stamp")
    async def stamp(ctx: TaskContext, seq: int) -> None:
        probe.starts[seq] = stamp_now()
        probe.hit()

    return app


# -- the measurements --------------------------------------------------------------------


async def enqueue(app: App, count: int, batch: int) -> tuple[float, float]:
    """Submit ``count`` no-op tasks: a fifth one by one, the rest ``batch`` at a time."""
    single = max(1, count // 5)
    started = time.perf_counter()
    for _ in range(single):
        await app.submit("noop", None, OWNER)
    one_by_one = single / (time.perf_counter() - started)
    rest = count - single
    started = time.perf_counter()
    for first in range(0, rest, batch):
        size = min(batch, rest - first)
        await asyncio.gather(*(app.submit("noop", None, OWNER) for _ in range(size)))
    batched = rest / (time.perf_counter() - started) if rest else 0.0
    return one_by_one, batched


async def burn_down(
    app: App, probe: Probe, count: int, concurrency: int, prefetch: int | str
) -> float:
    """Tasks/s for one worker to run ``count`` queued no-op tasks and write every outcome."""
    probe.expect(count)
    worker = app.worker(concurrency=concurrency, prefetch=prefetch, reap_interval=None)
    untune = tune_for_serving()  # as `tasks worker` does before its loop (undone below)
    started = time.perf_counter()
    running = asyncio.create_task(worker.run())
    waiting = asyncio.ensure_future(probe.done.wait())
    await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        waiting.cancel()
        running.result()
        raise RuntimeError("the worker stopped before the burn-down finished")
    if not await worker.shutdown(drain_timeout=60):
        raise RuntimeError("the worker's drain did not settle")
    elapsed = time.perf_counter() - started
    await running
    untune()
    return count / elapsed


async def burn_again(args: argparse.Namespace) -> float:
    """One more PostgreSQL burn-down of ``--tasks`` tasks (submitted as in
    :func:`enqueue`, then burnt down by a store opened afresh), in a namespace of its own
    — new tables, as pgqueuer's each round — removed afterwards: tasks/s."""
    from tasks_store_sql.plugin import drop_namespace

    namespace = "bench_" + secrets.token_hex(3)
    target = _sql_target("postgresql", args.postgres_url, namespace, None)
    probe = Probe()
    try:
        store = await target.open()
        try:
            await enqueue(make_app(store, probe), args.tasks, args.batch)
        finally:
            await target.close(store)
        store = await target.second(store)
        try:
            return await burn_down(make_app(store, probe), probe, args.tasks,
                                   args.concurrency, args.prefetch)
        finally:
            await target.close(store)
    finally:
        await drop_namespace(args.postgres_url, namespace)


async def check(store: TaskStore, count: int) -> str:
    """Every task completed, ran once, and has its completion in its history."""
    completed, after, sample = 0, None, None
    while True:
        page = await store.list(TaskQuery(tenant=None, statuses=frozenset([TaskStatus.COMPLETED]),
                                          after=after, limit=1000))
        for snapshot in page:
            completed += 1
            if snapshot.deliveries != 1:
                raise AssertionError(f"{snapshot.id} was delivered {snapshot.deliveries} times")
            sample = snapshot
        if len(page) < 1000:
            break
        after = page[-1].id
    if completed != count:
        raise AssertionError(f"{completed} of {count} tasks completed")
    if sample is not None:
        kinds = [r.kind for r in await store.history(sample.id, tenant=None)]
        if kinds != ["completed"]:
            raise AssertionError(f"history of {sample.id} is {kinds}")
    return f"{completed} completed once, history recorded"


async def in_turn(
    round_number: int, ours: Callable[[], Awaitable[A]], theirs: Callable[[], Awaitable[B]]
) -> tuple[A, B]:
    """One round of a pair measured in the same run: ``ours()`` first in even rounds,
    ``theirs()`` first in odd ones (what goes first meets a different machine); both
    results, ours first."""
    if round_number % 2 == 0:
        mine = await ours()
        return mine, await theirs()
    other = await theirs()
    return await ours(), other


Submitter = Callable[[], Awaitable[dict[int, float]]]
"""Submits the ``stamp`` tasks at the steady rate; returns when each was submitted."""


async def steady(submit: Callable[[int], Awaitable[object]], rate: float,
                 samples: int) -> dict[int, float]:
    """Call ``submit(seq)`` for ``samples`` sequence numbers at ``rate`` per second; the
    :func:`stamp_now` of each call's start."""
    submitted: dict[int, float] = {}
    interval = 1.0 / rate
    begin = time.perf_counter()
    for seq in range(samples):
        pause = begin + seq * interval - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        submitted[seq] = stamp_now()
        await submit(seq)
    return submitted


def in_process(app: App, rate: float, samples: int) -> Submitter:
    """Submit through ``app`` in this process."""

    async def submit(seq: int) -> None:
        await app.submit("stamp", {"seq": seq}, OWNER)

    return lambda: steady(submit, rate, samples)


def other_process(url: str, namespace: str | None, rate: float, samples: int) -> Submitter:
    """Submit from a separate process (``submitter.py``) with a store of its own — a web
    server and a worker, as deployed."""

    async def run() -> dict[int, float]:
        args = [str(Path(__file__).with_name("submitter.py")), url, namespace or "",
                str(rate), str(samples)]
        child = await asyncio.create_subprocess_exec(
            sys.executable, *args, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"the submitter process failed ({child.returncode})")
        return {int(k): v for k, v in json.loads(out)["submitted"].items()}

    return run


async def latency(
    worker_app: App, submitter: Submitter, probe: Probe, rate: float, samples: int,
    concurrency: int,
) -> dict[str, float]:
    """Milliseconds from ``submit`` to the handler's start, an idle worker, steady rate."""
    probe.expect(samples)
    worker = worker_app.worker(concurrency=concurrency, reap_interval=None)
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)  # let it go idle (and start listening)
        submitted = await submitter()
        await asyncio.wait_for(probe.done.wait(), 30 + samples / rate)
    finally:
        await worker.shutdown(drain_timeout=30)
        await running
    waits = sorted((probe.starts[s] - submitted[s]) * 1000 for s in submitted)
    cuts = statistics.quantiles(waits, n=100, method="inclusive")
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98], "max": waits[-1]}


async def measure(
    target: Target, args: argparse.Namespace, baseline: Callable[[], Awaitable[dict[str, float]]]
) -> Result:
    """Every figure of one store; ``baseline()`` is measured right before and right after
    the burn-down (the machine's load drifts: the ratio uses their mean)."""
    result = Result(target.name)
    probe = Probe()
    store = await target.open()
    app = make_app(store, probe)
    try:
        result.enqueue_single, result.enqueue_batched = await enqueue(
            app, args.tasks, args.batch
        )
    finally:
        await target.close(store)  # its sessions end, so their commits are counted now
    result.baselines.append(await baseline())
    before = await database_commits(target.dsn) if target.dsn else 0
    store = await target.second(store)
    app = make_app(store, probe)
    try:
        spent = cpu.sample()
        result.burn_down = await burn_down(app, probe, args.tasks, args.concurrency,
                                           args.prefetch)
        result.cpu_per_task = cpu.per_task(spent, cpu.sample(), args.tasks)
    finally:
        await target.close(store)
    if target.dsn:
        after = await database_commits(target.dsn)
        result.commits_per_task = (after - before) / args.tasks
    result.baselines.append(await baseline())
    store = await target.second(store)
    other = await target.second(store)
    try:
        result.checked = await check(store, args.tasks)
        worker_app, submit_app = make_app(store, probe), make_app(other, probe)
        modes = {
            "other app": in_process(submit_app, args.rate, args.samples),
            "same app": in_process(worker_app, args.rate, args.samples),
        }
        if target.url is not None:
            modes["other process"] = other_process(target.url, target.namespace, args.rate,
                                                   args.samples)
        for mode, submitter in modes.items():
            result.latency_ms[mode] = await latency(
                worker_app, submitter, probe, args.rate, args.samples, args.concurrency
            )
    finally:
        await target.close(other)
        await target.close(store)
    return result


# -- the stores --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def targets(args: argparse.Namespace, tmp: Path) -> AsyncIterator[list[Target]]:
    """The stores asked for, removed again afterwards."""
    from tasks_store_memory import MemoryStore

    chosen: list[Target] = []
    namespace = "bench_" + secrets.token_hex(3)
    if "memory" in args.stores:
        kept = [MemoryStore()]

        async def open_memory() -> TaskStore:
            return kept[0]

        async def same(_: TaskStore) -> TaskStore:
            return kept[0]

        async def keep(_: TaskStore) -> None:
            return None

        chosen.append(Target("memory", open_memory, same, keep, release=kept.clear))
    if "sqlite" in args.stores:
        chosen.append(_sql_target("sqlite", f"sqlite:///{tmp}/bench.db", None, None))
    if "postgresql" in args.stores:
        chosen.append(_sql_target("postgresql", args.postgres_url, namespace, _dsn(args)))
    try:
        yield chosen
    finally:
        if "postgresql" in args.stores:
            from tasks_store_sql.plugin import drop_namespace

            await drop_namespace(args.postgres_url, namespace)


def _sql_target(name: str, url: str, namespace: str | None, dsn: str | None) -> Target:
    from tasks_store_sql import SQLStore

    async def open_sql() -> TaskStore:
        return await SQLStore.open(url, namespace=namespace)

    async def again(_: TaskStore) -> TaskStore:
        return await open_sql()

    async def close(store: TaskStore) -> None:
        await store.aclose()

    return Target(name, open_sql, again, close, dsn, url=url, namespace=namespace)


def _dsn(args: argparse.Namespace) -> str:
    from tasks_store_sql._url import parse_url

    url = parse_url(args.postgres_url).url
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def _ensure_database(dsn: str) -> None:
    """Create the bench database when missing (it is measured on its own)."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    url = sa.make_url(dsn).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            found = await conn.scalar(
                sa.select(sa.literal(1)).where(sa.column("datname") == url.database)
                .select_from(sa.table("pg_database", sa.column("datname")))
            )
            if not found:
                await conn.execute(CreateDatabase(str(url.database)))
    finally:
        await engine.dispose()


# -- the report --------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark; the JSON report."""
    report: dict[str, Any] = {
        "tasks": args.tasks, "concurrency": args.concurrency, "prefetch": args.prefetch,
        "batch": args.batch,
        "rate": args.rate, "samples": args.samples, "python": sys.version.split()[0],
        "stores": {},
    }
    with tempfile.TemporaryDirectory(prefix="tasks-bench-") as tmp:
        dsn = _dsn(args) if "postgresql" in args.stores else None
        if dsn is not None:
            await _ensure_database(dsn)

        async def postgres() -> dict[str, float]:
            assert dsn is not None
            return await postgres_baselines(
                dsn, "bench_" + secrets.token_hex(3) + "_", connections=args.concurrency,
                seconds=args.baseline_seconds,
            )

        async def sqlite() -> dict[str, float]:
            return await asyncio.to_thread(
                sqlite_baselines, f"{tmp}/baseline.db", seconds=args.baseline_seconds
            )

        async def nothing() -> dict[str, float]:
            return {}

        async with targets(args, Path(tmp)) as chosen:
            for target in chosen:
                kind = target.name if target.name != "memory" else "postgresql"
                baseline = {"postgresql": postgres if dsn else nothing, "sqlite": sqlite}[kind]
                result = await measure(target, args, baseline)
                report["stores"][target.name] = _figures(result, kind)
                target.release()  # the next store is measured without this one's heap
                gc.collect()
                if target.name == "postgresql":
                    report["peer"] = await _peer(dsn, args.tasks)
                    report["rounds"] = await _rounds(args, dsn, result.burn_down,
                                                     report["peer"].get("pgqueuer"))
                    report["delayed"] = await _delayed(target, args)
                    report["footprint"] = await _footprint(args, dsn)
                    report["processes"] = await _processes(args, dsn)
        report["runtime_alone"] = await _runtime_alone(args)
        report["submits"] = await _submits(args, dsn, Path(tmp))
    report["mongo"] = await _mongo(args)
    return report


async def _footprint(args: argparse.Namespace, dsn: str | None) -> Any:
    """Database bytes and WAL per finished task against pgqueuer's (``footprint.py``)."""
    import footprint  # (here: it imports this module)

    if dsn is None or not peers.available():
        return "not measured: no PostgreSQL or no pgqueuer"
    return await footprint.run(args, dsn)


async def _processes(args: argparse.Namespace, dsn: str | None) -> Any:
    """Burn-downs by 1, 2 and 4 worker processes against pgqueuer's (``processes.py``)."""
    import processes  # (here: it imports this module)

    if dsn is None or not peers.available():
        return "not measured: no PostgreSQL or no pgqueuer"
    return await processes.run(args, dsn)


async def _mongo(args: argparse.Namespace) -> dict[str, Any]:
    """MongoDB against PostgreSQL, the write concern on and off (``mongo.py``)."""
    import mongo  # (here: it imports this module)

    if "postgresql" in args.stores:
        await _ensure_database(_dsn(args))
    return await mongo.run(args)


async def _submits(args: argparse.Namespace, dsn: str | None, tmp: Path) -> dict[str, Any]:
    """The submit rates against their references (``submits.py``)."""
    import submits  # (here: it imports this module)

    return await submits.run(args, dsn, tmp)


async def _submits_only(args: argparse.Namespace) -> dict[str, Any]:
    """``--submits``: only the submit rates."""
    dsn = _dsn(args) if "postgresql" in args.stores else None
    if dsn is not None:
        await _ensure_database(dsn)
    with tempfile.TemporaryDirectory(prefix="tasks-bench-") as tmp:
        return {"submits": await _submits(args, dsn, Path(tmp))}


async def _runtime_alone(args: argparse.Namespace) -> dict[str, Any]:
    """The burn-down on :class:`floor.NoWorkStore`: the runtime's own rate and CPU per
    task, the least any store adds to."""
    probe = Probe()
    app = make_app(floor.NoWorkStore(args.tasks, OWNER), probe)
    async with app:
        spent = cpu.sample()
        rate = await burn_down(app, probe, args.tasks, args.concurrency, args.prefetch)
        return {"burn_down": round(rate, 1),
                "cpu_per_task": cpu.per_task(spent, cpu.sample(), args.tasks)}


async def _delayed(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """The start delay of delayed and fresh tasks on ``target`` (``delay_latency.py``)."""
    import delay_latency  # (here: it imports this module)

    return {"delayed": args.delayed, "spread_s": args.delay_spread,
            "concurrency": args.concurrency,
            "stores": {target.name: await delay_latency.measure(target, args)}}


async def _rounds(args: argparse.Namespace, dsn: str | None, ours: float,
                  theirs: float | None) -> list[dict[str, float]]:
    """Each pair of burn-downs — ours, then pgqueuer's right after — as rates and their
    ratio: the first pair (the figures above), then ``--rounds`` less one more."""
    if theirs is None:
        return []
    rounds = [{"postgresql": round(ours, 1), "pgqueuer": theirs}]
    for _ in range(args.rounds - 1):
        ours = await burn_again(args)
        peer = await _peer(dsn, args.tasks)
        rounds.append({"postgresql": round(ours, 1), "pgqueuer": peer["pgqueuer"]})
    for pair in rounds:
        pair["ratio"] = round(pair["postgresql"] / pair["pgqueuer"], 3)
    return rounds


async def _peer(dsn: str | None, tasks: int) -> dict[str, Any]:
    """pgqueuer's burn-down on the same server (see ``peers.py``), if it is installed."""
    if dsn is None or not peers.available():
        return {"pgqueuer": None, "why": "pgqueuer is not installed (nox -s bench installs it)"}
    from importlib.metadata import version

    target = peers.peer_dsn(dsn)
    await _ensure_database(target)
    rate, cpu_per_task = await peers.pgqueuer_burn_down(target, tasks)
    return {"pgqueuer": round(rate, 1), "version": version("pgqueuer"),
            "cpu_per_task": cpu_per_task}


def _figures(result: Result, against: str) -> dict[str, Any]:
    runs = [b for b in result.baselines if b]
    base = {k: statistics.fmean(b[k] for b in runs) for k in runs[0]} if runs else {}
    rates = {"enqueue_single": result.enqueue_single,
             "enqueue_batched": result.enqueue_batched, "burn_down": result.burn_down}
    figures: dict[str, Any] = {k: round(v, 1) for k, v in rates.items()}
    figures["baseline"] = {
        "database": against,
        "ops_per_s": {k: round(v, 1) for k, v in base.items()},
        "before_after": [{k: round(v, 1) for k, v in b.items()} for b in runs],
    }
    figures["ratios"] = {
        f"{name} / {kind}": round(rate / base[kind], 3)
        for name, rate in rates.items() for kind in base
    }
    figures["commits_per_task"] = (
        None if result.commits_per_task is None else round(result.commits_per_task, 3)
    )
    figures["latency_ms"] = {
        mode: {k: round(v, 2) for k, v in cuts.items()} for mode, cuts in result.latency_ms.items()
    }
    figures["cpu_per_task"] = result.cpu_per_task
    figures["checked"] = result.checked
    return figures


def _cpu(figures: dict[str, float | None]) -> str:
    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    return f"{shown(figures.get('worker_us'))} / {shown(figures.get('rest_us'))}"


def render(report: dict[str, Any]) -> str:
    """The human-readable table."""
    lines = [f"tasks={report['tasks']} concurrency={report['concurrency']} "
             f"prefetch={report['prefetch']} "
             f"batch={report['batch']} latency at {report['rate']:g}/s x {report['samples']}",
             "", "baselines (ops/s, mean of right before and right after each burn-down):"]
    for name, f in report["stores"].items():
        base = f["baseline"]
        figures = ", ".join(f"{k} {v:.0f}" for k, v in base["ops_per_s"].items()) or "-"
        lines.append(f"  {name:<11} on {base['database']:<11} {figures}")
    lines += ["", f"{'store':<11} {'enqueue 1x1':>11} {'enqueue xN':>11} {'burn-down':>10} "
              f"{'/update':>8} {'/upd+ins':>8} {'commits':>8}   latency p50/p90/p99 ms "
              "(other app | same app | other process)"]
    for name, f in report["stores"].items():
        ratios = f["ratios"]
        commits = "-" if f["commits_per_task"] is None else f"{f['commits_per_task']:.3f}"
        lat = " | ".join(
            "/".join(f"{cuts[k]:.1f}" for k in ("p50", "p90", "p99"))
            for cuts in f["latency_ms"].values()
        )
        per = {k: "-" if f"burn_down / {k}" not in ratios else f"{ratios[f'burn_down / {k}']:.3f}"
               for k in ("update", "update+insert")}
        lines.append(
            f"{name:<11} {f['enqueue_single']:>11.0f} {f['enqueue_batched']:>11.0f} "
            f"{f['burn_down']:>10.0f} {per['update']:>8} {per['update+insert']:>8} "
            f"{commits:>8}   {lat}"
        )
    lines += ["", "CPU per task of the burn-down, µs (worker process / rest of the machine):"]
    for name, f in report["stores"].items():
        lines.append(f"  {name:<11} {_cpu(f['cpu_per_task'])}")
    peer_cpu = report.get("peer", {}).get("cpu_per_task")
    if peer_cpu:
        lines.append(f"  {'pgqueuer':<11} {_cpu(peer_cpu)}")
    alone = report.get("runtime_alone")
    if alone:
        lines.append(f"  {'no store':<11} {_cpu(alone['cpu_per_task'])}   (the runtime alone, "
                     f"on a store that does no work: {alone['burn_down']:.0f}/s)")
    lines += ["", f"target (issue 4): burn-down/update >= {PGQUEUER_RATIO:.3f} (pgqueuer), "
              f"commits/task <= {TARGET_COMMITS}, latency p50 <= {TARGET_P50_MS:g} ms "
              "(PostgreSQL, other app)"]
    pg = report["stores"].get("postgresql")
    if pg:
        ratio = pg["ratios"].get("burn_down / update", 0.0)
        p50 = " / ".join(f"{mode} {cuts['p50']:.2f}" for mode, cuts in pg["latency_ms"].items())
        lines.append(
            f"postgresql: burn-down/update {ratio:.3f} ({ratio / PGQUEUER_RATIO:.2f}x the "
            f"issue's pgqueuer ratio), commits/task {pg['commits_per_task']}, p50 ms: {p50}"
        )
        peer = report.get("peer", {})
        if peer.get("pgqueuer"):
            lines.append(
                f"peer, same run: pgqueuer {peer['version']} burns down {peer['pgqueuer']:.0f}"
                f"/s; postgresql burn-down / pgqueuer = {pg['burn_down'] / peer['pgqueuer']:.2f}"
                " (target >= 1)"
            )
        else:
            lines.append(f"peer: {peer.get('why', 'not measured')}")
        rounds = report.get("rounds", [])
        if len(rounds) > 1:
            ratios = [pair["ratio"] for pair in rounds]
            lines.append(
                f"rounds, each pair back to back: postgresql / pgqueuer = "
                f"{' '.join(f'{r:.2f}' for r in ratios)}; median "
                f"{statistics.median(ratios):.2f} (target >= 1)"
            )
    delayed = report.get("delayed")
    if delayed:
        import delay_latency  # (here: it imports this module)

        lines += ["", *delay_latency.table(delayed, delayed["stores"])]
    footprint_rounds = report.get("footprint")
    if footprint_rounds:
        import footprint  # (here: it imports this module)

        lines += ["", *([f"footprint: {footprint_rounds}"] if isinstance(footprint_rounds, str)
                        else footprint.render(footprint_rounds))]
    by_processes = report.get("processes")
    if by_processes:
        import processes  # (here: it imports this module)

        lines += ["", *([f"processes: {by_processes}"] if isinstance(by_processes, str)
                        else processes.render(by_processes))]
    if "submits" in report:
        import submits  # (here: it imports this module)

        lines += ["", *submits.render(report["submits"])]
    if "mongo" in report:
        import mongo  # (here: it imports this module)

        lines += ["", *mongo.render(report["mongo"])]
    return "\n".join(lines)


def render_submits(report: dict[str, Any]) -> str:
    """The table of ``--submits``."""
    import submits  # (here: it imports this module)

    return "\n".join(submits.render(report["submits"]))


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run, print the table and then the JSON report on one line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stores", default=",".join(STORES),
                        help="comma-separated, of: " + ", ".join(STORES))
    parser.add_argument("--postgres-url", default=POSTGRES_URL,
                        help="a database of the bench's own ($TASKS_BENCH_POSTGRES_URL)")
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--prefetch", type=lambda text: text if text == "auto" else int(text),
                        default="auto", metavar="auto|N",
                        help="the burn-down worker's prefetch (default auto, the worker's)")
    parser.add_argument("--batch", type=int, default=100, help="submits in flight at once")
    parser.add_argument("--rate", type=float, default=200.0, help="latency: submits per second")
    parser.add_argument("--samples", type=int, default=300, help="latency: tasks per mode")
    parser.add_argument("--baseline-seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="PostgreSQL: burn-downs of ours and pgqueuer's, pair after pair")
    parser.add_argument("--json", dest="json_path", help="also write the JSON report here")
    parser.add_argument("--cancel-latency", action="store_true",
                        help="only cancel → handler latency from another process")
    parser.add_argument("--cancels", type=int, default=200, help="--cancel-latency: per store")
    parser.add_argument("--delay-latency", action="store_true",
                        help="only the start delay of delayed (and fresh) tasks")
    parser.add_argument("--delayed", type=int, default=300,
                        help="start delay: delayed tasks per store (and a third as many fresh)")
    parser.add_argument("--delay-spread", type=float, default=3.0,
                        help="start delay: seconds over which every task is submitted")
    parser.add_argument("--seed", type=int, default=31,
                        help="--cancel-latency: the pauses; start delay: the delays; "
                        "submits: the mixed priorities")
    parser.add_argument("--serial", type=int, default=1000,
                        help="submits: app.submit one after another, per round")
    parser.add_argument("--bulk", type=int, default=5000,
                        help="submits: tasks by submit_many of 1000, per round")
    parser.add_argument("--mariadb-url", default=MARIADB_URL,
                        help="submits: MariaDB ($TASKS_BENCH_MARIADB_URL; skipped if down)")
    parser.add_argument("--submits", action="store_true", help="only the submit rates")
    import mongo  # (here: it imports this module)
    import processes  # (here: it imports this module)

    mongo.add_arguments(parser)
    processes.add_arguments(parser)
    args = parser.parse_args(argv)
    args.stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = sorted(set(args.stores) - set(STORES))
    if unknown:
        parser.error(f"unknown store(s): {', '.join(unknown)}")
    if args.tasks < 10 or args.samples < 10:
        parser.error("--tasks and --samples must be at least 10")
    if args.serial < 1 or args.bulk < 1:
        parser.error("--serial and --bulk must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.delayed < 10 or args.delay_spread <= 0:
        parser.error("--delayed must be at least 10 and --delay-spread above 0")
    if args.cancel_latency:
        import cancel_latency  # (here: it imports this module)

        report = asyncio.run(cancel_latency.run(args))
        print(cancel_latency.render(report))
    elif args.delay_latency:
        import delay_latency  # (here: it imports this module)

        report = asyncio.run(delay_latency.run(args))
        print(delay_latency.render(report))
    elif args.submits:
        report = asyncio.run(_submits_only(args))
        print(render_submits(report))
    elif args.mongo:
        report = {"mongo": asyncio.run(_mongo(args))}
        print("\n".join(mongo.render(report["mongo"])))
    else:
        report = asyncio.run(run(args))
        print(render(report))
    text = json.dumps(report)
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
