"""Cancel wakeups (private): ``wait_for_cancels`` read from a change stream.

Each wait opens a change stream on the tasks collection that passes only writes setting
``status`` to ``cancelled`` (a transition's ``$set``; an insert or replacement storing a
cancelled task), started after the resume token where the store's previous cancel stream
stopped — so a cancel committed between two waits comes back in the next stream's first
batch, whatever the timeout. The token moves only past changes a stream has handed over:
each is reported if the caller watches its task at that moment (``task_ids`` is read
live), else kept (at most :data:`UNREPORTED_CANCELS`, oldest dropped) for a later wait
that watches it. A token the server can no longer resume from (history rolled off the
oplog, collection dropped) is dropped with a warning and the stream starts from now: the
cancels in between reach the worker at its heartbeat instead.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Collection, Mapping
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError
from tasks_core.durations import check_wait_timeout
from tasks_core.errors import CapabilityNotSupported

from tasks_store_mongo._base import MongoBase, operation
from tasks_store_mongo._driver import settle, transient

__all__ = ["CANCELS", "UNREPORTED_CANCELS", "MongoCancels"]

log = logging.getLogger("tasks_store_mongo")

UNREPORTED_CANCELS = 10_000
"""Cancels kept for a later wait when no waiter watched their task."""
MAX_AWAIT_MS = 250
"""The longest server-side wait of one read, so a wait ends promptly at its timeout."""
CANCELS: dict[str, Any] = {
    "$or": [
        {"operationType": "update", "updateDescription.updatedFields.status": "cancelled"},
        {"operationType": {"$in": ["insert", "replace"]}, "fullDocument.status": "cancelled"},
    ]
}
"""Change events that cancel a task (``updatedFields`` lists only changed fields)."""


class MongoCancels(MongoBase):
    """``wait_for_cancels`` (capability ``cancel_wakeups``: a replica set only)."""

    @operation
    async def wait_for_cancels(
        self, task_ids: Collection[str], timeout: float
    ) -> builtins.set[str]:
        """Wait until a task of ``task_ids`` is cancelled, by any process, or ``timeout``
        seconds pass (see ``TaskStore.wait_for_cancels`` and the module docstring).

        Raises:
            CapabilityNotSupported: a standalone server (no change streams).
            InvalidInput: ``timeout`` is not a finite number of seconds >= 0.
            StoreUnavailable: transient failure.
        """
        if not self.capabilities.cancel_wakeups:
            raise CapabilityNotSupported(
                "cancel wakeups need a MongoDB replica set (change streams)"
            )
        seconds = check_wait_timeout(timeout)
        # The token before the kept cancels: a wait (on another loop) keeps a cancel
        # before it stores a token past it, so each cancel is kept or after the token.
        token = self._cancels_after
        found = self._take_unreported(task_ids)
        if found:
            return found
        try:
            return await self._read_cancels(task_ids, seconds, token)
        except PyMongoError:
            if self._closed:
                return set()
            raise

    async def _read_cancels(
        self, task_ids: Collection[str], seconds: float, token: Mapping[str, Any] | None
    ) -> builtins.set[str]:
        """Read the cancel stream until a watched task is cancelled or ``seconds`` pass;
        changes already there are read past the deadline, for at most one more
        server-side wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        await_ms = max(1, int(min(seconds * 1000, MAX_AWAIT_MS)))
        stream, change = await self._open_cancels(token, await_ms)
        found: builtins.set[str] = set()
        try:
            while not self._closed:
                if change is not None:
                    self._sort(change, task_ids, found)
                    if found:
                        break
                now = loop.time()
                if now >= deadline and (change is None or now >= deadline + await_ms / 1000):
                    break
                if not stream.alive:  # invalidated (the collection was dropped)
                    break
                change = await stream.try_next()
        finally:
            stopped = stream.resume_token  # past the last change handed over
            if stopped is not None:
                self._cancels_after = stopped
            await settle(stream.close())
        return found

    async def _open_cancels(
        self, token: Mapping[str, Any] | None, await_ms: int
    ) -> tuple[Any, Any]:
        """A cancel stream started after ``token`` (else from now), and its first change
        or ``None``: opened by that first read (motor opens lazily)."""
        try:
            return await self._start_cancels(token, await_ms)
        except OperationFailure as exc:
            if token is None or transient(exc) or exc.has_error_label(
                "ResumableChangeStreamError"
            ):
                raise
            log.warning(
                "The cancel stream cannot resume where it stopped (code %s); it starts "
                "from now, and cancels committed since reach workers at their heartbeat",
                exc.code,
            )
            if self._cancels_after is token:
                self._cancels_after = None
            return await self._start_cancels(None, await_ms)

    async def _start_cancels(
        self, token: Mapping[str, Any] | None, await_ms: int
    ) -> tuple[Any, Any]:
        stream = await settle(
            self._tasks.watch(
                [{"$match": CANCELS}], max_await_time_ms=await_ms, start_after=token
            )
        )
        try:
            return stream, await stream.try_next()
        except BaseException:
            await settle(stream.close())
            raise

    def _sort(
        self, change: Mapping[str, Any], task_ids: Collection[str], found: builtins.set[str]
    ) -> None:
        """Add the cancelled task to ``found`` if ``task_ids`` holds it now, else keep it
        for a later wait."""
        key = change.get("documentKey")
        task_id = key.get("_id") if isinstance(key, Mapping) else None
        if not isinstance(task_id, str):
            return
        if task_id in task_ids:
            found.add(task_id)
            return
        with self._unreported_lock:
            self._unreported[task_id] = None
            self._unreported.move_to_end(task_id)
            while len(self._unreported) > UNREPORTED_CANCELS:
                self._unreported.popitem(last=False)

    def _take_unreported(self, task_ids: Collection[str]) -> builtins.set[str]:
        """The kept cancels of tasks in ``task_ids``, no longer kept."""
        with self._unreported_lock:
            if not self._unreported:
                return set()
            if len(task_ids) < len(self._unreported):
                found = {t for t in list(task_ids) if t in self._unreported}
            else:
                found = {t for t in self._unreported if t in task_ids}
            for task_id in found:
                del self._unreported[task_id]
        return found

