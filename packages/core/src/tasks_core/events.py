"""Events: every state change of a task is one event with a caller-chosen ``event_id``.

- ``input_requested`` (lease holder): -> ``waiting_input``; a key is asked once per run;
- ``input_responses_accepted`` (respond): answers outstanding keys only; none left -> runnable;
- ``retry_requested`` (lease holder): schedules ``retry_at``, or fails once the policy is spent;
- ``completed`` and ``failed`` (lease holder): terminal;
- ``cancelled`` (cancel): terminal, "Cancelled by user";
- ``watcher_added`` (core, at submit): grants read/cancel/respond.

The ``event_id`` is stable across retries of the same call: a store that already applied it
answers ``duplicate`` with the original revision and commit time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import AfterValidator, Field

from tasks_core._model import Model
from tasks_core.authority import Owner
from tasks_core.models import ErrorInfo, Instant, JSONValue, Key, Message, Snapshot, TaskStatus

__all__ = [
    "LEASE_EVENTS",
    "Cancelled",
    "Completed",
    "Event",
    "EventRecord",
    "Failed",
    "InputRequested",
    "InputResponsesAccepted",
    "RetryRequested",
    "Transition",
    "WatcherAdded",
    "ended_as",
]


def _event_id(value: str) -> str:
    if not value or len(value.encode()) > 256 or not value.isprintable():
        raise ValueError("event_id must be 1..256 printable bytes")
    return value


EventId = Annotated[str, AfterValidator(_event_id)]
ErrorType = Annotated[str, Field(min_length=1, max_length=256)]


class _Event(Model):
    event_id: EventId

    def content(self) -> dict[str, Any]:
        """The event without its id: what a replay must match exactly."""
        return self.model_dump(mode="json", exclude={"event_id"})


class InputRequested(_Event):
    """The run asks a person for input under ``key``."""

    kind: Literal["input_requested"] = "input_requested"
    key: Key
    request: JSONValue = None


class InputResponsesAccepted(_Event):
    """Answers to outstanding input requests, by key."""

    kind: Literal["input_responses_accepted"] = "input_responses_accepted"
    responses: Annotated[dict[str, JSONValue], Field(min_length=1)]


class RetryRequested(_Event):
    """The run failed and asks to be retried under the task's retry policy."""

    kind: Literal["retry_requested"] = "retry_requested"
    error: ErrorType
    message: Message = ""


class Completed(_Event):
    """The run finished with ``result``."""

    kind: Literal["completed"] = "completed"
    result: JSONValue = None


class Failed(_Event):
    """The run failed for good. ``reason="timeout"`` records a timeout."""

    kind: Literal["failed"] = "failed"
    error: ErrorType
    message: Message = ""
    reason: Literal["timeout"] | None = None


class Cancelled(_Event):
    """A cancel request: terminal, stored as "Cancelled by user"."""

    kind: Literal["cancelled"] = "cancelled"


class WatcherAdded(_Event):
    """Core grants ``principal`` read/cancel/respond (only at submit)."""

    kind: Literal["watcher_added"] = "watcher_added"
    principal: Owner


Event: TypeAlias = Annotated[
    InputRequested
    | InputResponsesAccepted
    | RetryRequested
    | Completed
    | Failed
    | Cancelled
    | WatcherAdded,
    Field(discriminator="kind"),
]

LEASE_EVENTS = frozenset({"input_requested", "retry_requested", "completed", "failed"})
"""Kinds only the lease holder may send."""


def ended_as(event: Event, snapshot: Snapshot) -> str:
    """What a run's applied ``event`` made of its task (``snapshot``, after it), as the
    worker's summary line and the run's span name it: a finished task's status
    (``completed``, ``failed`` — a retry asked for with no attempt left too —,
    ``cancelled``), ``retried`` for a retry scheduled, else the event's kind."""
    if snapshot.terminal:
        return snapshot.status.value
    if isinstance(event, RetryRequested):
        return "retried"
    return event.kind


class EventRecord(Model):
    """An applied event as history keeps it.

    Attributes:
        revision: the task's revision right after this event.
        committed_at: store-assigned; strictly increasing along one task's history.
        status: the (stored) status the event left the task in.
        retry_at: the retry deadline it scheduled, if any.
        error: the failure it recorded, if any.
        accepted: for ``input_responses_accepted``, the keys of its answers that were
            accepted (questions outstanding then); the event keeps every answer as sent
            (a replay compares it), the others were ignored. ``None`` for other kinds —
            and in records stored before the field existed.
    """

    event: Event
    revision: int
    committed_at: Instant
    status: TaskStatus
    retry_at: Instant | None = None
    error: ErrorInfo | None = None
    accepted: tuple[str, ...] | None = None

    @property
    def event_id(self) -> str:
        """The caller-chosen id of the event."""
        return self.event.event_id

    @property
    def kind(self) -> str:
        """The event kind."""
        return self.event.kind


class Transition(Model):
    """What ``transition`` did.

    Attributes:
        outcome: ``applied`` (revision +1), ``duplicate`` (this event id was applied
            before; ``record`` is the original), or ``unchanged`` (a valid no-op).
        snapshot: the task as it is now.
        record: the applied event; ``None`` for ``unchanged``.
    """

    outcome: Literal["applied", "duplicate", "unchanged"]
    snapshot: Snapshot
    record: EventRecord | None = None

    @property
    def committed_at(self) -> datetime | None:
        """When the event was committed (``None`` for ``unchanged``)."""
        return self.record.committed_at if self.record else None

