"""``App``: the task registry and the client API.

Every client call takes the caller's authority (``Owner(...)`` or ``System(...)``)
positionally, with no default: leaving it out is a ``TypeError``, and so is a bare string.
Visibility is checked here, in core, for every store: a task the caller may not see raises
exactly what a missing task raises (``TaskNotFound``).

The store is opened by ``async with app:`` (or lazily by the first call) and closed on
exit — unless the application passed in a store it owns, which is never closed here.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from tasks_core import rules
from tasks_core._json import check_json, json_size
from tasks_core._registry import open_store
from tasks_core.authority import (
    DEFAULT_TENANT,
    Access,
    Authority,
    Owner,
    System,
    check_key,
    check_task_id,
    names,
    random_task_id,
    require_authority,
    scoped_task_key,
)
from tasks_core.definitions import DEFAULT_QUEUE, UNSET, Queue, TaskDef, _Unset
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S, MIN_INTERVAL_S, check_duration
from tasks_core.errors import (
    AuthorizationError,
    CapabilityNotSupported,
    InvalidInput,
    RevisionConflict,
    StoreCorrupt,
    TaskNotFound,
    TaskTimeout,
)
from tasks_core.events import Cancelled, EventRecord, InputResponsesAccepted, Transition
from tasks_core.models import NewTask, RetryPolicy, Snapshot, TaskQuery, TaskStatus, Work
from tasks_core.policy import Limits, Policy
from tasks_core.runtime._app_registry import Registry
from tasks_core.runtime._defaults import default_store_url
from tasks_core.runtime._notify import Changes
from tasks_core.runtime._submit import MAX_RACES, Submitted, check_input, check_watchers
from tasks_core.runtime._submit import submit as _submit
from tasks_core.store import TaskStore

if TYPE_CHECKING:
    from tasks_core.runtime._sync import SyncApp
    from tasks_core.runtime.worker import Worker

__all__ = ["DEFAULT_RETENTION_S", "UNSET", "App", "Page", "Submitted"]

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


class App(Registry):
    """Tasks, queues, policy and the store: the client API and the worker's home.

    Args:
        url: store URL (``"sqlite:///tasks.db"``, ``"memory://"``…); default
            ``$TASKS_STORE``, else SQLite when its plugin is installed, else memory.
        store: a store the application owns (not closed by the app); excludes ``url``.
        policy: security hooks and visibility (default :class:`Policy`).
        limits: sizes and counts (default :class:`Limits`).
        queues: declared queues (names or :class:`Queue`); ``"default"`` and every
            ``@app.task(queue=…)`` are declared too.
        retention: default seconds a finished task is kept (``None``: until deleted).
        store_options: extra options for the store opened from ``url``.
        poll_interval: how often ``watch``/``wait`` re-read the store when nothing local
            wakes them.

    Raises:
        InvalidInput: bad arguments (durations: see :mod:`tasks_core.durations`).
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
        retention: float | None = DEFAULT_RETENTION_S,
        store_options: Mapping[str, Any] | None = None,
        poll_interval: float = 0.5,
    ) -> None:
        if url is not None and store is not None:
            raise InvalidInput("pass a store URL or a store, not both")
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
        self._changes = Changes()
        self._work = Changes()
        self._sync: SyncApp | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def use_store(self, url: str) -> None:
        """Point an app that is not open yet at another store URL (``tasks --store``).

        Raises:
            InvalidInput: the app is open already, or was given a store object.
        """
        if self._store is not None:
            raise InvalidInput("the app's store is already set")
        self.url = url

    async def open(self) -> TaskStore:
        """Open the store (idempotent).

        Raises:
            UnknownStore: no installed plugin serves the URL.
            StoreUnavailable: the store cannot be reached.
        """
        async with self._open_lock:
            if self._store is None:
                url = self.url or default_store_url()[0]
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

    async def aclose(self) -> None:
        """Close the store if the app opened it."""
        store, owned = self._store, self._owns_store
        if owned and store is not None:
            self._store = None
            self._owns_store = False
            await store.aclose()
        self._loop = None

    async def __aenter__(self) -> App:
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

    async def _opened(self) -> TaskStore:
        if self._store is not None and self._loop is not None:
            return self._store
        return await self.open()

    def _access(self, authority: Authority) -> Access:
        return Access(principal=authority, visibility=self.policy.visibility)

    def _visible(self, snapshot: Snapshot, authority: Authority) -> Snapshot:
        if not rules.can_see(snapshot, authority, self.policy.visibility):
            raise TaskNotFound(snapshot.id)
        return snapshot

    # -- submit --------------------------------------------------------------------------

    async def submit(
        self,
        task: TaskDef | str,
        input: Mapping[str, Any] | None,
        authority: Authority,
        /,
        *,
        key: str | None = None,
        dedup: Literal["owner", "global"] = "owner",
        watchers: Sequence[Owner] = (),
        queue: str | None = None,
        ttl: float | _Unset | None = UNSET,
        retention: float | _Unset | None = UNSET,
        retry: RetryPolicy | None = None,
        timeout: float | _Unset | None = UNSET,
        max_deliveries: int | None = None,
        idempotency_key: str | None = None,
        transaction: Any = None,
    ) -> Submitted:
        """Submit a task, or join the live run of its key, or start a new run of it.

        Args:
            task: a registered task, or a task name (for clients without the handler).
            input: keyword arguments of the handler (JSON, at most
                ``limits.max_input_bytes``), or ``None``.
            authority: the submitter.
            key: dedup key. ``dedup="owner"``: id ``"<user>::<key>"`` (per owner and
                tenant); ``"global"``: the key itself. No key: a random id.
            watchers: principals of the same tenant granted read/cancel/respond.
            queue: a declared queue (default: the task's).
            ttl, retention, retry, timeout, max_deliveries: override the task's defaults.
            idempotency_key: handed to the handler for its side effects.
            transaction: your own open transaction (stores with capability
                ``transactional_submit``; SQL: the ``AsyncConnection`` of your
                transaction): the task is created or replaced inside it, so it exists if
                and only if your transaction commits. Joining a live run of the key creates
                nothing: the watcher it grants is written on its own.

        Returns:
            ``Submitted`` with the id and ``outcome`` ``created``/``joined``/``replaced``.

        Raises:
            TypeError: a missing or bare-string authority.
            InvalidInput: bad input, key, queue, option or watcher; nothing written.
            AuthorizationError: the queue authorizer said no; or joining a task you do not
                own without the watch authorizer's approval.
            CapacityExceeded: a store capacity or ``max_runs_per_owner``.
            CapabilityNotSupported: ``transaction`` given to a store without
                ``transactional_submit``; nothing written.
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        ttl = _duration(ttl, "ttl", MAX_KEEP_S)
        retention = _duration(retention, "retention", MAX_KEEP_S, allow_zero=True)
        timeout = _duration(timeout, "timeout", MAX_WAIT_S)
        definition = self._definition(task)
        name = definition.name if definition else task
        if not isinstance(name, str):
            raise InvalidInput("task must be a registered task or a task name")
        default_queue = definition.queue if definition else DEFAULT_QUEUE
        queue_name = default_queue if queue is None else queue  # "" is refused below
        if not isinstance(queue_name, str):
            raise InvalidInput("queue must be the name of a declared queue")
        if queue_name not in self._queues:
            raise InvalidInput(f"queue {queue_name!r} is not declared")
        self.policy.check_queue(queue_name, authority)
        data = check_input(input, definition, self.limits)
        tenant = authority.tenant or DEFAULT_TENANT
        owner = authority if isinstance(authority, Owner) else None
        if key is None:
            task_id = random_task_id()
        else:
            task_id = scoped_task_key(check_key(key), owner, dedup=dedup, tenant=tenant)
        granted = check_watchers(watchers, tenant, owner)
        work = Work(
            name=name,
            input=data,
            idempotency_key=idempotency_key,
            retry_policy=retry or (definition.retry if definition else RetryPolicy.none()),
            timeout_s=_pick(timeout, definition.timeout if definition else None),
            max_deliveries=(max_deliveries if max_deliveries is not None
                            else definition.max_deliveries if definition else 25),
        )
        new = NewTask(
            id=task_id,
            tenant=tenant,
            owner=owner,
            watchers=granted,
            queue=queue_name,
            work=work,
            ttl_s=_pick(ttl, definition.ttl if definition else None),
            retention_s=_pick(retention, definition.retention if definition else self.retention),
        )
        store = await self._opened()
        if transaction is not None and not store.capabilities.transactional_submit:
            raise CapabilityNotSupported(
                "This store cannot create a task inside your transaction (capability "
                "'transactional_submit' is off); submit after your commit instead")
        submitted = await _submit(store, self.policy, self.limits, new, authority,
                                  keyed=key is not None, transaction=transaction)
        self._work.notify()
        self._changes.notify()
        return submitted

    # -- reads ---------------------------------------------------------------------------

    async def get(self, task_id: str, authority: Authority, /) -> Snapshot:
        """The task as ``authority`` may see it.

        Raises:
            TypeError: a missing or bare-string authority.
            TaskNotFound: unknown, another tenant, expired — or invisible to ``authority``.
            StoreCorrupt, StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        store = await self._opened()
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
        store = await self._opened()
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
        self, task_id: str, authority: Authority, /, *, poll_interval: float | None = None
    ) -> AsyncIterator[Snapshot]:
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
            version = self._changes.version
            snapshot = await self.get(task_id, authority)
            seen = (snapshot.run_id, snapshot.revision, snapshot.status, snapshot.progress,
                    snapshot.deliveries)
            if seen != last:
                last = seen
                yield snapshot
            if snapshot.terminal:
                return
            await self._changes.wait(version, poll)

    async def wait(
        self, task_id: str, authority: Authority, /, *, timeout: float | None = None
    ) -> Snapshot:
        """Wait until the task is terminal and return it.

        Raises:
            TaskTimeout: ``timeout`` seconds passed first (also a ``TimeoutError``); the
                task itself is left alone.
            InvalidInput: a bad ``timeout`` (see :mod:`tasks_core.durations`): nothing
                waited for.
            TypeError, TaskNotFound, StoreUnavailable: as :meth:`get`.
        """
        timeout = check_duration(timeout, "timeout", high=MAX_WAIT_S, allow_zero=True,
                                 allow_none=True)
        try:
            async with asyncio.timeout(timeout):
                async for snapshot in self.watch(task_id, authority):
                    if snapshot.terminal:
                        return snapshot
        except TimeoutError:
            raise TaskTimeout(f"Waited {timeout:g}s; the task is not finished yet") from None
        raise TaskNotFound(task_id)  # pragma: no cover - watch ends only on terminal

    # -- request transitions -------------------------------------------------------------

    async def cancel(self, task_id: str, authority: Authority, /) -> Snapshot:
        """Cancel the task's current run: recorded ``cancelled`` at once; a worker running
        it learns on its next heartbeat (at once in this process). A finished task is left
        as it is.

        Raises:
            TypeError, TaskNotFound: as :meth:`get`.
            AuthorizationError: visible (``visibility="tenant"``) but not a member.
            StoreUnavailable: the store failed.
        """
        snapshot = await self.get(task_id, authority)
        store = self.store
        access = self._access(authority)
        for _ in range(MAX_RACES):
            event = Cancelled(event_id=f"{snapshot.run_id}:cancel")
            try:
                result = await store.transition(snapshot.id, snapshot.revision, event, access)
            except RevisionConflict as exc:
                snapshot = exc.current
                continue
            if result.outcome != "unchanged":
                self._changes.cancelled(snapshot.id, snapshot.run_id)
            return result.snapshot
        raise RevisionConflict(snapshot)

    async def respond(
        self, task_id: str, responses: Mapping[str, Any], authority: Authority, /
    ) -> Transition:
        """Answer outstanding input requests by key (answers to no outstanding key are
        ignored: outcome ``unchanged``).

        Returns:
            The transition: ``applied`` when an answer was accepted.

        Raises:
            TypeError, TaskNotFound: as :meth:`get`.
            InvalidInput: bad keys, non-JSON or oversized answers.
            AuthorizationError: visible but not a member.
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        if not isinstance(responses, Mapping) or not responses:
            raise InvalidInput("responses must be a non-empty dict of answers by key")
        answers = {check_key(k): v for k, v in responses.items()}
        try:
            check_json(answers, what="responses")
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        if json_size(answers) > self.limits.max_input_bytes:
            raise InvalidInput(f"responses must be at most {self.limits.max_input_bytes} bytes")
        snapshot = await self.get(task_id, authority)
        digest = hashlib.sha256(
            json.dumps(answers, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:32]
        access = self._access(authority)
        for _ in range(MAX_RACES):
            event = InputResponsesAccepted(event_id=f"{snapshot.run_id}:respond:{digest}",
                                           responses=answers)
            try:
                result = await self.store.transition(snapshot.id, snapshot.revision, event, access)
            except RevisionConflict as exc:
                snapshot = exc.current
                continue
            if result.outcome == "applied":
                self._work.notify()
                self._changes.notify()
            return result
        raise RevisionConflict(snapshot)

    # -- administration ------------------------------------------------------------------

    async def release(self, task_id: str, authority: Authority, /) -> None:
        """Admin: delete a finished task and its history, freeing its key (System only).

        Raises:
            TypeError: a missing or bare-string authority.
            AuthorizationError: ``authority`` is not ``System``.
            TaskNotFound: unknown (or outside the System's tenant).
            Unavailable: the task is live (cancel it first).
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        if not isinstance(authority, System):
            raise AuthorizationError("release is an admin action: System(...) only")
        snapshot = await self.get(task_id, authority)
        for _ in range(MAX_RACES):
            try:
                await self.store.delete(snapshot.id, expected_revision=snapshot.revision)
            except RevisionConflict as exc:
                snapshot = exc.current
                continue
            self._changes.notify()
            return
        raise RevisionConflict(snapshot)

    async def reap(self, authority: Authority, /, *, limit: int = 1000) -> builtins.list[str]:
        """Admin: delete up to ``limit`` expired tasks now (workers also do it periodically).

        Raises:
            TypeError, AuthorizationError: as :meth:`release`.
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        if not isinstance(authority, System):
            raise AuthorizationError("reap is an admin action: System(...) only")
        store = await self._opened()
        return await store.reap(limit)

    # -- workers and the sync facade -----------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A :class:`~tasks_core.runtime.worker.Worker` of this app (``async with`` it, or
        ``await worker.run()``)."""
        from tasks_core.runtime.worker import Worker

        return Worker(self, **options)

    async def run_worker(self, **options: Any) -> None:
        """Run a worker until it is shut down or cancelled (see ``Worker`` for options)."""
        await self.worker(**options).run()

    @property
    def sync(self) -> SyncApp:
        """The blocking facade for sync callers (Django views, Flask, scripts)."""
        if self._sync is None:
            from tasks_core.runtime._sync import SyncApp

            self._sync = SyncApp(self)
        return self._sync


def _duration(value: float | _Unset | None, what: str, high: float, *,
              allow_zero: bool = False) -> float | _Unset | None:
    """A submit option as given: ``UNSET`` or ``None`` as they are, else checked seconds.

    Raises:
        InvalidInput: see :func:`~tasks_core.durations.check_duration`.
    """
    if isinstance(value, _Unset):
        return value
    return check_duration(value, what, high=high, allow_zero=allow_zero, allow_none=True)


def _pick(value: float | _Unset | None, default: float | None) -> float | None:
    return default if isinstance(value, _Unset) else value


def _status(value: TaskStatus | str) -> TaskStatus:
    try:
        return TaskStatus(value)
    except (ValueError, TypeError):
        raise InvalidInput(f"unknown status {value!r}") from None
