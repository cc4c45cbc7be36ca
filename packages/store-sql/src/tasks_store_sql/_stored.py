"""How a task's snapshot is laid out in its row: the keys a claim or a completion writes
(:data:`HEAD_KEYS`) and the keys the row holds anyway (:data:`ROW_KEYS`) as columns, every
other key as JSON text written once (the ``snapshot`` column, the *body*).

Rules: a claim or a completion changes columns only, never the body; the body holds no key
a column holds (an owner of another tenant than the task's, which no ``NewTask`` allows,
stays in it) and leaves out every value at its default, nested ones included; JSON text is
ASCII (``\\u``-escaped), so any string survives any column charset. A task is read back as
:class:`Stored` (the body and the columns, in the order of :data:`STORED_COLUMNS`) and
decoded by pydantic-core in one pass over the columns' keys, then the body
(:func:`decode_snapshot`); anything that fails is ``StoreCorrupt`` naming only the task id.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple

import pydantic_core
import sqlalchemy as sa
from pydantic import BaseModel, TypeAdapter
from tasks_core.errors import StoreCorrupt
from tasks_core.models import ClaimInfo, Instant, Snapshot, TaskStatus

__all__ = [
    "CLAIM_KEYS",
    "COMPLETION_KEYS",
    "ENDED",
    "HEAD_KEYS",
    "HELD",
    "OUT_OF_BODY",
    "RECOVERED",
    "ROW_KEYS",
    "STORED_COLUMNS",
    "Stored",
    "claim_flags",
    "decode_snapshot",
    "encode",
    "encode_body",
    "encode_model",
    "head_values",
    "instant_json",
    "json_text",
    "status_value",
    "stored_columns",
]

CLAIM_KEYS = frozenset({
    "progress", "retry_at", "deliveries", "claim", "lease_generation", "updated_at",
    "started_at",
})
"""The snapshot keys a claim writes (``rules.start_claim``)."""
COMPLETION_KEYS = frozenset({
    "status", "revision", "result", "error", "cancel_reason", "input_requests", "claim",
    "retry_at", "updated_at", "finished_at", "expires_at",
})
"""The snapshot keys a terminal event may write (``rules.apply_event``)."""
HEAD_KEYS = tuple(key for key in Snapshot.model_fields if key in CLAIM_KEYS | COMPLETION_KEYS)
"""The head: the keys a claim or a completion writes, in the order of the model's fields.
Each is a column; none is in the body."""
ROW_KEYS = ("id", "tenant", "owner", "queue", "run_id", "created_at", "run_at")
"""The keys the row holds as columns of their own (the owner as its user id), written with
the row (a create, a new run); none is in the body, so the body holds no instant the store
clock gives."""
OUT_OF_BODY = frozenset(HEAD_KEYS) | frozenset(ROW_KEYS)
"""Every key a column holds."""
_LEFT_OUT = set(OUT_OF_BODY)
_LEFT_OUT_BUT_OWNER = _LEFT_OUT - {"owner"}

ENDED, RECOVERED, HELD = 1, 2, 4
"""The bits of ``claim_flags``: the claim's ``ended``, ``recovered`` and ``held``."""


class Stored(NamedTuple):
    """A task as its row stores it: the body (the ``snapshot`` column) and the head's
    columns. Two rows that store the same task store equal values."""

    body: str
    status: str
    revision: int
    progress: str | None
    result: str | None
    error: str | None
    cancel_reason: str | None
    retry_at: datetime | None
    deliveries: int
    input_requests: str | None
    claim_worker: str | None
    claim_generation: int | None
    claim_until: datetime | None
    claim_flags: int | None
    lease_generation: int
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None
    tenant: str
    owner: str | None
    queue: str
    run_id: str
    created_at: datetime
    run_at: datetime | None


STORED_COLUMNS = ("snapshot", *Stored._fields[1:])
"""The columns a read selects to decode a task, in the order of :class:`Stored`."""


def stored_columns(tasks: sa.Table) -> list[sa.Column[Any]]:
    """The columns of ``tasks`` that :class:`Stored` holds, in its order."""
    return [tasks.c[name] for name in STORED_COLUMNS]


_INSTANT = TypeAdapter(Instant)
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)
_string = json.encoder.encode_basestring_ascii
"""A string as :func:`encode` spells it (``TypeError`` for anything else), without its
dispatch: a read spells several."""


def encode(document: Any) -> str:
    """Compact JSON text (ASCII-escaped)."""
    return _ENCODER.encode(document)


def json_text(value: Any) -> str:
    """The stored JSON text of a JSON value (a result, input requests): pydantic-core's
    spelling when it is ASCII (as a model's JSON spells it), else :func:`encode`'s."""
    text = pydantic_core.to_json(value).decode()
    return text if text.isascii() else encode(value)


def instant_json(value: datetime) -> str:
    """How stored JSON spells the instant ``value``: pydantic's JSON string of it
    (``"2026-11-30T21:35:02.239000Z"``, without the fraction on a whole second)."""
    return _INSTANT.dump_json(value).decode()


def status_value(status: TaskStatus) -> str:
    """The stored status (``running`` is derived, never stored)."""
    return TaskStatus.PENDING.value if status == TaskStatus.RUNNING else status.value


def claim_flags(claim: ClaimInfo) -> int:
    """``claim_flags`` of ``claim`` (:data:`ENDED`, :data:`RECOVERED`, :data:`HELD`)."""
    return ((ENDED if claim.ended else 0) | (RECOVERED if claim.recovered else 0)
            | (HELD if claim.held else 0))


