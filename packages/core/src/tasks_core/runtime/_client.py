"""The calls of an ``App`` that change tasks: ``submit``, ``submit_many``, ``cancel``,
``respond``, and the admin calls ``release`` and ``reap``.

Every client call takes the caller's authority (``Owner(...)`` or ``System(...)``)
positionally, with no default: leaving it out is a ``TypeError``, and so is a bare string.
A write that loses a race re-reads and tries again, at most ``MAX_RACES`` times. Each
write made here notifies this process's watchers and workers at once
(:class:`~tasks_core.runtime._notify.Notices`).
"""

from __future__ import annotations

import builtins
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from itertools import islice
from typing import Any, Literal

from tasks_core import rules, telemetry
from tasks_core._json import check_payload
from tasks_core.authority import (
    DEFAULT_TENANT,
    Authority,
    Owner,
    System,
    check_key,
    check_name,
    require_authority,
)
from tasks_core.definitions import (
    DEFAULT_QUEUE,
    Submitted,
    TaskDef,
    check_priority,
    check_task_name,
)
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S, Seconds, check_duration, check_instant
from tasks_core.errors import (
    AuthorizationError,
    CapabilityNotSupported,
    InvalidInput,
    RevisionConflict,
)
from tasks_core.events import Cancelled, InputResponsesAccepted, Transition
from tasks_core.items import SubmitItem
from tasks_core.models import NewTask, RetryPolicy, Snapshot, Work, check_retry
from tasks_core.options import UNSET, Unset
from tasks_core.runtime._bulk import refused
from tasks_core.runtime._bulk import submit_many as _submit_many
from tasks_core.runtime._client_reads import ClientReads
from tasks_core.runtime._submit import MAX_RACES, check_input, check_watchers, new_task_id
from tasks_core.runtime._submit import submit as _submit
from tasks_core.sizes import check_deliveries
from tasks_core.store import TaskStore
from tasks_core.storekit import MAX_BATCH

__all__ = ["Client"]


