"""What a store logs about tasks no caller will hear of: the rule and the words, in one
place for every store (first-party or not).

- :func:`delivery_limit`: a claim failed a task past its delivery limit. The worker whose
  claim it was never sees that task, so the store says so once the failure is written.
- :func:`corrupt_skipped`: a listing, a claim or a sweep skipped a record that fails
  validation. It is said once per task and place in a process — a pending corrupt record
  is met again by every claim, and a busy worker claims hundreds of times a second — and
  names the task id only when it is a string (never stored text).

Both log WARNING; the delivery limit under ``tasks_core.worker`` (beside the worker's own
lines), skipped records under the store's own logger.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from tasks_core import telemetry
from tasks_core._inert import inert
from tasks_core.events import EventRecord
from tasks_core.models import Snapshot
from tasks_core.rules import DELIVERY_LIMIT_ERROR

__all__ = ["corrupt_skipped", "delivery_limit"]

_worker_log = logging.getLogger("tasks_core.worker")
_SKIPS_REMEMBERED = 10_000
"""Skipped records remembered per process (the oldest are forgotten, and said again)."""
_skips: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_skips_lock = threading.Lock()


def delivery_limit(task_id: str, record: EventRecord, *, snapshot: Snapshot | None = None
                   ) -> None:
    """Log that a claim failed ``task_id`` past its delivery limit; ``record`` is the
    failure ``rules.start_claim`` returned, ``snapshot`` the failed task (counted by
    telemetry when enabled and given). Call it once that failure is written."""
    if snapshot is not None and telemetry.active is not None:
        telemetry.active.delivery_limit(snapshot)
    why = record.error.message if record.error is not None else DELIVERY_LIMIT_ERROR
    _worker_log.warning("task %r failed instead of running again: %s (every claim is a "
                        "delivery: a crash, a lost lease, a release by a draining worker, a "
                        "claim held ahead and given back unstarted, or a wait for input each "
                        "used one)", task_id, inert(why))


def corrupt_skipped(log: logging.Logger, task_id: object, where: str) -> None:
    """Log, on ``log``, that ``where`` (``"claim_next"``, ``"a listing"``, ``"reap"``…)
    skipped the corrupt record of ``task_id`` — the first time this process meets it
    there."""
    shown = task_id if isinstance(task_id, str) else f"<an id of type {type(task_id).__name__}>"
    key = (log.name, str(shown), where)
    with _skips_lock:
        if key in _skips:
            _skips.move_to_end(key)
            return
        _skips[key] = None
        if len(_skips) > _SKIPS_REMEMBERED:
            _skips.popitem(last=False)
    log.warning("%s skipped the corrupt record of task %r (said once per process)", where,
                shown)
