"""What an application declares: tasks (``@app.task``), queues, and the ``Retry`` signal.

A :class:`TaskDef` is what ``@app.task`` returns. It is still callable like the function it
wraps (handy in unit tests) and knows its defaults: queue, retry policy, timeout, delivery
limit, ttl and retention. :class:`Submitted` is what submitting one answers. Nothing here
depends on the runtime: a task knows its app only as a :class:`Submitter`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Unpack

from tasks_core.arguments import MAX_RUNNING
from tasks_core.authority import Authority, check_name
from tasks_core.durations import MAX_KEEP_S, MAX_WAIT_S, Seconds, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.models import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    RetryPolicy,
    Snapshot,
    Work,
    check_retry,
)
from tasks_core.options import UNSET, SubmitOptions
from tasks_core.sizes import check_deliveries, check_limit
from tasks_core.storekit import QueueLimits

__all__ = ["DEFAULT_QUEUE", "UNSET", "Queue", "Retry", "Submitted", "Submitter", "TaskDef",
           "check_priority", "check_task_name", "is_async_callable"]

DEFAULT_QUEUE = "default"
_MOST_BINDS = 64
"""The most key sets a task remembers as binding to its handler."""


class Retry(Exception):
    """Return it or raise it from a handler to ask for another attempt.

    The task's retry policy decides whether there is one and when (the store computes
    ``retry_at`` from its own clock); without attempts left the task fails with this
    message.

    Args:
        message: why (stored as the failure message, after the policy's redactor).
        error: the error type name stored (default ``"Retry"``), a metric label too: a
            Python identifier, dotted parts allowed (``"RateLimited"``,
            ``"partner.HTTP503"``), at most 128 characters — never free text with ids.

    Raises:
        InvalidInput: ``error`` is not such a name.
    """

    def __init__(self, message: str = "retry requested", *, error: str = "Retry") -> None:
        if not (isinstance(error, str) and len(error) <= MAX_ERROR_NAME
                and all(part.isidentifier() and part.isascii() for part in error.split("."))):
            raise InvalidInput("Retry(error=...) error must be an error type name (a Python "
                               f"identifier, dotted parts allowed, at most {MAX_ERROR_NAME} "
                               f"characters), not {error!r:.80}")
        super().__init__(message)
        self.message = message
        self.error = error


MAX_ERROR_NAME = 128
"""The longest ``Retry(error=…)`` name."""


@dataclass(frozen=True)
class Submitted:
    """What ``submit`` did.

    Attributes:
        id: the task id (derived from the key, or random).
        run_id: the run this submit refers to.
        outcome: ``created`` (a new task), ``joined`` (a live run of the key: the submitter
            is now a watcher) or ``replaced`` (a new run of a finished key).
        snapshot: the task right after the submit.
    """

    id: str
    run_id: str
    outcome: Literal["created", "joined", "replaced"]
    snapshot: Snapshot


class Submitter(Protocol):
    """What :meth:`TaskDef.submit` needs of the app a task is registered with (an ``App``
    is one): its ``submit``."""

    @property
    def submit(self) -> Callable[..., Awaitable[Submitted]]: ...


def check_priority(priority: object, what: str = "priority") -> int:
    """Validate a task priority: an integer in [-100, 100] (a size's rule:
    :func:`~tasks_core.sizes.check_limit`), returned as a plain ``int``.

    Raises:
        InvalidInput: anything else, naming ``what``.
    """
    return check_limit(priority, minimum=MIN_PRIORITY, maximum=MAX_PRIORITY, what=what)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` answers an awaitable by its definition: an ``async def``, or
    an object whose ``__call__`` is one (a handler runs on the loop; a policy hook, which
    is called without ``await``, is refused)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def check_task_name(name: object) -> None:
    """Refuse a task name, registered or submitted, that is blank or begins or ends with
    whitespace (it reads as another name, and no worker would serve it); the rest of the
    rule (a string of 1–256 printable characters) is ``Work.name``'s.

    Raises:
        InvalidInput: such a name.
    """
    if isinstance(name, str) and (not name.strip() or name != name.strip()):
        raise InvalidInput("task name must not be blank nor begin or end with whitespace")


@dataclass(frozen=True)
class Queue:
    """A declared queue.

    Attributes:
        name: the queue name (validated like a user id).
        concurrency: at most this many runs of the queue at once in one worker (``1`` =
            sequential, FIFO in that worker); ``None``: only the worker's total applies.
        max_running: at most this many runs of the queue at once across *every* worker
            and process (live leases, counted in the claim's atomic step).
        rate: ``(claims, seconds)``: at most ``claims`` claims of the queue in any window
            of ``seconds`` across every worker, on the store clock (claims, not starts).
        exclusive: the old spelling of ``max_running=1`` (kept: both mean the same).

    A worker serving a queue with ``max_running`` or ``rate`` needs a store with the
    ``queue_limits`` capability (``exclusive`` alone: ``exclusive_queues``); it refuses to
    start otherwise.

    Raises:
        InvalidInput: a bad name, concurrency or limit, or ``exclusive`` with another
            ``max_running``.
    """

    name: str
    concurrency: int | None = None
    exclusive: bool = False
    max_running: int | None = None
    rate: tuple[int, Seconds] | None = None

    def __post_init__(self) -> None:
        check_name(self.name, what="queue")
        if self.concurrency is not None:
            object.__setattr__(self, "concurrency", check_limit(
                self.concurrency, maximum=MAX_RUNNING, what="queue concurrency"))
        if not isinstance(self.exclusive, bool):
            raise InvalidInput("exclusive must be True or False")
        if self.exclusive:
            if self.max_running is not None and check_limit(
                    self.max_running, maximum=MAX_RUNNING, what="max_running") != 1:
                raise InvalidInput("an exclusive queue is max_running=1; give one of them")
            object.__setattr__(self, "max_running", 1)
        elif self.max_running == 1 and not isinstance(self.max_running, bool):
            object.__setattr__(self, "exclusive", True)
        limits = self.limits
        if limits is not None:
            object.__setattr__(self, "max_running", limits.max_running)
            object.__setattr__(self, "rate", limits.rate)

    @property
    def limits(self) -> QueueLimits | None:
        """The fleet-wide limits the store keeps for this queue (``None``: none)."""
        if self.max_running is None and self.rate is None:
            return None
        return QueueLimits(max_running=self.max_running, rate=self.rate)


@dataclass(frozen=True)
class TaskDef:
    """A registered task: the handler and its defaults.

    Attributes:
        name: the registered name stored in ``Work.name`` (default: the function's name).
        fn: the handler, ``fn(ctx, **input)``; ``async def`` runs on the worker's loop,
            ``def`` in a thread.
        queue: default queue.
        retry: default retry policy.
        timeout: default timeout in seconds (``None``: none).
        max_deliveries: default delivery limit.
        ttl: default time to live in seconds from creation (``None``: none).
        retention: seconds a finished task is kept (``None``: the app default).
        priority: default priority, -100..100 (``claim_next`` serves higher first).

    Raises:
        InvalidInput: a handler that is not callable or cannot take the context first, a
            bad name, queue name, retry policy (:func:`~tasks_core.models.check_retry`),
            duration (:func:`~tasks_core.durations.check_duration`), priority or delivery
            limit.
    """

    name: str
    fn: Callable[..., Any]
    queue: str = DEFAULT_QUEUE
    retry: RetryPolicy = field(default_factory=RetryPolicy.none)
    timeout: float | None = None
    max_deliveries: int = 25
    ttl: float | None = None
    retention: float | None = None
    priority: int = 0
    app: Submitter | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidInput("a task handler must be callable")
        check_task_name(self.name)
        check_name(self.queue, what="queue")
        check_retry(self.retry)
        for name, high, zero in (("timeout", MAX_WAIT_S, False), ("ttl", MAX_KEEP_S, False),
                                 ("retention", MAX_KEEP_S, True)):
            object.__setattr__(self, name, check_duration(
                getattr(self, name), name, high=high, allow_zero=zero, allow_none=True))
        object.__setattr__(self, "priority", check_priority(self.priority))
        object.__setattr__(self, "max_deliveries", check_deliveries(self.max_deliveries))
        Work(name=self.name, timeout_s=self.timeout, max_deliveries=self.max_deliveries)
        self._check_takes_context()

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether the handler is an ``async def``, or an object whose ``__call__`` is one
        (run on the loop, not in a thread)."""
        return is_async_callable(self.fn)

    @functools.cached_property
    def _signature(self) -> inspect.Signature | None:
        """The handler's signature (read once: every submit checks its input against it);
        ``None`` when it has none to read."""
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None

    def _check_takes_context(self) -> None:
        """Refuse a handler that cannot be called ``fn(ctx, **input)``: its signature has
        no positional parameter left for the context (``*args`` has room; a
        ``functools.partial`` or a callable object is read as it is called). A handler
        without a readable signature is taken as it is.

        Raises:
            InvalidInput: no room for the context.
        """
        signature = self._signature
        if signature is None:
            return
        try:
            signature.bind_partial(None)
        except TypeError:
            raise InvalidInput(
                f"task {self.name!r}: a task handler takes the context first: "
                f"def handler(ctx, ...), not {self.name}{signature}") from None

    @functools.cached_property
    def _binds(self) -> set[frozenset[str]] | None:
        """The key sets of inputs that bound to a handler without ``**kwargs`` (each key
        then one of its parameters), at most :data:`_MOST_BINDS`: the same keys bind
        again without ``inspect``. ``None`` for a handler with ``**kwargs``."""
        signature = self._signature
        if signature is None or any(p.kind is p.VAR_KEYWORD
                                    for p in signature.parameters.values()):
            return None
        return set()

    def check_input(self, input: dict[str, Any] | None) -> None:
        """Refuse an input that does not bind to ``fn(ctx, **input)``. Whether it binds
        depends on its keys alone, so keys that bound once are not bound again.

        Raises:
            InvalidInput: naming the mismatch (never the values).
        """
        signature = self._signature
        if signature is None:
            return
        binds, keys = self._binds, frozenset(input or ())
        if binds is not None and keys in binds:
            return
        try:
            signature.bind(None, **(input or {}))
        except TypeError as exc:
            raise InvalidInput(f"input does not match task {self.name!r}: {exc}") from None
        if binds is not None and len(binds) < _MOST_BINDS:
            binds.add(keys)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the handler directly (no store, no worker): for unit tests."""
        return self.fn(*args, **kwargs)

    async def submit(
        self, input: Mapping[str, Any] | None, authority: Authority, /,
        **options: Unpack[SubmitOptions],
    ) -> Submitted:
        """Shortcut for ``app.submit(self, input, authority, **options)``.

        Raises:
            InvalidInput: the task is not registered with an app.
        """
        if self.app is None:
            raise InvalidInput(f"task {self.name!r} is not registered with an App")
        return await self.app.submit(self, input, authority, **options)
