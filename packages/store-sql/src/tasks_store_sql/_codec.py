"""Rows <-> core models: a task's row (:func:`projection`; the snapshot's layout in it is
:mod:`tasks_store_sql._stored`'s), its history records, its watchers' rows, and the
snapshots decoded lately (:class:`Decoded`).

The lease token only ever lives in its own column. Decoding what fails validation raises
``StoreCorrupt`` naming the task id and nothing of what is stored.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from tasks_core import rules
from tasks_core.errors import StoreCorrupt
from tasks_core.events import Completed, EventRecord
from tasks_core.models import Snapshot, TaskStatus, detached

from tasks_store_sql._stored import (
    STORED_COLUMNS,
    Stored,
    decode_snapshot,
    encode,
    encode_body,
    encode_model,
    head_values,
)

__all__ = [
    "Decoded",
    "Kept",
    "decode_record",
    "decode_snapshot",
    "encode",
    "encode_model",
    "event_row",
    "final_record",
    "kept_in_row",
    "member_rows",
    "projection",
    "stored_of",
]


class Kept(NamedTuple):
    """A decoded snapshot, exactly what it was decoded from, and the ``row_version`` of
    the row that stored that (``None`` where the writer did not learn it)."""

    stored: Stored
    snapshot: Snapshot
    row_version: int | None = None


class Decoded:
    """Snapshots decoded lately, each kept with exactly what it was decoded from, so that
    reading the same again — a completion locking the row its claim returned — takes
    the snapshot instead of validating it a second time. What is kept is
    ``models.detached`` from what the caller was handed (a snapshot is frozen, the JSON values
    in it are not), and equal stored values decode to an equal snapshot, so handing one
    out twice is safe.

    Each entry is given back once (:meth:`take`, :meth:`pop`) and the oldest are dropped
    beyond ``size``: what a process keeps is bounded whatever becomes of its claims. A
    lock keeps it whole when event loops in several threads share the store (the sync
    facade).
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._entries: dict[str, Kept] = {}
        self._lock = threading.Lock()

    def keep(
        self, task_id: str, stored: Stored, snapshot: Snapshot, row_version: int | None = None
    ) -> None:
        """Remember that ``stored`` of ``task_id`` decodes to ``snapshot`` (and was stored
        at ``row_version``)."""
        kept = Kept(stored, detached(snapshot), row_version)
        with self._lock:
            entries = self._entries
            entries.pop(task_id, None)
            entries[task_id] = kept
            if len(entries) > self.size:
                del entries[next(iter(entries))]

    def take(self, task_id: str, stored: Stored) -> Snapshot | None:
        """The snapshot kept for exactly this ``stored`` of ``task_id`` (forgotten now), or
        ``None``: decode it."""
        with self._lock:
            kept = self._entries.pop(task_id, None)
        return kept.snapshot if kept is not None and kept.stored == stored else None

    def peek(self, task_id: str) -> Kept | None:
        """What is kept for ``task_id`` (still kept)."""
        with self._lock:
            return self._entries.get(task_id)

    def pop(self, task_id: str) -> None:
        """Forget what is kept for ``task_id``."""
        with self._lock:
            self._entries.pop(task_id, None)


def decode_record(task_id: str, text: Any) -> EventRecord:
    """An event record of ``task_id``.

    Raises:
        StoreCorrupt: the text is not a valid event record.
    """
    try:
        return EventRecord.model_validate_json(text)
    except (ValueError, TypeError, RecursionError):
        raise StoreCorrupt(task_id) from None


def projection(
    snapshot: Snapshot, token: str | None, final_event: str | None = None
) -> dict[str, Any]:
    """Every column of the ``tasks`` row but ``id`` and ``row_version``: the head's
    (:func:`tasks_store_sql._stored.head_values`), the body, and those queries filter on.

    ``final_event`` is the id of the event that completed the run, whose record the row
    stands for (:func:`final_record`); a row whose snapshot is not ``completed`` holds
    none, whatever is given (a new run of the same id starts without it).

    ``claim_expires_at`` is the expiry of a lease that has not ended (``NULL`` once the
    holder released it or wrote its last event), so "live lease" is
    ``claim_expires_at > now`` in SQL, exactly :meth:`Snapshot.lease_live`;
    ``available_at`` is ``rules.available_at`` (claim order, and when a task waiting for
    a retry or its ``run_at`` becomes claimable), after ``neg_priority``, minus the
    priority (so that claim order is ascending in every key).
    """
    claim = snapshot.claim
    return {
        **head_values(snapshot),
        "tenant": snapshot.tenant,
        "queue": snapshot.queue,
        "run_id": snapshot.run_id,
        "claim_token": token,
        "claim_expires_at": claim.expires_at if claim and not claim.ended else None,
        "created_at": snapshot.created_at,
        "run_at": snapshot.run_at,
        "available_at": rules.available_at(snapshot),
        "neg_priority": -snapshot.priority,
        "max_deliveries": snapshot.work.max_deliveries,
        "snapshot": encode_body(snapshot),
        "final_event": final_event if snapshot.status == TaskStatus.COMPLETED else None,
        "owner": None if snapshot.owner is None else snapshot.owner.user_id,
    }


def stored_of(projected: dict[str, Any]) -> Stored:
    """What a row written with the columns ``projected`` (:func:`projection`) stores."""
    return Stored(*(projected[name] for name in STORED_COLUMNS))


def final_record(snapshot: Snapshot, event_id: str) -> EventRecord:
    """The history record of the ``completed`` event ``event_id`` that finished the run
    of ``snapshot``, derived from the snapshot: no event applies to a finished task, so
    its revision, result and ``finished_at`` are the event's revision, result and
    commit instant for as long as the run is stored.

    Raises:
        StoreCorrupt: the snapshot cannot hold such an event (a damaged row).
    """
    if snapshot.status != TaskStatus.COMPLETED or snapshot.finished_at is None:
        raise StoreCorrupt(snapshot.id)
    try:
        event = Completed(event_id=event_id, result=snapshot.result)
    except ValueError:
        raise StoreCorrupt(snapshot.id) from None
    return EventRecord(event=event, revision=snapshot.revision,
                       committed_at=snapshot.finished_at, status=TaskStatus.COMPLETED)


def kept_in_row(snapshot: Snapshot, record: EventRecord) -> bool:
    """Whether the row of ``snapshot`` (the task as ``record``'s event left it) stands
    for ``record``: the event completed the run and :func:`final_record` gives it back
    exactly. Anything else is a ``task_events`` row."""
    return (record.kind == "completed" and snapshot.status == TaskStatus.COMPLETED
            and final_record(snapshot, record.event_id) == record)


def event_row(task_id: str, record: EventRecord) -> dict[str, Any]:
    """The ``task_events`` row of ``record``."""
    return {
        "task_id": task_id,
        "event_id": record.event_id,
        "revision": record.revision,
        "kind": record.kind,
        "committed_at": record.committed_at,
        "record": encode_model(record),
    }


def member_rows(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The ``task_members`` rows of the watchers but the owner (a column of the task's
    row: :func:`projection`)."""
    rows = []
    for watcher in snapshot.watchers:
        if watcher == snapshot.owner:
            continue
        rows.append(
            {
                "tenant": watcher.tenant,
                "user_id": watcher.user_id,
                "task_id": snapshot.id,
                "role": "watcher",
            }
        )
    return _unique(rows)


def _unique(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for row in rows:
        key = (row["tenant"], row["user_id"])
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out
