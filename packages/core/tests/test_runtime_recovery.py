"""Recovery of a dead worker's tasks, the delivery limit, ``recover="fail"``, the reaper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import (
    ALICE,
    TIMEOUT,
    DelegatingStore,
    fast_worker,
    make_app,
    until,
)
from tasks_core import (
    App,
    ManualClock,
    StoreUnavailable,
    System,
    TaskContext,
    TasksError,
    TaskStatus,
    Worker,
    find_store,
)
from tasks_core.reasons import WORKER_LOST_MESSAGE
from tasks_core.runtime._housekeeping import Reaper
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _hanging_app(clock: ManualClock, **submit: Any) -> tuple[App, list[int], asyncio.Event]:
    """An app whose handler hangs on its first ``hang`` deliveries (a worker that dies)."""
    app = make_app(clock)
    runs: list[int] = []
    started = asyncio.Event()

    @app.task
    async def job(ctx: TaskContext, hang: int) -> dict[str, Any]:
        runs.append(ctx.deliveries)
        if ctx.deliveries <= hang:
            started.set()
            await asyncio.Event().wait()
        return {"deliveries": ctx.deliveries}

    return app, runs, started


async def _kill_worker_mid_run(app: App, started: asyncio.Event, worker_id: str) -> None:
    """Start a worker, wait for its handler to start, then kill it: its asyncio task is
    cancelled, nothing is written or released (like a process that died)."""
    started.clear()
    worker = fast_worker(app, worker_id=worker_id)
    serving = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), TIMEOUT)
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving


async def test_a_killed_workers_task_is_recovered_after_its_lease_expires() -> None:
    """The task of a dead worker MUST stay leased until its lease expires, then another
    worker MUST claim it (``claim.recovered``) and run it again."""
    clock = ManualClock()
    app, runs, started = _hanging_app(clock)
    async with app:
        t = await app.submit("job", {"hang": 1}, ALICE)
        await _kill_worker_mid_run(app, started, "doomed")
        held = await app.get(t.id, ALICE)
        assert (TaskStatus.RUNNING, "doomed") == (held.status, held.claim and held.claim.worker_id)
        assert [] == await app.store.claim_next("probe", 30, queues=["default"])
        clock.advance(30)  # the dead worker's lease (30 s) expires
        async with fast_worker(app, worker_id="rescuer"):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.claim is not None
    assert ({"deliveries": 2}, "rescuer", True, [1, 2]) == (
        done.result, done.claim.worker_id, done.claim.recovered, runs)


async def test_a_task_that_kills_its_workers_runs_at_most_max_deliveries_times() -> None:
    """A poison task MUST run at most ``max_deliveries`` times; the next claim MUST fail it
    ("exceeded N deliveries")."""
    clock = ManualClock()
    app, runs, started = _hanging_app(clock)
    async with app:
        t = await app.submit("job", {"hang": 99}, ALICE, max_deliveries=2)
        for n in range(2):
            await _kill_worker_mid_run(app, started, f"doomed-{n}")
            clock.advance(30)
        async with fast_worker(app, worker_id="last"):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert (TaskStatus.FAILED, "DeliveryLimitExceeded", "exceeded 2 deliveries", [1, 2]) == (
        done.status, done.error.type, done.error.message, runs)


async def test_recover_fail_marks_a_dead_workers_task_failed() -> None:
    """With ``recover="fail"`` a claim that took over an expired lease MUST fail the task
    with "Worker process terminated unexpectedly" instead of running it again."""
    clock = ManualClock()
    app, runs, started = _hanging_app(clock)
    async with app:
        t = await app.submit("job", {"hang": 1}, ALICE)
        await _kill_worker_mid_run(app, started, "doomed")
        clock.advance(30)
        healthy = await app.submit("job", {"hang": 0}, ALICE)
        async with fast_worker(app, recover="fail"):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
            fine = await app.wait(healthy.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert (TaskStatus.FAILED, "WorkerLost", WORKER_LOST_MESSAGE) == (
        done.status, done.error.type, done.error.message)
    assert "Worker process terminated unexpectedly" == WORKER_LOST_MESSAGE
    assert TaskStatus.COMPLETED == fine.status, "a first delivery is never 'recovered'"
    assert [1, 1] == runs, "the dead worker's task never ran again"


async def test_recover_fail_spares_a_task_whose_worker_died_waiting_for_input() -> None:
    """A worker that died while its run waited in its slot for input lost no work a park
    would not have (a parked run is re-run too): the answer MUST end the dead worker's
    claim, so the next claim is no takeover and ``recover="fail"`` runs the task — not
    ``WorkerLost`` right after the person answered."""
    clock = ManualClock()
    app = make_app(clock)
    asking = asyncio.Event()

    @app.task
    async def approve(ctx: TaskContext) -> Any:
        asking.set()
        return await ctx.request_input("ok", {"q": "pay?"})

    async with app:
        t = await app.submit(approve, None, ALICE)
        worker = fast_worker(app, worker_id="doomed", input_park=TIMEOUT)
        serving = asyncio.create_task(worker.run())
        await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
        serving.cancel()  # dies while waiting: nothing written, nothing released
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        clock.advance(30)  # its lease (30 s) expires
        assert "applied" == (await app.respond(t.id, {"ok": True}, ALICE)).outcome
        answered = await app.get(t.id, ALICE)
        assert answered.claim is not None
        assert answered.claim.ended
        async with fast_worker(app, recover="fail"):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, True) == (done.status, done.result)


def _sqlite_or_skip() -> None:
    try:
        find_store("sqlite")
    except TasksError:
        pytest.skip("needs a multi-process store: pip install tasks-store-sql (sqlite)")


def _write_module(directory: Path, name: str, body: str) -> None:
    (directory / f"{name}.py").write_text(textwrap.dedent(body))


def _spawn_worker(directory: Path, spec: str, url: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "tasks_core.cli", "worker", spec, "--store", url,
         "--no-reaper", *extra],
        cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )


async def test_a_killed_worker_process_is_recovered_by_another_process(tmp_path: Path) -> None:
    """A worker process killed with SIGKILL mid-run MUST have its task recovered by
    another process once the lease expires (real processes, a shared SQLite file)."""
    _sqlite_or_skip()
    _write_module(tmp_path, "victimapp", """
        import time
        from tasks_core import App, TaskContext
        app = App(queues=["kill"])

        @app.task(queue="kill")
        def victim(ctx: TaskContext) -> dict:
            time.sleep(600)  # the doomed process never finishes
            return {"never": True}
    """)
    url = f"sqlite:///{tmp_path}/kill.db"
    app = App(url, queues=["kill"])

    @app.task(queue="kill")
    def victim(ctx: TaskContext) -> dict[str, Any]:
        return {"deliveries": ctx.deliveries}

    async with app:
        t = await app.submit(victim, None, ALICE)
        proc = _spawn_worker(tmp_path, "victimapp:app", url, "--lease", "1")
        try:
            held = await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.RUNNING)
            proc.kill()
            proc.wait(TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert held.claim is not None
        doomed = held.claim.worker_id
        async with Worker(app, poll_interval=0.05, reap_interval=None):
            done = await app.wait(t.id, ALICE, timeout=30)
    assert done.claim is not None
    assert ({"deliveries": 2}, True) == (done.result, done.claim.recovered)
    assert doomed != done.claim.worker_id


async def test_sigterm_drains_the_cli_worker(tmp_path: Path) -> None:
    """SIGTERM MUST make ``tasks worker`` drain: the running task stops for the shutdown
    and is released (pending, not cancelled), and the process exits 0."""
    _sqlite_or_skip()
    _write_module(tmp_path, "drainapp", """
        from tasks_core import App, TaskContext
        app = App(queues=["drain"])

        @app.task(queue="drain")
        def patient(ctx: TaskContext) -> None:
            ctx.token.wait_sync(600)
            ctx.raise_if_cancelled()
    """)
    url = f"sqlite:///{tmp_path}/drain.db"
    app = App(url, queues=["drain"])
    async with app:
        t = await app.submit("patient", None, ALICE, queue="drain")
        proc = _spawn_worker(tmp_path, "drainapp:app", url)
        try:
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.RUNNING)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
        snapshot = await app.get(t.id, ALICE)
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert 0 == code, output
    assert (TaskStatus.PENDING, None, 0) == (snapshot.status, snapshot.cancel_reason,
                                             snapshot.revision)
    assert snapshot.claim is not None
    assert snapshot.claim.ended


class _FlakyReap(DelegatingStore):
    """``reap`` fails on its first call, then works; counts calls."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.calls = 0
        self.second = asyncio.Event()

    async def reap(self, limit: int = 1000) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            raise StoreUnavailable("database is locked")
        if self.calls >= 2:
            self.second.set()
        return await self.inner.reap(limit)


