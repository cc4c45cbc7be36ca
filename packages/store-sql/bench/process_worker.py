"""One worker process of ``processes.py``: ours (``ours URL NAMESPACE CONCURRENCY``) or
pgqueuer's (``pgqueuer DSN``). It prints ``ready`` once set up, starts when a line
arrives on stdin, and then: ours runs a worker as ``tasks worker`` does (logging at INFO
to stderr, the serving GC tuning) until SIGTERM; pgqueuer's runs one ``QueueManager`` in
``drain`` mode, which returns once the queue is empty. Last, it prints the CPU seconds
it spent from its start on.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_STARTED: list[float] = []


async def _go() -> None:
    """Say ready; return when the start arrives (the CPU spent counts from here)."""
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    _STARTED.append(_cpu())


async def ours(url: str, namespace: str, concurrency: int) -> None:
    """A worker of ours until SIGTERM (its drain included)."""
    from tasks_core import App, TaskContext
    from tasks_core.runtime._worker_gc import tune_for_serving
    from tasks_store_sql import SQLStore

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    store = await SQLStore.open(url, namespace=namespace)
    app = App(store=store)

    @app.task(name="noop")
    async def noop(ctx: TaskContext) -> None:
        """The job."""

    worker = app.worker(concurrency=concurrency, reap_interval=None)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await _go()
    tune_for_serving()
    running = asyncio.create_task(worker.run())
    await stop.wait()
    await worker.shutdown(drain_timeout=30)
    await running
    await store.aclose()


async def pgqueuer(dsn: str) -> None:
    """One pgqueuer ``QueueManager`` until its queue is empty."""
    import asyncpg
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(dsn)
    manager = QueueManager(Queries.from_asyncpg_connection(conn))

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        """The job."""

    await _go()
    await manager.run(mode=QueueExecutionMode.drain)
    await conn.close()


def main() -> None:
    """Run the kind named by the first argument; print the CPU seconds spent since the
    start."""
    kind, *rest = sys.argv[1:]
    if kind == "ours":
        asyncio.run(ours(rest[0], rest[1], int(rest[2])))
    else:
        asyncio.run(pgqueuer(rest[0]))
    print(f"cpu {_cpu() - _STARTED[0]}", flush=True)


if __name__ == "__main__":
    main()
