"""The garbage collector's settings for a process that serves as a worker (``tasks worker``).

Rule: what the process loaded before serving is left out of the collector's scans
(:func:`gc.freeze`, CPython's advice for long-lived servers), and a young collection starts
only once :data:`YOUNG_THRESHOLD` more tracked objects are alive than at the last one
(CPython's default is 700): a run allocates many short-lived models (docs/design.md, "CLI
and demo"). Objects still die by reference counting at once; only the search for cycles
waits. Only processes the package owns apply it: an embedded worker leaves its process's
collector alone; the undo unfreezes everything frozen, which only the owner should ask for.
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
