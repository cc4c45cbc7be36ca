"""The CLI's reads: ``ls`` newest first, reads that never create a store, ``workers``,
the no-live-worker hint of ``submit --wait``, and the ``ls`` table: within the console's
width on a terminal, at its natural width (outcomes whole) into a pipe."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, MALLORY, TIMEOUT, fast_worker, make_app
from rich.cells import cell_len
from rich.console import Console
from tasks_core import (
    App,
    ManualClock,
    Owner,
    RetryPolicy,
    TaskContext,
    TaskStatus,
    UnknownStore,
)
from tasks_core.cli import _reads
from tasks_core.cli._render import LEFT_OUT_FIRST, output_console
from tasks_core.cli.main import run
from tasks_core.errors import StoreError
from tasks_core.events import InputRequested
from tasks_core.runtime._defaults import EMBEDDED_STORE_URL, installed

pytestmark = pytest.mark.anyio


def _console(width: int = 200) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, color_system=None), out


async def _cli(app: App, *argv: str, width: int = 200) -> tuple[int, str]:
    console, out = _console(width)
    code = await run(list(argv), app=app, console=console)
    return code, out.getvalue()


def _ids(out: str, ids: list[str]) -> list[str]:
    """The ids of ``ids`` in the order ``out`` shows them."""
    return sorted((i for i in ids if i in out), key=out.index)


async def test_ls_lists_newest_first_and_pages_in_that_order() -> None:
    """``tasks ls`` MUST list the newest task first, keyed or not, and ``--after`` MUST
    continue in the same order."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        ids = []
        for n in range(4):
            ids.append((await app.submit("job", None, ALICE, key=f"k{3 - n}")).id)
            clock.advance(1)
            ids.append((await app.submit("job", None, ALICE)).id)
            clock.advance(1)
        newest = ids[::-1]
        _, out = await _cli(app, "ls", "--system")
        assert newest == _ids(out, ids)
        _, first = await _cli(app, "ls", "--system", "--limit", "3")
        assert newest[:3] == _ids(first, ids)
        assert f"--after {newest[2]!r}" in first
        _, second = await _cli(app, "ls", "--system", "--limit", "3", "--after", newest[2])
        assert newest[3:6] == _ids(second, ids)


PERIODIC_APP = """
from tasks_core import App

app = App()


@app.periodic(every=60)
@app.task
async def tick(ctx) -> None:
    return None
"""


@pytest.fixture
def periodic_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable app with one schedule (``tasks periodic`` needs ``--app``), outside
    the directory a command runs in."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "ticking.py").write_text(PERIODIC_APP)
    monkeypatch.syspath_prepend(str(modules))
    return "ticking:app"


@pytest.mark.parametrize("command", [["ls"], ["show", "x"], ["workers"], ["cancel", "x"],
                                     ["periodic"], ["reap"]])
