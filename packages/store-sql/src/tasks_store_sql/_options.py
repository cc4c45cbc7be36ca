"""The query options of a store URL, checked per asyncio driver before anything connects.

Every option but ``namespace`` goes to the driver's ``connect``. Rule: an option the driver
(or SQLAlchemy's dialect for it) does not take, or a value it cannot use, is
``InvalidInput`` naming the option — never its value — and listing the accepted ones
(:data:`QUERY_OPTIONS`), not a ``TypeError`` at the first connect or an option silently
ignored. On asyncpg the libpq spellings most URLs carry are translated (``sslmode`` ->
``ssl``, ``connect_timeout`` -> ``timeout``). SQLite's URI parameters (``mode=ro``…) need
``uri=true``; the options the store manages itself (``timeout``, ``isolation_level``…)
are refused. A timeout in seconds (asyncpg's) is checked by :mod:`tasks_core.durations`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tasks_core.durations import MAX_WAIT_S, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.sizes import check_limit

__all__ = [
    "MAX_POOL",
    "QUERY_OPTIONS",
    "SSL_MODES",
    "STORE_OPTIONS",
    "Check",
    "check_engine_options",
    "check_query",
    "check_store_options",
    "driver_params",
    "flag_of",
]

Check = Callable[[str], object]
"""Turns an option's text into the value the driver takes; raises ``ValueError``."""

# (The checks below have no docstring: ``check_query`` quotes a check's docstring as the
# hint of a refused value, which only ``_choice`` sets.)


def _text(value: str) -> str:
    return value  # the driver's business (an empty ``sql_mode`` clears the modes)


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("negative")
    return number


def _seconds(value: str) -> float:
    try:
        return check_duration(float(value), "seconds", high=MAX_WAIT_S)
    except InvalidInput:
        raise ValueError("not a positive number of seconds") from None


def _whole_seconds(value: str) -> int:
    seconds = int(value)
    try:
        check_duration(seconds, "seconds", high=MAX_WAIT_S)
    except InvalidInput:
        raise ValueError("not a positive whole number of seconds") from None
    return seconds


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise ValueError("not a boolean")


def _choice(*values: str) -> Check:
    def check(value: str) -> str:
        if value not in values:
            raise ValueError("one of " + ", ".join(values))
        return value

    check.__doc__ = "one of " + ", ".join(values)
    return check


