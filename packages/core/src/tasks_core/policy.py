"""Policy and limits: the security and size rules the runtime applies for every backend.

``Policy`` holds the pure hooks deciding who may use a queue, who may join someone else's
task, and what an error message may say; ``Limits`` holds the sizes. Both live in core and
are applied once, before a store is called, so no two stores can differ in security.

Hooks must be pure (no I/O, no side effects). A hook that raises denies: the authorizers
answer ``False``, the redactor withholds the message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tasks_core._store_models import NO_LIMIT
from tasks_core.arguments import MAX_RUNNING
from tasks_core.authority import Authority, Owner, System
from tasks_core.errors import AuthorizationError, InvalidInput
from tasks_core.models import MAX_MESSAGE_CHARS
from tasks_core.sizes import check_limit

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_RESULT_BYTES",
    "Limits",
    "Policy",
    "QueueAuthorizer",
    "Redactor",
    "WatchAuthorizer",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_INPUT_BYTES = 256 * 1024
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
DEFAULT_CONCURRENCY = 8

QueueAuthorizer = Callable[[str, Owner], bool]
"""``f(queue, owner) -> bool``: may ``owner`` submit to ``queue``?"""
WatchAuthorizer = Callable[[str, tuple[Owner, ...], Owner], bool]
"""``f(task_id, newcomers, submitter) -> bool``: may ``submitter`` add ``newcomers`` (itself
included when it joins) as watchers of a task it does not own?"""
Redactor = Callable[[BaseException, str], str]
"""``f(exc, text) -> str``: the error text that may be stored for ``exc``."""


@dataclass(frozen=True)
class Policy:
    """Who may do what, applied in core for every store.

    Attributes:
        queue_authorizer: ``f(queue, owner) -> bool``; default: every owner, every declared
            queue. ``System`` is not asked (it is the explicit bypass).
        watch_authorizer: ``f(task_id, newcomers, submitter) -> bool``; asked when a
            submitter who does not own a task joins it (a live key) or starts a new run of
            it (a finished key), or grants further watchers on it. Default: deny.
        error_redactor: ``f(exc, text) -> str``; default: the text unchanged. The result is
            capped at 2048 characters before it is stored.
        visibility: ``"watchers"`` (owner, watchers and System see a task) or ``"tenant"``
            (every principal of the tenant may read; only members cancel and respond).
    """

    queue_authorizer: QueueAuthorizer | None = None
    watch_authorizer: WatchAuthorizer | None = None
    error_redactor: Redactor | None = None
    visibility: Literal["watchers", "tenant"] = "watchers"

    def __post_init__(self) -> None:
        if self.visibility not in ("watchers", "tenant"):
            raise InvalidInput("visibility must be 'watchers' or 'tenant'")

    def check_queue(self, queue: str, authority: Authority) -> None:
        """Refuse ``queue`` to ``authority`` unless the queue authorizer allows it.

        Raises:
            AuthorizationError: the authorizer said no (or raised).
        """
        if isinstance(authority, System) or self.queue_authorizer is None:
            return
        if not _ask("queue_authorizer", self.queue_authorizer, queue, authority):
            raise AuthorizationError(f"Not authorized to submit to queue {queue!r}")

    def allows_watch(self, task_id: str, newcomers: tuple[Owner, ...], submitter: Owner) -> bool:
        """Whether ``submitter`` may add ``newcomers`` as watchers of ``task_id``."""
        if self.watch_authorizer is None:
            return False
        return _ask("watch_authorizer", self.watch_authorizer, task_id, newcomers, submitter)

    def redact(self, exc: BaseException) -> str:
        """The storable message of ``exc``: redacted, capped at 2048 characters, and valid
        Unicode (a lone surrogate, as ``surrogateescape`` decoding leaves them, is stored as
        its escape ``\\udcff``: no store can encode it).

        A redactor that raises (or returns something else than a ``str``) withholds the
        message: the stored text is ``"<ErrorType> (message withheld: the error redactor
        failed)"``, and the log names only the two exception types — never the original
        text, which the redactor's own error might quote.
        """
        text = _text(exc)
        if self.error_redactor is not None:
            try:
                text = self.error_redactor(exc, text)
                if not isinstance(text, str):
                    raise TypeError("error_redactor must return a str")
            except Exception as failure:
                log.error("error_redactor raised %s; the message of %s is withheld",
                          _name(failure), _name(exc))
                text = f"{_name(exc)} (message withheld: the error redactor failed)"
        return _storable(text[:MAX_MESSAGE_CHARS])[:MAX_MESSAGE_CHARS]


def _ask(hook: str, fn: Callable[..., bool], *args: object) -> bool:
    try:
        return fn(*args) is True
    except Exception:
        log.exception("%s raised; denying", hook)
        return False


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def _storable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return _name(exc)


@dataclass(frozen=True)
class Limits:
    """Sizes and counts, each with a default and a defined refusal (nothing is written).

    Attributes:
        max_input_bytes: compact JSON size of a task's input (and of one ``respond``
            payload); above it ``InvalidInput``. Default 256 KiB.
        max_result_bytes: compact JSON size of a handler's result; above it the run is
            recorded ``failed`` (``InvalidResult``, never retried) and the result is not
            stored. Default 1 MiB (a store writes the result twice, in the snapshot and
            the event: MariaDB's default packet limit is 16 MiB).
        max_runs_per_owner: live (non-terminal) tasks one owner may own; above it
            ``CapacityExceeded("max_runs_per_owner")``. Default: off. Checked by the
            runtime before the create, so concurrent submits may overshoot it slightly.
        concurrency: default worker concurrency (runs at once per worker). Default 8.
        max_tasks: stored tasks of every status (finished ones kept for their retention
            included), passed to a store the ``App`` opens from a URL (the store enforces
            it atomically: ``CapacityExceeded("max_tasks")``). Default: off. An ``App``
            given a store object refuses (``InvalidInput``) a value other than the default
            that the store was not opened with: set it where the store is opened.
        max_active_tasks_per_scope: likewise, live (not finished, not expired) tasks per
            tenant. Default: off.
    """

    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    max_runs_per_owner: int | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    max_tasks: int | None = None
    max_active_tasks_per_scope: int | None = None

    def __post_init__(self) -> None:
        checked = {"concurrency": check_limit(self.concurrency, maximum=MAX_RUNNING,
                                              what="concurrency")}
        for name in ("max_input_bytes", "max_result_bytes"):
            checked[name] = check_limit(getattr(self, name), maximum=NO_LIMIT, what=name)
        for name in ("max_runs_per_owner", "max_tasks", "max_active_tasks_per_scope"):
            value = getattr(self, name)
            if value is not None:
                checked[name] = check_limit(value, maximum=NO_LIMIT, what=f"{name} (None: off)")
        for name, value in checked.items():  # each a plain int (a NumPy integer is not)
            object.__setattr__(self, name, value)
