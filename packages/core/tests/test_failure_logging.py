"""How the runtime logs a failed store call it will try again."""

from __future__ import annotations

import logging

import pytest
from tasks_core._failures import log_failure
from tasks_core.errors import StoreUnavailable

log = logging.getLogger("tasks_core.test_failures")


def test_an_unavailable_store_is_one_warning_line_and_a_bug_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``StoreUnavailable`` (expected, retried) MUST be logged at WARNING with its message
    and no traceback; any other exception MUST be logged at ERROR with its traceback."""
    caplog.set_level(logging.WARNING, logger=log.name)
    try:
        raise StoreUnavailable("PostgreSQL is unavailable: ConnectionResetError")
    except StoreUnavailable:
        log_failure(log, "task %r: progress write failed", "t1")
    try:
        raise KeyError("bug")
    except KeyError:
        log_failure(log, "task %r: progress write failed", "t2")
    first, second = caplog.records
    assert (logging.WARNING, None) == (first.levelno, first.exc_info)
    assert first.getMessage() == (
        "task 't1': progress write failed: PostgreSQL is unavailable: ConnectionResetError")
    assert logging.ERROR == second.levelno
    assert second.exc_info is not None
    assert second.getMessage() == "task 't2': progress write failed"
