"""The data model: what a store keeps and what crosses the store boundary.

Every model is frozen and JSON round-trippable (``model_dump(mode="json")`` then
``model_validate``). Payloads (``input``, ``result``, requests and answers) are plain
JSON, checked by :func:`tasks_core._json.check_json`. Persisted enum values are strings
and are never renamed.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import AfterValidator, BeforeValidator, Field, StrictStr, model_validator

from tasks_core._errors_base import InvalidInput
from tasks_core._json import check_json, check_text
from tasks_core._model import Model, built, replaced
from tasks_core._store_models import StoreCapabilities, StoreLimits
from tasks_core._trace_context import check_trace_context
from tasks_core.authority import MAX_ID_BYTES, Owner, check_key, check_name
from tasks_core.clock import utc
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S, Seconds, check_duration
from tasks_core.reasons import CancelReason
from tasks_core.sizes import MAX_ATTEMPTS, MAX_DELIVERIES, check_attempts

__all__ = [
    "Claim",
    "ClaimInfo",
    "ErrorInfo",
    "JSONValue",
    "Lease",
    "NewTask",
    "Progress",
    "RetryPolicy",
    "Snapshot",
    "StoreCapabilities",
    "StoreLimits",
    "TaskQuery",
    "TaskStatus",
    "Work",
    "built",
    "check_retry",
    "detached",
    "replaced",
]

MAX_MESSAGE_CHARS = 2048


def _json(value: Any) -> Any:
    return check_json(value)


JSONValue = Annotated[Any, AfterValidator(_json)]
"""A JSON-safe value (see :mod:`tasks_core._json`)."""


def _cap(limit: int) -> BeforeValidator:
    def cut(value: Any) -> Any:
        return check_text(value[:limit], what="text") if isinstance(value, str) else value

    return BeforeValidator(cut)


def _named(what: str) -> AfterValidator:
    def validate(value: str) -> str:
        try:
            return check_name(value, what=what)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(validate)


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("must be printable text")
    return value


def _task_id(value: str) -> str:
    if not value or len(value.encode()) > MAX_ID_BYTES or not value.isprintable():
        raise ValueError(f"task id must be 1..{MAX_ID_BYTES} printable bytes")
    return value


def _key(value: str) -> str:
    try:
        return check_key(value)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


Message = Annotated[str, _cap(MAX_MESSAGE_CHARS)]
"""Stored text, truncated to 2048 characters (after the policy's redactor)."""
Name = Annotated[str, _named("name")]
QueueName = Annotated[str, _named("queue")]
TaskId = Annotated[str, AfterValidator(_task_id)]
Key = Annotated[str, AfterValidator(_key)]
Instant = Annotated[datetime, AfterValidator(utc)]
MIN_PRIORITY, MAX_PRIORITY = -100, 100
Priority = Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY, strict=True)]
"""A task's priority: an integer in [-100, 100], 0 by default."""


