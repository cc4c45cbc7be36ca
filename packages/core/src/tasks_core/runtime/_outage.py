"""Outages logged once: a failing call the runtime keeps retrying (a worker's wait for
work while the store's wakeups are down) says so when the outage begins and when it ends,
never once per retry.

Rule: the first failure after a success (or at start) is logged like any retried store
call (:func:`~tasks_core.runtime._failures.log_failure`: a ``StoreUnavailable`` as one WARNING
line, anything else with its traceback); the failures after it at DEBUG; the first success
after a failure as one INFO line.
"""

from __future__ import annotations

import logging

from tasks_core.runtime._failures import log_failure

__all__ = ["Outage"]


class Outage:
    """Whether ``what`` is failing now, and its log lines (see the module docstring).

    Args:
        logger: where the lines go.
        what: the call, as the log names it (``"waiting for work"``).
        fallback: what happens meanwhile, as the log says it (``"polling with backoff"``).
    """

    def __init__(self, logger: logging.Logger, what: str, fallback: str) -> None:
        self.logger = logger
        self.what = what
        self.fallback = fallback
        self.down = False
        self.failures = 0
        """Failures in a row (the current outage's)."""

    def failed(self) -> None:
        """The call failed: call it in the ``except`` block (it logs the exception being
        handled when the outage begins)."""
        self.failures += 1
        if self.down:
            self.logger.debug("%s failed again (%d in a row); still %s", self.what,
                              self.failures, self.fallback, exc_info=True)
            return
        self.down = True
        log_failure(self.logger, "%s failed; %s until it works again (logged once)",
                    self.what, self.fallback)

    def worked(self) -> None:
        """The call succeeded: an outage, if one was on, is over."""
        if self.down:
            self.logger.info("%s works again after %d failure(s)", self.what, self.failures)
        self.down = False
        self.failures = 0
