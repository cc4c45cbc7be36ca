"""Policy and limits: the security and size rules the runtime applies for every backend.

``Policy`` holds the pure hooks deciding who may use a queue, who may join someone else's
task, and what an error message may say; ``Limits`` holds the sizes. Both live in core and
are applied once, before a store is called, so no two stores can differ in security.

Hooks must be pure (no I/O, no side effects) and plain functions, answering at once: an
``async`` one is refused when the ``Policy`` is built. A hook that raises denies: the
authorizers answer ``False`` (and so does one answering anything but a ``bool``), the
redactor withholds the message.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tasks_core._store_models import NO_LIMIT
from tasks_core.arguments import MAX_RUNNING
from tasks_core.authority import Authority, Owner, System
from tasks_core.definitions import is_async_callable
from tasks_core.errors import AuthorizationError, InvalidInput
from tasks_core.models import MAX_MESSAGE_CHARS
from tasks_core.sizes import check_limit

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_RESULT_BYTES",
    "MAX_WATCHERS",
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
MAX_WATCHERS = 100
"""The most watchers one submit (or bulk item) may name: ``watchers=`` beyond it is
refused (``InvalidInput``) before anything is written."""

QueueAuthorizer = Callable[[str, Owner], bool]
"""``f(queue, owner) -> bool``: may ``owner`` submit to ``queue``?"""
WatchAuthorizer = Callable[[str, tuple[Owner, ...], Owner], bool]
"""``f(task_id, newcomers, submitter) -> bool``: may ``submitter`` add ``newcomers`` (itself
included when it joins) as watchers of a task it does not own — or, for a finished task, start
its new run (``newcomers`` may then be empty: a watcher re-running it)?"""
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
            it (a finished key: asked even when the submitter is already a watcher — the
            run is the owner's, with the submitter's input), or grants further watchers on
            it. Default: deny.
        error_redactor: ``f(exc, text) -> str``; default: the text unchanged. The result is
            capped at 2048 characters before it is stored.
        visibility: ``"watchers"`` (owner, watchers and System see a task) or ``"tenant"``
            (every principal of the tenant may read; only members cancel and respond).

    Rule: a hook is a plain callable that answers at once (it is called without
    ``await``); an authorizer grants only when it answers ``True`` — any other answer
    (``1``, ``numpy.bool_``, ``None``, an awaitable) denies, with a WARNING naming the
    hook on every such call.

    Raises:
        InvalidInput: a hook that is not callable, or a coroutine function (or an object
            whose ``__call__`` is one); a bad ``visibility``.
    """

    queue_authorizer: QueueAuthorizer | None = None
    watch_authorizer: WatchAuthorizer | None = None
    error_redactor: Redactor | None = None
    visibility: Literal["watchers", "tenant"] = "watchers"

    def __post_init__(self) -> None:
        if self.visibility not in ("watchers", "tenant"):
            raise InvalidInput("visibility must be 'watchers' or 'tenant'")
        for name in ("queue_authorizer", "watch_authorizer", "error_redactor"):
            _check_hook(name, getattr(self, name))

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
                redacted: object = self.error_redactor(exc, text)
                if not isinstance(redacted, str):
                    _discard(redacted)
                    raise TypeError("error_redactor must return a str")
                text = redacted
            except Exception as failure:
                log.error("error_redactor raised %s; the message of %s is withheld",
                          _name(failure), _name(exc))
                text = f"{_name(exc)} (message withheld: the error redactor failed)"
        return _storable(text[:MAX_MESSAGE_CHARS])[:MAX_MESSAGE_CHARS]


def _check_hook(name: str, fn: object) -> None:
    """Refuse a hook the runtime could not call for an answer at once (see :class:`Policy`).

    Raises:
        InvalidInput: not callable (``None`` is: no hook), or a coroutine function.
    """
    if fn is None:
        return
    if not callable(fn):
        raise InvalidInput(f"{name} must be a function (or None), not {type(fn).__name__}")
    if is_async_callable(fn):
        raise InvalidInput(f"{name} must be a plain function answering at once, not async: "
                           "hooks are called without await")


def _ask(hook: str, fn: Callable[..., bool], *args: object) -> bool:
    """Whether ``fn(*args)`` grants: only an answer of ``True`` does. One that raises
    denies (logged with its traceback); one that is not a ``bool`` denies with a WARNING
    naming the hook (an awaitable answer is closed, never left un-awaited)."""
    try:
        answer: object = fn(*args)
    except Exception:
        log.exception("%s raised; denying", hook)
        return False
    if isinstance(answer, bool):
        return answer
    _discard(answer)
    log.warning("%s answered %s, not a bool; denying (a hook answers True or False, at once)",
                hook, type(answer).__name__)
    return False


def _discard(answer: object) -> None:
    """Close ``answer`` when it is a coroutine (a hook that handed one back): it is never
    awaited, and Python would warn of that when it is collected."""
    if inspect.iscoroutine(answer):
        answer.close()


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
