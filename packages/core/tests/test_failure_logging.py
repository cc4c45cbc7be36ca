"""How the runtime logs a failed store call it will try again, and what stores report
(``tasks_core.reports``)."""

from __future__ import annotations

import logging

import pytest
from tasks_core import reports
from tasks_core.errors import StoreError, StoreUnavailable
from tasks_core.runtime._failures import log_failure

log = logging.getLogger("tasks_core.test_failures")


def test_an_unavailable_store_is_one_warning_line_and_a_bug_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``StoreUnavailable`` (expected, retried) MUST be logged at WARNING with its message
    and no traceback; another ``StoreError`` (a schema changed under a running worker: a
    traceback at every backoff) at ERROR with its message and no traceback; any other
    exception at ERROR with its traceback."""
    caplog.set_level(logging.WARNING, logger=log.name)
    try:
        raise StoreUnavailable("PostgreSQL is unavailable: ConnectionResetError")
    except StoreUnavailable:
        log_failure(log, "task %r: progress write failed", "t1")
    try:
        raise KeyError("bug")
    except KeyError:
        log_failure(log, "task %r: progress write failed", "t2")
    try:
        raise StoreError("PostgreSQL refused the operation: UndefinedColumnError [42703]")
    except StoreError:
        log_failure(log, "worker %s: claim failed; backing off", "w1")
    first, second, third = caplog.records
    assert (logging.ERROR, None) == (third.levelno, third.exc_info)
    assert third.getMessage() == ("worker w1: claim failed; backing off: PostgreSQL refused "
                                  "the operation: UndefinedColumnError [42703]")
    assert (logging.WARNING, None) == (first.levelno, first.exc_info)
    assert first.getMessage() == (
        "task 't1': progress write failed: PostgreSQL is unavailable: ConnectionResetError")
    assert logging.ERROR == second.levelno
    assert second.exc_info is not None
    assert second.getMessage() == "task 't2': progress write failed"


def test_a_skipped_corrupt_record_is_said_once_per_place_and_never_quotes_a_stored_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``reports.corrupt_skipped`` MUST log a task's skipped record once per place (a
    pending record is met by every claim), again for another place, and name an id that
    is not a string by its type only (it is stored data)."""
    log = logging.getLogger("tasks_test.reports")
    with caplog.at_level("WARNING", logger=log.name):
        for _ in range(3):
            reports.corrupt_skipped(log, "t-1", "claim_next")
        reports.corrupt_skipped(log, "t-1", "a listing")
        reports.corrupt_skipped(log, {"SECRET": 1}, "a listing")
    assert [
        "claim_next skipped the corrupt record of task 't-1' (said once per process)",
        "a listing skipped the corrupt record of task 't-1' (said once per process)",
        "a listing skipped the corrupt record of task '<an id of type dict>' (said once per "
        "process)",
    ] == caplog.messages
