"""``--json`` of the reads (``ls``, ``show``, ``workers``, ``periodic``): one JSON document
on stdout for scripts, holding exactly what the reads return (a snapshot reads back as the
``Snapshot`` the API returns, a history record as its ``EventRecord``), whatever the
console's width, with the same refusals as the tables."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app
from rich.console import Console
from tasks_core import App, EventRecord, ManualClock, Snapshot, TaskContext, TaskNotFound
from tasks_core.cli._render import print_json
from tasks_core.cli.main import run

pytestmark = pytest.mark.anyio


async def _cli(app: App, *argv: str, width: int = 200) -> tuple[int, str]:
    out = io.StringIO()
    code = await run(list(argv), app=app,
                     console=Console(file=out, width=width, color_system=None))
    return code, out.getvalue()


def _document(out: str) -> Any:
    """The one JSON document ``out`` holds (nothing else: ``json.loads`` refuses more)."""
    return json.loads(out)


async def test_ls_json_is_the_page_as_the_api_reads_it() -> None:
    """``ls --json`` MUST print one JSON object: ``tasks``, the page newest first, each
    reading back as the task ``app.get`` returns (input, result and status included);
    ``next_after``, the ``--after`` of the next page (``null`` on the last); and
    ``capped``, whether ``--scan`` stopped the read."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        ids = []
        for n in range(3):
            ids.append((await app.submit("job", {"n": n}, ALICE, priority=n)).id)
            clock.advance(1)
        _, first = await _cli(app, "ls", "--system", "--json", "--limit", "2")
        _, second = await _cli(app, "ls", "--system", "--json", "--limit", "2",
                                  "--after", ids[1])
        page, last = _document(first), _document(second)
        assert [t["id"] for t in page["tasks"]] == [ids[2], ids[1]]
        assert (page["next_after"], page["capped"]) == (ids[1], False)
        assert [t["id"] for t in last["tasks"]] == [ids[0]]
        assert last["next_after"] is None
        for task in page["tasks"] + last["tasks"]:
            assert Snapshot.model_validate_json(json.dumps(task)) == await app.get(
                task["id"], ALICE)
        _, capped = await _cli(app, "ls", "--system", "--json", "--scan", "1")
        assert _document(capped)["capped"] is True


async def test_show_json_is_the_task_and_its_history_as_the_api_reads_them() -> None:
    """``show --json`` MUST print one JSON object: ``task``, as ``app.get`` reads it, and
    ``history``, every record as ``app.history`` returns it, in order."""
    app = make_app()

    @app.task(name="add")
    async def add(ctx: TaskContext, a: int, b: int) -> int:
        ctx.progress(50, "half")
        return a + b

    async with app:
        task_id = (await app.submit("add", {"a": 2, "b": 3}, ALICE)).id
        async with fast_worker(app):
            await app.wait(task_id, ALICE, timeout=TIMEOUT)
        code, out = await _cli(app, "show", task_id, "--user", "alice", "--json")
        shown = _document(out)
        assert code == 0
        assert Snapshot.model_validate_json(json.dumps(shown["task"])) == await app.get(
            task_id, ALICE)
        assert [EventRecord.model_validate_json(json.dumps(r)) for r in shown["history"]] == (
            await app.history(task_id, ALICE))
        assert shown["task"]["result"] == 5


async def test_json_is_whole_on_a_narrow_console_and_escapes_control_characters() -> None:
    """Printed to a console of 20 columns, the document MUST still be one JSON text (no
    wrapping, no markup read from stored text), and a stored control character MUST
    reach the output escaped, never raw."""
    app = make_app()
    async with app:
        stored = {"note": "[bold]x[/bold] \x1b[31mred " + "long " * 40}
        task_id = (await app.submit("job", stored, ALICE)).id
        _, listed = await _cli(app, "ls", "--user", "alice", "--json", width=20)
        _, shown = await _cli(app, "show", task_id, "--user", "alice", "--json", width=20)
        assert _document(listed)["tasks"][0]["work"]["input"] == stored
        assert _document(shown)["task"]["work"]["input"] == stored
        assert "\x1b" not in listed + shown


