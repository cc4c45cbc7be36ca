"""Reading back what the store kept, and waiting on it, from the harness process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tasks_core import Snapshot, StoreUnavailable, TaskQuery, TaskStatus, TaskStore

from tasks_contract_tests.stress._invariants import TaskFacts
from tasks_contract_tests.stress._target import HarnessError

__all__ = ["collect", "retrying", "snapshots", "wait_until"]

T = TypeVar("T")
LIVE = frozenset(status for status in TaskStatus if not status.terminal)


async def retrying(call: Callable[[], Awaitable[T]], *, timeout: float = 60.0) -> T:
    """``call()``, again while the store is unavailable (a restart), up to ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await call()
        except StoreUnavailable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.25)


async def snapshots(store: TaskStore, *, live: bool = False) -> list[Snapshot]:
    """Every task of the namespace (only the unfinished ones with ``live``)."""
    found: list[Snapshot] = []
    after: str | None = None
    while True:
        query = TaskQuery(tenant=None, statuses=LIVE if live else None, after=after, limit=1000)
        page = await retrying(lambda query=query: store.list(query))  # type: ignore[misc]
        found += page
        if len(page) < query.limit:
            return found
        after = page[-1].id


async def collect(store: TaskStore) -> dict[str, TaskFacts]:
    """The facts of every task of the namespace, with their histories."""
    now = await retrying(store.now)
    facts = {}
    for snapshot in await snapshots(store):
        history = await retrying(
            lambda s=snapshot: store.history(s.id, tenant=None))  # type: ignore[misc]
        facts[snapshot.id] = TaskFacts.of(snapshot, history, now)
    return facts


async def wait_until(
    probe: Callable[[], Awaitable[bool]], *, timeout: float, what: str, every: float = 0.1
) -> None:
    """Poll ``probe`` until it is true.

    Raises:
        HarnessError: ``timeout`` passed first (named by ``what``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await probe():
        if loop.time() > deadline:
            raise HarnessError(f"{what}: not reached within {timeout:g}s")
        await asyncio.sleep(every)