class Client(ClientReads):
    """The whole client API of an :class:`~tasks_core.App`: its reads, and the calls that
    change tasks."""

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
        ttl: Seconds | Unset | None = UNSET,
        retention: Seconds | Unset | None = UNSET,
        retry: RetryPolicy | None = None,
        timeout: Seconds | Unset | None = UNSET,
        max_deliveries: int | None = None,
        idempotency_key: str | None = None,
        transaction: Any = None,
        delay: Seconds | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> Submitted:
        """Submit a task, or join the live run of its key, or start a new run of it.

        Args:
            task: a registered task, or a task name (for clients without the handler).
            input: keyword arguments of the handler (JSON, at most
                ``limits.max_input_bytes``), or ``None``.
            authority: the submitter.
            key: dedup key. ``dedup="owner"``: id ``"<user>::<key>"`` (per owner and
                tenant); ``"global"``: the key itself. No key: a random id (``dedup`` left).
            watchers: principals of the same tenant granted read/cancel/respond.
            queue: a declared queue (default: the task's).
            ttl, retention, retry, timeout, max_deliveries: override the task's defaults.
            idempotency_key: handed to the handler for its side effects.
            delay: seconds (0 to a leap year) after the store's clock reads the submit
                before any worker may start the task; it reads ``scheduled`` until then.
            run_at: an aware datetime from which the task may start (an instant already
                past: at once). Not both; its ``ttl`` counts from then.
            priority: -100..100 (default: the task's, else 0); ``claim_next`` serves the
                highest first, then the earliest available instant, then the id.
            transaction: your own open transaction (stores with capability
                ``transactional_submit``; SQL: the ``AsyncConnection`` of your
                transaction): the task is created or replaced inside it, so it exists if
                and only if your transaction commits. Joining a live run of the key creates
                nothing: the watcher it grants is written on its own.

        Returns:
            ``Submitted`` with the id and ``outcome`` ``created``/``joined``/``replaced``.

        Raises:
            TypeError: a missing or bare-string authority.
            InvalidInput: bad input, key, queue, option, watcher, ``delay`` or ``run_at``
                (both given, a naive datetime) or ``priority``; nothing written.
            AuthorizationError: the queue authorizer said no; or joining a task you do not
                own without the watch authorizer's approval.
            CapacityExceeded: a store capacity or ``max_runs_per_owner``.
            CapabilityNotSupported: ``transaction`` given to a store without
                ``transactional_submit``; nothing written.
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        new = self._new_task(
            task, input, authority, key=key, dedup=dedup, watchers=watchers, queue=queue,
            ttl=ttl, retention=retention, retry=retry, timeout=timeout,
            max_deliveries=max_deliveries, idempotency_key=idempotency_key, delay=delay,
            run_at=run_at, priority=priority,
        )
        store = await self._submit_store(transaction)
        span = None if telemetry.active is None else telemetry.active.submit(new)
        try:
            submitted = await _submit(store, self.policy, self.limits,
                                      new if span is None else span.new, authority,
                                      keyed=key is not None, transaction=transaction)
        except BaseException as exc:
            if span is not None:
                span.end(None, exc)
            raise
        if span is not None:
            span.end(submitted.outcome)
        self.notices.work.notify()
        self.notices.changes.notify()
        return submitted

    async def submit_many(
        self,
        items: Iterable[SubmitItem | Mapping[str, Any]],
        authority: Authority,
        /,
        *,
        transaction: Any = None,
    ) -> builtins.list[Submitted]:
        """Submit several tasks, each decided exactly as :meth:`submit` would, in order.

        Every item is checked first, as ``submit`` checks its arguments; a refused item
        refuses the batch, naming the item (``"item 3: ..."``), before anything is
        written. On a store with capability ``batch_create`` the new tasks are written in
        one atomic step and one commit, ``max_runs_per_owner`` and the store's capacity
        limits held for the batch as a whole: a refused batch writes nothing. A key whose
        task exists joins or re-runs it as ``submit`` would, written after the new tasks,
        each on its own (an id given twice: the later item joins the earlier one's task).
        Without the capability each item is submitted in turn (a refusal stops the loop).

        Args:
            items: :class:`~tasks_core.SubmitItem` (or dicts of its fields), at most
                1000, never read past the 1001st: split a longer list (each call one batch).
            authority: the submitter of every item.
            transaction: as for :meth:`submit`: the new tasks (and re-runs) are written
                inside it.

        Returns:
            One ``Submitted`` per item, in order.

        Raises:
            TypeError: a missing or bare-string authority.
            InvalidInput: not a list of items, more than 1000 (refused at the 1001st),
                or an item ``submit`` would refuse (named by its index); nothing written.
            AuthorizationError: an item's queue, or joining a task you may not join;
                nothing written (unless a race made the task appear meanwhile).
            Unavailable: with ``transaction=``, a join granting watchers; nothing written.
            CapacityExceeded: for the batch, nothing written; at a re-run or a loop's
                item, ``.stored`` holds what the batch submitted.
            CapabilityNotSupported: as for :meth:`submit`; nothing written.
            StoreUnavailable: the store failed; with ``batch_create``, nothing of the
                new tasks written.
        """
        authority = require_authority(authority)
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise InvalidInput("items must be a list of SubmitItem (or dicts of its fields)")
        if len(given := list(islice(items, MAX_BATCH + 1))) > MAX_BATCH:  # read no further
            raise InvalidInput(f"submit_many takes at most {MAX_BATCH} items; split the list")
        checked = []
        for index, value in enumerate(given):
            try:
                item = SubmitItem.of(value)
                new = self._new_task(item.task, item.input, authority, **item.options())
            except (InvalidInput, AuthorizationError) as exc:
                raise refused(index, exc) from None
            except TypeError as exc:  # a field of the wrong type that nothing checks
                raise InvalidInput(f"item {index}: {exc}") from None
            checked.append((new, item.key is not None))
        store = await self._submit_store(transaction)
        spans = [] if telemetry.active is None else [telemetry.active.submit(new)
                                                     for new, _ in checked]
        if spans:
            checked = [(span.new, keyed) for span, (_, keyed) in zip(spans, checked, strict=True)]
        try:
            submitted = await _submit_many(store, self.policy, self.limits, checked, authority,
                                          transaction=transaction)
        except BaseException as exc:
            for span in spans:
                span.end(None, exc)
            raise
        for span, done in zip(spans, submitted if spans else (), strict=True):
            span.end(done.outcome)
        if submitted:
            self.notices.work.notify()
            self.notices.changes.notify()
        return submitted

    async def _submit_store(self, transaction: Any) -> TaskStore:
        """The store, opened, once it can take ``transaction``.

        Raises:
            CapabilityNotSupported: ``transaction`` given to a store without
                ``transactional_submit``.
        """
        store = await self.open()
        if transaction is not None and not store.capabilities.transactional_submit:
            raise CapabilityNotSupported(
                "This store cannot create a task inside your transaction (capability "
                "'transactional_submit' is off); submit after your commit instead")
        return store

    def _new_task(
        self,
        task: TaskDef | str,
        input: Mapping[str, Any] | None,
        authority: Authority,
        *,
        key: str | None,
        dedup: Literal["owner", "global"],
        watchers: Sequence[Owner],
        queue: str | None,
        ttl: Seconds | Unset | None,
        retention: Seconds | Unset | None,
        retry: RetryPolicy | None,
        timeout: Seconds | Unset | None,
        max_deliveries: int | None,
        idempotency_key: str | None,
        delay: Seconds | None,
        run_at: datetime | None,
        priority: int | None,
    ) -> NewTask:
        """The task one ``submit`` call asks for (the one path from arguments to a
        ``NewTask``, of ``submit`` and ``submit_many``); nothing is read or written.

        Raises:
            InvalidInput, AuthorizationError: as :meth:`submit`.
        """
        ttl = _duration(ttl, "ttl", MAX_KEEP_S)
        retention = _duration(retention, "retention", MAX_KEEP_S, allow_zero=True)
        timeout = _duration(timeout, "timeout", MAX_WAIT_S)
        delay_s = check_duration(delay, "delay", high=MAX_WAIT_S, allow_zero=True,
                                 allow_none=True)
        run_at = check_instant(run_at, "run_at", allow_none=True)
        if delay_s is not None and run_at is not None:
            raise InvalidInput("give delay or run_at, not both")
        if priority is not None:
            priority = check_priority(priority)
        definition = self._definition(task)
        name = definition.name if definition else task
        if not isinstance(name, str):
            raise InvalidInput("task must be a registered task or a task name")
        check_task_name(name)
        queue_name = (definition.queue if definition else DEFAULT_QUEUE) if queue is None else queue
        if not isinstance(queue_name, str):
            raise InvalidInput("queue must be the name of a declared queue")
        if queue_name not in self._queues:
            check_name(queue_name, what="queue")  # an empty name says so, not "undeclared"
            raise InvalidInput(f"queue {queue_name!r} is not declared")
        self.policy.check_queue(queue_name, authority)
        data = check_input(input, definition, self.limits)
        tenant = authority.tenant or DEFAULT_TENANT
        owner = authority if isinstance(authority, Owner) else None
        task_id = new_task_id(key, owner, dedup=dedup, tenant=tenant)
        granted = check_watchers(watchers, tenant, owner)
        default_retry = definition.retry if definition else RetryPolicy.none()
        work = Work(
            name=name,
            input=data,
            idempotency_key=idempotency_key,
            retry_policy=default_retry if retry is None else check_retry(retry),
            timeout_s=_pick(timeout, definition.timeout if definition else None),
            max_deliveries=(check_deliveries(max_deliveries) if max_deliveries is not None
                            else definition.max_deliveries if definition else 25),
        )
        return NewTask(
            id=task_id,
            tenant=tenant,
            owner=owner,
            watchers=granted,
            queue=queue_name,
            work=work,
            ttl_s=_pick(ttl, definition.ttl if definition else None),
            retention_s=_pick(retention, definition.retention if definition else self.retention),
            delay_s=delay_s,
            run_at=run_at,
            priority=(priority if priority is not None
                      else definition.priority if definition else 0),
        )

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
                self.notices.changes.cancelled(snapshot.id, snapshot.run_id)
                if result.outcome == "applied" and telemetry.active is not None:
                    telemetry.active.cancelled_task(result.snapshot)
            return result.snapshot
        raise RevisionConflict(snapshot)

    async def respond(
        self, task_id: str, responses: Mapping[str, Any], authority: Authority, /
    ) -> Transition:
        """Answer outstanding input requests by key (answers to no outstanding key are
        ignored: outcome ``unchanged``). The same answers sent again are ``duplicate`` until
        the run asks another question; then they answer it too.

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
        check_payload(answers, "responses", self.limits.max_input_bytes)
        snapshot = await self.get(task_id, authority)
        digest = hashlib.sha256(
            json.dumps(answers, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:32]
        access = self._access(authority)
        for _ in range(MAX_RACES):
            asked = len(snapshot.input_history)  # a new question: a new event (docstring)
            event = InputResponsesAccepted(
                event_id=f"{snapshot.run_id}:respond:{asked}:{digest}", responses=answers)
            try:
                result = await self.store.transition(snapshot.id, snapshot.revision, event, access)
            except RevisionConflict as exc:
                snapshot = exc.current
                continue
            if result.outcome == "applied":
                self.notices.work.notify()
                self.notices.changes.notify()
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
            self.notices.changes.notify()
            return
        raise RevisionConflict(snapshot)

    async def reap(self, authority: Authority, /, *, limit: int = 1000) -> builtins.list[str]:
        """Admin: delete up to ``limit`` expired tasks now, of every tenant (workers also
        do it periodically); their ids.

        Raises:
            TypeError: as :meth:`release`.
            AuthorizationError: not ``System()`` — an owner, or the operator of one tenant
                (``System("acme")``): the sweep spans every tenant and names what it deleted.
            InvalidInput: ``limit`` is not a positive integer (before the store is opened).
            StoreUnavailable: the store failed.
        """
        authority = require_authority(authority)
        if not isinstance(authority, System) or authority.tenant is not None:
            raise AuthorizationError("reap deletes the expired tasks of every tenant: "
                                     "System() only (not an owner, not System(tenant))")
        rules.check_limit(limit)
        store = await self.open()
        return await store.reap(limit)


def _duration(value: Seconds | Unset | None, what: str, high: float, *,
              allow_zero: bool = False) -> float | Unset | None:
    """A submit option as given: ``UNSET`` or ``None`` as they are, else checked seconds.

    Raises:
        InvalidInput: see :func:`~tasks_core.durations.check_duration`.
    """
    if isinstance(value, Unset):
        return value
    return check_duration(value, what, high=high, allow_zero=allow_zero, allow_none=True)


def _pick(value: float | Unset | None, default: float | None) -> float | None:
    return default if isinstance(value, Unset) else value

