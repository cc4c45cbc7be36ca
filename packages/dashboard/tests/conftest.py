"""Shared fixtures of the dashboard tests: an App on the memory store with a few tasks,
the dashboard over it, and an HTTP client that calls it in process (httpx, ASGI)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from tasks_core import App, Limits, Queue, TaskContext, TaskStore
from tasks_dashboard import create_app

TOKEN = "operator-token-for-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives a real headless Chromium "
                                       "(Playwright); fails under CI without one")


@pytest.fixture
def anyio_backend() -> str:
    """Stores are asyncio libraries."""
    return "asyncio"


def build_app(url: str | None, *, store: TaskStore | None = None,
              limits: Limits | None = None) -> App:
    """An App (on ``url`` or ``store``, with ``limits``) with the tasks the tests run:
    steps (progress), ask (input), forever, fail (raises ``message``)."""
    app = App(url, store=store, queues=[Queue("web")], limits=limits)

    @app.task(queue="web")
    async def steps(ctx: TaskContext, count: int, pause: float = 0.3) -> dict[str, int]:
        for step in range(1, count + 1):
            await ctx.sleep(pause)
            ctx.progress(100 * step / count, f"step {step}/{count}")
        return {"steps": count}

    @app.task(queue="web")
    async def ask(ctx: TaskContext, question: str) -> object:
        ctx.progress(5, "waiting for an answer")
        return await ctx.request_input("approve", {"question": question})

    @app.task(queue="web")
    async def forever(ctx: TaskContext) -> None:
        while True:
            await ctx.sleep(0.2)
            ctx.progress(50, "working")

    @app.task(queue="web")
    async def fail(ctx: TaskContext, message: str) -> None:
        raise RuntimeError(message)

    return app


@pytest.fixture
async def app() -> AsyncIterator[App]:
    """The test App on a fresh memory store, open."""
    async with build_app("memory://") as opened:
        yield opened


@pytest.fixture
def web(app: App) -> Starlette:
    """The dashboard over ``app`` with the test token."""
    return create_app(app, token=TOKEN)


@pytest.fixture
async def client(web: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of ``web`` (no credentials of its own)."""
    transport = httpx.ASGITransport(app=web)
    async with httpx.AsyncClient(transport=transport, base_url="http://dash") as c:
        yield c