@pytest.mark.parametrize("store", [None, "sqlite:///nothing-here.db"])
async def test_a_read_never_creates_a_sqlite_file(
    command: list[str], store: str | None, tmp_path: Path, periodic_app: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command on an existing store MUST refuse a SQLite store whose file is missing —
    naming the file and suggesting ``--app``/``--store`` (with ``--app`` given: that the
    app's first worker or submit creates it) — and create nothing."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.delenv("TASKS_STORE", raising=False)
    if store is None and not installed(EMBEDDED_STORE_URL):
        pytest.skip("the default store is SQLite only with tasks-store-sql installed")
    argv = [*command, "--system", *(["--store", store] if store else []),
            *(["--app", periodic_app] if command == ["periodic"] else [])]
    with pytest.raises(UnknownStore) as info:
        await run(argv, console=_console()[0])
    name = "nothing-here.db" if store else "tasks.db"
    assert str(here / name) in str(info.value)
    if command == ["periodic"]:
        assert "the app's first worker or submit creates it" in str(info.value)
    else:
        assert "--app module:app or --store URL" in str(info.value)
    assert [] == os.listdir(here)


async def test_a_read_of_a_url_no_plugin_serves_says_only_that() -> None:
    """A read command on a URL no installed plugin serves MUST say which plugin to
    install — not the hint about a store that is not there."""
    with pytest.raises(UnknownStore) as info:
        await run(["ls", "--system", "--store", "nosuch://x"], console=_console()[0])
    assert "'nosuch'" in str(info.value)
    assert "reading never creates" not in str(info.value)


@pytest.mark.parametrize("command", [
    ["ls", "--system"], ["show", "x", "--system"], ["workers", "--system"],
    ["cancel", "x", "--system"], ["respond", "x", "a=1", "--system"], ["reap", "--system"],
    ["periodic", "--system", "--app", "ticking:app"]])
@pytest.mark.parametrize("content", ["empty", "foreign"])
async def test_a_read_never_creates_the_schema_in_an_existing_file(
    command: list[str], content: str, tmp_path: Path, periodic_app: str
) -> None:
    """A command on an existing store MUST NOT write into a SQLite file without the tasks
    schema — an empty file, another program's database: no table, no switch of its
    journal mode, not a byte — but refuse, saying how to make one (``tasks dashboard``
    likewise: the dashboard's own tests)."""
    if not installed(EMBEDDED_STORE_URL):
        pytest.skip("needs tasks-store-sql")
    path = tmp_path / "data" / "other.db"
    path.parent.mkdir()
    with contextlib.closing(sqlite3.connect(path)) as foreign:
        if content == "foreign":
            foreign.execute("CREATE TABLE notes (body TEXT)")
            foreign.commit()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="no tasks schema"):
        await run([*command, "--store", f"sqlite:///{path}"],
                  console=_console()[0])
    assert before == path.read_bytes()
    assert ["other.db"] == os.listdir(path.parent)


@pytest.mark.parametrize("url", ["memory://", "sqlite://", "sqlite:///:memory:"])
async def test_a_store_private_to_the_process_is_said_to_be(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task submitted to a store that dies with the command (``memory://``, an
    in-memory SQLite database) MUST come with a note saying so."""
    if url.startswith("sqlite") and not installed(EMBEDDED_STORE_URL):
        pytest.skip("needs tasks-store-sql")
    await run(["submit", "job", "--system", "--store", url], console=_console()[0])
    assert f"{url} is private to this process" in capsys.readouterr().err


async def test_workers_lists_the_holders_of_live_leases() -> None:
    """``tasks workers`` MUST list each worker id holding live leases with its task
    counts; its last heartbeat is the lease's expiry less ``--lease`` when given."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        _, none = await _cli(app, "workers", "--system")
        tasks = [await app.submit("job", None, ALICE) for _ in range(4)]
        for task, worker in zip(tasks, ("w1", "w1", "w2", None), strict=True):
            if worker:
                await app.store.claim(task.id, worker, 10)
        _, out = await _cli(app, "workers", "--system", "--lease", "10")
        clock.advance(11)
        _, gone = await _cli(app, "workers", "--system")
    assert "no live worker" in none
    cells = [line.replace("│", " ").split() for line in out.splitlines()]
    rows = {c[0]: c[1:3] for c in cells if c and c[0] in ("w1", "w2")}
    assert {"w1": ["2", "0"], "w2": ["1", "0"]} == rows
    assert "LAST HEARTBEAT" in out
    assert "(0s ago)" in out
    assert "no live worker" in gone


async def test_workers_shows_only_the_leases_of_tasks_the_caller_can_list() -> None:
    """``tasks workers --user U`` MUST read as U: workers holding leases only on tasks U
    cannot list — another owner's, another tenant's — MUST NOT appear (an invisible task
    reads as a missing one); ``--system`` sees every tenant, ``--tenant`` narrows it."""
    app = make_app()
    async with app:
        for owner, worker in ((ALICE, "w-alice"), (BOB, "w-bob"), (MALLORY, "w-evil")):
            task = await app.submit("job", None, owner)
            await app.store.claim(task.id, worker, 30)
        shown = {}
        for who in (["--user", "alice"], ["--user", "mallory", "--tenant", "evil"],
                    ["--user", "carol"], ["--system"], ["--system", "--tenant", "evil"]):
            _, out = await _cli(app, "workers", *who)
            shown[" ".join(who)] = [w for w in ("w-alice", "w-bob", "w-evil") if w in out]
    assert {"--user alice": ["w-alice"], "--user mallory --tenant evil": ["w-evil"],
            "--user carol": [], "--system": ["w-alice", "w-bob", "w-evil"],
            "--system --tenant evil": ["w-evil"]} == shown


async def test_submit_wait_says_once_that_no_live_worker_serves_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``submit --wait`` on a queue no worker serves MUST say so once (not wait silently
    forever); it keeps following the task."""
    monkeypatch.setattr(_reads, "NO_WORKER_AFTER_S", 0.05)
    monkeypatch.setattr(_reads, "HINT_POLL_S", 0.02)
    app = make_app()
    async with app:
        follow = asyncio.create_task(_cli(app, "submit", "job", "--user", "alice", "--key",
                                          "k", "--wait"))
        for _ in range(200):
            await asyncio.sleep(0.02)
        await app.cancel("alice::k", ALICE)
        code, out = await asyncio.wait_for(follow, TIMEOUT)
    assert 1 == code
    assert 1 == out.count("no live worker serves queue 'default'"), out


async def test_submit_wait_hint_reads_the_leases_as_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hint MUST read the queue's leases as the caller reads them (as ``tasks workers
    --user`` does): another owner's task held by a worker is invisible to bob, so whether
    bob sees the hint MUST NOT tell him that such a task is running."""
    monkeypatch.setattr(_reads, "NO_WORKER_AFTER_S", 0.05)
    monkeypatch.setattr(_reads, "HINT_POLL_S", 0.02)
    app = make_app()
    async with app:
        hers = await app.submit("job", None, ALICE)
        await app.store.claim(hers.id, "w1", 60)
        follow = asyncio.create_task(_cli(app, "submit", "job", "--user", "bob", "--key",
                                          "k", "--wait"))
        for _ in range(200):
            await asyncio.sleep(0.02)
        await app.cancel("bob::k", Owner("bob"))
        _, out = await asyncio.wait_for(follow, TIMEOUT)
    assert 1 == out.count("no live worker"), out


async def test_submit_wait_says_nothing_while_a_worker_serves_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker running the task: no hint."""
    monkeypatch.setattr(_reads, "NO_WORKER_AFTER_S", 0.05)
    monkeypatch.setattr(_reads, "HINT_POLL_S", 0.02)
    app = make_app()

    @app.task
    async def slow(ctx: TaskContext) -> int:
        await ctx.sleep(0.5)
        return 1

    async with app, fast_worker(app):
        code, out = await asyncio.wait_for(
            _cli(app, "submit", "slow", "--user", "alice", "--wait"), TIMEOUT)
    assert (0, False) == (code, "no live worker" in out)


async def test_ls_at_100_columns_keeps_ids_whole_and_outcomes_on_one_line() -> None:
    """At 100 columns every id MUST be on one line, whole, and a long outcome MUST be cut
    with an ellipsis, never folded mid-word onto more lines."""
    app = make_app()

    @app.task
    async def big(ctx: TaskContext) -> Any:
        return {"words": "lorem ipsum dolor sit amet " * 20}

    async with app:
        done = [await app.submit(big, None, ALICE, key="report-" + "x" * 18),
                await app.submit(big, None, ALICE)]
        async with fast_worker(app):
            for task in done:
                await app.wait(task.id, ALICE, timeout=TIMEOUT)
        _, out = await _cli(app, "ls", "--system", width=100)
    lines = out.splitlines()
    for task in done:
        assert [line for line in lines if task.id in line], out
    assert 2 == sum(1 for line in lines if "…" in line), out
    assert 2 + 4 == len([line for line in lines if line.strip()]), out  # 3 rules + header
    assert all(len(line) <= 100 for line in lines), out


WORDS = "lorem ipsum dolor sit amet " * 20


async def _long_outcomes(app: App) -> tuple[list[str], dict[str, str]]:
    """Tasks with long ids (40 characters, as a periodic tick's) and short ones, ended with
    long outcomes — a result, an error — and one still pending: their ids, and the one-line
    outcome of each ended one."""

    @app.task(retry=RetryPolicy.none())
    async def big(ctx: TaskContext, fail: bool = False) -> Any:
        if fail:
            raise ValueError("first line\n" + WORDS)
        return {"words": WORDS}

    tasks = [await app.submit(big, None, ALICE, key="report:2030-01-01T09:00:00.000Z-" + n)
             for n in "ab"]
    tasks += [await app.submit(big, {"fail": True}, ALICE), await app.submit(big, None, ALICE)]
    async with fast_worker(app):
        for task in tasks:
            await app.wait(task.id, ALICE, timeout=TIMEOUT)
    pending = await app.submit("job", None, ALICE)
    outcomes = {t.id: json.dumps({"words": WORDS}, separators=(",", ":")) for t in tasks}
    outcomes[tasks[2].id] = "ValueError: first line " + " ".join(WORDS.split())
    return [*(t.id for t in tasks), pending.id], outcomes


@pytest.mark.parametrize("width", [60, 80, 120, 160])
@pytest.mark.parametrize("wide", [False, True])
async def test_ls_fits_the_console_with_ids_whole_and_outcomes_cut_with_an_ellipsis(
    width: int, wide: bool
) -> None:
    """Within ``width`` columns the whole ``tasks ls`` table, borders included, MUST fit:
    every id whole on its row, its status whole when shown; an outcome shown whole or cut
    with ``…`` at its end; a column that does not fit left out, named under the table."""
    app = make_app()
    async with app:
        ids, outcomes = await _long_outcomes(app)
        _, out = await _cli(app, "ls", "--system", *(["--wide"] if wide else []), width=width)
    lines = out.splitlines()
    assert all(cell_len(line) <= width for line in lines), out
    table = [line for line in lines if line.startswith(tuple("┏┃┡│└"))]
    assert all(line[-1] in "┓┃┩│┘" for line in table), out  # the right border is there
    headers = [name.strip() for name in table[1].strip("┃").split("┃")]
    below = " ".join(lines[lines.index(table[-1]) + 1:])  # the caption
    left_out = [name for name in LEFT_OUT_FIRST if name in below]
    assert "ID" == headers[0]
    assert len(LEFT_OUT_FIRST) - (0 if wide else 4) == len(headers) - 1 + len(left_out), out
    for task_id in ids:
        [row] = [line for line in table if task_id in line]
        cells = [text.strip() for text in row.strip("│").split("│")]
        if "STATUS" in headers:
            assert cells[headers.index("STATUS")] in {status.value for status in TaskStatus}
        shown = cells[-1]
        if task_id in outcomes and "OUTCOME" in headers:
            whole = outcomes[task_id]
            assert shown == whole or (whole.startswith(shown[:-1]) and shown[-1] == "…"), row


async def test_ls_into_a_pipe_shows_each_outcome_whole_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Into a pipe (no terminal, no ``$COLUMNS``) each outcome MUST be shown whole, on
    the task's one line (newlines and runs of spaces as one space)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    app = make_app()
    async with app:
        ids, outcomes = await _long_outcomes(app)
        capsys.readouterr()
        assert 0 == await run(["ls", "--system", "--wide"], app=app, console=output_console())
    lines = capsys.readouterr().out.splitlines()
    for task_id in ids:
        [row] = [line for line in lines if task_id in line]
        assert task_id not in outcomes or outcomes[task_id] in row, row


async def test_an_ordinary_cancel_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A cancel of a running task whose handler ends later is expected: its late outcome
    is fenced off at DEBUG, never a WARNING."""
    app = make_app()
    started = asyncio.Event()

    @app.task
    def stubborn(ctx: TaskContext) -> int:
        app_loop.call_soon_threadsafe(started.set)
        import time

        time.sleep(0.3)
        return 1

    app_loop = asyncio.get_running_loop()
    caplog.set_level(logging.DEBUG, logger="tasks_core")
    async with app, fast_worker(app):
        task = await app.submit(stubborn, None, ALICE)
        await asyncio.wait_for(started.wait(), TIMEOUT)
        await app.cancel(task.id, ALICE)
        await asyncio.sleep(0.6)
    fenced = [r for r in caplog.records if "fenced off" in r.getMessage()]
    assert fenced, caplog.text
    assert [] == [r for r in fenced if r.levelno >= logging.WARNING]


def _lease_line(out: str) -> str:
    """The ``lease`` row of ``tasks show``."""
    return next(line for line in out.splitlines() if line.split()[:1] == ["lease"])


async def test_show_says_held_only_of_a_claim_held_ahead_of_a_free_slot() -> None:
    """``tasks show`` MUST call a live lease ``held`` only when the claim is held ahead of
    a free slot (the task reads ``claimed``, its handler not started); the live lease of a
    running task, or of one waiting for input, MUST read ``live``; a lease that lapsed
    MUST read ``expired``, whether the task reads pending again or still waits for input."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        for _ in range(3):
            await app.submit("job", None, ALICE)
        claims = await app.store.claim_next("w1", 10, queues=["default"], limit=3, start=2)
        running, asking, held = (claim.snapshot for claim in claims)
        asked = await app.store.transition(asking.id, asking.revision, InputRequested(
            event_id="ask", key="approve"), claims[1].lease)
        assert [TaskStatus.RUNNING, TaskStatus.WAITING_INPUT, TaskStatus.CLAIMED] == [
            running.status, asked.snapshot.status, held.status]
        shown = [(await _cli(app, "show", s.id, "--system"))[1]
                 for s in (running, asking, held)]
        clock.advance(11)
        lapsed = [(await _cli(app, "show", s.id, "--system"))[1] for s in (running, asking)]
    assert ["live", "live", "held", "expired", "expired"] == [
        _lease_line(out).split("(")[1].split(",")[0] for out in shown + lapsed]