async def test_show_json_of_a_task_you_may_not_see_reads_like_a_missing_one() -> None:
    """``show --json`` MUST refuse another owner's task exactly as a missing one (the same
    error and message), printing nothing."""
    app = make_app()
    async with app:
        task_id = (await app.submit("job", None, ALICE)).id
        refusals = []
        for asked in (task_id, "no-such-task"):
            out = io.StringIO()
            with pytest.raises(TaskNotFound) as refused:
                await run(["show", asked, "--user", "bob", "--json"], app=app,
                          console=Console(file=out, color_system=None))
            assert out.getvalue() == ""
            refusals.append(str(refused.value).replace(asked, "ID"))
        assert refusals[0] == refusals[1]
        assert (await app.get(task_id, ALICE)).owner == ALICE


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def test_workers_json_is_one_entry_per_worker_with_its_leases() -> None:
    """``workers --json`` MUST print one JSON object: ``now``, the store's clock, and
    ``workers``, busiest first, each with its id, its tasks by status (``running``,
    ``held``, ``waiting``), its queues, its latest lease expiry and — with ``--lease`` —
    its last heartbeat (that expiry less the lease), else ``null``."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    clock = ManualClock(start)
    app = make_app(clock)
    app.queue("a")
    app.queue("b")
    async with app:
        for worker, queue in (("w1", "a"), ("w1", "b"), ("w2", "a")):
            task = await app.submit("job", None, ALICE, queue=queue)
            await app.store.claim(task.id, worker, 30)
        clock.advance(5)
        _, plain_out = await _cli(app, "workers", "--system", "--json")
        _, heard_out = await _cli(app, "workers", "--system", "--json", "--lease", "30")
    listed, heard = _document(plain_out), _document(heard_out)
    assert _instant(listed["now"]) == start + timedelta(seconds=5)
    assert [(w["worker_id"], w["running"], w["held"], w["waiting"], w["queues"])
            for w in listed["workers"]] == [("w1", 2, 0, 0, ["a", "b"]),
                                            ("w2", 1, 0, 0, ["a"])]
    for worker in listed["workers"]:
        assert _instant(worker["lease_expires"]) == start + timedelta(seconds=30)
        assert worker["last_heartbeat"] is None
    assert [_instant(w["last_heartbeat"]) for w in heard["workers"]] == [start, start]


async def test_periodic_json_is_each_schedule_with_its_last_and_next_tick() -> None:
    """``periodic --json`` MUST print one JSON object: ``now``, the store's clock, and
    ``schedules``, each with its name, task, cadence, queue, catch-up, last tick (the
    latest at or before ``now``), the status of that tick's task (``not created`` when
    there is none) and next tick."""
    clock = ManualClock(datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC))
    app = make_app(clock)

    @app.periodic(every=60)
    @app.task
    async def tick(ctx: TaskContext) -> None:
        return None

    async with app:
        _, out = await _cli(app, "periodic", "--system", "--json")
    shown = _document(out)
    assert _instant(shown["now"]) == datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
    [schedule] = shown["schedules"]
    assert {key: schedule[key] for key in ("name", "task", "when", "queue", "catch_up",
                                           "last_run")} == {
        "name": "tick", "task": "tick", "when": "every 60s", "queue": "default",
        "catch_up": 1, "last_run": "not created"}
    assert _instant(schedule["last_tick"]) == datetime(2030, 1, 1, tzinfo=UTC)
    assert _instant(schedule["next_tick"]) == datetime(2030, 1, 1, 0, 1, tzinfo=UTC)


@pytest.mark.parametrize("argv", [["ls", "--wide"], ["show", "x", "--follow"]])
async def test_json_refuses_the_options_that_draw_for_a_person(argv: list[str]) -> None:
    """``--json`` with ``--wide`` (``ls``) or ``--follow`` (``show``) MUST be refused as a
    usage error (exit 2) before anything is read."""
    app = make_app()
    async with app:
        with pytest.raises(SystemExit) as exited:
            await _cli(app, *argv, "--system", "--json")
        assert exited.value.code == 2


NOT_PRINTABLE = {"csi": "\u009b2J", "osc": "\u009d52;c;aGVsbG8=\u009c", "bidi": "\u202e",
                 "delete": "\x7f", "tag": "\U000e0001"}
"""Stored text a terminal acts on or shows deceptively, none of it a C0 control character
(which ``json.dumps`` escapes anyway): the 8-bit CSI and OSC (C1), DEL, a bidi override,
and a tag character outside the BMP."""


async def test_json_escapes_every_character_that_is_not_printable() -> None:
    """``ls --json`` and ``show --json`` MUST write every character of stored text that is
    not printable as its JSON escape (C1 controls, DEL, bidi and format characters, one
    outside the BMP as its surrogate pair) — never raw — while other non-ASCII text stays
    as it is, and the line MUST load back to exactly the stored values."""
    app = make_app()
    async with app:
        stored = {**NOT_PRINTABLE, "plain": "é"}
        task_id = (await app.submit("job", stored, ALICE, key="é")).id
        _, listed = await _cli(app, "ls", "--user", "alice", "--json")
        _, shown = await _cli(app, "show", task_id, "--user", "alice", "--json")
    for out in (listed, shown):
        assert [] == [ch for ch in "\u009b\u009d\u009c\u202e\x7f\U000e0001" if ch in out]
        assert out.endswith("\n")
        assert out[:-1].isprintable()
        assert '"plain":"é"' in out
        assert '"tag":"\\udb40\\udc01"' in out
    assert _document(listed)["tasks"][0]["work"]["input"] == stored
    assert _document(shown)["task"]["work"]["input"] == stored
    assert "alice::é" == _document(shown)["task"]["id"] == task_id


def test_print_json_escapes_keys_and_values_that_are_not_printable() -> None:
    """Every ``--json`` goes through ``print_json`` (``workers`` and ``periodic`` too): an
    object key that is not printable MUST be escaped as a value is, and the line MUST load
    back to the document."""
    document = {"\u202ekey": ["\x7f", {"\u0085": "\u2028\u00a0ü"}], "n": 1.5, "t": True}
    out = io.StringIO()
    print_json(Console(file=out, width=20, color_system=None), document)
    assert out.getvalue()[:-1].isprintable()
    assert "ü" in out.getvalue()
    assert document == json.loads(out.getvalue())
