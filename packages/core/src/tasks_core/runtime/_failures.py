"""How the runtime logs a store call that failed and will be tried again.

A store that is unavailable (``StoreUnavailable``: a lost connection, a busy database) is
expected now and then, is retried, and says what happened in its message: it is logged as
a warning of one line. Another store refusal (``StoreError``: a schema changed under the
process, a privilege taken away) is an error of one line, its message naming the
driver's error class and code (its traceback is the driver's, the same at every retry).
Anything else is a bug somewhere and keeps its traceback.
"""

from __future__ import annotations

import logging
import sys

from tasks_core.errors import StoreError, StoreUnavailable

__all__ = ["log_failure"]


def log_failure(logger: logging.Logger, message: str, *args: object) -> None:
    """Log the exception being handled: ``message`` and the error's own text at WARNING
    for ``StoreUnavailable``, at ERROR for another ``StoreError``, else with its traceback
    (``logger.exception``). Call it in an ``except`` block."""
    error = sys.exc_info()[1]
    if isinstance(error, StoreError):
        level = logging.WARNING if isinstance(error, StoreUnavailable) else logging.ERROR
        logger.log(level, message + ": %s", *args, error)
    else:
        logger.exception(message, *args)