class TaskStatus(StrEnum):
    """Where a task stands (persisted values: never rename).

    ``running``, ``claimed`` and ``scheduled`` are derived, never stored (a store keeps
    ``pending``): a non-terminal, non-waiting task with a live lease is ``running``, or
    ``claimed`` while the lease is held ahead of a free slot and its handler has not
    started; a pending task whose ``run_at`` lies ahead is ``scheduled``.
    """

    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    CLAIMED = "claimed"
    WAITING_INPUT = "waiting_input"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether no event can change the task any more."""
        return self in _TERMINAL

    @property
    def stored(self) -> TaskStatus:
        """The status a store keeps for this one (``pending`` for a derived status)."""
        return TaskStatus.PENDING if self in _DERIVED else self


_TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
_DERIVED = frozenset({TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.SCHEDULED})


class RetryPolicy(Model):
    """How many attempts a task gets and how long to wait between them.

    ``attempts`` counts every run, the first included: ``attempts=1`` never retries.
    The n-th retry (n >= 1) waits ``delay_s`` (fixed) or ``min(delay_s * 2**(n-1), cap_s)``
    (exponential). Build one with :meth:`none`, :meth:`fixed` or :meth:`exponential`; one
    built by hand is checked where a caller gives it (:func:`check_retry`).
    """

    kind: Literal["none", "fixed", "exponential"] = "none"
    attempts: int = Field(default=1, ge=1, le=MAX_ATTEMPTS, strict=True)
    delay_s: float = Field(default=0.0, ge=0, le=MAX_WAIT_S, strict=True, allow_inf_nan=False)
    cap_s: float | None = Field(default=None, ge=0, le=MAX_WAIT_S, strict=True,
                                allow_inf_nan=False)

    @classmethod
    def none(cls) -> RetryPolicy:
        """Never retry."""
        return cls()

    @classmethod
    def fixed(cls, delay: Seconds, *, attempts: int) -> RetryPolicy:
        """Retry after the same ``delay`` seconds, up to ``attempts`` runs in all.

        Raises:
            InvalidInput: a bad ``delay`` (see :mod:`tasks_core.durations`) or ``attempts``.
        """
        delay_s = check_duration(delay, "delay", high=MAX_WAIT_S, allow_zero=True)
        return cls(kind="fixed", attempts=check_attempts(attempts), delay_s=delay_s)

    @classmethod
    def exponential(
        cls, base: Seconds, *, attempts: int, cap: Seconds | None = None
    ) -> RetryPolicy:
        """Retry after ``base``, ``2*base``, ``4*base``… seconds (at most ``cap``).

        Raises:
            InvalidInput: a bad ``base`` or ``cap`` (see :mod:`tasks_core.durations`), a
                ``cap`` below ``base`` (:func:`check_retry`), or a bad ``attempts``.
        """
        base_s = check_duration(base, "base", high=MAX_WAIT_S, allow_zero=True)
        cap_s = check_duration(cap, "cap", high=MAX_WAIT_S, allow_zero=True, allow_none=True)
        return check_retry(cls(kind="exponential", attempts=check_attempts(attempts),
                               delay_s=base_s, cap_s=cap_s))

    def allows_retry(self, retry_count: int) -> bool:
        """Whether a run that has already been retried ``retry_count`` times may retry again."""
        return self.kind != "none" and retry_count + 1 < self.attempts

    def delay_for(self, retry_number: int) -> timedelta:
        """The wait before retry number ``retry_number`` (1-based), whole milliseconds."""
        if self.kind == "exponential":
            seconds = self.delay_s * 2 ** min(retry_number - 1, 64)
            if self.cap_s is not None:
                seconds = min(seconds, self.cap_s)
        elif self.kind == "fixed":
            seconds = self.delay_s
        else:
            seconds = 0.0
        return timedelta(milliseconds=round(min(seconds, MAX_WAIT_S) * 1000))


def check_retry(policy: object, what: str = "retry") -> RetryPolicy:
    """Return ``policy`` if a caller may give it (``@app.task``, ``submit``, a bulk item,
    ``RetryPolicy.exponential``): a :class:`RetryPolicy` — never a dict to coerce — that
    does what it says: kind ``"none"`` only as :meth:`RetryPolicy.none` builds it (with
    ``attempts`` or a delay it would never retry), a cap only on an exponential policy,
    and at least its base delay (below it, the cap would replace every delay). Only
    where a caller gives one: a stored record decodes whatever policy it holds.

    Raises:
        InvalidInput: naming ``what`` and the rule.
    """
    if not isinstance(policy, RetryPolicy):
        raise InvalidInput(f"{what} must be a RetryPolicy (RetryPolicy.fixed(...), "
                           f".exponential(...) or .none()), not {type(policy).__name__}")
    if policy.kind == "none" and policy != RetryPolicy():
        raise InvalidInput(f"{what}: kind 'none' never retries; use RetryPolicy.fixed(...) "
                           "or .exponential(..., attempts=3)")
    if policy.cap_s is not None and policy.kind != "exponential":
        raise InvalidInput(f"{what}: a cap applies to exponential delays only")
    if policy.cap_s is not None and policy.cap_s < policy.delay_s:
        raise InvalidInput(f"{what}: cap ({policy.cap_s:g}s) must be at least the base delay "
                           f"({policy.delay_s:g}s)")
    return policy


class Work(Model):
    """What to run: serializable, so any process can run it after a restart."""

    name: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable)]
    input: JSONValue = None
    idempotency_key: StrictStr | None = Field(default=None, max_length=512)
    retry_policy: RetryPolicy = RetryPolicy()
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_WAIT_S, strict=True,
                                    allow_inf_nan=False)
    max_deliveries: int = Field(default=25, ge=1, le=MAX_DELIVERIES, strict=True)
    trace_context: Annotated[dict[str, str] | None, AfterValidator(check_trace_context)] = Field(
        default=None, exclude_if=lambda carrier: carrier is None)
    """The W3C trace context of the submit (``traceparent``, ``tracestate``), set only
    while telemetry is enabled (:mod:`tasks_core.telemetry`); written only when set."""


class ErrorInfo(Model):
    """A stored failure: the error type name and its (redacted, capped) message."""

    type: Annotated[str, _cap(256)]
    message: Message


class Progress(Model):
    """Progress of the current run, written by the lease holder; not revisioned."""

    value: float = Field(ge=0, le=100, allow_inf_nan=False, strict=True)
    message: Annotated[str | None, _cap(1024)] = None


class ClaimInfo(Model):
    """The visible part of the current (or last) lease. The token never leaves the store.

    Attributes:
        ended: the holder released the lease or wrote a terminal/retry event.
        recovered: this claim took over a lease that expired without ending (a crashed or
            stalled worker), which ``recover="fail"`` turns into a failure.
        held: claimed ahead of a free slot (``claim_next(start=...)``): the handler has
            not started, and the task reads ``claimed``; the first renew clears it.
    """

    worker_id: str
    generation: int
    expires_at: Instant
    ended: bool = False
    recovered: bool = False
    held: bool = Field(default=False, exclude_if=lambda held: not held)
    """(Written only when true: a claim started at once stores what it always stored.)"""


class Lease(Model):
    """The right to run one task: valid while token, generation and worker match exactly
    and, by the store clock, ``expires_at`` has not passed."""

    task_id: TaskId
    worker_id: Annotated[str, Field(min_length=1, max_length=256)]
    token: Annotated[str, Field(min_length=1, max_length=256)]
    generation: int = Field(ge=1)
    expires_at: Instant


class Snapshot(Model):
    """The task aggregate: the unit of compare-and-set (see docs/design.md, Model and ids)."""

    id: TaskId
    tenant: Name
    owner: Owner | None
    watchers: tuple[Owner, ...] = ()
    queue: QueueName = "default"
    work: Work
    status: TaskStatus = TaskStatus.PENDING
    revision: int = Field(default=0, ge=0)
    run_id: str
    progress: Progress | None = None
    result: JSONValue = None
    error: ErrorInfo | None = None
    cancel_reason: CancelReason | None = None
    retry_count: int = Field(default=0, ge=0)
    retry_at: Instant | None = None
    last_failure: ErrorInfo | None = None
    deliveries: int = Field(default=0, ge=0)
    input_requests: dict[str, JSONValue] = Field(default_factory=dict)
    input_history: tuple[str, ...] = ()
    accepted_input_responses: dict[str, JSONValue] = Field(default_factory=dict)
    claim: ClaimInfo | None = None
    lease_generation: int = Field(default=0, ge=0)
    ttl_s: float | None = None
    retention_s: float | None = None
    created_at: Instant
    updated_at: Instant
    started_at: Instant | None = None
    finished_at: Instant | None = None
    expires_at: Instant | None = None
    # Written only when set, so other tasks' stored bytes are what they always were:
    run_at: Instant | None = Field(default=None, exclude_if=lambda run_at: run_at is None)
    priority: Priority = Field(default=0, exclude_if=lambda priority: priority == 0)

    @property
    def terminal(self) -> bool:
        """Whether the task has finished (completed, failed or cancelled)."""
        return self.status.terminal

    def expired(self, now: datetime) -> bool:
        """Whether the task's ``expires_at`` has passed at ``now``."""
        return self.expires_at is not None and now >= self.expires_at

    def lease_live(self, now: datetime) -> bool:
        """Whether a lease on the task is live at ``now`` (not ended, not expired).

        ``ended`` counts even while ``expires_at`` is still ahead: an event's commit instant
        may lie a millisecond past the store clock (``rules.next_commit_time``).
        """
        return self.claim is not None and not self.claim.ended and now < self.claim.expires_at


