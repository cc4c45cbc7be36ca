"""Task documents <-> core models (private to the Mongo store).

One document per task (its layout is below). User payloads (input, result, questions,
answers, events) are kept as JSON text, not as BSON: JSON allows integers beyond 64 bits
and any string as a key (``"$x"``, ``"a.b"``, ``"\\u0000"``), which BSON does not, and a
value must read back exactly as written. Everything the store queries on is native BSON.

Decoding never trusts the document: anything that does not validate raises
``StoreCorrupt`` naming the task id, never quoting the stored data.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from tasks_core import rules
from tasks_core.errors import StoreCorrupt
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot, TaskStatus

__all__ = [
    "ACTIVE_STATUSES",
    "AVAILABLE_FROM_FIELDS",
    "PRIORITY_FROM_FIELDS",
    "decode_record",
    "decode_task",
    "encode_fields",
    "encode_record",
    "find_event",
    "history_of",
    "new_document",
    "new_tag",
    "record_at",
    "token_of",
]

# The task document:
#
#   {
#     "_id": task id,
#     ...every Snapshot field but ``id``, BSON-native (dates are BSON dates)...,
#     "work": {..., "input": "<JSON text>"},
#     "result" / "input_requests" / "accepted_input_responses": "<JSON text>",
#     "_token":    the lease token (never part of a returned snapshot) or null,
#     "_w":        a random write tag, new on every write: the compare-and-set version,
#     "_ready":    stored status is pending (neither terminal nor waiting for input),
#     "_ready_at": the earliest instant a claim may succeed (lease end, available),
#     "_prio":     minus the priority (an int, 0 when none is stored): ascending like the
#                  claim order, which is (_prio, _avail, _id), see ``storekit.claim_order``
#     "_avail":    the available instant (``rules.available_at``: retry due, run_at,
#                  creation)
#     "_wake":     changed by writes that may make work claimable (change-stream filter),
#     "_scope":    standalone servers only: the tenant whose active-task counter holds a
#                  unit for this task (``_scopes``); absent when none does,
#     "_history":  [{"id", "event": "<JSON text>", "revision", "committed_at", "status",
#                    "retry_at", "error", "accepted"}, ...]  # this run's applied events
#   }

_PAYLOADS = ("result", "input_requests", "accepted_input_responses")
_INSTANTS = ("retry_at", "created_at", "updated_at", "started_at", "finished_at", "expires_at")
_PAYLOAD_FIELDS: Any = {"work": {"input"}, **dict.fromkeys(_PAYLOADS, True)}
_PRIVATE = ("_token", "_w", "_ready", "_ready_at", "_prio", "_avail", "_wake", "_scope",
            "_history")
_DECODE_ERRORS = (ValidationError, ValueError, TypeError, KeyError, AttributeError)

ACTIVE_STATUSES = (TaskStatus.PENDING.value, TaskStatus.WAITING_INPUT.value)
"""Stored statuses of tasks that count as active (``running`` is never stored)."""


def new_tag() -> str:
    """A fresh write tag (96 random bits): two writes never share one, so a stale
    compare-and-set can never match a newer document (no ABA after delete/re-create)."""
    return secrets.token_hex(12)


def _dump(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: BSON strings are UTF-8, so escape it
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text


def encode_fields(snapshot: Snapshot) -> dict[str, Any]:
    """Every stored field of ``snapshot`` (all but ``_id``, ``_token``, ``_w``,
    ``_history``), for a ``$set`` or a new document."""
    # Payloads are left out of pydantic's JSON mode (it cannot serialize every str key)
    # and written by ``_dump``.
    data: dict[str, Any] = snapshot.model_dump(mode="json", exclude=_PAYLOAD_FIELDS)
    del data["id"]
    data["work"]["input"] = _dump(snapshot.work.input)
    for key in _PAYLOADS:
        data[key] = _dump(getattr(snapshot, key))
    for key in _INSTANTS:
        data[key] = getattr(snapshot, key)
    if snapshot.run_at is not None:  # written only when set, like the snapshot's JSON
        data["run_at"] = snapshot.run_at
    claim = snapshot.claim
    if claim is not None:
        data["claim"]["expires_at"] = claim.expires_at
    ready = snapshot.status.stored == TaskStatus.PENDING
    data["_ready"] = ready
    data["_prio"] = -snapshot.priority
    data["_avail"] = rules.available_at(snapshot)
    data["_ready_at"] = _ready_at(snapshot) if ready else None
    return data


def _ready_at(snapshot: Snapshot) -> datetime:
    """The available instant, or the end of a lease not ended if later: a claim can
    succeed from then on and not before (``rules.is_claimable``)."""
    moments = [snapshot.created_at, rules.available_at(snapshot)]
    if snapshot.claim is not None and not snapshot.claim.ended:
        moments.append(snapshot.claim.expires_at)
    return max(moments)


AVAILABLE_FROM_FIELDS: Any = {"$ifNull": ["$retry_at", {"$ifNull": ["$run_at", "$created_at"]}]}
"""``_avail`` computed by the server from a document's stored fields (an aggregation
expression: ``rules.available_at``), to fill it in on documents written before it."""

PRIORITY_FROM_FIELDS: Any = {"$subtract": [0, {"$ifNull": ["$priority", 0]}]}
"""``_prio`` computed by the server from a document's stored fields (minus ``priority``,
which is stored only when not 0), to fill it in on documents written before it."""


def new_document(snapshot: Snapshot) -> dict[str, Any]:
    """The whole document of a newly created task (or a new run of one)."""
    tag = new_tag()
    return {
        "_id": snapshot.id,
        **encode_fields(snapshot),
        "_token": None,
        "_w": tag,
        "_wake": tag,
        "_history": [],
    }


def decode_task(task_id: str, doc: Mapping[str, Any]) -> Snapshot:
    """The snapshot stored in ``doc``.

    Raises:
        StoreCorrupt: the document does not validate (names ``task_id`` only).
    """
    try:
        data = {k: v for k, v in doc.items() if k not in _PRIVATE and k != "_id"}
        data["id"] = doc["_id"]
        work = dict(data["work"])
        work["input"] = json.loads(work["input"])
        data["work"] = work
        for key in _PAYLOADS:
            data[key] = json.loads(data[key])
        snapshot = Snapshot.model_validate(data)
        if snapshot.id != task_id:
            raise ValueError("id mismatch")
        return snapshot
    except _DECODE_ERRORS:
        raise StoreCorrupt(task_id) from None


def token_of(task_id: str, doc: Mapping[str, Any]) -> str | None:
    """The lease token kept beside the snapshot.

    Raises:
        StoreCorrupt: neither a string nor null.
    """
    token = doc.get("_token")
    if token is not None and not isinstance(token, str):
        raise StoreCorrupt(task_id)
    return token


def encode_record(record: EventRecord) -> dict[str, Any]:
    """One history entry."""
    return {
        "id": record.event_id,
        "event": _dump(record.event.model_dump()),  # plain JSON types: no dates in events
        "revision": record.revision,
        "committed_at": record.committed_at,
        "status": record.status.value,
        "retry_at": record.retry_at,
        "error": record.error.model_dump(mode="json") if record.error else None,
        "accepted": None if record.accepted is None else list(record.accepted),
    }


def history_of(task_id: str, doc: Mapping[str, Any]) -> Sequence[Any]:
    """The raw history entries of ``doc``.

    Raises:
        StoreCorrupt: not a list.
    """
    history = doc.get("_history", [])
    if not isinstance(history, list):
        raise StoreCorrupt(task_id)
    return history


def find_event(task_id: str, doc: Mapping[str, Any], event_id: str) -> int | None:
    """The position of ``event_id`` in the history of ``doc``, if it was applied.

    Raises:
        StoreCorrupt: the history is not a list.
    """
    for position, entry in enumerate(history_of(task_id, doc)):
        if isinstance(entry, Mapping) and entry.get("id") == event_id:
            return position
    return None


def record_at(task_id: str, doc: Mapping[str, Any], position: int) -> EventRecord:
    """The history entry at ``position`` (from :func:`find_event`) as an ``EventRecord``.

    Raises:
        StoreCorrupt: the entry does not validate.
    """
    return decode_record(task_id, history_of(task_id, doc)[position])


def decode_record(task_id: str, entry: Any) -> EventRecord:
    """One history entry as an ``EventRecord``.

    Raises:
        StoreCorrupt: the entry does not validate.
    """
    try:
        return EventRecord.model_validate(
            {
                "event": json.loads(entry["event"]),
                "revision": entry["revision"],
                "committed_at": entry["committed_at"],
                "status": entry["status"],
                "retry_at": entry.get("retry_at"),
                "error": entry.get("error"),
                "accepted": entry.get("accepted"),
            }
        )
    except _DECODE_ERRORS:
        raise StoreCorrupt(task_id) from None
