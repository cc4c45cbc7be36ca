"""Another tenant's task is decided by the database: a reader of one tenant never reads
another tenant's row, so its answer costs what a missing id's does, however large the
task (``docs/security.md``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from tasks_core import App, Owner, TaskNotFound
from tasks_store_sql import SQLStore

pytestmark = pytest.mark.anyio

ALICE = Owner("alice", tenant="acme")
MALLORY = Owner("mallory", tenant="evil")


class _Statements:
    """Each statement the store's engine runs with its parameters, as given to the driver."""

    def __init__(self, store: SQLStore) -> None:
        self.seen: list[tuple[str, list[Any]]] = []
        sa.event.listen(store._db.engine.sync_engine, "before_cursor_execute", self._record)

    def _record(self, _conn: Any, _cursor: Any, statement: str, parameters: Any,
                *_: Any) -> None:
        values = parameters.values() if isinstance(parameters, dict) else parameters
        self.seen.append((statement, list(values or ())))


async def _error(call: Any) -> BaseException:
    with pytest.raises(TaskNotFound) as refused:
        await call
    return refused.value


async def test_a_read_of_another_tenants_task_never_reads_its_row(
    any_opener: Callable[..., Any], closing: Callable[[SQLStore], SQLStore]
) -> None:
    """``get`` and ``history`` by another tenant MUST read only rows of the reader's tenant
    (every statement reading a task's document binds that tenant), and MUST answer as
    for a missing id."""
    store = closing(await any_opener())
    app = App(store=store)
    task = await app.submit("job", {"blob": "x" * 200_000}, ALICE)
    statements = _Statements(store)
    got = [await _error(app.get(task.id, MALLORY)),
           await _error(app.history(task.id, MALLORY))]
    reads = [values for sql, values in statements.seen if "snapshot" in sql]
    assert reads, "no statement read a task"
    for values in reads:
        assert "evil" in values or b"evil" in values, values
    missing = "acme::alice::ghost"
    for error, call in zip(got, (app.get, app.history), strict=True):
        assert str(await _error(call(missing, MALLORY))).replace(missing, task.id) == str(error)
    assert task.id == (await app.get(task.id, ALICE)).id
