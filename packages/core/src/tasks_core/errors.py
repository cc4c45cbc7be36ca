"""The one error tree of tasks. Every refusal anywhere in the project is one of these.

::

    TasksError
    ├── TaskNotFound            (LookupError)  unknown, other tenant, expired, or invisible
    ├── TaskExists                             create() on an id that is taken; carries .current
    ├── RevisionConflict                       expected revision is stale; carries .current
    ├── EventIdReused                          same event id, different content
    ├── LeaseLost                              lease stale, expired, fenced or forged
    ├── Unavailable                            claim refused: terminal, waiting or leased
    ├── Deferred                               claim refused: retry not due; carries .seconds
    ├── CapacityExceeded                       a limit is reached; carries .limit, .retryable
    ├── AuthorizationError      (PermissionError)
    ├── InvalidInput            (ValueError)   bad argument; nothing was written
    │   └── UnknownStore        (LookupError)  no plugin serves that URL; create=False: no store
    ├── TaskTimeout             (TimeoutError) a run exceeded its timeout; app.wait ran out
    ├── CapabilityNotSupported                 optional feature the store does not offer
    └── StoreError                             the storage itself failed
        ├── StoreUnavailable                   transient: connection lost, busy, timed out
        ├── StoreCorrupt                       a persisted record fails validation
        ├── SchemaMismatch                     the store's schema is missing, older or newer
        └── PluginConflict                     two distributions claim one store name

Each class docstring is its default message. Raise with a message only when the message
adds something the default does not say. (``TasksError`` and ``InvalidInput`` are defined
in ``_errors_base``, which the model imports: the tree is still this module's.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tasks_core._errors_base import InvalidInput, TasksError

if TYPE_CHECKING:
    from tasks_core.models import Snapshot

__all__ = [
    "AuthorizationError",
    "CapabilityNotSupported",
    "CapacityExceeded",
    "Deferred",
    "EventIdReused",
    "InvalidInput",
    "LeaseLost",
    "PluginConflict",
    "RevisionConflict",
    "SchemaMismatch",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "TaskExists",
    "TaskNotFound",
    "TaskTimeout",
    "TasksError",
    "Unavailable",
    "UnknownStore",
]


class TaskNotFound(TasksError, LookupError):
    """Task not found."""

    def __init__(self, task_id: str, message: str | None = None) -> None:
        # The message is the same for unknown, foreign, expired and invisible tasks:
        # it must never tell them apart (no existence oracle).
        super().__init__(message or f"Task not found: {task_id!r}")
        self.task_id = task_id


class TaskExists(TasksError):
    """A task with this id already exists."""

    def __init__(self, current: Snapshot) -> None:
        super().__init__(f"A task with this id already exists: {current.id!r}")
        self.current = current


class RevisionConflict(TasksError):
    """The task changed since the expected revision."""

    def __init__(self, current: Snapshot, expected: int | None = None) -> None:
        detail = ""
        if expected is not None:
            detail = f" (expected {expected}, current {current.revision})"
        super().__init__(f"The task changed since the expected revision{detail}")
        self.current = current
        self.expected = expected


class EventIdReused(TasksError):
    """This event id was already applied to the task with different content."""


class LeaseLost(TasksError):
    """The lease is stale, expired, or was never issued for this task."""


class Unavailable(TasksError):
    """The task cannot be claimed or changed in its current state."""


class Deferred(TasksError):
    """The task is scheduled for a retry that is not due yet."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"The task is scheduled for a retry in {seconds:.3f}s")
        self.seconds = seconds


class CapacityExceeded(TasksError):
    """A capacity limit is reached; nothing was stored — or, at ``item`` of a
    ``submit_many`` that writes item by item (a loop, a re-run), nothing of that item:
    ``stored`` maps the index of every other item of the batch already submitted to its
    outcome (a ``Submitted``), whatever its place in the batch."""

    def __init__(self, limit: str, *, retryable: bool = True, item: int | None = None,
                 stored: Mapping[int, Any] | None = None) -> None:
        written = dict(stored or {})
        super().__init__(
            f"Capacity limit reached: {limit}; nothing was stored" if item is None else
            f"item {item}: capacity limit reached: {limit}; that item was not stored"
            + (f"; {len(written)} other items of the batch were submitted (.stored)"
               if written else ", nor any other item"))
        self.limit = limit
        self.retryable = retryable
        self.item = item
        self.stored = written



class AuthorizationError(TasksError, PermissionError):
    """Not authorized for this action."""


class UnknownStore(InvalidInput, LookupError):
    """No installed store plugin serves this URL or name, or (opened with
    ``create=False``) no store is there."""


class TaskTimeout(TasksError, TimeoutError):
    """The task exceeded its timeout (or a wait for it did)."""


class CapabilityNotSupported(TasksError):
    """This store does not support the requested feature."""


class StoreError(TasksError):
    """The store failed."""


class SchemaMismatch(StoreError):
    """The store's schema (tables, collections, their layout) is not the one this code
    expects: none yet, older, newer, or not a tasks store's."""


class StoreUnavailable(StoreError):
    """The store is unavailable right now (transient); retry later."""


class StoreCorrupt(StoreError):
    """A persisted record failed validation."""

    def __init__(self, task_id: str) -> None:
        # Never quote stored text: it may be attacker-controlled or secret.
        super().__init__(f"The stored record of task {task_id!r} failed validation")
        self.task_id = task_id


class PluginConflict(StoreError):
    """Two installed distributions claim the same store name."""
