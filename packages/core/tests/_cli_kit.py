"""Helpers of the ``tasks`` CLI tests: a console into a string, an app whose task asks, an
app ``--app`` can load, the duration options."""

from __future__ import annotations

import io
import sys
import types
from typing import Any

import pytest
from _runtime_kit import make_app
from rich.console import Console
from tasks_core import App, InvalidInput, ManualClock, Owner, TaskContext
from tasks_core.cli import run

DURATION_OPTIONS = [
    (["worker", "m:app"], "--lease"),
    (["worker", "m:app"], "--input-park"),
    (["worker", "m:app"], "--drain-timeout"),
    (["worker", "m:app"], "--reap-interval"),
    (["workers", "--system"], "--lease"),
    (["stress"], "--timeout"),
]
"""Every duration option of ``tasks`` read as it is parsed (``submit --delay`` is read as
the command runs): ``(the command before it, the option)``."""


def importable(monkeypatch: pytest.MonkeyPatch, app: App, module: str) -> str:
    """Make ``app`` importable as ``<module>:app`` for the test (what ``--app`` loads)."""
    probe = types.ModuleType(module)
    probe.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, probe)
    return f"{module}:app"


def console() -> tuple[Console, io.StringIO]:
    """A plain 200-column console and the text it prints."""
    out = io.StringIO()
    return Console(file=out, width=200, color_system=None), out


def asking_app(clock: ManualClock | None = None) -> App:
    """``make_app(clock)`` with the task ``ask``: progress 40 ("asking"), then it asks
    ``approve`` and returns the answer."""
    app = make_app(clock)

    @app.task
    async def ask(ctx: TaskContext) -> Any:
        ctx.progress(40, "asking")
        return await ctx.request_input("approve", {"q": "ok?"})

    return app


async def cli(app: App, *argv: str) -> tuple[int, str]:
    """Run ``tasks *argv`` on ``app``: the exit code and what it printed."""
    screen, out = console()
    code = await run(list(argv), app=app, console=screen)
    return code, out.getvalue()


async def refused_before_any_claim(*argv: str) -> str:
    """Run ``tasks *argv`` on an app holding one pending task: the ``InvalidInput`` message
    it MUST refuse with, once it is checked that no claim was made (the task's deliveries
    are still 0)."""
    app = make_app()
    async with app:
        task = await app.submit("job", None, Owner("alice"))
        with pytest.raises(InvalidInput) as info:
            await cli(app, *argv)
        assert 0 == (await app.get(task.id, Owner("alice"))).deliveries
    return str(info.value)
