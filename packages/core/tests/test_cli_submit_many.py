"""``tasks submit --many FILE.jsonl``: one bulk submit of a JSON object per line, one
result line per item; a bad line refuses the file, naming the line, before any write."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _runtime_kit import ALICE
from rich.console import Console
from tasks_core import App, InvalidInput, System, TaskContext, TaskStatus
from tasks_core.cli import run
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _app() -> App:
    app = App(store=MemoryStore(), queues=["urgent"])

    @app.task
    async def send(ctx: TaskContext, to: str) -> str:
        return to

    return app


async def _run(app: App, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await run(["submit", *argv, "--user", "alice"], app=app,
                     console=Console(file=out, width=200, color_system=None))
    return code, out.getvalue()


async def test_every_line_is_one_item_of_one_batch(tmp_path: Path) -> None:
    lines = ['{"task": "send", "input": {"to": "a"}, "key": "a", "queue": "urgent"}', "",
             '{"input": {"to": "b"}, "key": "b", "delay": "5m", "priority": 7}',
             '{"input": {"to": "c"}, "key": "a"}',
             '{"input": {"to": "d"}, "key": "d", "global": true, '
             '"at": "2030-01-01T00:00Z"}']
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(lines) + "\n")
    app = _app()
    async with app:
        code, out = await _run(app, "send", "--many", str(path))
        assert 0 == code
        assert ["created: alice::a", "created: alice::b", "joined: alice::a",
                "created: d"] == out.splitlines()
        b = await app.get("alice::b", ALICE)
        assert (TaskStatus.SCHEDULED, 7) == (b.status, b.priority)
        assert "urgent" == (await app.get("alice::a", ALICE)).queue


@pytest.mark.parametrize(("line", "why"), [
    ("not json", "line 2: "),
    ('["send"]', "line 2: each line must be a JSON object"),
    ('{"task": "send", "when": 1}', "line 2: unknown key(s) when"),
    ('{"input": {"to": "x"}}', "line 2: name the task"),
    ('{"task": "send", "delay": "soon"}', "line 2: "),
    ('{"task": "send", "input": {"nope": 1}}', "item 1: input does not match"),
    ('{"task": "send", "key": "g", "global": "yes"}', "line 2: global must be true or false"),
    ('{"task": "send", "key": "g", "global": 1}', "line 2: global must be true or false"),
    ('{"task": 5}', "line 2: task must be a task name"),
    ('{"task": "send", "delay": "5m", "at": "2030-01-01T00:00Z"}',
     "line 2: give delay or at, not both"),
    ('{"task": "send", "input": {"to": "b"}, "task": "send"}',
     "line 2: the line gives the key 'task' twice"),
    ('{"task": "send", "input": {"to": "b", "to": "c"}}',
     "line 2: the line gives the key 'to' twice"),
    ('{"task": "send", "priority": ' + "9" * 5000 + "}",
     "line 2: the line cannot be read: nested too deeply or a number too long"),
    ("[" * 100_000 + "]" * 100_000,
     "line 2: the line cannot be read: nested too deeply or a number too long"),
])
async def test_a_bad_line_refuses_the_file(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"task": "send", "input": {"to": "a"}}\n' + line + "\n")
    app = _app()
    async with app:
        with pytest.raises(InvalidInput) as caught:
            await _run(app, "--many", str(path))
        assert str(caught.value).startswith(why)
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize(("argv", "why"), [
    (["--many", "FILE", "--key", "k"], "not --key"),
    ([], "--many FILE"),
    (["--many", "MISSING"], "cannot read"),
])
async def test_many_takes_its_options_from_the_lines(
    tmp_path: Path, argv: list[str], why: str
) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"task": "send", "input": {"to": "a"}}\n')
    names = {"FILE": str(path), "MISSING": str(tmp_path / "missing.jsonl")}
    app = _app()
    async with app:
        with pytest.raises(InvalidInput) as caught:
            await _run(app, *(names.get(arg, arg) for arg in argv))
        assert why in str(caught.value)


async def test_a_file_saved_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    """A UTF-8 file that begins with a byte order mark (as some editors save it) is read as
    the same lines without it."""
    path = tmp_path / "items.jsonl"
    path.write_text('{"task": "send", "input": {"to": "a"}, "key": "a"}\n', encoding="utf-8-sig")
    app = _app()
    async with app:
        assert (0, "created: alice::a\n") == await _run(app, "--many", str(path))


async def test_a_file_without_a_task_says_it_submitted_nothing(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("\n  \n")
    app = _app()
    async with app:
        code, out = await _run(app, "send", "--many", str(path))
        assert (0, "submitted nothing: the file holds no line\n") == (code, out)
