"""The one sync adapter: ``app.sync.submit(...)`` and friends for Django/Flask callers.

Not a second implementation: every method runs the async method of the same ``App`` on the
loop the app was opened on when it runs in another thread (an async server hosting sync
views), else on a private loop in a daemon thread started on first use, and blocks for its
result. Calling it from the app's own loop thread would deadlock: ``RuntimeError``.
``close()`` ends the calls in flight first. A process forked from one that used the private
loop (gunicorn ``--preload``) has neither its thread nor a right to the store connections
opened on it: the child forgets both — keeping them, never closing what is the parent's —
and opens its own on first use.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import os
import threading
import warnings
import weakref
from collections.abc import AsyncGenerator, Coroutine, Iterable, Iterator, Mapping
from typing import Any, TypeVar, Unpack

from tasks_core.authority import Authority
from tasks_core.definitions import Submitted, TaskDef
from tasks_core.durations import Seconds
from tasks_core.events import EventRecord, Transition
from tasks_core.items import SubmitItem
from tasks_core.models import Snapshot, TaskStatus
from tasks_core.options import SubmitOptions
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
        self._in_flight: set[concurrent.futures.Future[Any]] = set()
        """Calls running on the private loop (guarded by ``_lock``)."""
        self._ended: set[concurrent.futures.Future[Any]] = set()
        """Those of them :meth:`close` ended."""
        self._closed_loop: asyncio.AbstractEventLoop | None = None
        """The private loop :meth:`close` last closed (or is closing): a call that picked
        it is refused (guarded by ``_lock``)."""
        _facades.add(self)

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's private loop and, when the app opened
        its store there, that store (kept referenced, never closed: its connections are
        the parent's), so the next call starts both afresh in this process."""
        self._lock = threading.Lock()
        self._in_flight.clear()  # the parent's calls: they end in the parent
        self._ended.clear()
        portal, self._portal = self._portal, None
        if portal is None:
            return
        _inherited.append(portal)
        if self._app.loop is portal.loop and (store := self._app.forget_store()) is not None:
            _inherited.append(store)

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
        if running is not None:
            warnings.warn("app.sync blocks the event loop running in this thread until its "
                          "call returns; await the App's async method instead",
                          RuntimeWarning, stacklevel=3)
        with self._lock:  # in flight before it can run: close() then always sees it
            if loop is self._closed_loop:
                coro.close()
                raise RuntimeError("app.sync.close() closed the loop this call was to run "
                                   "on; it did not run")
            future = asyncio.run_coroutine_threadsafe(coro, loop)
            self._in_flight.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if future in self._ended:
                raise RuntimeError("app.sync.close() ended this call before it "
                                   "finished") from None
            raise
        finally:
            with self._lock:
                self._in_flight.discard(future)
                self._ended.discard(future)

    def close(self) -> None:
        """End the calls still running on the private loop (each raises ``RuntimeError``
        in its thread, as does a call reaching the loop from now on), close the store (if
        opened here) and stop the loop."""
        portal = self._portal
        if portal is None:
            return
        with self._lock:
            self._closed_loop = portal.loop
            running = list(self._in_flight)
            self._ended.update(running)  # before the cancel wakes their threads
        for future in running:
            future.cancel()
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
        **options: Unpack[SubmitOptions],
    ) -> Submitted:
        """Blocking :meth:`App.submit`."""
        return self._run(self._app.submit(task, input, authority, **options))

    def submit_many(
        self,
        items: Iterable[SubmitItem | Mapping[str, Any]],
        authority: Authority,
        /,
        *,
        transaction: Any = None,
    ) -> builtins.list[Submitted]:
        """Blocking :meth:`App.submit_many`."""
        return self._run(self._app.submit_many(items, authority, transaction=transaction))

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


_facades: weakref.WeakSet[SyncApp] = weakref.WeakSet()
"""Every facade of this process, reset in a forked child (:meth:`SyncApp._after_fork`)."""

_inherited: list[object] = []
"""What a forked child inherited and must neither use nor close (nor let the collector
finalize: a connection's close would end the parent's session)."""


def _reset_after_fork() -> None:
    for facade in list(_facades):
        facade._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