async def test_a_run_whose_own_machinery_fails_gives_its_task_back(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unexpected exception in a run's own machinery, once its heartbeat is armed
    (here the OS refusing the sync handler's thread, once), MUST stop the run's heartbeat
    and give the task back: it runs again — never a lease renewed for a run that is not
    running."""
    app = make_app(store=MemoryStore())
    runs: list[int] = []
    refused: list[str] = []
    start = threading.Thread.start

    def start_or_refuse(thread: threading.Thread) -> None:
        if thread.name.startswith("tasks:job:") and not refused:
            refused.append(thread.name)
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_or_refuse)

    @app.task
    def job(ctx: TaskContext) -> int:
        runs.append(ctx.deliveries)
        return ctx.deliveries

    async with app:
        t = await app.submit(job, None, ALICE)
        with caplog.at_level(logging.ERROR, logger="tasks_core.worker"):
            async with fast_worker(app, lease_for=0.3):
                done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 2, [2]) == (done.status, done.result, runs)
    assert any("failed unexpectedly" in r.getMessage() for r in caplog.records)


async def test_a_failing_reaper_tick_costs_only_that_tick(caplog: pytest.LogCaptureFixture) -> None:
    """A tick that fails MUST be logged and the next tick MUST run and reap."""
    clock = ManualClock()
    inner = MemoryStore(clock=clock)
    store = _FlakyReap(inner)
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> None: ...

    async with app:
        t = await app.submit(job, None, ALICE, ttl=10)
        clock.advance(11)
        reaper = Reaper(store, interval=0.01)
        stop = asyncio.Event()
        with caplog.at_level(logging.INFO, logger="tasks_core.housekeeping"):
            running = asyncio.create_task(reaper.run(stop))
            await asyncio.wait_for(store.second.wait(), TIMEOUT)
            stop.set()
            await running
    assert 1 == reaper.failures
    assert any("tick failed" in r.getMessage() for r in caplog.records)
    assert any("removed 1 expired task(s)" in r.getMessage() for r in caplog.records)
    assert [] == await inner.list(_all())
    assert t.id not in [s.id for s in await inner.list(_all())]


def _all() -> Any:
    from tasks_core import TaskQuery

    return TaskQuery(tenant=None)


async def test_a_reaper_behind_sweeps_again_without_waiting_its_interval() -> None:
    """A sweep cut short by its cap (every batch full) MUST be followed by the next one
    within ``CATCH_UP_S``, not after the whole interval: a worker completing tasks faster
    than one capped sweep an interval removes would pile up expired rows without end.

    Troubleshooting: ``Reaper.run`` waits ``min(interval, CATCH_UP_S)`` after a capped
    sweep (``_housekeeping.py``).
    """
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    app = make_app(store=store)

    @app.task
    async def job(ctx: TaskContext) -> None: ...

    async with app:
        for _ in range(9):
            await app.submit(job, None, ALICE, ttl=1)
        clock.advance(2)
        caught_up = asyncio.Event()
        original = store.reap

        async def reap(limit: int = 1000) -> list[str]:
            ids = await original(limit)
            if len(ids) < limit:
                caught_up.set()
            return ids

        store.reap = reap  # type: ignore[method-assign]
        reaper = Reaper(store, interval=3600, batch=2, max_batches=2)
        stop = asyncio.Event()
        running = asyncio.create_task(reaper.run(stop))
        try:
            await asyncio.wait_for(caught_up.wait(), TIMEOUT)
        finally:
            stop.set()
            await running
        assert ([], 3) == (await store.list(_all()), reaper.ticks)


async def test_every_sweep_logs_what_it_did(caplog: pytest.LogCaptureFixture) -> None:
    """A sweep MUST log its count, even when it removed nothing."""
    store = MemoryStore(clock=ManualClock())
    with caplog.at_level(logging.INFO, logger="tasks_core.housekeeping"):
        assert [] == await Reaper(store).sweep()
    assert ["reaper: removed 0 expired task(s)"] == [r.getMessage() for r in caplog.records]


async def test_a_worker_runs_the_reaper() -> None:
    """A worker with ``reap_interval`` MUST reap expired tasks in the background."""
    clock = ManualClock()
    app = make_app(clock)

    @app.task
    async def job(ctx: TaskContext) -> None: ...

    async with app:
        t = await app.submit(job, None, System(), ttl=5)
        clock.advance(6)
        store = app.store
        assert isinstance(store, MemoryStore)
        reaped = asyncio.Event()
        original = store.reap

        async def reap(limit: int = 1000) -> list[str]:
            ids = await original(limit)
            if ids:
                reaped.set()
            return ids

        store.reap = reap  # type: ignore[method-assign]
        async with fast_worker(app, reap_interval=0.01):
            await asyncio.wait_for(reaped.wait(), TIMEOUT)
        with pytest.raises(TasksError):
            await app.store.get(t.id, tenant=None)
        assert [] == await app.store.list(_all())


async def test_a_second_sigterm_while_the_process_ends_exits_130(tmp_path: Path) -> None:
    """A second SIGTERM after the drain, while the interpreter ends (here an ``atexit``
    hook of the app's module that waits), MUST exit at once with 130 — not meet the
    default action (143)."""
    _write_module(tmp_path, "teardownapp", """
        import atexit
        import time
        from tasks_core import App

        app = App()

        @atexit.register
        def slow_teardown() -> None:
            print("tearing down", flush=True)
            time.sleep(60)  # ends only by the signal the test sends
    """)
    code, _ = await _terminated(tmp_path, "teardownapp:app", "tearing down")
    assert 130 == code


async def test_a_second_sigterm_while_the_store_closes_ends_the_process_at_once(
    tmp_path: Path,
) -> None:
    """A second SIGTERM while the drained worker's app closes its store MUST end the
    console script's process at once with 130, not cancel the close half-way (a driver's
    connections cancelled while closing logged tracebacks: sqlalchemy's "Exception
    closing connection … CancelledError", asyncpg's "Future exception was never
    retrieved"). Here the app's close stands for the store's: it reports a cancellation.

    Troubleshooting: ``Interrupts.closing`` in ``cli/_signals.py``, called by the worker
    command once serving ended.
    """
    _write_module(tmp_path, "closingapp", """
        import asyncio
        from tasks_core import App

        class ClosingApp(App):
            async def aclose(self) -> None:
                print("closing", flush=True)
                try:
                    await asyncio.sleep(60)  # ends only by the signal the test sends
                except asyncio.CancelledError:
                    print("close cut short", flush=True)
                    raise
                await super().aclose()

        app = ClosingApp()
    """)
    code, rest = await _terminated(tmp_path, "closingapp:app", "closing")
    assert (130, False, True) == (code, "close cut short" in rest, "exiting at once" in rest)


async def test_the_worker_process_ends_without_the_interpreters_finalization(
    tmp_path: Path,
) -> None:
    """Once the worker command returned and the exit hooks ran, the process MUST end with
    the command's code without the interpreter's finalization — whose steps run with
    SIGTERM at its default action, so a second signal there ended the process with 143
    (here an object's ``__del__`` at module teardown stands for that window: it never
    runs, and the process does not wait for it).

    Troubleshooting: ``_end_unfinalized`` in ``cli/_signals.py``, the console script's
    last ``atexit`` hook, ends the process with ``os._exit``.
    """
    _write_module(tmp_path, "finalapp", """
        import time
        from tasks_core import App

        app = App()

        class Slow:
            def __del__(self) -> None:
                print("finalizing", flush=True)
                time.sleep(60)  # the old exit waited here, signals at their default

        kept = Slow()
    """)
    code, rest = await _terminated(tmp_path, "finalapp:app")
    assert (0, False) == (code, "finalizing" in rest)


async def _terminated(directory: Path, spec: str, *then: str) -> tuple[int, str]:
    """Spawn a worker of ``spec`` on ``memory://``, send it SIGTERM once it serves and
    again each time it prints one of ``then`` in turn; its exit code and the output after
    the last line waited for."""
    proc = _spawn_worker(directory, spec, "memory://")
    try:
        await _line_with(proc, "worker ")
        proc.send_signal(signal.SIGTERM)
        for line in then:
            await _line_with(proc, line)
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, TIMEOUT)
        assert proc.stdout is not None
        return code, proc.stdout.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()


async def _line_with(proc: subprocess.Popen[bytes], text: str) -> str:
    """The first line of ``proc``'s output holding ``text`` (bounded by ``TIMEOUT``)."""
    assert proc.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        while True:
            line = (await asyncio.to_thread(proc.stdout.readline)).decode()
            if text in line or not line:
                assert text in line, f"the process ended before printing {text!r}"
                return line
