"""Another tenant's task is decided by the server: a reader of one tenant never reads
another tenant's document, so its answer costs what a missing id's does, however large
the task (``docs/security.md``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo import monitoring
from tasks_core import App, Owner, TaskNotFound

pytestmark = pytest.mark.anyio

ALICE = Owner("alice", tenant="acme")
MALLORY = Owner("mallory", tenant="evil")


class _Finds(monitoring.CommandListener):
    """The filter of every ``find`` command sent while it listens."""

    def __init__(self) -> None:
        self.filters: list[dict[str, Any]] = []
        self.listening = False

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.listening and event.command_name == "find":
            self.filters.append(dict(event.command.get("filter", {})))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


_FINDS = _Finds()
monitoring.register(_FINDS)  # for the clients opened from now on (both drivers)


async def _error(call: Any) -> BaseException:
    with pytest.raises(TaskNotFound) as refused:
        await call
    return refused.value


async def test_a_read_of_another_tenants_task_never_reads_its_document(
    open_store: Callable[..., Awaitable[Any]],
) -> None:
    """``get`` and ``history`` by another tenant MUST ask the server only for documents of
    the reader's tenant (or a damaged tenant, which is reported), and MUST answer as for
    a missing id."""
    app = App(store=await open_store())
    task = await app.submit("job", {"blob": "x" * 200_000}, ALICE)
    _FINDS.filters.clear()
    _FINDS.listening = True
    try:
        got = [await _error(app.get(task.id, MALLORY)),
               await _error(app.history(task.id, MALLORY))]
    finally:
        _FINDS.listening = False
    reads = [f for f in _FINDS.filters if f.get("_id") == task.id]
    assert reads, "no find read the task"
    for found in reads:
        assert {"tenant": "evil"} in found.get("$or", []), found
    missing = "acme::alice::ghost"
    for error, call in zip(got, (app.get, app.history), strict=True):
        assert str(await _error(call(missing, MALLORY))).replace(missing, task.id) == str(error)
    assert task.id == (await app.get(task.id, ALICE)).id