def flag_of(value: object) -> bool:
    """Whether ``value`` is the text of a true flag (``"true"``, ``"1"``…)."""
    try:
        return isinstance(value, str) and _flag(value)
    except ValueError:
        return False


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's ``sslmode`` values, which asyncpg's ``ssl`` takes as they are."""

_ASYNCPG: dict[str, Check] = {
    # asyncpg.connect() keywords a URL can carry (text, numbers, flags)
    "ssl": _choice(*SSL_MODES),
    "timeout": _seconds,
    "command_timeout": _seconds,
    "statement_cache_size": _count,
    "max_cached_statement_lifetime": _count,
    "max_cacheable_statement_size": _count,
    "direct_tls": _flag,
    "passfile": _text,
    "service": _text,
    "servicefile": _text,
    "krbsrvname": _text,
    "gsslib": _choice("gssapi", "sspi"),
    "target_session_attrs": _choice(
        "any", "primary", "standby", "prefer-standby", "read-write", "read-only"
    ),
    # SQLAlchemy's own: its statement cache, and ``?host=h1:p1&host=h2:p2`` (several hosts)
    "prepared_statement_cache_size": _count,
    "host": _text,
}
_ASYNCPG_ALIASES = {"sslmode": "ssl", "connect_timeout": "timeout"}
"""libpq spellings translated for asyncpg."""

_ASYNCPG_TYPED = frozenset(
    name for name, check in _ASYNCPG.items() if check in (_seconds, _count, _flag)
) - {"prepared_statement_cache_size"}  # (SQLAlchemy's own, which it converts)
"""asyncpg keywords that need a number or a flag (SQLAlchemy passes the URL's text)."""

_LIBPQ_NAMES = (
    "hostaddr", "passfile", "require_auth", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "tcp_user_timeout", "gssencmode", "sslmode", "sslnegotiation", "sslcompression",
    "sslcert", "sslkey", "sslcertmode", "sslpassword", "sslrootcert", "sslcrl",
    "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
    "target_session_attrs", "load_balance_hosts", "host",
)
_LIBPQ: dict[str, Check] = dict.fromkeys(_LIBPQ_NAMES, _text)
"""psycopg: libpq's connection keywords (libpq parses their text itself)."""

_MYSQL_COMMON: dict[str, Check] = {
    # keywords of asyncmy.connect() and aiomysql.connect() alike; SQLAlchemy converts the
    # numbers and flags
    "charset": _text,
    "connect_timeout": _whole_seconds,
    "init_command": _text,
    "sql_mode": _text,
    "unix_socket": _text,
    "read_default_file": _text,
    "read_default_group": _text,
    "local_infile": _flag,
    "client_flag": _count,
    "use_unicode": _flag,
}
_ASYNCMY: dict[str, Check] = {
    **_MYSQL_COMMON,
    "read_timeout": _whole_seconds,
    "program_name": _text,
    # SQLAlchemy gathers these into the ``ssl`` dict asyncmy takes
    "ssl_ca": _text,
    "ssl_cert": _text,
    "ssl_key": _text,
    "ssl_capath": _text,
    "ssl_cipher": _text,
    "ssl_check_hostname": _flag,
}

_SQLITE: dict[str, Check] = {"uri": _flag, "cached_statements": _count}
_SQLITE_URI: dict[str, Check] = {  # SQLite's URI parameters (only with uri=true)
    "mode": _choice("ro", "rw", "rwc"),
    "cache": _choice("shared", "private"),
    "vfs": _text,
    "immutable": _flag,
    "nolock": _flag,
    "psow": _flag,
    "modeof": _text,
}
_SQLITE_REFUSED = {
    "timeout": "the store waits for the file's lock for busy_timeout seconds (default 5), "
               "an option of SQLStore.open(url, busy_timeout=...), not of the URL",
    "isolation_level": "the store manages transactions",
    "detect_types": "the store decodes its own columns",
    "check_same_thread": "the driver's thread is the store's business",
}

QUERY_OPTIONS: dict[str, dict[str, Check]] = {
    "aiosqlite": {**_SQLITE, **_SQLITE_URI},
    "asyncpg": _ASYNCPG,
    "psycopg": _LIBPQ,
    "psycopg_async": _LIBPQ,
    "asyncmy": _ASYNCMY,
    "aiomysql": _MYSQL_COMMON,
}
"""Per asyncio driver: the URL query options it takes (besides ``namespace``)."""


def check_query(driver: str, label: str, query: dict[str, Any]) -> dict[str, Any]:
    """The driver's query options, checked (see the module docstring), with the libpq
    spellings translated for asyncpg.

    Raises:
        InvalidInput: naming the option, never its value.
    """
    accepted = QUERY_OPTIONS[driver]
    aliases = _ASYNCPG_ALIASES if driver == "asyncpg" else {}
    listing = ", ".join(sorted({*aliases, *accepted, "namespace"}))
    uri = driver == "aiosqlite" and flag_of(query.get("uri"))
    checked: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # how the URL named each option
    for given, value in query.items():
        name = aliases.get(given, given)
        if driver == "aiosqlite" and name in _SQLITE_REFUSED:
            raise InvalidInput(f"SQLite URL option {name!r} is refused: {_SQLITE_REFUSED[name]}")
        check = accepted.get(name)
        if check is None:
            raise InvalidInput(
                f"{label} ({driver}) does not take the URL query option {given!r}; "
                f"it takes: {listing}"
            )
        if name in checked:
            first = spelled[name]
            raise InvalidInput(f"URL query options {first!r} and {given!r} are one option")
        if driver == "aiosqlite" and name in _SQLITE_URI and not uri:
            raise InvalidInput(
                f"SQLite URL option {name!r} is a URI parameter: name the file as a SQLite "
                f"URI and add uri=true (sqlite:///file:PATH?{name}=…&uri=true)")
        values = value if isinstance(value, tuple) else (value,)
        if len(values) > 1 and name != "host":
            raise InvalidInput(f"URL query option {given!r} is given more than once")
        for one in values:
            try:
                check(one)
            except ValueError:
                hint = check.__doc__  # the choices, if the option has a few
                raise InvalidInput(
                    f"URL query option {given!r} has a value {label} cannot use"
                    + (f" ({hint})" if hint else "")
                ) from None
        checked[name] = value
        spelled[name] = given
    return checked


def driver_params(driver: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` for the driver's ``connect``, with the URL's text turned into the numbers
    and flags the driver needs (asyncpg: SQLAlchemy passes most of the URL's text on as
    it is). Values that are not text (``connect_args``) are left alone."""
    if driver == "asyncpg":
        for name in _ASYNCPG_TYPED & params.keys():
            value = params[name]
            if isinstance(value, str):
                params[name] = _ASYNCPG[name](value)
    return params


MAX_POOL = 1000
"""The largest ``pool_size`` and ``max_overflow`` of ``engine_options``."""


def check_engine_options(options: object) -> dict[str, Any]:
    """``engine_options`` (passed to SQLAlchemy's ``create_async_engine``) once the pool's
    numbers are checked as every size and duration is: ``pool_size`` a count in
    ``1..MAX_POOL``, ``max_overflow`` in ``0..MAX_POOL``, ``pool_timeout`` seconds in
    ``(0, MAX_WAIT_S]``. The rest is SQLAlchemy's to check when the engine is made.

    Raises:
        InvalidInput: not a mapping of option names, or a pool number out of range.
    """
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise InvalidInput("engine_options must be a dict of create_async_engine options")
    checked = dict(options)
    if "pool_size" in checked:
        checked["pool_size"] = check_limit(checked["pool_size"], maximum=MAX_POOL,
                                           what="engine_options pool_size")
    if "max_overflow" in checked:
        checked["max_overflow"] = check_limit(checked["max_overflow"], minimum=0,
                                              maximum=MAX_POOL,
                                              what="engine_options max_overflow")
    if "pool_timeout" in checked:
        checked["pool_timeout"] = check_duration(checked["pool_timeout"],
                                                 "engine_options pool_timeout",
                                                 high=MAX_WAIT_S)
    return checked


STORE_OPTIONS = frozenset({
    "clock", "limits", "max_tasks", "max_active_tasks_per_scope", "namespace", "engine",
    "schema", "busy_timeout", "engine_options", "create",
})
"""The keyword options of ``SQLStore`` (and of ``open_store`` for its URLs)."""


def check_store_options(options: Mapping[str, Any]) -> None:
    """Refuse an option ``SQLStore`` does not take, by name, before anything is built.

    Raises:
        InvalidInput: naming every unknown option.
    """
    unknown = sorted(set(options) - STORE_OPTIONS)
    if unknown:
        raise InvalidInput(f"Unknown SQLStore option(s): {', '.join(unknown)}")