def detached(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with copies of its own of the JSON values a caller can change in place
    (the input and the trace context, the result, input requests and accepted answers:
    every mutable value a snapshot holds; the rest is frozen), or ``snapshot`` itself when
    it holds none. A store that keeps snapshot objects (the memory store's rows, the SQL
    store's decode cache) keeps this of each snapshot it writes, and hands out no object it
    keeps but through this, so that nothing a caller does to a snapshot it gave or was
    handed reaches what is kept."""
    changes: dict[str, Any] = {}
    work = snapshot.work
    work_changes: dict[str, Any] = {}
    if isinstance(work.input, (dict, list)):
        work_changes["input"] = copy.deepcopy(work.input)
    if work.trace_context is not None:
        work_changes["trace_context"] = dict(work.trace_context)
    if work_changes:
        changes["work"] = replaced(work, **work_changes)
    if isinstance(snapshot.result, (dict, list)):
        changes["result"] = copy.deepcopy(snapshot.result)
    if snapshot.input_requests:
        changes["input_requests"] = copy.deepcopy(snapshot.input_requests)
    if snapshot.accepted_input_responses:
        changes["accepted_input_responses"] = copy.deepcopy(snapshot.accepted_input_responses)
    return replaced(snapshot, **changes) if changes else snapshot


def _in_tenant(owners: tuple[Owner, ...], tenant: str) -> bool:
    return all(o.tenant == tenant for o in owners)


class NewTask(Model):
    """A task to create: everything the submitter decides. The store decides the rest."""

    id: TaskId
    tenant: Name
    owner: Owner | None
    watchers: tuple[Owner, ...] = ()
    queue: QueueName = "default"
    work: Work
    ttl_s: float | None = Field(default=None, gt=0, le=MAX_KEEP_S, strict=True,
                                allow_inf_nan=False)
    retention_s: float | None = Field(default=None, ge=0, le=MAX_KEEP_S, strict=True,
                                      allow_inf_nan=False)
    delay_s: float | None = Field(default=None, ge=0, le=MAX_WAIT_S, strict=True,
                                  allow_inf_nan=False)
    """Available this many seconds after the store's ``now`` at creation."""
    run_at: Instant | None = None
    """Available from this instant (an earlier one than the creation: at once)."""
    priority: Priority = 0

    @model_validator(mode="after")
    def _same_tenant(self) -> NewTask:
        if self.delay_s is not None and self.run_at is not None:
            raise ValueError("give delay_s or run_at, not both")
        if self.owner is not None and self.owner.tenant != self.tenant:
            raise ValueError("owner must belong to the task's tenant")
        if not _in_tenant(self.watchers, self.tenant):
            raise ValueError("watchers must belong to the task's tenant")
        return self


class TaskQuery(Model):
    """A listing filter. ``tenant=None`` lists every tenant (System only).

    Keyset pagination on id: pass the last id of a page as ``after``; a page shorter than
    ``limit`` is the last one. ``after`` is checked as a task id is (1..1024 bytes of
    printable text), so no store is handed a cursor it cannot compare.
    """

    tenant: Name | None
    principal: Owner | None = None
    statuses: frozenset[TaskStatus] | None = None
    queue: QueueName | None = None
    after: TaskId | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class Claim(NamedTuple):
    """A successful claim: the task as the worker sees it, and the lease to run it."""

    snapshot: Snapshot
    lease: Lease


def new_run_id() -> str:
    """A fresh run id."""
    import secrets

    return secrets.token_hex(8)
