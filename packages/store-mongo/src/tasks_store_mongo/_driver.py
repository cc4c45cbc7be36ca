"""The driver boundary (private): motor or PyMongo's async client, errors, transactions.

Both drivers expose the same collection API; they differ only where a call is a coroutine
in one and a plain call in the other (``start_session``, ``start_transaction``, ``watch``,
``close``, ``cursor.close``). :func:`settle` absorbs that difference, so the store has one
implementation for both.

:func:`translate` is the one point where driver errors become the core error tree; a
refusal names the server's code and ``codeName``, never its message.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import random
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from bson.errors import InvalidDocument
from pymongo.errors import (
    ConfigurationError,
    ConnectionFailure,
    DocumentTooLarge,
    ExecutionTimeout,
    InvalidOperation,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
    WTimeoutError,
)
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern
from tasks_core.errors import (
    InvalidInput,
    StoreError,
    StoreUnavailable,
    TasksError,
)

__all__ = [
    "DRIVERS",
    "DURABLE",
    "TRANSACTION_BUDGET_S",
    "TRANSACTION_READ",
    "Driver",
    "TransientConflict",
    "application_session",
    "check_write_concern",
    "driver_of",
    "in_transaction",
    "open_client",
    "settle",
    "transient",
    "translate",
    "write_concern_for",
]

log = logging.getLogger(__name__)

Driver = Literal["pymongo", "motor"]
DRIVERS: tuple[Driver, ...] = ("pymongo", "motor")
TRANSACTION_BUDGET_S = 30.0
"""How long a transaction that keeps conflicting is tried again before ``StoreUnavailable``
(pymongo's own ``with_transaction`` tries for 120 s). Writers of one tenant all touch its
counter, so a burst of them queues up: each waits its turn, none is refused for it."""
_CODE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""A server ``codeName`` (``UnknownReplWriteConcern``): a fixed name, never stored data."""
_PROBE_ID = "tasks-store-mongo:write-concern-probe"
_BACKOFF_FIRST_S = 0.001
_BACKOFF_CAP_S = 0.05
_COMMIT_ATTEMPTS = 5
# mongod codes for "the document would be too large" (BSONObjectTooLarge and friends).
_TOO_LARGE = frozenset({10334, 17419, 17420})
_LOGIN_REFUSED = 18  # AuthenticationFailed
_TRANSACTION_TOO_LARGE = 388  # TransactionTooLargeForCache
# Codes that mean "try again later": shutting down, not primary, interrupted, busy.
_TRANSIENT_CODES = frozenset(
    {6, 7, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 251}
)

T = TypeVar("T")


class TransientConflict(Exception):
    """Raised by a transaction body whose compare-and-set missed: the transaction is
    aborted and the caller runs it again from its reads."""


async def settle(value: Any) -> Any:
    """``await value`` if it is awaitable (PyMongo async), else return it (motor)."""
    if inspect.isawaitable(value):
        return await value
    return value


def driver_of(client: Any) -> Driver:
    """Which driver ``client`` belongs to.

    Raises:
        InvalidInput: neither a motor ``AsyncIOMotorClient`` nor a PyMongo
            ``AsyncMongoClient`` (a synchronous ``MongoClient`` is refused too).
    """
    module = type(client).__module__
    if module.startswith("motor.") and hasattr(client, "start_session"):
        return "motor"
    from pymongo import AsyncMongoClient

    if isinstance(client, AsyncMongoClient):
        return "pymongo"
    raise InvalidInput(
        "client must be a pymongo AsyncMongoClient or a motor AsyncIOMotorClient"
    )


def application_session(driver: Driver, client: Any, value: Any) -> Any:
    """``value`` checked as the application's session for ``create(transaction=…)``: a
    client session of ``driver`` started on ``client`` (the store's own), inside a
    transaction the application started and has not ended.

    Raises:
        InvalidInput: not a session of ``driver``, a session of another client, or a
            session with no transaction in progress.
    """
    if driver == "motor":
        try:
            from motor.motor_asyncio import AsyncIOMotorClientSession
        except ImportError:  # pragma: no cover - a motor client implies motor
            is_session = False
        else:
            is_session = isinstance(value, AsyncIOMotorClientSession)
        kind = "motor AsyncIOMotorClientSession"
    else:
        from pymongo.asynchronous.client_session import AsyncClientSession

        is_session = isinstance(value, AsyncClientSession)
        kind = "pymongo AsyncClientSession"
    if not is_session:
        raise InvalidInput(
            f"transaction must be a {kind} of the store's client "
            "(client.start_session()), inside the transaction you started"
        )
    if value.client is not client:
        raise InvalidInput(
            "transaction is a session of another client: start it on the client the "
            "store uses (the one passed as client=)"
        )
    if value.has_ended or not value.in_transaction:
        raise InvalidInput(
            "transaction is a session with no transaction in progress: call "
            "session.start_transaction() first (and create before you commit)"
        )
    return value


def open_client(url: str, driver: Driver, **client_options: Any) -> Any:
    """A new client for ``url`` with ``driver`` (connects lazily); ``client_options`` go
    to the client's constructor (tests pass ``event_listeners``).

    Raises:
        InvalidInput: motor asked for but not installed, or a malformed URL.
    """
    with translate():
        if driver == "motor":
            try:
                from motor.motor_asyncio import AsyncIOMotorClient
            except ImportError:
                raise InvalidInput(
                    "driver=motor needs motor: pip install 'tasks-store-mongo[motor]'"
                ) from None
            return AsyncIOMotorClient(url, tz_aware=True, **client_options)
        from pymongo import AsyncMongoClient

        return AsyncMongoClient(url, tz_aware=True, **client_options)


DURABLE = WriteConcern("majority", j=True)
"""The store's default write concern: acknowledged once a majority of the replica set has
the write in its journal (on a standalone server: once it is journaled)."""


TRANSACTION_READ = ReadConcern("majority")
"""The read concern of the store's transactions (replica set or sharded cluster only: a
standalone server runs none): what a transaction decides on was majority-committed."""


def write_concern_for(client: Any) -> WriteConcern:
    """The write concern of every write of a store on ``client`` (and of its commits).

    ``{w: "majority", j: true}`` unless the client's own write concern (its URL's
    ``w``/``journal``/``fsync``, or its constructor's) names ``w``, ``j`` or ``fsync``:
    then the client's is taken as it is — the application chose it knowingly. A
    ``wtimeoutMS`` alone keeps the default and adds the timeout.

    Raises:
        InvalidInput: an unacknowledged concern (``w=0``): a compare-and-set must know
            whether it matched.
    """
    given: dict[str, Any] = dict(client.write_concern.document)
    if not {"w", "j", "fsync"} & set(given):
        given = {**DURABLE.document, **given}
    concern = WriteConcern(
        given.get("w"), wtimeout=given.get("wtimeout"), j=given.get("j"),
        fsync=given.get("fsync"),
    )
    if not concern.acknowledged:
        raise InvalidInput("MongoStore needs acknowledged writes: w=0 is not supported")
    return concern


@contextmanager
def translate() -> Iterator[None]:
    """Turn driver errors into the core tree (``raise … from exc``).

    Messages name the error class and code only: a server message can quote stored data
    (a duplicate key, a failing document).
    """
    try:
        yield
    except TasksError:
        raise
    except UnicodeEncodeError as exc:  # BSON strings are UTF-8: no lone surrogates
        raise InvalidInput(
            "Text stored outside a payload (a message, a name) must be valid Unicode: "
            "MongoDB cannot store lone surrogates"
        ) from exc
    except (DocumentTooLarge, InvalidDocument) as exc:
        raise InvalidInput(
            f"The task document cannot be stored ({type(exc).__name__}): a MongoDB "
            "document holds at most 16 MiB, history included"
        ) from exc
    except (ConnectionFailure, ExecutionTimeout, WTimeoutError) as exc:
        raise StoreUnavailable(f"MongoDB is unavailable right now ({type(exc).__name__})") from exc
    except OperationFailure as exc:
        if exc.code in _TOO_LARGE:
            raise InvalidInput(
                "The task document would exceed MongoDB's 16 MiB document limit"
            ) from exc
        if exc.code == _TRANSACTION_TOO_LARGE:  # before ``transient``: a retry fails alike
            raise InvalidInput(
                "The batch is too large for one MongoDB transaction (its cache refused it, "
                f"{_code(exc)}): submit it in smaller batches; nothing was written"
            ) from exc
        if transient(exc):
            raise StoreUnavailable(
                f"MongoDB is unavailable right now ({_code(exc)})"
            ) from exc
        if exc.code == _LOGIN_REFUSED:  # refused as configured: as on the SQL stores
            raise StoreUnavailable(
                "MongoDB is unavailable: the login was refused (an unknown user or a "
                f"wrong password) ({_code(exc)})") from exc
        raise StoreError(f"MongoDB refused the operation ({_code(exc)})") from exc
    except InvalidOperation as exc:
        raise StoreUnavailable("The MongoDB client is closed") from exc
    except ConfigurationError as exc:
        if _dns_failure(exc):
            raise StoreUnavailable(
                "MongoDB is unreachable: the DNS lookup of its mongodb+srv:// host failed "
                "(check the host name and the DNS; a lookup that timed out may pass later)"
            ) from exc
        raise InvalidInput(f"Invalid MongoDB URL or option ({type(exc).__name__})") from exc
    except PyMongoError as exc:
        raise StoreError(f"MongoDB driver error ({type(exc).__name__})") from exc


def _code(exc: OperationFailure) -> str:
    """``code N`` and the server's ``codeName`` when it is a name (nothing else of the
    server's answer: its message may quote stored data)."""
    name = (exc.details or {}).get("codeName")
    named = isinstance(name, str) and _CODE_NAME.fullmatch(name)
    return f"code {exc.code} {name}" if named else f"code {exc.code}"


async def check_write_concern(collection: Any) -> None:
    """Refuse, before anything is created, a write concern the server refuses for good
    (a ``w`` mode no replica set configuration names, more nodes than it has): one
    delete that matches nothing, sent with ``collection``'s write concern. Refused for
    another reason (a user without the right to delete: a reader's ``create=False``), the
    probe proves nothing and is skipped.

    Raises:
        InvalidInput: the server refused the write concern (naming its code name).
        StoreUnavailable: the server cannot be reached.
    """
    with translate():
        try:
            await collection.delete_one({"_id": _PROBE_ID})
        except WriteConcernError as exc:
            if isinstance(exc, WTimeoutError) or transient(exc):
                raise
            raise InvalidInput(
                "MongoDB refused the store's write concern (the URL's 'w', 'wtimeoutMS', "
                f"'journal' or 'fsync', or the client's own) ({_code(exc)}); nothing was "
                "created") from exc
        except OperationFailure as exc:
            if transient(exc):
                raise


def transient(exc: OperationFailure) -> bool:
    """Whether the server refused for now (shutting down, not primary, interrupted, busy,
    a transient transaction error), not for good."""
    return exc.code in _TRANSIENT_CODES or _has_label(exc, "TransientTransactionError")


def _dns_failure(exc: ConfigurationError) -> bool:
    """Whether pymongo raised ``exc`` for a failed DNS lookup (``mongodb+srv://``: it wraps
    every resolver error, a timeout included, in ``ConfigurationError``)."""
    cause = exc.__cause__
    return cause is not None and type(cause).__module__.split(".")[0] == "dns"


def _has_label(exc: PyMongoError, label: str) -> bool:
    return bool(exc.has_error_label(label))


async def in_transaction(
    client: Any,
    body: Callable[[Any], Awaitable[T]],
    *,
    write_concern: WriteConcern | None = None,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Run ``body(session)`` in a multi-document transaction, retrying the whole of it on
    ``TransientTransactionError`` (a write conflict with a concurrent transaction, a
    failover) — after a random pause that doubles up to 50 ms, for at most
    :data:`TRANSACTION_BUDGET_S` — and the commit on ``UnknownTransactionCommitResult``.

    The session is always ended, which aborts a transaction left open (a server may never
    expire an abandoned one). A core error raised by ``body`` aborts and propagates.
    ``write_concern``: the transaction's (sent with the commit and the abort); its read
    concern is :data:`TRANSACTION_READ`.

    Raises:
        StoreUnavailable: still conflicting after :data:`TRANSACTION_BUDGET_S` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TRANSACTION_BUDGET_S
    for attempt in itertools.count():
        session = await settle(client.start_session())
        try:
            await settle(session.start_transaction(
                read_concern=TRANSACTION_READ, write_concern=write_concern
            ))
            try:
                result = await body(session)
            except BaseException:
                await _abort(session)
                raise
            await _commit(session)
            return result
        except PyMongoError as exc:
            if not _has_label(exc, "TransientTransactionError"):
                raise
            log.debug("transient transaction error (attempt %d): retrying", attempt + 1)
            if on_retry is not None:
                on_retry()
        finally:
            await settle(session.end_session())
        # Spread competing writers apart: they conflicted on the same document.
        pause = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_FIRST_S * 2 ** min(attempt, 16)))
        if loop.time() + pause >= deadline:
            break
        await asyncio.sleep(pause)
    raise StoreUnavailable("A MongoDB transaction kept conflicting; retry later")


async def _commit(session: Any) -> None:
    for attempt in range(_COMMIT_ATTEMPTS):
        try:
            await settle(session.commit_transaction())
            return
        except PyMongoError as exc:
            if attempt + 1 < _COMMIT_ATTEMPTS and _has_label(
                exc, "UnknownTransactionCommitResult"
            ):
                continue
            raise


async def _abort(session: Any) -> None:
    if session.in_transaction:
        try:
            await settle(session.abort_transaction())
        except PyMongoError:  # the session end aborts it anyway
            log.debug("abort_transaction failed; ending the session aborts it")
