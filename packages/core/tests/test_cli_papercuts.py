"""Papercuts of the ``tasks`` command line an outside tester reported: ``periodic`` (and
``dashboard``) refused or dropped ``--app`` given before the command; duration options
other than ``--delay`` took plain seconds only; ``show`` printed instants without their
zone; ``ls --wide`` did not show the priority.

Rules: every command on an app takes ``--app`` before the command or after it, once (given
twice it is ``InvalidInput``, before anything is read); every duration option is read by
one grammar — a number of seconds, or a number with a unit s, m, h or d, in ASCII — and
checked by its one check, a refusal quoting the text as typed; every instant the CLI
prints says it is UTC; ``ls --wide`` has a PRIORITY column.
"""

from __future__ import annotations

import argparse
import io
import re
import sys

import pytest
from _cli_kit import DURATION_OPTIONS, cli, console, importable, refused_before_any_claim
from _runtime_kit import ALICE, make_app
from rich.console import Console
from tasks_core import App, InvalidInput, ManualClock, System, TaskContext
from tasks_core.cli import build_parser, run
from tasks_core.cli._commands import COMMANDS
from tasks_core.cli._options import duration
from tasks_core.cli._worker_cmd import _worker_of
from tasks_core.durations import MAX_WAIT_S

pytestmark = pytest.mark.anyio

PROBE = "cli_papercut_probe"
"""The module ``--app`` loads the test's app from (:func:`_cli_kit.importable`)."""


def _ticking_app(clock: ManualClock | None = None) -> App:
    """An app on a memory store with the task ``tick`` scheduled every minute."""
    app = make_app(clock)

    @app.periodic(every=60)
    @app.task
    async def tick(ctx: TaskContext) -> None:
        return None

    return app


class Spy:
    """A command that records the app and arguments it was run with."""

    def __init__(self) -> None:
        self.calls: list[tuple[App, argparse.Namespace]] = []

    async def __call__(self, app: App, args: argparse.Namespace, console: Console) -> int:
        self.calls.append((app, args))
        return 0


# -- 1. --app before or after the command, once ------------------------------------------

ON_AN_APP = [["worker"], ["submit", "tick", "--user", "alice"], ["ls", "--system"],
             ["show", "x", "--system"], ["workers", "--system"], ["cancel", "x", "--system"],
             ["respond", "x", "a=1", "--system"], ["reap", "--system"], ["migrate"],
             ["periodic", "--system"], ["dashboard"]]
"""Every command on an app: it takes ``--app``."""


@pytest.mark.parametrize("command", ON_AN_APP)
@pytest.mark.parametrize("where", ["before", "after"])
async def test_every_command_on_an_app_takes_it_before_or_after_the_command(
    command: list[str], where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tasks --app A periodic --system`` was a usage error (``--app`` required) and
    ``tasks --app A dashboard`` served the default store, not A's. Every command on an app
    MUST run on the app ``--app`` names, whether it comes before the command or after."""
    app = _ticking_app()
    spec = importable(monkeypatch, app, PROBE)
    spy = Spy()
    monkeypatch.setitem(COMMANDS, command[0], spy)
    argv = ["--app", spec, *command] if where == "before" else [*command, "--app", spec]
    assert 0 == await run(argv, console=console()[0])
    [(used, args)] = spy.calls
    assert used is app
    assert spec == args.app


@pytest.mark.parametrize("command", [["periodic", "--system"], ["ls", "--system"],
                                     ["dashboard"], ["submit", "tick", "--user", "alice"],
                                     ["worker"]])
async def test_the_app_given_before_and_after_the_command_is_refused(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tasks --app A periodic --app B`` ran on B, silently: the app given twice MUST be
    refused (``InvalidInput``, as ``tasks --app A worker B`` is), before the command runs."""
    spec = importable(monkeypatch, _ticking_app(), PROBE)
    spy = Spy()
    monkeypatch.setitem(COMMANDS, command[0], spy)
    with pytest.raises(InvalidInput, match="the app is given twice"):
        await run(["--app", spec, *command, "--app", spec], console=console()[0])
    assert [] == spy.calls


async def test_periodic_without_an_app_is_refused_naming_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks periodic`` lists an app's schedules: without ``--app`` (before or after the
    command) it MUST be refused as ``tasks worker`` without its app is, naming ``--app``,
    before the store is opened."""
    spy = Spy()
    monkeypatch.setitem(COMMANDS, "periodic", spy)
    with pytest.raises(InvalidInput, match="--app"):
        await run(["periodic", "--system", "--store", "memory://"], console=console()[0])
    assert [] == spy.calls


async def test_periodic_lists_the_schedules_of_the_app_given_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``tasks --app A periodic --system`` MUST list A's schedules."""
    spec = importable(monkeypatch, _ticking_app(), PROBE)
    screen, out = console()
    assert 0 == await run(["--app", spec, "periodic", "--system"], console=screen)
    assert re.search(r"│ tick +│ tick +│ every 60s", out.getvalue()), out.getvalue()


