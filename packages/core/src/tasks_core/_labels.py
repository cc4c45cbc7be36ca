"""The ``task`` label of the task metrics (:mod:`tasks_core.telemetry`): a name an App in
this process registered, else :data:`UNREGISTERED`. Rule: a name may be submitted without
being registered, so a label taken from what was submitted would let any submitter add
series to every worker's metrics; the registrations bound the label's values instead.
"""

from __future__ import annotations

__all__ = ["UNREGISTERED", "note_registered", "task_label"]

UNREGISTERED = "(unregistered)"
"""The ``task`` label of a name no App in this process registered."""
_registered: set[str] = set()


def note_registered(name: str) -> None:
    """Record that an App in this process registered a task named ``name``."""
    _registered.add(name)


def task_label(name: str) -> str:
    """The ``task`` label of a task named ``name`` (module docstring)."""
    return name if name in _registered else UNREGISTERED
