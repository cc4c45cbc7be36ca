"""How the runtime logs a store call that failed and will be tried again.

A store that is unavailable (``StoreUnavailable``: a lost connection, a busy database) is
expected now and then, is retried, and says what happened in its message: it is logged as
a warning of one line. Anything else is a bug somewhere and keeps its traceback.
"""

from __future__ import annotations

import logging
import sys

from tasks_core.errors import StoreUnavailable

__all__ = ["log_failure"]


def log_failure(logger: logging.Logger, message: str, *args: object) -> None:
    """Log the exception being handled: ``message`` and the error's own text at WARNING
    for ``StoreUnavailable``, else with its traceback (``logger.exception``). Call it in an
    ``except`` block."""
    error = sys.exc_info()[1]
    if isinstance(error, StoreUnavailable):
        logger.warning(message + ": %s", *args, error)
    else:
        logger.exception(message, *args)