# -- 2. one grammar of durations ---------------------------------------------------------

@pytest.mark.parametrize(("command", "option"), DURATION_OPTIONS)
@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30), ("30s", 30), ("1.5m", 90), ("2h", 7200), ("1d", 86400), (".5s", 0.5),
    ("+2m", 120), ("1e3s", 1000),
])
def test_every_duration_option_takes_a_unit_as_delay_does(
    command: list[str], option: str, text: str, seconds: float
) -> None:
    """``tasks worker --lease 30s`` was a usage error (``not a number: '30s'``) while
    ``submit --delay 30s`` took it. Every duration option MUST read a number of seconds or
    a number with a unit s, m, h or d, as ``--delay`` does."""
    args = build_parser().parse_args([*command, f"{option}={text}"])
    assert seconds == getattr(args, option.removeprefix("--").replace("-", "_"))


def test_a_worker_gets_durations_given_in_units() -> None:
    """The seconds a duration with a unit reads MUST be what the worker runs with."""
    args = build_parser().parse_args(["worker", "m:app", "--lease", "1m", "--input-park",
                                      "30s", "--reap-interval", "2h", "--drain-timeout",
                                      "1.5m"])
    worker = _worker_of(make_app(), args)
    assert (60, 30, 7200, 90) == (worker.lease_for, worker.input_park,
                                  worker.reap_interval, worker.drain_timeout)


