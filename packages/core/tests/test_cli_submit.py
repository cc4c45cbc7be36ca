"""``tasks submit``/``cancel``/``respond``: submitting through the app module
(``--app MODULE:ATTR``) and one-line results that scripts can parse."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from _cli_kit import importable
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app, until
from rich.console import Console
from tasks_core import (
    App,
    InvalidInput,
    RetryPolicy,
    System,
    TaskContext,
    TaskStatus,
    UnknownStore,
)
from tasks_core.cli import build_parser, run
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio

PROBE = "cli_submit_probe"
"""The module ``--app`` loads the test's app from (:func:`_cli_kit.importable`)."""

POLICY = RetryPolicy.exponential(1.0, attempts=5, cap=60)
SUBMIT = ["submit", "build_report", "--input", '{"month": "2026-11"}', "--key", "r-11",
          "--user", "alice"]


def _reports_app(url: str | None = None) -> App:
    """The README's app: ``build_report`` on queue ``reports`` with retry and timeout, and
    a second declared queue, ``urgent``. On a memory store of its own unless ``url``."""
    app = App(url, queues=["urgent"]) if url else App(store=MemoryStore(), queues=["urgent"])

    @app.task(queue="reports", retry=POLICY, timeout=120, max_deliveries=7)
    async def build_report(ctx: TaskContext, month: str) -> dict[str, Any]:
        return {"month": month}

    return app


def _asking_app() -> App:
    """An app on a memory store whose task ``ask`` waits for the input ``approve`` and
    returns the answer."""
    app = make_app()

    @app.task
    async def ask(ctx: TaskContext) -> Any:
        return await ctx.request_input("approve", {"q": "ok?"})

    return app


async def _run(*argv: str, app: App | None = None, width: int = 200) -> tuple[int, str]:
    out = io.StringIO()
    code = await run(list(argv), app=app, console=Console(file=out, width=width,
                                                          color_system=None))
    return code, out.getvalue()


@pytest.mark.parametrize("argv", [SUBMIT, ["ls", "--system"], ["show", "x", "--system"],
                                  ["workers", "--system"], ["cancel", "x", "--system"],
                                  ["worker"], ["reap", "--system"], ["migrate"]])
def test_app_is_an_option_of_every_command_on_tasks(argv: list[str]) -> None:
    """``--app MODULE:ATTR`` MUST be accepted by every command on tasks, after the command
    or before it (default: none)."""
    assert build_parser().parse_args([*argv, "--app", "m:app"]).app == "m:app"
    assert build_parser().parse_args(["--app", "m:app", *argv]).app == "m:app"
    assert build_parser().parse_args(argv).app is None


