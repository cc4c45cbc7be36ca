"""The keyword options of a submit and of a worker, as types for ``**options``.

``App.submit`` and ``Worker(...)`` spell their options out; the calls that pass them on
(``TaskDef.submit``, ``app.sync.submit``, ``app.worker``, ``app.run_worker``) take
``**options: Unpack[...]`` of these, so a type checker checks every option there too. The
names and types are those of ``Client.submit`` and ``Worker.__init__`` (a test keeps
them equal). ``UNSET`` marks an option left to the task's (or app's) default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, Literal, TypedDict

from tasks_core.authority import Owner
from tasks_core.durations import Seconds
from tasks_core.models import RetryPolicy

__all__ = ["UNSET", "SubmitOptions", "Unset", "WorkerOptions"]


class Unset(Enum):
    """The type of :data:`UNSET`."""

    UNSET = "unset"


UNSET = Unset.UNSET
"""Marks an option left to the task's (or app's) default; ``None`` means "none"."""


class SubmitOptions(TypedDict, total=False):
    """The keyword options of ``App.submit`` (see it for each)."""

    key: str | None
    dedup: Literal["owner", "global"]
    watchers: Sequence[Owner]
    queue: str | None
    ttl: Seconds | Unset | None
    retention: Seconds | Unset | None
    retry: RetryPolicy | None
    timeout: Seconds | Unset | None
    max_deliveries: int | None
    idempotency_key: str | None
    transaction: Any
    delay: Seconds | None
    run_at: datetime | None
    priority: int | None


class WorkerOptions(TypedDict, total=False):
    """The keyword options of ``Worker(app, ...)`` (see it for each)."""

    queues: Sequence[str] | None
    concurrency: int | None
    queue_concurrency: Mapping[str, int] | None
    worker_id: str | None
    lease_for: Seconds
    recover: Literal["retry", "fail"]
    input_park: Seconds
    poll_interval: Seconds
    min_poll: Seconds
    progress_interval: Seconds
    reap_interval: Seconds | None
    batch_window: Seconds
    commit_batch: int
    prefetch: int | Literal["auto"]
    drain_timeout: Seconds
    periodic: bool