def encode_body(snapshot: Snapshot) -> str:
    """The body of ``snapshot``: every key no column holds, the values at their defaults
    left out (ASCII)."""
    owner = snapshot.owner
    left_out = (_LEFT_OUT if owner is None or owner.tenant == snapshot.tenant
                else _LEFT_OUT_BUT_OWNER)
    text = snapshot.model_dump_json(exclude=left_out, exclude_defaults=True)
    if text.isascii():
        return text
    return encode(snapshot.model_dump(mode="json", exclude=left_out, exclude_defaults=True))


def head_values(snapshot: Snapshot) -> dict[str, Any]:
    """The head's columns of ``snapshot`` (:class:`Stored` but the body)."""
    claim = snapshot.claim
    requests = snapshot.input_requests
    return {
        "status": status_value(snapshot.status),
        "revision": snapshot.revision,
        "progress": None if snapshot.progress is None else encode_model(snapshot.progress),
        "result": None if snapshot.result is None else json_text(snapshot.result),
        "error": None if snapshot.error is None else encode_model(snapshot.error),
        "cancel_reason": (None if snapshot.cancel_reason is None
                          else snapshot.cancel_reason.value),
        "retry_at": snapshot.retry_at,
        "deliveries": snapshot.deliveries,
        "input_requests": json_text(requests) if requests else None,
        "claim_worker": None if claim is None else claim.worker_id,
        "claim_generation": None if claim is None else claim.generation,
        "claim_until": None if claim is None else claim.expires_at,
        "claim_flags": None if claim is None else claim_flags(claim),
        "lease_generation": snapshot.lease_generation,
        "updated_at": snapshot.updated_at,
        "started_at": snapshot.started_at,
        "finished_at": snapshot.finished_at,
        "expires_at": snapshot.expires_at,
    }


def encode_model(model: BaseModel) -> str:
    """The stored text of a model (a history record, a progress, an error): pydantic-core's
    compact JSON when it is ASCII (the common case, and several times faster), else
    :func:`encode` of its JSON document (non-ASCII text ``\\u``-escaped). Both decode to
    the same model."""
    text = model.model_dump_json()
    return text if text.isascii() else encode(model.model_dump(mode="json"))


def _or_null(text: str | None) -> str:
    return "null" if text is None else text


def _instant(value: datetime | None) -> str:
    if value is None:
        return "null"
    if not isinstance(value, datetime):  # SQLite text that is no instant (``_types``)
        raise TypeError("not an instant")
    return instant_json(value)


def _claim_text(stored: Stored) -> str:
    if stored.claim_worker is None:
        return "null"
    flags = int(stored.claim_flags or 0)
    return "".join((
        '{"worker_id":', _string(stored.claim_worker),
        ',"generation":', str(int(stored.claim_generation)),  # type: ignore[arg-type]
        ',"expires_at":', _instant(stored.claim_until),
        ',"ended":', "true" if flags & ENDED else "false",
        ',"recovered":', "true" if flags & RECOVERED else "false",
        ',"held":true}' if flags & HELD else "}",
    ))


def _text(task_id: str, stored: Stored) -> str:
    """The JSON text of the task: the keys its columns hold spelled from them, then the
    body (whose keys come last, so a key it holds wins)."""
    body = stored.body
    if not body.startswith("{") or body == "{}":
        raise ValueError("not a body")
    owner = stored.owner
    return "".join((
        '{"id":', _string(task_id),
        ',"tenant":', _string(stored.tenant),
        ',"owner":', "null" if owner is None
        else f'{{"user_id":{_string(owner)},"tenant":{_string(stored.tenant)}}}',
        ',"queue":', _string(stored.queue),
        ',"run_id":', _string(stored.run_id),
        ',"created_at":', _instant(stored.created_at),
        ',"run_at":', _instant(stored.run_at),
        ',"status":', _string(stored.status),
        ',"revision":', str(int(stored.revision)),
        ',"progress":', _or_null(stored.progress),
        ',"result":', _or_null(stored.result),
        ',"error":', _or_null(stored.error),
        ',"cancel_reason":', "null" if stored.cancel_reason is None
        else _string(stored.cancel_reason),
        ',"retry_at":', _instant(stored.retry_at),
        ',"deliveries":', str(int(stored.deliveries)),
        ',"input_requests":', stored.input_requests or "{}",
        ',"claim":', _claim_text(stored),
        ',"lease_generation":', str(int(stored.lease_generation)),
        ',"updated_at":', _instant(stored.updated_at),
        ',"started_at":', _instant(stored.started_at),
        ',"finished_at":', _instant(stored.finished_at),
        ',"expires_at":', _instant(stored.expires_at),
        ",", body[1:],
    ))


def decode_snapshot(task_id: str, stored: Stored) -> Snapshot:
    """The snapshot of ``task_id`` that ``stored`` holds (validated in one pass by
    pydantic-core).

    Raises:
        StoreCorrupt: what is stored is not a valid snapshot of that task.
    """
    try:
        snapshot = Snapshot.model_validate_json(_text(task_id, stored))
    except (ValueError, TypeError, AttributeError, RecursionError):
        raise StoreCorrupt(task_id) from None
    if snapshot.id != task_id:
        raise StoreCorrupt(task_id)
    return snapshot