async def test_submit_with_app_applies_the_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``--app``, the task MUST be submitted with its registered queue, retry policy,
    timeout and delivery limit (the README's example)."""
    app = _reports_app()
    code, out = await _run(*SUBMIT, "--app", importable(monkeypatch, app, PROBE))
    assert (0, "created: alice::r-11") == (code, out.strip())
    snapshot = await app.get("alice::r-11", ALICE)
    await app.aclose()
    work = snapshot.work
    assert ("reports", POLICY, 120, 7) == (snapshot.queue, work.retry_policy, work.timeout_s,
                                           work.max_deliveries)


async def test_submit_with_app_takes_only_a_queue_the_app_declared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``--app``, ``--queue`` MUST name a queue the app declared (then it replaces
    the registered one, the rest of the registration still applies); any other queue MUST
    be refused with ``InvalidInput`` and nothing written; an empty or blank name is refused
    as such."""
    app = _reports_app()
    spec = importable(monkeypatch, app, PROBE)
    with pytest.raises(InvalidInput, match="'elsewhere' is not declared"):
        await _run(*SUBMIT, "--app", spec, "--queue", "elsewhere")
    for name, rule in [("", "queue must not be empty"), (" ", "queue must not be blank")]:
        with pytest.raises(InvalidInput, match=rule):
            await _run(*SUBMIT, "--app", spec, "--queue", name)
    assert [] == list(await app.list(System()))
    assert "elsewhere" not in app.queues
    code, _ = await _run(*SUBMIT, "--app", spec, "--queue", "urgent")
    snapshot = await app.get("alice::r-11", ALICE)
    await app.aclose()
    assert (0, "urgent", 120) == (code, snapshot.queue, snapshot.work.timeout_s)


async def test_submit_with_app_refuses_a_task_the_app_does_not_register(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``--app``, a name the app does not register MUST be refused with
    ``InvalidInput`` naming the task and the app, before anything is written."""
    app = _reports_app()
    spec = importable(monkeypatch, app, PROBE)
    with pytest.raises(InvalidInput) as info:
        await _run("submit", "build_reprot", "--user", "alice", "--app", spec)
    assert "'build_reprot' is not registered in cli_submit_probe:app" in str(info.value)
    assert [] == list(await app.list(System()))
    await app.aclose()


async def test_store_overrides_the_url_of_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--store`` MUST replace the URL of the ``--app`` app, as for ``tasks worker``."""
    spec = importable(monkeypatch, _reports_app("nosuchscheme://anywhere"), PROBE)
    with pytest.raises(UnknownStore):
        await _run(*SUBMIT, "--app", spec)
    code, out = await _run(*SUBMIT, "--app", spec, "--store", "memory://")
    assert (0, "created: alice::r-11") == (code, out.strip())


async def test_submit_without_app_gets_the_defaults_and_declares_its_queue() -> None:
    """Without ``--app`` the CLI knows only the name: the task MUST get the defaults —
    queue ``default`` unless ``--queue`` (declared on the fly), no retry, no timeout, 25
    deliveries."""
    app = make_app()  # knows no task: a client without the handler code
    async with app:
        assert 0 == (await _run(*SUBMIT, app=app))[0]
        plain = await app.get("alice::r-11", ALICE)
        assert 0 == (await _run(*SUBMIT[:4], "--key", "r-12", "--user", "alice",
                                "--queue", "reports", app=app))[0]
        queued = await app.get("alice::r-12", ALICE)
    assert ("default", RetryPolicy.none(), None, 25) == (
        plain.queue, plain.work.retry_policy, plain.work.timeout_s, plain.work.max_deliveries)
    assert "reports" == queued.queue


async def test_one_line_results_never_wrap_whatever_the_width() -> None:
    """The results of ``submit``, ``respond`` and ``cancel`` MUST each be one line with the
    task id unbroken, however long the id and however narrow the console."""
    key = "k" * 100
    task_id = f"alice::{key}"
    app = _asking_app()

    async with app:
        submitted = await _run("submit", "ask", "--key", key, "--user", "alice", app=app,
                               width=40)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, task_id, ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            responded = await _run("respond", task_id, "approve=true", "--user", "alice",
                                   app=app, width=40)
            await app.wait(task_id, ALICE, timeout=TIMEOUT)
        await _run("submit", "ask", "--key", key, "--user", "alice", app=app, width=40)
        cancelled = await _run("cancel", task_id, "--user", "alice", app=app, width=40)
        unchanged = await _run("respond", task_id, "approve=true", "--user", "alice",
                               app=app, width=40)
    assert (0, [f"created: {task_id}"]) == (submitted[0], submitted[1].splitlines())
    assert (0, [f"{task_id}: answer applied; now running"]) == (
        responded[0], responded[1].splitlines())
    assert (0, [f"{task_id}: cancelled"]) == (cancelled[0], cancelled[1].splitlines())
    assert (1, [f"{task_id}: no outstanding question matched; nothing changed (the task is "
                "cancelled)"]) == (unchanged[0], unchanged[1].splitlines())


@pytest.mark.parametrize(("flag", "seconds"), [("90", 90.0), ("90s", 90.0), ("1.5m", 90.0),
                                               ("2h", 7200.0), ("1d", 86400.0)])
async def test_submit_delay_schedules_the_task(
    monkeypatch: pytest.MonkeyPatch, flag: str, seconds: float
) -> None:
    """``tasks submit --delay D`` MUST schedule the task ``D`` after its creation on the
    store clock (a unit of s, m, h or d, or plain seconds); ``tasks ls`` shows it as
    ``scheduled`` with its time and ``--status scheduled`` lists it."""
    app = _reports_app()
    code, _ = await _run(*SUBMIT, "--app", importable(monkeypatch, app, PROBE), "--delay", flag)
    snapshot = await app.get("alice::r-11", ALICE)
    assert 0 == code
    assert snapshot.run_at is not None
    assert seconds == (snapshot.run_at - snapshot.created_at).total_seconds()
    code, listed = await _run("ls", "--system", "--status", "scheduled", app=app)
    _, pending = await _run("ls", "--system", "--status", "pending", app=app)
    await app.aclose()
    assert "alice::r-11" in listed
    assert "runs at " + snapshot.run_at.strftime("%Y-%m-%d %H:%M:%S") in listed
    assert "alice::r-11" not in pending


async def test_submit_at_schedules_the_task_at_that_instant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks submit --at INSTANT`` MUST schedule the task at that ISO 8601 instant
    (any offset, stored in UTC)."""
    app = _reports_app()
    code, _ = await _run(*SUBMIT, "--app", importable(monkeypatch, app, PROBE),
                         "--at", "2031-12-24T10:00+01:00")
    snapshot = await app.get("alice::r-11", ALICE)
    await app.aclose()
    assert 0 == code
    assert snapshot.run_at is not None
    assert "2031-12-24T09:00:00+00:00" == snapshot.run_at.isoformat()


@pytest.mark.parametrize(("flags", "says"), [
    (["--delay=-5s"], "--delay"),
    (["--delay", "soon"], "--delay"),
    (["--delay", "nan"], "--delay"),
    (["--delay", "400d"], "--delay"),
    (["--at", "2031-12-24T09:00"], "time zone"),
    (["--at", "tomorrow"], "--at"),
])
async def test_submit_refuses_a_bad_delay_or_instant_writing_nothing(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], says: str
) -> None:
    """A bad ``--delay`` or ``--at`` MUST be refused with ``InvalidInput`` naming the
    option before anything is written; giving both is a usage error."""
    app = _reports_app()
    spec = importable(monkeypatch, app, PROBE)
    with pytest.raises(InvalidInput, match=says):
        await _run(*SUBMIT, "--app", spec, *flags)
    assert [] == list(await app.list(System()))
    await app.aclose()
    with pytest.raises(SystemExit):
        build_parser().parse_args([*SUBMIT, "--delay", "5", "--at", "2031-12-24T09:00Z"])


