"""The context's waiting helpers end with ``RunCancelled`` for every cause, even when the
worker's cancel of the handler's task lands before the handler hears the token."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from tasks_core import CancelReason, CancelToken, RunCancelled, TaskContext, rules
from tasks_core.models import NewTask, Work

pytestmark = pytest.mark.anyio


class _Hooks:
    """A run whose questions are never answered."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.asked = asyncio.Event()

    def progress(self, value: float, message: str | None) -> None:
        pass

    async def request_input(self, key: str, request: Any) -> Any:
        self.asked.set()
        await asyncio.Event().wait()


def _context(hooks: _Hooks) -> TaskContext:
    new = NewTask(id="t1", tenant="default", owner=None, work=Work(name="job", input={}))
    return TaskContext(rules.new_snapshot(new, datetime(2030, 1, 1, tzinfo=UTC)),
                       CancelToken(), hooks)


async def _waiting(ctx: TaskContext, hooks: _Hooks, wait: str) -> asyncio.Task[Any]:
    """A task running ``ctx.<wait>``, once it waits."""
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "sleep": lambda: ctx.sleep(60), "request_input": lambda: ctx.request_input("ok")}

    async def handler() -> Any:
        return await calls[wait]()

    task = asyncio.get_running_loop().create_task(handler())
    for _ in range(100):  # until it waits: on the token's waiters, or asked
        if ctx.token._waiters or hooks.asked.is_set():
            return task
        await asyncio.sleep(0)
    raise AssertionError("the helper never waited")


@pytest.mark.parametrize("wait", ["sleep", "request_input"])
@pytest.mark.parametrize("reason", [CancelReason.USER, CancelReason.TIMEOUT,
                                    CancelReason.SUPERSEDED, CancelReason.SHUTDOWN])
async def test_a_wait_cancelled_with_the_token_raises_run_cancelled(
    wait: str, reason: CancelReason
) -> None:
    """The worker sets the token and cancels an async handler's task in the same step
    (``_stop_early``): a handler waiting in ``ctx.sleep`` or ``ctx.request_input`` MUST get
    ``RunCancelled`` with the token's reason, never ``asyncio.CancelledError`` (3 cancels
    in 40 did, as the cancel landed before the token's wakeup), and its task ends with it
    (not cancelled)."""
    hooks = _Hooks()
    ctx = _context(hooks)
    task = await _waiting(ctx, hooks, wait)
    ctx.token.cancel(reason)
    task.cancel()
    with pytest.raises(RunCancelled) as stopped:
        await task
    assert reason == stopped.value.reason
    assert not task.cancelled()


@pytest.mark.parametrize("wait", ["sleep", "request_input"])
async def test_a_cancel_that_is_not_the_runs_stays_cancelled_error(wait: str) -> None:
    """A cancel of the handler's task that is not the run's (no cause on the token: the
    handler's own ``asyncio.timeout``, a task group) MUST stay ``CancelledError``."""
    hooks = _Hooks()
    ctx = _context(hooks)
    task = await _waiting(ctx, hooks, wait)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
