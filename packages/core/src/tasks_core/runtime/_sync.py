"""The one sync adapter: ``app.sync.submit(...)`` and friends for Django/Flask callers.

Not a second implementation: every method runs the async method of the same ``App`` on an
event loop and blocks for its result —

- on the loop the app was opened on, when that loop runs in another thread (an async
  server hosting sync views);
- otherwise on a private loop in a daemon thread, started on first use, where the app
  opens its store (stores bind to the loop they were opened on).

Calling it from the app's own loop thread would deadlock, so it raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from tasks_core.authority import Authority
from tasks_core.definitions import Submitted, TaskDef
from tasks_core.durations import Seconds
from tasks_core.events import EventRecord, Transition
from tasks_core.items import SubmitItem
from tasks_core.models import Snapshot, TaskStatus
from tasks_core.runtime._client import Client
from tasks_core.runtime._client_reads import Page

__all__ = ["SyncApp"]

T = TypeVar("T")


class _Portal:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tasks-sync",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncApp:
    """Blocking twins of the ``App`` client calls (same arguments, same errors)."""

    def __init__(self, app: Client) -> None:
        self._app = app
        self._portal: _Portal | None = None
        self._lock = threading.Lock()

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._app.loop
        if loop is not None and loop.is_running():
            return loop
        if loop is not None and (self._portal is None or loop is not self._portal.loop):
            raise RuntimeError("the app was opened on an event loop that is not running; "
                               "close it (await app.aclose()) before using app.sync")
        with self._lock:
            if self._portal is None:
                self._portal = _Portal()
            return self._portal.loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            loop = self._loop()
        except BaseException:
            coro.close()  # never run: no "coroutine was never awaited" warning
            raise
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("app.sync called on the app's own event loop; await the async "
                               "method instead")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def close(self) -> None:
        """Close the store (if opened here) and stop the private loop."""
        portal = self._portal
        if portal is None:
            return
        if self._app.loop is portal.loop:
            asyncio.run_coroutine_threadsafe(self._app.aclose(), portal.loop).result()
        self._portal = None
        portal.close()

    def submit(
        self,
        task: TaskDef | str,
        input: Mapping[str, Any] | None,
        authority: Authority,
        /,
        **options: Any,
    ) -> Submitted:
        """Blocking :meth:`App.submit`."""
        return self._run(self._app.submit(task, input, authority, **options))

    def submit_many(
        self,
        items: Iterable[SubmitItem | Mapping[str, Any]],
        authority: Authority,
        /,
        **options: Any,
    ) -> builtins.list[Submitted]:
        """Blocking :meth:`App.submit_many`."""
        return self._run(self._app.submit_many(items, authority, **options))

    def get(self, task_id: str, authority: Authority, /) -> Snapshot:
        """Blocking :meth:`App.get`."""
        return self._run(self._app.get(task_id, authority))

    def list(
        self,
        authority: Authority,
        /,
        *,
        status: TaskStatus | str | Iterable[TaskStatus | str] | None = None,
        queue: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> Page:
        """Blocking :meth:`App.list`."""
        return self._run(self._app.list(authority, status=status, queue=queue, after=after,
                                        limit=limit))

    def history(self, task_id: str, authority: Authority, /) -> builtins.list[EventRecord]:
        """Blocking :meth:`App.history`."""
        return self._run(self._app.history(task_id, authority))

    def watch(
        self, task_id: str, authority: Authority, /, *, poll_interval: Seconds | None = None
    ) -> Iterator[Snapshot]:
        """Blocking :meth:`App.watch`: an iterator whose every step blocks until the task's
        next change (the same snapshots, the same errors); leaving the loop early ends the
        watch on the app's loop."""
        changes = self._app.watch(task_id, authority, poll_interval=poll_interval)
        try:
            while (snapshot := self._run(_next(changes))) is not None:
                yield snapshot
        finally:
            self._run(changes.aclose())

    def wait(
        self, task_id: str, authority: Authority, /, *, timeout: Seconds | None = None
    ) -> Snapshot:
        """Blocking :meth:`App.wait`."""
        return self._run(self._app.wait(task_id, authority, timeout=timeout))

    def cancel(self, task_id: str, authority: Authority, /) -> Snapshot:
        """Blocking :meth:`App.cancel`."""
        return self._run(self._app.cancel(task_id, authority))

    def respond(
        self, task_id: str, responses: Mapping[str, Any], authority: Authority, /
    ) -> Transition:
        """Blocking :meth:`App.respond`."""
        return self._run(self._app.respond(task_id, responses, authority))

    def release(self, task_id: str, authority: Authority, /) -> None:
        """Blocking :meth:`App.release`."""
        return self._run(self._app.release(task_id, authority))

    def reap(self, authority: Authority, /, *, limit: int = 1000) -> builtins.list[str]:
        """Blocking :meth:`App.reap`."""
        return self._run(self._app.reap(authority, limit=limit))


async def _next(changes: AsyncGenerator[Snapshot, None]) -> Snapshot | None:
    """The next snapshot of a watch; ``None`` once it has ended."""
    return await anext(changes, None)