async def test_a_global_dedup_without_a_key_is_refused_writing_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--global`` makes a key global: without ``--key`` (on the command line, or a
    ``--many`` line's ``global`` without ``key``) it MUST be refused in the command's own
    words — never ignored, as if the task had been deduplicated — with nothing written; the
    API likewise, in its words."""
    app = _reports_app()
    spec = importable(monkeypatch, app, PROBE)
    argv = ["submit", "build_report", "--input", '{"month": "2026-11"}', "--user", "alice"]
    with pytest.raises(InvalidInput, match=r"^--global applies to a key: give --key, or leave "
                       r"--global out$"):
        await _run(*argv, "--global", "--app", spec)
    lines = tmp_path / "items.jsonl"
    lines.write_text('{"task": "build_report", "input": {"month": "m"}, "global": true}\n')
    with pytest.raises(InvalidInput, match="global applies to a key: give key, or leave "
                       "global out"):
        await _run("submit", "--many", str(lines), "--user", "alice", "--app", spec)
    with pytest.raises(InvalidInput, match="dedup applies to a key"):
        await app.submit("build_report", {"month": "m"}, System(), dedup="global")
    assert [] == list(await app.list(System()))
    await app.aclose()


def test_a_worker_takes_the_reaper_off_or_its_interval_not_both() -> None:
    """``--reap-interval`` and ``--no-reaper`` contradict each other: a usage error."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["worker", "m:app", "--reap-interval", "5", "--no-reaper"])
    assert build_parser().parse_args(["worker", "m:app", "--no-reaper"]).no_reaper


async def test_the_app_given_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tasks --app A worker B`` names the app twice: it MUST be refused, never one of
    them silently served."""
    spec = importable(monkeypatch, _reports_app(), PROBE)
    with pytest.raises(InvalidInput, match="given twice"):
        await asyncio.wait_for(_run("--app", spec, "worker", spec), TIMEOUT)


async def test_submit_refuses_an_input_giving_a_key_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--input`` that gives one key twice MUST be refused naming the key, not read as its
    last value (what Python's ``json`` does), before anything is written."""
    app = _reports_app()
    spec = importable(monkeypatch, app, PROBE)
    argv = ["submit", "build_report", "--input", '{"month": "2026-11", "month": "2026-12"}',
            "--user", "alice", "--app", spec]
    with pytest.raises(InvalidInput, match="--input gives the key 'month' twice"):
        await _run(*argv)
    assert [] == list(await app.list(System()))
    await app.aclose()


@pytest.mark.parametrize(("answers", "says"), [
    (["approve=true", "approve=false"], "the key 'approve' is answered twice"),
    (['approve={"ok": true, "ok": false}'], "an answer gives the key 'ok' twice"),
])
async def test_respond_refuses_a_key_given_twice_changing_nothing(
    answers: list[str], says: str
) -> None:
    """``tasks respond`` MUST refuse two answers to one key, or an answer whose JSON gives
    a key twice, before anything is written: the task keeps waiting."""
    app = _asking_app()

    async with app:
        await _run("submit", "ask", "--key", "q", "--user", "alice", app=app)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, "alice::q", ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            with pytest.raises(InvalidInput, match=says):
                await _run("respond", "alice::q", *answers, "--user", "alice", app=app)
            assert TaskStatus.WAITING_INPUT == (await app.get("alice::q", ALICE)).status
            await app.cancel("alice::q", ALICE)


@pytest.mark.parametrize("typed", ["NaN", "Infinity", "-Infinity"])
async def test_respond_takes_nan_and_infinity_as_the_text_they_are(typed: str) -> None:
    """``NaN`` and ``Infinity`` are not JSON (Python's ``json`` reads them): an answer of
    that text MUST be the string, as any other value that is not JSON — it was refused."""
    app = _asking_app()

    async with app:
        await _run("submit", "ask", "--key", "n", "--user", "alice", app=app)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, "alice::n", ALICE, lambda s: s.status == TaskStatus.WAITING_INPUT)
            code, _ = await _run("respond", "alice::n", f"approve={typed}", "--user", "alice",
                                 app=app)
            done = await app.wait("alice::n", ALICE, timeout=TIMEOUT)
    assert (0, TaskStatus.COMPLETED, typed) == (code, done.status, done.result)


