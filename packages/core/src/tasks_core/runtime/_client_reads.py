"""The store's lifecycle and the read calls of an ``App``: ``get``, ``list``, ``history``,
``watch`` and ``wait``.

Visibility is checked here, in core, for every store: a task the caller may not see raises
exactly what a missing task raises (``TaskNotFound``). The store is opened by ``async with
app:`` (or lazily by the first call) and closed on exit — unless the application passed in
a store it owns, which is never closed here.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from tasks_core import rules
from tasks_core._registry import open_store
from tasks_core.authority import Access, Authority, Owner, check_task_id, names, require_authority
from tasks_core.definitions import Queue
from tasks_core.durations import MAX_WAIT_S, MIN_INTERVAL_S, Seconds, check_duration
from tasks_core.errors import InvalidInput, StoreCorrupt, TaskNotFound, TaskTimeout
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot, TaskQuery, TaskStatus
from tasks_core.policy import Limits, Policy
from tasks_core.runtime._app_registry import Registry
from tasks_core.runtime._defaults import EMBEDDED_STORE_URL, default_store_url
from tasks_core.runtime._notify import Notices
from tasks_core.runtime._submit import MAX_RACES
from tasks_core.store import TaskStore

__all__ = ["DEFAULT_RETENTION_S", "ClientReads", "Page"]

log = logging.getLogger("tasks_core.app")  # a stable name: logging configs refer to it

DEFAULT_RETENTION_S = 7 * 86400.0
"""Finished tasks are kept a week unless the task or the app says otherwise."""


@dataclass(frozen=True)
class Page:
    """One page of a listing.

    Attributes:
        items: the tasks, ordered by id.
        next_after: pass it as ``after=`` for the next page; ``None`` at the end.
    """

    items: list[Snapshot]
    next_after: str | None

    def __iter__(self) -> Iterator[Snapshot]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def _check_store_limits(store: TaskStore, limits: Limits) -> None:
    """``max_tasks`` and ``max_active_tasks_per_scope`` are the store's to enforce: an app
    passes them on only to a store it opens. Given a store, a limit set to other than its
    default must be the store's own (``store.limits``, where the store says).

    Raises:
        InvalidInput: naming the limit and where to set it.
    """
    defaults, own = Limits(), getattr(store, "limits", None)
    for name in ("max_tasks", "max_active_tasks_per_scope"):
        wanted = getattr(limits, name)
        if wanted != getattr(defaults, name) and wanted != getattr(own, name, None):
            raise InvalidInput(
                f"{name}={wanted} is enforced by the store, and this store was opened "
                f"without it: pass {name} where the store is opened (or give the app a "
                "URL and it opens the store with it)")


def _check_url(url: object) -> str:
    """A store URL given to the app: a str that is not blank (an unset variable in
    ``App(os.environ.get("URL", ""))`` must not mean "the default store here").

    Raises:
        TypeError: not a str.
        InvalidInput: blank.
    """
    if not isinstance(url, str):
        raise TypeError(f"the store URL must be a str, not {type(url).__name__}")
    if not url.strip():
        raise InvalidInput("the store URL is blank: give a store URL (e.g. "
                           f"{EMBEDDED_STORE_URL}), or none for the default store")
    return url


def _check_store_options(options: object) -> None:
    """``store_options``: a mapping of the store's option names (strings: they become
    the keyword arguments of the store's factory) to values the store checks.

    Raises:
        TypeError: not a mapping.
        InvalidInput: a key that is not a str.
    """
    if not isinstance(options, Mapping):
        raise TypeError(f"store_options= takes a dict of the store's options, not "
                        f"{type(options).__name__}")
    for key in options:
        if not isinstance(key, str):
            raise InvalidInput(f"store_options maps the store's option names to values: a "
                               f"key must be a str, not {type(key).__name__}")


class ClientReads(Registry):
    """The store's lifecycle and the read calls of an :class:`~tasks_core.App` (whose
    docstring lists the arguments).

    Attributes:
        notices: what the app's clients and workers tell each other in this process.
    """

    def __init__(
        self,
        url: str | None = None,
        /,
        *,
        store: TaskStore | None = None,
        policy: Policy | None = None,
        limits: Limits | None = None,
        queues: Iterable[str | Queue] = (),
        retention: Seconds | None = DEFAULT_RETENTION_S,
        store_options: Mapping[str, Any] | None = None,
        poll_interval: Seconds = 0.5,
    ) -> None:
        if url is not None and store is not None:
            raise InvalidInput("pass a store URL or a store, not both")
        if url is not None:
            _check_url(url)
        if store is not None and not isinstance(store, TaskStore):
            raise TypeError(
                f"store= takes a store object (a TaskStore), not {type(store).__name__}; "
                "a store URL is the first argument: App('sqlite:///tasks.db')")
        for given, kind, name in ((policy, Policy, "policy"), (limits, Limits, "limits")):
            if given is not None and not isinstance(given, kind):
                raise TypeError(f"{name}= takes a {kind.__name__}(...), not "
                                f"{type(given).__name__}")
        if store_options is not None:
            _check_store_options(store_options)
        if store is not None and limits is not None:
            _check_store_limits(store, limits)
        super().__init__(queues, retention)
        self.url = url
        self.policy = policy or Policy()
        self.limits = limits or Limits()
        self.poll_interval = check_duration(poll_interval, "poll_interval",
                                            low=MIN_INTERVAL_S, high=MAX_WAIT_S)
        self.store_options = dict(store_options or {})
        self._store = store
        self._owns_store = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._open_lock = asyncio.Lock()
        self.notices = Notices()

    # -- lifecycle -----------------------------------------------------------------------

    def use_store(self, url: str) -> None:
        """Point an app that is not open yet at another store URL (``tasks --store``).

        Raises:
            InvalidInput: the app is open already, or was given a store object; a blank
                URL.
            TypeError: a URL that is not a str.
        """
        if self._store is not None:
            raise InvalidInput("the app's store is already set")
        self.url = _check_url(url)

    async def open(self) -> TaskStore:
        """Open the store (idempotent).

        Raises:
            UnknownStore: no installed plugin serves the URL.
            InvalidInput: no URL given and ``$TASKS_STORE`` set but blank.
            StoreUnavailable: the store cannot be reached.
        """
        if self._store is not None and self._loop is not None:
            return self._store
        async with self._open_lock:
            if self._store is None:
                # which default is installed: a plugin import, off the event loop
                url = self.url or (await asyncio.to_thread(default_store_url))[0]
                options = {
                    "max_tasks": self.limits.max_tasks,
                    "max_active_tasks_per_scope": self.limits.max_active_tasks_per_scope,
                    **self.store_options,
                }
                self._store = await open_store(url, **options)
                self.url = url
                self._owns_store = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            return self._store

    def forget_store(self) -> TaskStore | None:
        """Drop the store the app opened, without closing it, and its loop (a forked
        child's ``app.sync``: the store's connections are the parent's); the next call
        opens a store afresh. A store given to the app is kept.

        Returns:
            The store dropped (``None``: none was the app's own).
        """
        dropped = self._store if self._owns_store else None
        if dropped is not None:
            self._store = None
            self._owns_store = False
        self._loop = None
        self._open_lock = asyncio.Lock()
        return dropped

    async def aclose(self) -> None:
        """Close the store if the app opened it."""
        store, owned = self._store, self._owns_store
        if owned and store is not None:
            self._store = None
            self._owns_store = False
            await store.aclose()
        self._loop = None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def store(self) -> TaskStore:
        """The open store.

        Raises:
            RuntimeError: the app is not open.
        """
        if self._store is None:
            raise RuntimeError("the app is not open: use 'async with app:' or 'await app.open()'")
        return self._store

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the store was opened on (``None`` while the app is closed)."""
        return self._loop

    def _access(self, authority: Authority) -> Access:
        return Access(principal=authority, visibility=self.policy.visibility)

    def _visible(self, snapshot: Snapshot, authority: Authority) -> Snapshot:
        if not rules.can_see(snapshot, authority, self.policy.visibility):
            raise TaskNotFound(snapshot.id)
        return snapshot

    # -- reads ---------------------------------------------------------------------------

    async def get(self, task_id: str, authority: Authority, /) -> Snapshot:
        """The task as ``authority`` may see it.

        Raises:
            TypeError: a missing or bare-string authority.
            TaskNotFound: unknown, another tenant, expired — or invisible to ``authority``.
            StoreCorrupt, StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        store = await self.open()
        task_id = check_task_id(task_id)
        try:
            snapshot = await store.get(task_id, tenant=authority.tenant)
        except StoreCorrupt:
            if names(task_id, authority):
                raise
            # Whose record it is cannot be read: to anyone who cannot be shown to own it
            # (by the id alone), it reads as missing — never as "exists, but broken".
            log.warning("task %r: the stored record is corrupt; reported as not found to %s",
                        task_id, authority)
            raise TaskNotFound(task_id) from None
        return self._visible(snapshot, authority)

    async def list(
        self,
        authority: Authority,
        /,
        *,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        queue: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> Page:
        """The tasks ``authority`` may see, ordered by id, one keyset page at a time.

        Args:
            authority: an owner sees its own and watched tasks (every task of its tenant
                under ``visibility="tenant"``); ``System(t)`` sees tenant ``t``,
                ``System()`` every tenant.
            status: one status or several.
            queue: one queue.
            after: the ``next_after`` of the previous page.
            limit: page size, 1..1000.

        Raises:
            TypeError: a missing or bare-string authority.
            InvalidInput: a bad filter.
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        if status is None:
            statuses = None
        elif isinstance(status, (str, TaskStatus)):
            statuses = frozenset({_status(status)})
        elif isinstance(status, Iterable):
            statuses = frozenset(_status(s) for s in status)
        else:
            raise InvalidInput("status must be a status or a list of statuses")
        rules.check_limit(limit, maximum=1000)
        if after is not None:
            after = check_task_id(after, what="after")
        principal = (
            authority
            if isinstance(authority, Owner) and self.policy.visibility == "watchers"
            else None
        )
        query = TaskQuery(tenant=authority.tenant, principal=principal, statuses=statuses,
                          queue=queue, after=after, limit=limit)
        store = await self.open()
        items = await store.list(query)
        visible = [s for s in items if rules.can_see(s, authority, self.policy.visibility)]
        more = len(items) >= limit and bool(await store.list(
            query.model_copy(update={"after": items[-1].id, "limit": 1})
        ))  # a full page may be the last: look one task further
        return Page(visible, items[-1].id if more else None)

    async def history(
        self, task_id: str, authority: Authority, /
    ) -> builtins.list[EventRecord]:
        """The applied events of the task's current run, in order.

        Raises:
            TypeError, TaskNotFound, StoreCorrupt, StoreUnavailable: as :meth:`get`.
        """
        for _ in range(MAX_RACES):
            before = await self.get(task_id, authority)
            records = await self.store.history(before.id, tenant=authority.tenant)
            after = await self.get(task_id, authority)
            if after.run_id == before.run_id:
                return records
        raise TaskNotFound(task_id)

    async def watch(
        self, task_id: str, authority: Authority, /, *, poll_interval: Seconds | None = None
    ) -> AsyncGenerator[Snapshot, None]:
        """Yield the task now and after every change (status, revision, progress, run),
        ending after a terminal snapshot.

        Raises:
            TypeError, TaskNotFound, StoreUnavailable: as :meth:`get` (also mid-watch, if
                the task is reaped or deleted).
            InvalidInput: a bad ``poll_interval`` (see :mod:`tasks_core.durations`).
        """
        require_authority(authority)
        poll = check_duration(poll_interval, "poll_interval", low=MIN_INTERVAL_S,
                              high=MAX_WAIT_S, allow_none=True) or self.poll_interval
        last: tuple[Any, ...] | None = None
        while True:
            version = self.notices.changes.version
            snapshot = await self.get(task_id, authority)
            seen = (snapshot.run_id, snapshot.revision, snapshot.status, snapshot.progress,
                    snapshot.deliveries)
            if seen != last:
                last = seen
                yield snapshot
            if snapshot.terminal:
                return
            await self.notices.changes.wait(version, poll)

    async def wait(
        self, task_id: str, authority: Authority, /, *, timeout: Seconds | None = None
    ) -> Snapshot:
        """Wait until the task is terminal and return it. The first read always
        completes, whatever the timeout: a task that has finished is returned and a
        missing one refused even with ``timeout=0``; the timeout counts from the call.

        Raises:
            TaskTimeout: ``timeout`` seconds passed first (also a ``TimeoutError``); the
                task itself is left alone.
            InvalidInput: a bad ``timeout`` (see :mod:`tasks_core.durations`): nothing
                waited for.
            TypeError, TaskNotFound, StoreUnavailable: as :meth:`get`.
        """
        timeout = check_duration(timeout, "timeout", high=MAX_WAIT_S, allow_zero=True,
                                 allow_none=True)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with contextlib.aclosing(self.watch(task_id, authority)) as changes:
            snapshot = await anext(changes)
            try:
                async with asyncio.timeout_at(deadline):
                    while not snapshot.terminal:
                        snapshot = await anext(changes)
            except TimeoutError:
                raise TaskTimeout(f"Waited {timeout:g}s; the task is not finished yet") from None
        return snapshot


def _status(value: TaskStatus | str) -> TaskStatus:
    try:
        return TaskStatus(value)
    except (ValueError, TypeError):
        raise InvalidInput(f"unknown status {value!r}") from None

