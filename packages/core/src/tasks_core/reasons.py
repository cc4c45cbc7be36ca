"""Why a run stopped, and the one table its stored messages are rendered from.

No call site passes a cancellation or timeout message in: they are all rendered here, so
every store and every runtime path reads the same.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CancelReason", "delivery_limit_message", "reason_error", "timeout_message"]


class CancelReason(StrEnum):
    """The cause of a cancellation token (persisted values: never rename)."""

    USER = "user"
    TIMEOUT = "timeout"
    SUPERSEDED = "superseded"
    SHUTDOWN = "shutdown"


_MESSAGES: dict[CancelReason, tuple[str, str]] = {
    CancelReason.USER: ("Cancelled", "Cancelled by user"),
    CancelReason.TIMEOUT: ("TaskTimeout", "Timeout of {timeout}s exceeded"),
    CancelReason.SUPERSEDED: ("Superseded", "Superseded by a new run of the same key"),
    CancelReason.SHUTDOWN: ("Shutdown", "Released by worker shutdown"),
}


def reason_error(reason: CancelReason, **fields: object) -> tuple[str, str]:
    """Return ``(error_type, message)`` stored for a run stopped by ``reason``."""
    error_type, template = _MESSAGES[reason]
    return error_type, template.format(**fields)


def timeout_message(timeout_s: float) -> str:
    """The stored message of a timed-out run."""
    return reason_error(CancelReason.TIMEOUT, timeout=f"{timeout_s:g}")[1]


def delivery_limit_message(max_deliveries: int) -> str:
    """The stored message of a task failed for exceeding its delivery limit ("exceeded 1
    delivery", "exceeded 25 deliveries")."""
    noun = "delivery" if max_deliveries == 1 else "deliveries"
    return f"exceeded {max_deliveries} {noun}"


WORKER_LOST_MESSAGE = "Worker process terminated unexpectedly"