@pytest.mark.parametrize("typed", ["1e999", "-1e999", "9" * 5000, "9" * 3000, "[1, 1e400]",
                                   '{"n": ' + "7" * 5000 + "}"])
async def test_respond_takes_a_number_no_json_value_can_carry_as_the_text_typed(
    typed: str,
) -> None:
    """A JSON number that cannot be sent — overflowing to infinity, an integer too long for
    Python to read or for a payload to carry, even inside an array or object — makes the
    answer no JSON value this tool can send: it MUST be the string as typed, as ``NaN`` is
    (it was refused as "NaN and infinities are not JSON" or "a number too long")."""
    app = _asking_app()

    async with app:
        await _run("submit", "ask", "--key", "big", "--user", "alice", app=app)
        async with fast_worker(app, input_park=TIMEOUT):
            await until(app, "alice::big", ALICE,
                        lambda s: s.status == TaskStatus.WAITING_INPUT)
            code, _ = await _run("respond", "alice::big", f"approve={typed}", "--user",
                                 "alice", app=app)
            done = await app.wait("alice::big", ALICE, timeout=TIMEOUT)
    assert (0, TaskStatus.COMPLETED, typed) == (code, done.status, done.result)


async def test_submit_input_holding_nan_is_not_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--input '{"month": NaN}'`` MUST be refused as not JSON, naming ``NaN``."""
    app = _reports_app()
    with pytest.raises(InvalidInput, match="--input is not JSON: NaN is not JSON"):
        await _run("submit", "build_report", "--input", '{"month": NaN}', "--user", "alice",
                   "--app", importable(monkeypatch, app, PROBE))
    await app.aclose()


@pytest.mark.parametrize("given", ["", "   "])
async def test_an_empty_input_is_not_json(given: str) -> None:
    """``--input ''`` MUST be refused as not JSON (never read as no input), and nothing
    written: an empty value is a mistake, as an empty ``--key`` or ``--queue`` is."""
    app = make_app()
    async with app:
        with pytest.raises(InvalidInput, match=r"^--input is not JSON: "):
            await _run("submit", "anything", "--input", given, "--user", "alice", app=app)
        assert [] == (await app.list(System())).items


@pytest.mark.parametrize("key", [":thumbs_up:x:warning:", "ends-in-a-backslash\\",
                                 "two\\\\", "[red]x[/]"])
async def test_one_line_results_print_the_id_exactly(key: str) -> None:
    """``created: ID`` and ``ID: cancelled`` are parsed by scripts: the id MUST print as it
    is — no emoji code turned into a picture, no backslash doubled, no markup applied."""
    app = make_app()

    @app.task
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        created = await _run("submit", "job", "--key", key, "--user", "alice", app=app)
        cancelled = await _run("cancel", f"alice::{key}", "--user", "alice", app=app)
    assert f"created: alice::{key}" == created[1].strip()
    assert f"alice::{key}: cancelled" == cancelled[1].strip()


def test_no_markup_tag_follows_a_plain_value() -> None:
    """``plain()`` leaves a trailing backslash single, so a markup tag right after a value
    (``{plain(x)}[/]``) would be escaped by it and print as text: no CLI line MUST put one
    there (the rule ``plain`` relies on, checked in every module of the CLI)."""
    import re
    from pathlib import Path

    import tasks_core.cli

    folder = Path(tasks_core.cli.__file__).parent
    pattern = re.compile(r"plain\((?:[^()]|\([^()]*\))*\)\}\[")
    found = [f"{path.name}: {match.group(0)}" for path in sorted(folder.glob("*.py"))
             for match in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert [] == found


@pytest.mark.parametrize(("typed", "read"), [
    ('{"a": [1, 2.5]}', {"a": [1, 2.5]}), ("1e999", "1e999"), ("NaN", "NaN"),
    ("not json", "not json"), ('{"a": 1, "a": 2, "b": 1e999}', '{"a": 1, "a": 2, "b": 1e999}'),
])
def test_an_answer_is_read_in_one_parse(
        typed: str, read: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tasks respond`` and the dashboard read an answer with one function,
    ``parse_answer``, which parses the text once (it was parsed twice): a number no payload
    carries anywhere makes it the string, even past a key given twice."""
    from tasks_core import _json

    parses: list[str] = []
    loads = json.loads

    def counted(text: str, **hooks: Any) -> Any:
        parses.append(text)
        return loads(text, **hooks)

    monkeypatch.setattr(_json.json, "loads", counted)
    assert read == _json.parse_answer(typed)
    assert [typed] == parses
    with pytest.raises(InvalidInput, match="an answer gives the key 'a' twice"):
        _json.parse_answer('{"a": 1, "a": 2}')
