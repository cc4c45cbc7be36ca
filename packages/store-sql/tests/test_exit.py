"""Leaving ``asyncio.run`` on SQLite: a program that cancels its worker and closes its app
ends, however the cancel meets the worker's connections."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tasks_store_sql._dialect import _open_aiosqlite

PROCESSES = 6
SEQUENCES = 16
"""Times each process runs the sequence, each in its own ``asyncio.run``."""
PARALLEL = 3
TIMEOUT = 60.0
"""Seconds a process may take (it takes a few): a process still running then hangs."""
STOP_WAIT = 10.0
"""Seconds a stopped connection's close may take (its thread serves a stop at once)."""

SEQUENCE = textwrap.dedent(
    """
    import asyncio, faulthandler, sys
    from tasks_core import App, Owner

    ALICE = Owner("alice")

    async def main(url):
        app = App(url)

        @app.task
        async def echo(ctx, n):
            return n

        submitted = await app.submit(echo, {"n": 1}, ALICE)
        worker = asyncio.create_task(app.run_worker())
        await app.wait(submitted.id, ALICE, timeout=30)
        worker.cancel()
        await app.aclose()

    faulthandler.dump_traceback_later(float(sys.argv[3]), exit=True)
    for n in range(int(sys.argv[2])):
        asyncio.run(main(f"sqlite:///{sys.argv[1]}/{n}.db"))
    """
)


def _run(folder: Path) -> tuple[int | None, str]:
    """Run the sequences in a fresh process; its exit code (``None``: killed, still
    running) and the end of its error output."""
    folder.mkdir()
    try:
        done = subprocess.run(
            [sys.executable, "-c", SEQUENCE, str(folder), str(SEQUENCES), str(TIMEOUT)],
            capture_output=True, text=True, timeout=TIMEOUT + 15,
        )
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr or ""
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        return None, err[-3000:]
    return done.returncode, done.stderr[-3000:]


def test_a_program_cancelling_its_worker_on_sqlite_leaves_asyncio_run(tmp_path: Path) -> None:
    """Submit, wait, cancel the task running ``app.run_worker()`` (not awaiting it), close
    the app, return from ``asyncio.run``: repeated in fresh processes, every run MUST end,
    and every process exit 0.

    Troubleshooting: a process that times out printing a traceback in
    ``_cancel_all_tasks`` waits at exit for a task that never ends. The usual one is
    SQLAlchemy's graceful close of an aiosqlite connection that a cancel interrupted
    (``terminate``): the connection was stopped twice, and its thread serves only one stop
    (``_dialect._stop_once``)."""
    folders = [tmp_path / f"p{n}" for n in range(PROCESSES)]
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(_run, folders))
    failed = [(code, err) for code, err in results if code != 0]
    assert 0 == len(failed), (
        f"{len(failed)} of {PROCESSES} processes did not exit cleanly; the first (exit "
        f"code {failed[0][0]}; None: killed) said:\n{failed[0][1]}")


@pytest.mark.anyio
async def test_a_sqlite_connection_stopped_while_closing_lets_the_close_end(
    tmp_path: Path,
) -> None:
    """A store's aiosqlite connection closing in its own task, stopped meanwhile (as
    SQLAlchemy's ``terminate`` does when a cancel interrupts that close), and the close
    then cancelled (as ``asyncio.run`` does at exit) MUST end its close: the second stop
    waits for the first, which the connection's thread serves."""
    aiosqlite = pytest.importorskip("aiosqlite")
    if not hasattr(aiosqlite.Connection, "stop"):
        pytest.skip("this aiosqlite has no stop(): SQLAlchemy never terminates it")
    connection = await _open_aiosqlite(str(tmp_path / "x.db"))
    closing = asyncio.ensure_future(connection.close())
    await asyncio.sleep(0)  # one turn of the loop: the close queues its call and waits
    connection.stop()
    closing.cancel()
    done, _ = await asyncio.wait({closing}, timeout=STOP_WAIT)
    assert {closing} == done
    assert closing.cancelled()
