"""Store plugins: how a backend distribution makes itself known.

A store distribution declares entry points in group ``tasks`` — one per URL scheme it
serves, plus its store name — all pointing at a module whose ``@hookimpl`` function
``tasks_stores()`` returns a :class:`StoreSpec` (docs/writing-a-store.md shows one, and
examples/acme-store is a whole plugin). Naming the entry point after the scheme lets
:func:`tasks_core.open_store` import exactly the plugin asked for and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pluggy

from tasks_core._hints import install_hint
from tasks_core.errors import InvalidInput
from tasks_core.models import StoreCapabilities
from tasks_core.store import TaskStore

__all__ = ["PROJECT", "ApplicationTransaction", "BeginTransaction", "Migrate", "StoreFactory",
           "StoreSpec", "check_create", "hookimpl", "hookspec", "install_hint"]

PROJECT = "tasks"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)



StoreFactory = Callable[..., Awaitable[TaskStore]]
"""``async factory(url, **options) -> TaskStore``. Options every store accepts:
``clock`` (a :class:`~tasks_core.clock.Clock`), ``namespace`` (an isolated name space:
table prefix, schema, database…), ``max_tasks``, ``max_active_tasks_per_scope`` and
``create`` (:func:`check_create`; ``False``: open only a store that exists — create no file,
database, table, index or collection, and refuse a missing one with ``UnknownStore`` or
``SchemaMismatch``; a plugin whose every open is a fresh store in the process takes it and
opens as usual). Unknown options raise ``InvalidInput``."""

Migrate = Callable[..., Awaitable[tuple[str | None, str | None]]]
"""``async migrate(url, *, to="head", namespace=None) -> (before, after)``: the schema
revisions of the namespace before and after (``None``: no schema). Safe to run from
several processes at once. Raises ``InvalidInput`` for an unknown revision and
``StoreError`` subclasses for a schema the code does not know or an unreachable store."""


class ApplicationTransaction(Protocol):
    """A transaction of the application's, of the kind a store's ``create(transaction=…)``
    takes, begun for the contract suite (test support).

    Attributes:
        handle: what ``create``/``create_many`` take as ``transaction=`` (an
            ``AsyncConnection`` for SQL, a ``ClientSession`` for MongoDB).
    """

    handle: Any

    async def commit(self) -> None:
        """Commit what was written in it and let the handle go."""

    async def rollback(self) -> None:
        """Roll it back and let the handle go; after ``commit`` or a first ``rollback``,
        nothing."""


BeginTransaction = Callable[[Any, bool], Awaitable[ApplicationTransaction]]
"""``async begin(store, started)``: an :class:`ApplicationTransaction` on ``store``'s own
database; ``started=False``: a handle of the right kind with no transaction begun, which
``create(transaction=…)`` must refuse (``InvalidInput``)."""


@dataclass(frozen=True)
class StoreSpec:
    """What a plugin offers.

    Attributes:
        name: the store's name (``"memory"``, ``"sql"``…), unique among installed plugins.
        schemes: URL schemes served (``"sqlite"``, ``"postgresql"``…).
        factory: opens a store from a URL and options.
        capabilities: the capabilities of stores it opens (the most a URL can get).
        distribution: the distribution to ``pip install`` for it.
        create_namespace: ``async (base_url, namespace)``; makes an empty, isolated
            namespace for the contract suite (``None``: every open is already fresh).
        drop_namespace: ``async (base_url, namespace)``; removes it again.
        migrate: ``async (url, *, to, namespace) -> (before, after)``; moves the schema of
            the store at ``url`` to revision ``to`` (``"head"``: what the installed code
            expects) and returns the revisions before and after (``None``: no schema).
            What ``tasks migrate`` calls; ``None``: the store has no schema to migrate.
        corrupt: ``async (store, task_id)``; damages the persisted record of a task so the
            contract suite can prove ``StoreCorrupt`` handling (test support only).
        begin_transaction: :data:`BeginTransaction`; lets the contract suite prove
            ``transactional_submit`` (test support only; ``None``: a store with the
            capability fails those tests with a reminder).
    """

    name: str
    schemes: tuple[str, ...]
    factory: StoreFactory
    capabilities: StoreCapabilities
    distribution: str
    create_namespace: Callable[[str, str], Awaitable[None]] | None = None
    drop_namespace: Callable[[str, str], Awaitable[None]] | None = None
    migrate: Migrate | None = field(default=None, repr=False)
    corrupt: Callable[[Any, str], Awaitable[None]] | None = field(default=None, repr=False)
    begin_transaction: BeginTransaction | None = field(default=None, repr=False)


def check_create(create: object) -> bool:
    """The standard factory option ``create`` (see :data:`StoreFactory`): ``True`` (the
    stores' default: make what is missing) or ``False`` (open only what exists).

    Raises:
        InvalidInput: anything but a ``bool``.
    """
    if not isinstance(create, bool):
        raise InvalidInput(f"create must be True or False, not {type(create).__name__}")
    return create


class _Hooks:
    @hookspec
    def tasks_stores(self) -> StoreSpec | list[StoreSpec]:  # type: ignore[empty-body]
        """Return the store(s) this plugin provides."""
