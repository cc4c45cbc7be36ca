"""Helpers of the ``tasks`` CLI tests: a console into a string, an app whose task asks."""

from __future__ import annotations

import io
from typing import Any

from _runtime_kit import make_app
from rich.console import Console
from tasks_core import App, ManualClock, TaskContext
from tasks_core.cli import run


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
