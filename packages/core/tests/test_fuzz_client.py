"""Bad input through every client call, the sync facade and the CLI; forged leases.

The property runs live in ``tasks_contract_tests.bad_input`` (so every backend runs them
too); here they run on the memory store with the sync facade, plus the regressions they
found and the ``tasks`` console script itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE, make_app
from tasks_contract_tests.bad_input import NASTY, run_client_fuzz, run_lease_fuzz
from tasks_contract_tests.fuzz import store_fingerprint
from tasks_core import (
    App,
    Completed,
    Failed,
    InvalidInput,
    ManualClock,
    TaskContext,
    TaskStore,
)
from tasks_core.cli import main
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def _memory(**options: Any) -> TaskStore:
    return MemoryStore(**options)


def test_every_client_call_refuses_bad_input_with_a_named_error_and_writes_nothing() -> None:
    """Every client call (async and ``app.sync``) and CLI command given hostile ids, keys,
    names, queues, options, JSON and authorities MUST either succeed and read back exactly
    what it stored, or raise a named error of the tree (``TypeError`` only for a bad
    authority) with the store unchanged; the CLI MUST NOT write a control character."""
    run_client_fuzz(_memory, max_examples=60)


def test_forged_leases_are_lost_and_change_nothing() -> None:
    """A lease with another token, task, generation or worker MUST be refused with
    ``LeaseLost`` by every lease operation and worker event, changing nothing (the real
    lease keeps working)."""
    run_lease_fuzz(_memory, max_examples=100)


def _app() -> App:
    app = make_app()

    @app.task
    async def job(ctx: TaskContext, **kwargs: Any) -> None:
        return None

    return app


@pytest.mark.parametrize(
    ("call", "args", "options"),
    [
        ("submit", ("job", None, ALICE), {"key": "lone \ud800 surrogate"}),
        ("submit", ("job", {"n": -(10**5000)}, ALICE), {}),
        ("submit", ("job", None, ALICE), {"queue": {"$ne": None}}),
        ("submit", ("job", None, ALICE), {"idempotency_key": b"bytes"}),
        ("respond", ("alice::k", {"lone \udcff": 1}, ALICE), {}),
        ("get", ("a\x00b", ALICE), {}),
        ("get", ("x" * 1025, ALICE), {}),
        ("list", (ALICE,), {"status": 5}),
        ("list", (ALICE,), {"limit": "5"}),
        ("list", (ALICE,), {"after": "\ud800"}),
    ],
    ids=["surrogate key", "huge int", "dict queue", "bytes idempotency key",
         "surrogate answer key", "NUL id", "long id", "int status", "text limit",
         "surrogate cursor"],
)
async def test_arguments_that_used_to_leak_raw_errors_are_invalid_input(
    call: str, args: tuple[Any, ...], options: dict[str, Any]
) -> None:
    """Each of these (found by the fuzzer) leaked ``UnicodeEncodeError``, ``ValueError``,
    ``TypeError`` or a driver error; each MUST now be ``InvalidInput``, with nothing
    written."""
    app = _app()
    async with app:
        await app.submit("job", None, ALICE, key="k")
        before = await store_fingerprint(app.store)
        with pytest.raises(InvalidInput):
            await getattr(app, call)(*args, **options)
        assert before == await store_fingerprint(app.store)


async def test_integers_beyond_8192_bits_are_refused_and_smaller_ones_read_back() -> None:
    """A JSON integer MUST fit in 8192 bits (larger ones cannot be written as text by
    every store); one that fits MUST read back exactly."""
    app = _app()
    async with app:
        t = await app.submit("job", {"n": 2**8192 - 1, "m": -(2**8192 - 1)}, ALICE)
        assert {"n": 2**8192 - 1, "m": -(2**8192 - 1)} == (await app.get(t.id, ALICE)).work.input
        with pytest.raises(InvalidInput):
            await app.submit("job", {"n": 2**8192}, ALICE)


# -- the console script ------------------------------------------------------------------


@pytest.fixture
def quiet_logging() -> Any:
    """``main`` configures logging for a console; put the tasks_core level back after."""
    import logging

    level = logging.getLogger("tasks_core").level
    yield
    logging.getLogger("tasks_core").setLevel(level)


@pytest.mark.usefixtures("quiet_logging")
@pytest.mark.parametrize(
    "argv",
    [
        ["show", "--system", "--", "[/]"],
        ["show", "--system", "--", "\x1b[2J[bold]x"],
        ["cancel", "--user=alice", "--", "[link=https://evil.example]x[/link]"],
        ["respond", "--user=alice", "--", "alice::k", "q=" + "[" * 5000],
        ["submit", "job", "--user=alice", "--input={\"a\": " + "1" * 5000 + "}"],
        ["submit", "job", "--user=alice", "--input=" + "[" * 5000],
        ["submit", "job", "--user=", "--key=k"],
        ["ls", "--user=[/]::x"],
        ["ls", "--system", "--after=a\x00b"],
    ],
    ids=["markup id", "escape id", "link id", "deep answer", "long number", "deep input",
         "empty user", "markup user", "NUL cursor"],
)
def test_the_console_script_prints_one_line_errors_never_tracebacks(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``tasks`` given hostile ids, users or JSON MUST exit 2 with a one-line ``error:``
    naming an error of the tree — no traceback, no rich markup error, no terminal escape
    sequence."""
    code = main(["--store", "memory://", *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert 2 == code
    assert 1 == len(lines), err
    assert lines[0].split(":")[1].strip() in ("InvalidInput", "TaskNotFound")
    assert "Traceback" not in err
    assert "\x1b" not in err


@pytest.mark.usefixtures("quiet_logging")
def test_stored_text_reaches_the_terminal_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored text — an error message, a progress message, a result, a key with rich
    markup — MUST be printed by ``tasks ls``/``show`` as text: no markup error, no
    terminal escape sequence, every character still visible (escaped)."""
    pytest.importorskip("tasks_store_sql")
    import asyncio

    monkeypatch.setenv("COLUMNS", "400")
    url = f"sqlite:///{tmp_path}/tasks.db"

    async def prepare() -> str:
        from tasks_core import open_store

        store = await open_store(url, clock=ManualClock())
        try:
            app = App(store=store)
            done = await app.submit("job", {"in": NASTY}, ALICE, key="[/]")
            claimed = await store.claim(done.id, "w1", 30)
            await store.report_progress(claimed.lease, 5.0, NASTY)
            await store.transition(done.id, 0, Failed(event_id="f", error="Boom",
                                                      message=NASTY), claimed.lease)
            other = await app.submit("job", None, ALICE, key="[bold]")
            held = await store.claim(other.id, "w1", 30)
            await store.transition(other.id, 0, Completed(event_id="c", result=NASTY),
                                   held.lease)
            return done.id
        finally:
            await store.aclose()

    task_id = asyncio.run(prepare())
    for argv in (["ls", "--system", "--wide"], ["show", "--system", "--", task_id],
                 ["show", "--system", "--", "alice::[bold]"]):
        assert 0 == main(["--store", url, *argv])
        out = capsys.readouterr().out
        assert "\x1b" not in out
        assert "\x07" not in out
        assert "[/]" in out or "[bold]" in out
    assert "\\x1b[2J" in out or "\\\\x1b[2J" in out


def test_refused_json_leaves_no_trace_in_a_shared_store(tmp_path: Path) -> None:
    """A ``tasks submit`` refused for its JSON (NaN, infinities, deep nesting) MUST NOT
    create anything in the store."""
    pytest.importorskip("tasks_store_sql")
    import asyncio

    from tasks_core import open_store

    url = f"sqlite:///{tmp_path}/tasks.db"
    for text in ("NaN", '{"a": NaN}', '{"a": 1e999}', "[" * 3000 + "]" * 3000):
        assert 2 == main(["--store", url, "submit", "job", "--user=alice", f"--input={text}"])

    async def count() -> int:
        store = await open_store(url)
        try:
            return len((await store_fingerprint(store))["tasks"])
        finally:
            await store.aclose()

    assert 0 == asyncio.run(count())
