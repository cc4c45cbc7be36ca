"""``App``: the task registry, the client API, and the home of the app's workers.

The layers: :class:`~tasks_core.runtime._app_registry.Registry` (``@app.task``, queues),
:class:`~tasks_core.runtime._client_reads.ClientReads` (the store's lifecycle, reads),
:class:`~tasks_core.runtime._client.Client` (the calls that change tasks), and ``App``,
which adds workers and the blocking facade. A worker sees its app only as a
:class:`~tasks_core.runtime._host.WorkerHost`.
"""

from __future__ import annotations

from typing import Unpack

from tasks_core.definitions import Submitted
from tasks_core.options import UNSET, WorkerOptions
from tasks_core.runtime._client import Client
from tasks_core.runtime._client_reads import DEFAULT_RETENTION_S, Page
from tasks_core.runtime._sync import SyncApp
from tasks_core.runtime.worker import Worker

__all__ = ["DEFAULT_RETENTION_S", "UNSET", "App", "Page", "Submitted"]


class App(Client):
    """Tasks, queues, policy and the store: the client API and the worker's home.

    Args:
        url: store URL (``"sqlite:///tasks.db"``, ``"memory://"``…); default
            ``$TASKS_STORE``, else SQLite when its plugin is installed, else memory.
        store: a store the application owns (not closed by the app); excludes ``url``.
        policy: security hooks and visibility (default :class:`Policy`).
        limits: sizes and counts (default :class:`Limits`).
        queues: declared queues (names or :class:`Queue`); ``"default"`` and every
            ``@app.task(queue=…)`` are declared too.
        retention: default seconds a finished task is kept (``None``: until deleted).
        store_options: extra options for the store opened from ``url``.
        poll_interval: how often ``watch``/``wait`` re-read the store when nothing local
            wakes them.

    Attributes:
        notices: what the app's clients and workers tell each other in this process.

    Every argument is checked here, when the app is made, never at its first call.

    Raises:
        InvalidInput: a malformed argument, naming it: a blank ``url``, both ``url`` and
            ``store``, a ``store_options`` key that is not a str, bad ``queues``, a
            ``retention`` or ``poll_interval`` that is not a duration in range (see
            :mod:`tasks_core.durations`), ``limits`` a given store does not enforce.
        TypeError: an argument of the wrong class, naming it: a ``url`` that is not a
            str, a ``store`` that is not a ``TaskStore``, a ``policy`` not a ``Policy``,
            ``limits`` not a ``Limits``, ``store_options`` not a mapping.
    """

    _sync: SyncApp | None = None

    # -- workers and the sync facade -----------------------------------------------------

    def worker(self, **options: Unpack[WorkerOptions]) -> Worker:
        """A :class:`~tasks_core.Worker` of this app (``async with`` it, or
        ``await worker.run()``)."""
        return Worker(self, **options)

    async def run_worker(self, **options: Unpack[WorkerOptions]) -> None:
        """Run a worker until it is shut down or cancelled (see ``Worker`` for options)."""
        await self.worker(**options).run()

    @property
    def sync(self) -> SyncApp:
        """The blocking facade for sync callers (Django views, Flask, scripts)."""
        if self._sync is None:
            self._sync = SyncApp(self)
        return self._sync

