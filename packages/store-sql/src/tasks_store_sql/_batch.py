"""A locked ``tasks`` row as :func:`tasks_core.storekit.plan_transitions` reads and
changes it (:class:`Loaded`, a ``LoadedTask``), and the rows a plan writes.

The caller locks the rows the items name (id order), reads the clock after the locks and
attaches the history entries of the items' event ids; the kit decides; the caller writes
each changed row once (``UPDATE … WHERE id AND row_version``) with the plan's records,
watchers (:func:`watcher_rows`), wakeups and cancel notices, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks_core.authority import Owner
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot

from tasks_store_sql import _codec

__all__ = ["Loaded", "changed_rows", "watcher_rows"]


@dataclass(eq=False)
class Loaded:
    """A locked ``tasks`` row, and what the operation did to it so far.

    Attributes:
        id: the task id.
        text: the stored snapshot (JSON text), decoded on first use.
        token: the lease token column.
        row_version: the version read under the lock (the write is guarded by it).
        events: the history entries of this task whose event ids the batch names
            (stored JSON text, or a record the batch itself applied).
    """

    id: str
    text: str
    token: str | None
    row_version: int
    events: dict[str, str | EventRecord] = field(default_factory=dict)
    _snapshot: Snapshot | None = None
    changed: bool = False

    @property
    def snapshot(self) -> Snapshot:
        """The task as the operation left it so far.

        Raises:
            StoreCorrupt: the stored snapshot fails validation.
        """
        if self._snapshot is None:
            self._snapshot = _codec.decode_snapshot(self.id, self.text)
        return self._snapshot

    def earlier(self, event_id: str) -> Callable[[], EventRecord] | None:
        """A reader of the history entry of ``event_id`` (``None``: never applied)."""
        entry = self.events.get(event_id)
        if entry is None:
            return None
        if isinstance(entry, EventRecord):
            return lambda: entry
        return lambda: _codec.decode_record(self.id, entry)

    def update(self, snapshot: Snapshot, record: EventRecord) -> None:
        """Keep the task as an applied event left it, and the event's record."""
        self.put(snapshot, self.token)
        self.events[record.event.event_id] = record

    def put(self, snapshot: Snapshot, token: str | None) -> None:
        """Record a new state of the row and its token (written once, at the end)."""
        self._snapshot = snapshot
        self.token = token
        self.changed = True

    def values(self) -> dict[str, Any]:
        """The columns to write (see :func:`tasks_store_sql._codec.projection`)."""
        return _codec.projection(self.snapshot, self.token)


def changed_rows(loaded: Mapping[str, Loaded]) -> list[Loaded]:
    """The rows to write, in id order."""
    return [row for _, row in sorted(loaded.items()) if row.changed]


def watcher_rows(watchers: Iterable[tuple[str, Owner]]) -> list[dict[str, Any]]:
    """The ``task_members`` rows of the watchers a plan granted."""
    return [
        {"tenant": who.tenant, "user_id": who.user_id, "task_id": task_id, "role": "watcher"}
        for task_id, who in watchers
    ]
