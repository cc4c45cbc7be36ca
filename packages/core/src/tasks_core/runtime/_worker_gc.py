"""The garbage collector's settings for a process that serves as a worker (``tasks worker``).

Rule: what the process loaded before serving (modules, the app, the store) is left out of
the collector's scans (:func:`gc.freeze`, CPython's advice for long-lived servers), and a
young-generation collection starts only once :data:`YOUNG_THRESHOLD` more tracked objects
are alive than at the last one (CPython's default is 700). *Why:* a run allocates tens of
short-lived models, and at 700 young collections took a share of the worker's CPU (figures:
packages/store-sql/bench/LOG.md; rule: docs/design.md, "CLI and demo"). Objects
still die by reference counting at once; the threshold only delays the search for cycles,
so memory grows by at most that many objects. The older generations keep their
thresholds.

Only processes the package owns apply it: a worker embedded in an application's process
leaves that process's collector alone. The undo unfreezes everything frozen, which only
the process's owner should ask for.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

__all__ = ["YOUNG_THRESHOLD", "tune_for_serving"]

YOUNG_THRESHOLD = 10_000
"""Tracked objects alive beyond the last collection that start the next young one."""


def tune_for_serving() -> Callable[[], None]:
    """Freeze what is loaded and raise the young generation's threshold to at least
    :data:`YOUNG_THRESHOLD`; returns the function that undoes both."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], YOUNG_THRESHOLD), *before[1:])

    def undo() -> None:
        gc.set_threshold(*before)
        gc.unfreeze()

    return undo
