"""The ``tasks`` plugin of tasks-store-acme: serves ``acme://<name>``."""

from __future__ import annotations

from tasks_core import StoreSpec, TaskStore, find_store, hookimpl

from tasks_store_acme.store import AcmeStore, drop, open_acme


async def create_namespace(base_url: str, namespace: str) -> None:
    """Make ``namespace`` of the store at ``base_url`` empty (the contract suite's URL run
    asks for a fresh one per test)."""
    await drop(base_url, namespace)


async def drop_namespace(base_url: str, namespace: str) -> None:
    """Remove ``namespace`` again."""
    await drop(base_url, namespace)


async def corrupt(store: TaskStore, task_id: str) -> None:
    """Damage the stored record of ``task_id`` (contract-suite support only).

    An ``AcmeStore`` keeps its records exactly like ``MemoryStore``, so the memory plugin's
    own published hook does it.
    """
    memory = find_store("memory://")
    assert memory.corrupt is not None
    await memory.corrupt(store, task_id)


@hookimpl
def tasks_stores() -> StoreSpec:
    """Declare the acme store."""
    return StoreSpec(
        name="acme",
        schemes=("acme",),
        factory=open_acme,
        capabilities=AcmeStore.CAPABILITIES,
        distribution="tasks-store-acme",
        create_namespace=create_namespace,
        drop_namespace=drop_namespace,
        corrupt=corrupt,
    )
