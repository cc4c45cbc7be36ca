"""The root of the error tree and ``InvalidInput``, below everything that validates: the
model, authority and durations raise them without importing :mod:`tasks_core.errors`,
whose other errors carry snapshots (so ``errors`` imports the model, never the reverse).
"""

from __future__ import annotations

__all__ = ["InvalidInput", "TasksError"]


class TasksError(Exception):
    """A tasks operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else _default_message(type(self)))


def _default_message(cls: type[BaseException]) -> str:
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0]


class InvalidInput(TasksError, ValueError):
    """Invalid input; nothing was written."""
