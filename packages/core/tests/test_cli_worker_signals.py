"""``tasks worker`` and its signals: the first SIGTERM/SIGINT drains, a second one exits
at once with 130 — at any point until the command returns, the store's close included.

The signals are real (``os.kill`` of this process), sent at points the command reports
(a log record, a handler that started, the store's close), never after a delay. A signal
is only sent while something handles it: SIGTERM's default action would end the test run,
so a missing handler is counted and fails the test instead.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import sys
import threading
import types

import pytest
from _runtime_kit import ALICE, TIMEOUT, make_app
from rich.console import Console
from tasks_core import App, TaskContext
from tasks_core.cli import run
from tasks_core.cli._signals import Interrupts
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


def _sigterm(missed: list[str], where: str) -> None:
    """Send this process SIGTERM if something handles it, else record ``where`` in
    ``missed`` (the default action would kill the test run)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        missed.append(where)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


class _SigtermOn(logging.Handler):
    """Sends SIGTERM once a record whose message contains ``text`` is logged."""

    def __init__(self, text: str, missed: list[str]) -> None:
        super().__init__()
        self.text = text
        self.missed = missed
        self.sent = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.sent and self.text in record.getMessage():
            self.sent = True
            _sigterm(self.missed, self.text)


class _HangingClose(App):
    """An app whose store close never ends, and which receives SIGTERM as it begins."""

    def __init__(self, missed: list[str]) -> None:
        super().__init__(store=MemoryStore())
        self.missed = missed
        self.closes = 0

    async def aclose(self) -> None:
        self.closes += 1
        _sigterm(self.missed, "close")
        if not self.missed:
            await asyncio.Event().wait()  # only the signal ends this close
        await super().aclose()


async def _worker(*argv: str, app: App | None = None) -> int:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    return await asyncio.wait_for(
        run(["worker", "cli_signal_probe:app", "--no-reaper", *argv], app=app,
            console=console), TIMEOUT)


async def test_a_second_signal_while_the_store_closes_exits_130(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A second signal that arrives while the drained worker's app closes its store MUST
    still be handled: the command returns 130 at once (it does not wait for the close),
    and only then are the signals given back their default action."""
    caplog.set_level(logging.INFO, logger="tasks_core")
    missed: list[str] = []
    app = _HangingClose(missed)
    module = types.ModuleType("cli_signal_probe")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cli_signal_probe", module)
    first = _SigtermOn("serving", missed)
    logging.getLogger("tasks_core.worker").addHandler(first)
    try:
        code = await _worker()
    finally:
        logging.getLogger("tasks_core.worker").removeHandler(first)
    assert ([], True, 1) == (missed, first.sent, app.closes)
    assert 130 == code
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_a_second_signal_during_the_drain_exits_130_and_cuts_the_drain_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second signal during the drain of a sync run that ignores it MUST end the
    command with 130, and nothing MUST then log that the drain settled (the run is still
    going): the drain is cut short, and the command leaves nothing of it running."""
    caplog.set_level(logging.INFO, logger="tasks_core")
    missed: list[str] = []
    release = threading.Event()
    app = make_app()

    @app.task
    def stubborn(ctx: TaskContext) -> None:
        _sigterm(missed, "run started")  # the first signal: the run is going
        release.wait(TIMEOUT)  # ignores the shutdown token

    second = _SigtermOn("shutting down", missed)
    logging.getLogger("tasks_core.worker").addHandler(second)
    async with app:
        await app.submit(stubborn, None, ALICE)
        before = asyncio.all_tasks()
        try:
            code = await _worker("--drain-timeout", str(TIMEOUT * 3), app=app)
            left = asyncio.all_tasks() - before
        finally:
            release.set()
            logging.getLogger("tasks_core.worker").removeHandler(second)
        if left:  # what the command cancelled on its way out ends now
            await asyncio.wait_for(asyncio.wait(left), TIMEOUT)
    messages = [record.getMessage() for record in caplog.records]
    assert ([], True, 130) == (missed, second.sent, code)
    assert not [m for m in messages if "drain settled" in m], messages
    assert [m for m in messages if "drain cut short" in m], messages
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_a_first_signal_before_the_worker_serves_says_when_it_drains(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A first signal MUST say what it does — a drain now, or as soon as the worker
    serves (the drain then starts when it is given) — and that a second exits at once."""
    caplog.set_level(logging.INFO, logger="tasks_core.cli")
    task = asyncio.current_task()
    assert task is not None
    early, serving = Interrupts(task), Interrupts(task)
    drains: list[str] = []
    early._received(signal.SIGTERM)
    early.on_first(lambda: drains.append("early"))
    serving.on_first(lambda: drains.append("serving"))
    serving._received(signal.SIGINT)
    assert ["received SIGTERM: draining as soon as the worker serves (again to exit at once)",
            "received SIGINT: draining (again to exit at once)"] \
        == [r.getMessage() for r in caplog.records]
    assert ["early", "serving"] == drains
