"""The tasks of a stress run: handlers that record each run in the ledger, and the kinds of
task a run submits with the outcome each must end in.

Every handler run writes ``start`` before it does anything and ``end`` on its way out,
whatever the way out is (a return, an exception, a cancel, a park). Its result names the
run — ``pid``, ``nonce`` (random per run), ``delivery`` and ``attempt`` — so the checker
can tell which run's outcome the store kept.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tasks_core import App, RetryPolicy, RunCancelled, TaskContext, TaskStore

from tasks_contract_tests.stress._ledger import Ledger

__all__ = ["KINDS", "QUEUE", "Kind", "RunRecorder", "build_app", "end_outcome"]

QUEUE = "stress"


@dataclass(frozen=True)
class Kind:
    """A kind of task a run submits, and what it must end as.

    Attributes:
        task: the registered task name.
        status: the terminal status it must reach.
        input: the handler's keyword arguments.
        retries: application retries it must have used (``retry_count``).
        error: the stored error type of a failed task.
        answered: the result must carry the client's answer.
        cancelled: the client cancels it (it runs until then).
    """

    task: str
    status: str
    input: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
    error: str | None = None
    answered: bool = False
    cancelled: bool = False

    def expectation(self, name: str) -> dict[str, Any]:
        """What the ledger's ``submit`` row records for the checker."""
        return {"kind": name, "status": self.status, "retries": self.retries,
                "error": self.error, "answered": self.answered}


KINDS: dict[str, Kind] = {
    "plain": Kind("stress.plain", "completed", {"pause": 0.01}),
    "plain_sync": Kind("stress.plain_sync", "completed", {"pause": 0.01}),
    "flaky": Kind("stress.flaky", "completed", {"fails": 2}, retries=2),
    "ask": Kind("stress.ask", "completed", answered=True),
    "ask_sync": Kind("stress.ask_sync", "completed", answered=True),
    "cancel": Kind("stress.hold", "cancelled", {"seconds": 120.0}, cancelled=True),
    "poison": Kind("stress.poison", "failed", retries=1, error="ValueError"),
    "bad_result": Kind("stress.bad_result", "failed", error="InvalidResult"),
}
"""The soak's mix (chaos scenarios add their own inputs to the same tasks)."""


def end_outcome(error: BaseException | None) -> str:
    """How a handler run ended, as the ledger's ``end`` row says it."""
    if error is None:
        return "returned"
    if isinstance(error, RunCancelled):
        return f"stopped:{error.reason.value}"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if type(error).__name__ == "_Parked":
        return "parked"
    return f"raised:{type(error).__name__}"


class RunRecorder:
    """Writes the ``start``/``end`` rows of handler runs (no ledger: records nothing)."""

    def __init__(self, ledger: Ledger | None) -> None:
        self.ledger = ledger

    @contextmanager
    def run(self, ctx: TaskContext) -> Iterator[dict[str, Any]]:
        """Record the run around the block; yields the result that names the run."""
        nonce = secrets.token_hex(8)
        named = {"pid": os.getpid(), "nonce": nonce, "delivery": ctx.deliveries,
                 "attempt": ctx.attempt}
        if self.ledger is not None:
            self.ledger.record("start", ctx.task_id, delivery=ctx.deliveries, nonce=nonce,
                               detail=str(ctx.attempt))
        error: BaseException | None = None
        try:
            yield named
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.ledger is not None:
                self.ledger.record("end", ctx.task_id, delivery=ctx.deliveries, nonce=nonce,
                                   outcome=end_outcome(error))


def build_app(
    *,
    url: str | None = None,
    store: TaskStore | None = None,
    ledger: Ledger | None = None,
    store_options: dict[str, Any] | None = None,
) -> App:
    """An app with every stress task registered (workers pass their recording store,
    clients a URL).

    Args:
        url: the store URL (clients).
        store: an open store (workers: the recording wrapper).
        ledger: where handler runs are recorded (``None`` in clients).
        store_options: options for the store opened from ``url`` (the namespace).
    """
    app = App(url, store=store, queues=[QUEUE], store_options=store_options)
    recorder = RunRecorder(ledger)

    @app.task(name="stress.plain", queue=QUEUE)
    async def plain(ctx: TaskContext, pause: float = 0.0) -> dict[str, Any]:
        with recorder.run(ctx) as result:
            await asyncio.sleep(pause)
            return result

    @app.task(name="stress.plain_sync", queue=QUEUE)
    def plain_sync(ctx: TaskContext, pause: float = 0.0) -> dict[str, Any]:
        with recorder.run(ctx) as result:
            time.sleep(pause)
            return result

    @app.task(name="stress.flaky", queue=QUEUE, retry=RetryPolicy.fixed(0.2, attempts=5))
    async def flaky(ctx: TaskContext, fails: int = 1) -> dict[str, Any]:
        with recorder.run(ctx) as result:
            if ctx.attempt <= fails:
                raise RuntimeError(f"attempt {ctx.attempt} fails on purpose")
            return result

    @app.task(name="stress.ask", queue=QUEUE)
    async def ask(ctx: TaskContext, key: str = "approve") -> dict[str, Any]:
        with recorder.run(ctx) as result:
            answer = await ctx.request_input(key, {"question": "go on?"})
            return {**result, "answer": answer}

    @app.task(name="stress.ask_sync", queue=QUEUE)
    def ask_sync(ctx: TaskContext, key: str = "approve") -> dict[str, Any]:
        with recorder.run(ctx) as result:
            answer = ctx.request_input_sync(key, {"question": "go on?"})
            return {**result, "answer": answer}

    @app.task(name="stress.hold", queue=QUEUE)
    async def hold(ctx: TaskContext, seconds: float = 1.0, once: bool = False) -> dict[str, Any]:
        """Run ``seconds`` (``once``: only on the first delivery), stopping early when asked."""
        with recorder.run(ctx) as result:
            if not (once and ctx.deliveries > 1):
                await ctx.sleep(seconds)
                ctx.raise_if_cancelled()
            return result

    @app.task(name="stress.stall", queue=QUEUE)
    def stall(ctx: TaskContext, seconds: float = 1.0) -> dict[str, Any]:
        """Block its thread ``seconds`` on the first delivery, deaf to every token."""
        with recorder.run(ctx) as result:
            if ctx.deliveries == 1:
                time.sleep(seconds)
            return result

    @app.task(name="stress.poison", queue=QUEUE, retry=RetryPolicy.fixed(0.1, attempts=2))
    def poison(ctx: TaskContext) -> None:
        with recorder.run(ctx):
            raise ValueError("poison: fails every attempt")

    @app.task(name="stress.bad_result", queue=QUEUE)
    async def bad_result(ctx: TaskContext) -> Any:
        with recorder.run(ctx):
            return {"not json": {1, 2}}

    return app
