"""Store-call arguments checked once, before anything is read or written: lease
durations, worker ids, the tenant of a read, queue names and ``transition_many`` items
(sizes: :mod:`tasks_core.sizes`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import timedelta

from tasks_core.authority import Access, check_name
from tasks_core.durations import check_duration
from tasks_core.errors import (
    InvalidInput,
)
from tasks_core.events import (
    Cancelled,
    Completed,
    Event,
    Failed,
    InputRequested,
    InputResponsesAccepted,
    RetryRequested,
    WatcherAdded,
)
from tasks_core.models import (
    Lease,
)

MAX_LEASE_S = 7 * 86400
"""The longest lease, in seconds: every store refuses a longer one, and so does a worker."""
_EVENT_TYPES = (
    InputRequested, InputResponsesAccepted, RetryRequested, Completed, Failed, Cancelled,
    WatcherAdded,
)


def check_lease_for(lease_for: float) -> timedelta:
    """Validate a lease duration in seconds (:func:`~tasks_core.durations.check_duration`).

    Raises:
        InvalidInput: not a finite number in (0, :data:`MAX_LEASE_S`].
    """
    seconds = check_duration(lease_for, "lease_for", high=MAX_LEASE_S)
    return timedelta(milliseconds=max(1, round(seconds * 1000)))


def check_worker_id(worker_id: str) -> str:
    """Validate a worker id: a non-empty string of at most 256 printable characters (log
    lines, the CLI and the dashboard show it; a control character or bidi override would
    act on what shows it).

    Raises:
        InvalidInput: not a non-empty string of at most 256 characters, or a character
            that is not printable (``str.isprintable``).
    """
    if not isinstance(worker_id, str) or not worker_id or len(worker_id) > 256:
        raise InvalidInput("worker_id must be a non-empty string of at most 256 characters")
    if not worker_id.isprintable():
        raise InvalidInput("worker_id must be printable: no control or bidi characters")
    return worker_id


def check_tenant(tenant: object) -> str | None:
    """Validate the tenant a read is scoped to: a tenant's name, or ``None`` (every
    tenant: the system's reads).

    Raises:
        InvalidInput: anything else.
    """
    if tenant is not None and not isinstance(tenant, str):
        raise InvalidInput("tenant must be a string or None")
    return tenant


def check_queues(queues: Collection[str], *, allow_empty: bool = False) -> frozenset[str]:
    """Validate the queue names of ``claim_next``/``wait_for_work``.

    Raises:
        InvalidInput: a bare string, a bad name, or none at all (unless ``allow_empty``).
    """
    if isinstance(queues, str):
        raise InvalidInput("queues must be a collection of queue names, not a string")
    names = frozenset(check_name(q, what="queue") for q in queues)
    if not names and not allow_empty:
        raise InvalidInput("at least one queue is required")
    return names


MAX_BATCH = 1000
"""The most items one ``transition_many`` takes (and one ``claim_next`` claims)."""

MAX_RUNNING = 1_000_000
"""The largest ``max_running``, the largest count of a ``rate`` and the largest
``concurrency`` of a worker, a queue or ``Limits``."""

BatchItem = tuple[str, int, Event, Lease | Access]
"""One ``transition_many`` item: ``(task_id, expected_revision, event, authority)``."""


def check_batch(items: Sequence[BatchItem]) -> list[BatchItem]:
    """Validate the items of ``transition_many`` before anything is read or written.

    Raises:
        TypeError: not a sequence of ``(str, int, Event, Lease | Access)`` tuples.
        InvalidInput: more than :data:`MAX_BATCH` items.
    """
    candidate: object = items
    if isinstance(candidate, (str, bytes)) or not isinstance(candidate, Sequence):
        raise TypeError("transition_many takes a sequence of (task_id, revision, event, "
                        "authority) tuples")
    checked = list(items)
    if len(checked) > MAX_BATCH:
        raise InvalidInput(f"transition_many takes at most {MAX_BATCH} items")
    for item in checked:
        if not isinstance(item, tuple) or len(item) != 4:
            raise TypeError("each item must be a (task_id, revision, event, authority) tuple")
        task_id, revision, event, authority = item
        if not isinstance(task_id, str):
            raise TypeError("task_id must be a string")
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise TypeError("expected_revision must be an integer")
        if not isinstance(event, _EVENT_TYPES):
            raise TypeError("event must be an Event")
        if not isinstance(authority, (Lease, Access)):
            raise TypeError("authority must be a Lease or an Access")
    return checked


