"""The ``tasks`` plugin of tasks-store-memory: serves ``memory://``."""

from __future__ import annotations

from typing import Any

from tasks_core.errors import InvalidInput
from tasks_core.plugins import StoreSpec, check_create, hookimpl

from tasks_store_memory.store import MemoryStore

OPTIONS = frozenset({"clock", "limits", "max_tasks", "max_active_tasks_per_scope", "namespace",
                     "create"})


async def open_memory(url: str, **options: Any) -> MemoryStore:
    """Open a fresh, empty ``MemoryStore`` for ``memory://`` (``create=False`` too: the
    store lives in this process, so nothing outside it is created).

    Raises:
        InvalidInput: a URL other than ``memory://`` (the store has no host, path or URL
            option: anything after the scheme would be ignored), or an unknown or bad
            option.
    """
    if url != "memory://":
        raise InvalidInput("the memory store's URL is 'memory://' alone (no host, path or "
                           "?option: pass options as keywords)")
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InvalidInput(f"Unknown MemoryStore option(s): {', '.join(unknown)}")
    check_create(options.pop("create", True))
    return MemoryStore(**options)


async def _corrupt(store: MemoryStore, task_id: str) -> None:
    store._corrupt(task_id)


@hookimpl
def tasks_stores() -> StoreSpec:
    """Declare the memory store."""
    return StoreSpec(
        name="memory",
        schemes=("memory",),
        factory=open_memory,
        capabilities=MemoryStore.CAPABILITIES,
        distribution="tasks-store-memory",
        corrupt=_corrupt,
    )
