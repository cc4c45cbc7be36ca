"""The ``tasks`` CLI's commands on a shared store: submit, ls, show, respond, cancel, reap,
backends, migrate."""

from __future__ import annotations

import asyncio

import pytest
from _cli_kit import asking_app as _app
from _cli_kit import cli as _cli
from _cli_kit import console as _console
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app, until
from tasks_core import ManualClock, System, TaskContext, TaskNotFound, TaskStatus
from tasks_core.cli import build_parser, run
from tasks_core.runtime._defaults import default_store_url

pytestmark = pytest.mark.anyio


async def test_submit_ls_show_respond_and_cancel_on_one_store() -> None:
    """The commands MUST act on the store they are given, as the operator with
    ``--system`` and as ``--user`` when told."""
    app = _app()
    async with app:
        code, out = await _cli(app, "submit", "ask", "--user", "alice", "--key", "k1")
        assert (0, "created: alice::k1") == (code, out.strip())
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, "alice::k1", ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            code, out = await _cli(app, "ls", "--system")
            assert 0 == code
            assert "alice::k1" in out
            assert "waiting_input" in out
            code, out = await _cli(app, "ls", "--user", "bob")
            assert "alice::k1" not in out
            code, out = await _cli(app, "show", "alice::k1", "--system")
            assert 0 == code
            assert "input_requested" in out
            assert "asks" in out
            code, out = await _cli(app, "respond", "alice::k1", 'approve={"ok": true}',
                                   "aprove=1", "--system")
            assert (0, "alice::k1: answer applied (ignored, not asked: aprove); now running"
                    ) == (code, out.strip())
            done = await app.wait("alice::k1", ALICE, timeout=TIMEOUT)
        assert {"ok": True} == done.result
        code, out = await _cli(app, "show", "alice::k1", "--user", "alice")
        assert "completed" in out
        assert "input_responses_accepted" in out
        await _cli(app, "submit", "ask", "--user", "alice", "--key", "k2")
        code, out = await _cli(app, "cancel", "alice::k2", "--user", "alice")
        assert (0, "alice::k2: cancelled") == (code, out.strip())
        code, out = await _cli(app, "respond", "alice::k2", "approve=yes", "--system")
        assert (1, "alice::k2: no outstanding question matched; nothing changed (the task "
                "is cancelled)") == (code, out.strip())
        code, out = await _cli(app, "cancel", "alice::k1", "--user", "alice")
        assert (0, "alice::k1: completed (it had finished before the cancel: nothing "
                "changed)") == (code, out.strip())


async def test_show_tells_the_priority_a_task_was_given() -> None:
    """``show`` MUST print the task's priority (``--priority``, else its task's or 0): it
    decides the claim order, so a person checking a submit must see it."""
    app = _app()
    async with app:
        await _cli(app, "submit", "ask", "--user", "alice", "--key", "p7", "--priority", "-7")
        await _cli(app, "submit", "ask", "--user", "alice", "--key", "p0")
        shown = [(await _cli(app, "show", f"alice::{key}", "--system"))[1] for key in ("p7", "p0")]
    rows = [[line.split() for line in out.splitlines() if line.split()[:1] == ["priority"]]
            for out in shown]
    assert [[["priority", "-7"]], [["priority", "0"]]] == rows


async def test_show_follow_and_submit_wait_draw_progress_until_the_end() -> None:
    """``show --follow`` and ``submit --wait`` MUST follow the task live to its end and
    exit 0 for a completed task; off a terminal the output ends with a newline."""
    app = make_app()

    @app.task
    async def steps(ctx: TaskContext, n: int) -> int:
        for i in range(n):
            ctx.progress(100 * (i + 1) / n, f"step {i + 1}")
            await asyncio.sleep(0)
        return n

    async with app, fast_worker(app):
        code, out = await _cli(app, "submit", "steps", "--input", '{"n": 3}', "--wait", "--system")
        assert 0 == code
        assert "100%" in out
        assert out.endswith("\n")
        t = await app.submit(steps, {"n": 2}, ALICE)
        code, out = await _cli(app, "show", t.id, "--follow", "--system")
        assert 0 == code
        assert "completed" in out
        assert "history" in out


async def test_show_follow_exits_1_for_a_task_that_did_not_complete() -> None:
    """``show --follow`` MUST exit as ``submit --wait`` does: 1 for a task that ended
    otherwise than completed (failed here; cancelled alike), so a script can follow a task
    to learn its outcome; plain ``show`` of it exits 0."""
    app = make_app()

    message = "the warehouse refused the report: " + "x" * 300 + " (the end)"

    @app.task
    async def boom(ctx: TaskContext) -> None:
        raise RuntimeError(message)

    async with app, fast_worker(app):
        t = await app.submit(boom, None, ALICE)
        code, out = await _cli(app, "show", t.id, "--follow", "--system")
        assert (1, True) == (code, "failed" in out)
        assert f"{t.id}: failed: RuntimeError: {message}" in out.splitlines(), (
            "the error whole on a line of its own (the bar cuts it)")
        code, _ = await _cli(app, "submit", "boom", "--wait", "--system")
        assert 1 == code
    code, _ = await _cli(app, "show", t.id, "--system")
    assert 0 == code


