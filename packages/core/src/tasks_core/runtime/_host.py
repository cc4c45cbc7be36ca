"""What a worker needs from its app: the one interface between ``Worker`` and ``App``.

A worker takes its app as a :class:`WorkerHost` (an ``App`` is one) and reads nothing else
of it: the declared queues, tasks and schedules, the policy and limits, the store (opened on
demand) and the in-process :class:`~tasks_core.runtime._notify.Notices` shared with the app's
clients. So the worker depends on this protocol, never on the ``App`` class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tasks_core.definitions import Queue, TaskDef
from tasks_core.periodic import Schedule
from tasks_core.policy import Limits, Policy
from tasks_core.runtime._notify import Notices
from tasks_core.store import TaskStore

__all__ = ["WorkerHost"]


class WorkerHost(Protocol):
    """The app of a worker, as the worker sees it."""

    @property
    def queues(self) -> Mapping[str, Queue]:
        """Declared queues by name."""
        ...

    @property
    def tasks(self) -> Mapping[str, TaskDef]:
        """Registered tasks by name (read when each claim starts)."""
        ...

    @property
    def schedules(self) -> Mapping[str, Schedule]:
        """Periodic schedules by name (run by the worker's scheduler)."""
        ...

    @property
    def policy(self) -> Policy:
        """Redaction of error messages, and the app's security hooks."""
        ...

    @property
    def limits(self) -> Limits:
        """Sizes and counts (``concurrency``, result and input sizes)."""
        ...

    @property
    def notices(self) -> Notices:
        """In-process notifications shared with the app's clients."""
        ...

    async def open(self) -> TaskStore:
        """The app's store, opened if it is not yet (idempotent)."""
        ...
