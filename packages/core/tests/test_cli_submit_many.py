"""``tasks submit --many FILE.jsonl``: one bulk submit of a JSON object per line, one
result line per item; a bad line refuses the file, naming the line, before any write."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE
from rich.console import Console
from tasks_core import App, CapacityExceeded, InvalidInput, System, TaskContext, TaskStatus
from tasks_core.cli import run
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _app() -> App:
    app = App(store=MemoryStore(), queues=["urgent"])

    @app.task
    async def send(ctx: TaskContext, to: str) -> str:
        return to

    return app


def _jsonl(tmp_path: Path, lines: list[str]) -> Path:
    """A file ``items.jsonl`` in ``tmp_path`` holding ``lines``, each ended by a newline."""
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


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
    path = _jsonl(tmp_path, lines)
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


async def test_a_null_value_on_a_line_reads_as_the_key_left_out(tmp_path: Path) -> None:
    """A key of a line whose value is JSON ``null`` MUST read as the key left out, as
    ``None`` does in ``app.submit_many``: ``"delay": null`` beside an ``at`` is not "both",
    ``"global": null`` is an owner's key (a null read as given refused the line naming a
    rule it kept)."""
    lines = ['{"task": "send", "input": {"to": "a"}, "at": "2030-01-01T00:00Z", "delay": null}',
             '{"task": "send", "input": {"to": "b"}, "at": null, "delay": "5m"}',
             '{"task": "send", "input": {"to": "c"}, "key": "c", "global": null, '
             '"priority": null, "queue": null}']
    path = _jsonl(tmp_path, lines)
    app = _app()
    async with app:
        code, out = await _run(app, "--many", str(path))
        assert 0 == code, out
        printed = out.splitlines()
        assert (["created"] * 3, "created: alice::c") == (
            [line.partition(":")[0] for line in printed], printed[-1])
        c = await app.get("alice::c", ALICE)
        assert (0, "default") == (c.priority, c.queue)
        scheduled = [t for t in (await app.list(System())).items if t.id != "alice::c"]
        assert [TaskStatus.SCHEDULED] * 2 == [t.status for t in scheduled]


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


LINE = b'{"task": "send", "input": {"to": "a"}}\n'


class _Lines(io.RawIOBase):
    """A stream of ``count`` copies of ``line`` served on demand; ``served`` counts the
    bytes read from it."""

    def __init__(self, line: bytes, count: int) -> None:
        self.line, self.left, self.served = line, count * len(line), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self.left)
        start = self.served % len(self.line)
        chunk = (self.line * (size // len(self.line) + 2))[start:start + size]
        buffer[:size] = chunk
        self.served += size
        self.left -= size
        return size


async def test_a_file_of_more_than_a_batch_is_refused_at_the_line_past_it(
    tmp_path: Path,
) -> None:
    """A file of more than 1000 items MUST be refused naming the file and saying it holds
    more than 1000 items, as soon as the first non-blank line past them is read (a bad line
    after it is never read): nothing written."""
    path = tmp_path / "items.jsonl"
    path.write_bytes((LINE + b"\n") * 1001 + b"not json\n")
    app = _app()
    async with app:
        with pytest.raises(InvalidInput) as caught:
            await _run(app, "--many", str(path))
        assert [] == (await app.list(System())).items
    assert str(path) in str(caught.value)
    assert "holds more than 1000 items; split it" in str(caught.value)


async def test_standard_input_is_read_no_further_than_the_line_past_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--many -`` of two million lines MUST stop reading once the line past 1000 items
    is read — not read the whole stream first — and refuse it: nothing written."""
    stream = _Lines(LINE, 2_000_000)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(stream)))
    app = _app()
    async with app:
        with pytest.raises(InvalidInput, match="standard input holds more than 1000 items"):
            await _run(app, "--many", "-")
        assert [] == (await app.list(System())).items
    assert stream.served < 100 * 1001 * len(LINE) < stream.left


@pytest.mark.parametrize("stdin", [False, True])
async def test_a_line_that_is_not_utf8_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: bool
) -> None:
    """A line that is not UTF-8 MUST be refused naming its number and saying so — from a
    file or from standard input (which Python reads with ``surrogateescape`` under a C
    locale, turning the byte into a lone surrogate): nothing written."""
    data = LINE + b'{"input": {"to": "b"}, "key": "\xff"}\n' + LINE
    path = tmp_path / "items.jsonl"
    path.write_bytes(data)
    if stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8",
                                                           errors="surrogateescape"))
    app = _app()
    async with app:
        with pytest.raises(InvalidInput) as caught:
            await _run(app, "send", "--many", "-" if stdin else str(path))
        assert [] == (await app.list(System())).items
    assert str(caught.value).startswith("line 2: not UTF-8")


async def test_a_capacity_refusal_at_a_re_run_prints_what_the_batch_submitted(
    tmp_path: Path,
) -> None:
    """A file whose re-run (a key of a finished task) is refused for capacity after the
    batch's new tasks were written MUST print those items (index, outcome, id) before the
    refusal, which MUST point at them ("listed above"), not at the Python attribute
    ``.stored``: the user must not submit them again."""
    app = App(store=MemoryStore(max_active_tasks_per_scope=3))

    @app.task
    async def send(ctx: TaskContext, to: str) -> str:
        return to

    path = tmp_path / "items.jsonl"
    path.write_text('{"key": "report", "input": {"to": "r"}}\n'
                    + "".join(f'{{"input": {{"to": "{n}"}}}}\n' for n in "abc"))
    out = io.StringIO()
    async with app:
        report = await app.submit("send", {"to": "r"}, ALICE, key="report")
        await app.cancel(report.id, ALICE)
        with pytest.raises(CapacityExceeded, match=r"item 0: .*submitted \(listed above\)$"):
            await run(["submit", "send", "--many", str(path), "--user", "alice"], app=app,
                      console=Console(file=out, width=200, color_system=None))
        pending = sorted(s.id for s in (await app.list(ALICE, status="pending")).items)
    printed = [line.split(": ", 2) for line in out.getvalue().splitlines()]
    assert [[f"item {n}", "created"] for n in (1, 2, 3)] == [p[:2] for p in printed]
    assert pending == sorted(p[2] for p in printed)


async def test_only_a_newline_ends_a_line(tmp_path: Path) -> None:
    """JSON Lines ends a line at ``\\n`` (``\\r\\n`` too): a raw U+2028, U+2029 or U+0085
    inside a JSON string (valid JSON) MUST stay in its item, not split its line
    (``str.splitlines`` split there and refused the file)."""
    texts = ["a\u2028b", "c\x85d", "e\u2029f"]
    path = tmp_path / "items.jsonl"
    lines = [json.dumps({"input": {"to": t}, "key": f"k{n}"}, ensure_ascii=False)
             for n, t in enumerate(texts)]
    path.write_bytes("".join(f"{line}\r\n" for line in lines).encode())
    app = _app()
    async with app:
        code, _ = await _run(app, "send", "--many", str(path))
        stored = [(await app.get(f"alice::k{n}", ALICE)).work.input["to"] for n in range(3)]
    assert 0 == code
    assert texts == stored