@pytest.mark.parametrize(("argv", "refusal"), [
    (["worker", "m:app", "--lease=8d"],
     "--lease (lease_for) must be in [0.001, 604800] seconds, not '8d'"),
    (["worker", "m:app", "--input-park=367d"],
     "--input-park (input_park) must be in [0.001, 31622400] seconds, not '367d'"),
    (["worker", "m:app", "--reap-interval=0s"],
     "--reap-interval (reap_interval) must be in [0.001, 31622400] seconds, not '0s'"),
    (["worker", "m:app", "--drain-timeout=-1m"],
     "--drain-timeout (drain_timeout) must be in [0, 31622400] seconds, not '-1m'"),
    (["worker", "m:app", "--lease=1e308d"],
     "--lease (lease_for) must be a finite number of seconds in [0.001, 604800], "
     "not '1e308d'"),
    (["workers", "--system", "--lease=8d"],
     "--lease must be in [0.001, 604800] seconds, not '8d'"),
    (["stress", "--store", "sqlite:///never.db", "--timeout=367d"],
     "--timeout must be in (0, 31622400] seconds, not '367d'"),
])
async def test_a_duration_in_a_unit_out_of_range_is_refused_quoting_it(
    argv: list[str], refusal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A duration with a unit MUST be checked by the option's one check, as plain seconds
    are, its refusal naming the option, giving the range in seconds and quoting the text as
    typed (``8d``, not the 691200 seconds it reads as), before anything is claimed."""
    monkeypatch.setitem(sys.modules, "tasks_contract_tests.stress", None)
    assert refusal == await refused_before_any_claim(*argv)


SPELLINGS = ["30", "30s", "1.5m", "2h", "1d", ".5s", "2.m", "+5s", "-5s", "007s", "1e3",
             "1e3s", "1E-3h", "nan", "inf", "Infinity", "30 s", " 30s", "30s ", "30S",
             "30sec", "5ms", "s", "m5", "1e", "1_0s", "٣s", "３０s", "30\u00a0s", "0x1f", ""]
"""Texts a duration option may be given, read or not."""


@pytest.mark.parametrize("text", SPELLINGS)
def test_delay_and_every_duration_option_read_one_grammar(text: str) -> None:
    """``--delay`` took ``30s`` and `` 30s`` but not ``1e3``; ``--lease`` the other way
    round. Both MUST read a text alike: refused as unreadable by both (``--delay``:
    ``InvalidInput``; ``--lease``: argparse's usage error), or read by both as the same
    seconds (which their checks then judge)."""
    try:
        lease: float | None = build_parser().parse_args(
            ["workers", "--system", f"--lease={text}"]).lease
    except SystemExit:
        lease = None
    refusal = ""
    try:
        delay: float | None = duration(text, "--delay", high=MAX_WAIT_S, allow_zero=True)
    except InvalidInput as exc:
        delay, refusal = None, str(exc)
    unreadable = "a number with a unit" in refusal
    assert unreadable == (lease is None), (refusal, lease)
    if delay is not None:
        assert lease is not None
        assert repr(float(lease)) == repr(float(delay))


# -- 3. every instant says UTC -----------------------------------------------------------

TIME_OF_DAY = re.compile(r"\d\d:\d\d:\d\d(?:\.\d+)?(?!\d)")


def _zones(out: str) -> list[str]:
    """What follows each time of day ``out`` prints (4 characters)."""
    return [out[found.end():found.end() + 4] for found in TIME_OF_DAY.finditer(out)]


async def test_show_ls_and_workers_say_every_instant_is_utc() -> None:
    """``tasks show`` printed ``run at 2026-12-06 18:06:49.986`` and ``created …`` with no
    zone while ``ls`` said ``runs at … UTC``. Every instant ``show`` (its fields and its
    history), ``ls --wide`` and ``workers`` print MUST say UTC."""
    clock = ManualClock()
    app = make_app(clock)
    async with app:
        later = await app.submit("job", None, ALICE, delay=60, ttl=3600)
        held, ended = [await app.submit("job", None, ALICE) for _ in range(2)]
        for task in (held, ended):
            await app.store.claim(task.id, "w1", 30)
        await app.cancel(ended.id, ALICE)
        outputs = [(await cli(app, *argv))[1] for argv in (
            ["show", later.id, "--system"], ["show", held.id, "--system"],
            ["show", ended.id, "--system"], ["ls", "--system", "--wide"],
            ["workers", "--system"])]
    for out in outputs:
        assert _zones(out), out
        assert all(zone == " UTC" for zone in _zones(out)), out
    show_later = outputs[0]
    for field in ("run at", "created", "expires"):
        assert re.search(rf"^ *{field} +\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{{3}} UTC\s*$",
                         show_later, re.MULTILINE), show_later
    assert re.search(r"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC\)", outputs[1])
    assert re.search(r"│ \d\d:\d\d:\d\d\.\d{3} UTC │ cancelled", outputs[2]), outputs[2]


# -- 4. ls --wide shows the priority -----------------------------------------------------


def _table(out: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the boxed table in ``out``, their cells stripped."""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    rows = [line for line in lines if line.startswith("│")]
    return ([cell.strip() for cell in header.strip("┃").split("┃")],
            [[cell.strip() for cell in row.strip("│").split("│")] for row in rows])


async def test_ls_wide_shows_each_tasks_priority() -> None:
    """Priority was shown by ``show`` only. ``ls --wide`` MUST have a PRIORITY column
    giving each task's priority; the default table (width-constrained) does not."""
    app = make_app()
    async with app:
        urgent = await app.submit("job", None, ALICE, priority=7)
        idle = await app.submit("job", None, ALICE, priority=-3)
        plain_task = await app.submit("job", None, ALICE)
        _, wide = await cli(app, "ls", "--system", "--wide")
        _, narrow = await cli(app, "ls", "--system")
    header, rows = _table(wide)
    shown = {row[0]: row[header.index("PRIORITY")] for row in rows}
    assert {urgent.id: "7", idle.id: "-3", plain_task.id: "0"} == shown
    assert "PRIORITY" not in narrow


async def test_ls_wide_leaves_priority_out_when_too_narrow() -> None:
    """On a terminal too narrow for it, the PRIORITY column MUST be left out and named
    under the table, as the other ``--wide`` columns are (never a crash)."""
    app = make_app()
    out = io.StringIO()
    async with app:
        await app.submit("job", None, ALICE, priority=7)
        await run(["ls", "--system", "--wide"], app=app,
                  console=Console(file=out, width=40, color_system=None))
    assert "PRIORITY" in out.getvalue().partition("left out, too narrow:")[2], out.getvalue()


@pytest.mark.parametrize("argv", [
    ["respond", "x", "approve=\udcff\udcfe", "--user", "alice"],
    ["submit", "tick", "--user", "alice", "--input", '{"tag": "\udcff"}'],
])
async def test_an_argument_that_is_not_utf8_is_named_as_such(argv: list[str]) -> None:
    """An argument of bytes that are not UTF-8 (Python hands them on as lone surrogates)
    read "text must be valid Unicode (no lone surrogates)", which the user never typed: it
    MUST be refused naming the argument, the byte and where it is, before anything runs."""
    app = _ticking_app()
    async with app:
        with pytest.raises(InvalidInput) as refused:
            await run(argv, app=app, console=console()[0])
        assert [] == (await app.list(System())).items
    index = next(n for n, arg in enumerate(argv) if "\udcff" in arg)
    assert f"argument {index + 1} is not UTF-8 (byte 0xff at byte " in str(refused.value)