async def test_ls_filters_and_pages() -> None:
    """``ls`` MUST filter by status and say how to get the next page."""
    app = _app()
    async with app:
        for n in range(3):
            await app.submit("ask", None, ALICE, key=f"k{n}")
        await app.cancel("alice::k0", ALICE)
        code, out = await _cli(app, "ls", "--status", "cancelled", "--system")
        assert (0, True, False) == (code, "alice::k0" in out, "alice::k1" in out)
        code, out = await _cli(app, "ls", "--limit", "2", "--wide", "--system")
        assert 0 == code
        assert "tasks ls … --after 'alice::k1'" in out
        assert "OWNER" in out


@pytest.mark.parametrize("command", [["ls"], ["show", "x"], ["cancel", "x"],
                                     ["respond", "x", "a=1"], ["submit", "ask"]])
def test_commands_refuse_to_run_without_saying_who_acts(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """There is no defaulted authority: a command that reads or acts on tasks MUST refuse
    to run unless ``--user`` or ``--system`` says who acts (and not both)."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(command)
    assert 2 == info.value.code
    assert "--user" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--user", "alice", "--system"])


@pytest.mark.parametrize("command", [["reap"], ["periodic", "--app", "m:app"]])
def test_admin_commands_refuse_to_run_without_system(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``reap`` (every tenant's expired tasks) and ``periodic`` (ticks of every tenant)
    act as ``System()`` only: they MUST say so with ``--system``, never by default."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(command)
    assert 2 == info.value.code
    assert "--system" in capsys.readouterr().err
    assert build_parser().parse_args([*command, "--system"]).system


async def test_show_of_an_invisible_task_reads_as_missing() -> None:
    """``show`` as another user MUST fail exactly as for a missing task."""
    app = _app()
    async with app:
        await app.submit("ask", None, ALICE, key="k")
        with pytest.raises(TaskNotFound):
            await _cli(app, "show", "alice::k", "--user", "bob")


async def test_reap_and_backends() -> None:
    """``reap`` MUST delete expired tasks; ``backends`` MUST list installed plugins with
    their capabilities and the default store."""
    clock = ManualClock()
    app = _app(clock)
    async with app:
        await app.submit("ask", None, System(), ttl=1)
        clock.advance(2)
        code, out = await _cli(app, "reap", "--system")
        assert (0, "reaped 1 expired task(s)") == (code, out.splitlines()[0])
        code, out = await _cli(app, "backends")
    assert 0 == code
    assert "memory" in out
    assert "tasks-store-memory" in out
    assert default_store_url()[0] in out


async def test_migrate_on_a_store_without_a_schema_says_so() -> None:
    """``migrate`` MUST say plainly when the store has no schema, and change nothing."""
    console, out = _console()
    assert 0 == await run(["migrate", "--store", "memory://"], console=console)
    assert "the memory store has no schema to migrate" == out.getvalue().strip()


async def test_ls_into_a_pipe_keeps_every_row_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tasks ls`` (``--wide`` too) into a pipe MUST print each task's row on one line
    with its id whole, however long (scripts grep and cut it); on a terminal it keeps the
    terminal's width."""
    monkeypatch.delenv("COLUMNS", raising=False)
    app = _app()
    key = "report-" + "x" * 90
    async with app:
        await app.submit("ask", None, ALICE, key=key)
        random = await app.submit("ask", None, ALICE)
        for wide in ([], ["--wide"]):
            assert 0 == await run(["ls", "--system", *wide], app=app)
            out = capsys.readouterr().out
            for task_id in (f"alice::{key}", random.id):
                assert [line for line in out.splitlines() if task_id in line], out


async def test_show_tells_a_live_lease_from_an_expired_one() -> None:
    """``tasks show`` MUST call a live lease of a started run ``live`` (``held`` is a
    claim held ahead of a free slot) and one that expired without ending ``expired`` (the
    task is pending again), never ``live``."""
    clock = ManualClock()
    app = _app(clock)
    async with app:
        t = await app.submit("ask", None, ALICE, key="k")
        await app.store.claim(t.id, "w1", 10)
        _, live = await _cli(app, "show", t.id, "--user", "alice")
        clock.advance(11)
        _, expired = await _cli(app, "show", t.id, "--user", "alice")
    assert "w1 gen 1 (live, until" in live
    assert "w1 gen 1 (expired, until" in expired


async def test_show_says_a_claim_took_over_an_expired_lease() -> None:
    """``tasks show`` of a task whose worker died MUST say its new claim took over an
    expired lease (the history shows no crash; only that and the deliveries count do)."""
    clock = ManualClock()
    app = _app(clock)
    async with app:
        t = await app.submit("ask", None, ALICE, key="k")
        await app.store.claim(t.id, "w1", 10)
        _, first = await _cli(app, "show", t.id, "--user", "alice")
        clock.advance(11)
        await app.store.claim(t.id, "w2", 10)
        _, second = await _cli(app, "show", t.id, "--user", "alice")
    assert "took over" not in first
    assert "w2 gen 2 (live, until" in second
    assert "; took over an expired lease)" in second


async def test_show_tells_accepted_answers_from_ignored_ones() -> None:
    """``tasks show`` MUST render an answer event with the answers that were accepted and
    name the keys that were ignored (not read them as accepted)."""
    app = _app()
    async with app:
        t = await app.submit("ask", None, ALICE, key="k")
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, t.id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            await app.respond(t.id, {"approve": True, "stray": "x"}, ALICE)
            await app.wait(t.id, ALICE, timeout=TIMEOUT)
        _, shown = await _cli(app, "show", t.id, "--user", "alice")
    assert '{"responses":{"approve":true},"ignored":["stray"]}' in shown
