"""A locked ``tasks`` row as :func:`tasks_core.storekit.plan_transitions` reads and
changes it (:class:`Loaded`, a ``LoadedTask``), and the rows a plan writes.

The caller locks the rows the items name (id order), reads the clock after the locks and
attaches the history entries of the items' event ids; the kit decides; the caller writes
each changed row once (``UPDATE … WHERE id AND row_version``) with the plan's records
(:func:`history_rows`: those a row does not stand for), watchers (:func:`watcher_rows`),
wakeups and cancel notices, in the same transaction. A row stands for the record of the
event that completed its run (``final_event``, ``_codec.final_record``): a replay of
that event finds it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks_core.authority import Owner
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot

from tasks_store_sql import _codec
from tasks_store_sql._stored import STORED_COLUMNS, Stored

__all__ = ["Loaded", "changed_rows", "history_rows", "watcher_rows"]


@dataclass(eq=False)
class Loaded:
    """A locked ``tasks`` row, and what the operation did to it so far.

    Attributes:
        id: the task id.
        stored: the task as the row stores it, decoded on first use.
        token: the lease token column.
        row_version: the version read under the lock (the write is guarded by it).
        events: the history entries of this task whose event ids the batch names
            (stored JSON text, or a record the batch itself applied).
        final_event: the id of the event that completed the run, whose record the row
            stands for (the column; set when the batch completes the run).
    """

    id: str
    stored: Stored
    token: str | None
    row_version: int
    events: dict[str, str | EventRecord] = field(default_factory=dict)
    _snapshot: Snapshot | None = None
    changed: bool = False
    final_event: str | None = None

    @classmethod
    def of(cls, row: Sequence[Any]) -> Loaded:
        """A row read as ``id``, the stored columns (``_stored.STORED_COLUMNS``), the token
        and the row's version — and its ``final_event`` where the read selects it next."""
        width = len(STORED_COLUMNS)
        token, row_version, *final = row[1 + width:4 + width]
        return cls(row[0], Stored(*row[1:1 + width]), token, row_version,
                   final_event=final[0] if final else None)

    @property
    def snapshot(self) -> Snapshot:
        """The task as the operation left it so far.

        Raises:
            StoreCorrupt: the stored snapshot fails validation.
        """
        if self._snapshot is None:
            self._snapshot = _codec.decode_snapshot(self.id, self.stored)
        return self._snapshot

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        """A reader of the history entry of ``event_id`` (``None``: never applied)."""
        entry = self.events.get(event_id)
        if entry is None:
            if event_id == self.final_event:
                return lambda: _codec.final_record(self.snapshot, event_id)
            return None
        if isinstance(entry, EventRecord):
            return lambda: entry
        return lambda: _codec.decode_record(self.id, entry)

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        """Keep the task as an applied event left it, and the event's record (the row
        stands for it when it completed the run)."""
        self.put(snapshot, self.token)
        self.events[record.event.event_id] = record
        if _codec.kept_in_row(snapshot, record):
            self.final_event = record.event.event_id

    def put(self, snapshot: Snapshot, token: str | None) -> None:
        """Record a new state of the row and its token (written once, at the end)."""
        self._snapshot = snapshot
        self.token = token
        self.changed = True

    def values(self) -> dict[str, Any]:
        """The columns to write (see :func:`tasks_store_sql._codec.projection`)."""
        return _codec.projection(self.snapshot, self.token, self.final_event)


def history_rows(
    events: Iterable[tuple[str, EventRecord]], loaded: Mapping[str, Loaded]
) -> list[tuple[str, EventRecord]]:
    """The records of a plan that need a ``task_events`` row: all but those a written
    row stands for (:attr:`Loaded.final_event`)."""
    return [(task_id, record) for task_id, record in events
            if loaded[task_id].final_event != record.event.event_id]


def changed_rows(loaded: Mapping[str, Loaded]) -> list[Loaded]:
    """The rows to write, in id order."""
    return [row for _, row in sorted(loaded.items()) if row.changed]


def watcher_rows(watchers: Iterable[tuple[str, Owner]]) -> list[dict[str, Any]]:
    """The ``task_members`` rows of the watchers a plan granted."""
    return [
        {"tenant": who.tenant, "user_id": who.user_id, "task_id": task_id, "role": "watcher"}
        for task_id, who in watchers
    ]
