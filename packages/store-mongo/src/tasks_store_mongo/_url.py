"""Store URLs (private): ``mongodb://[user:pass@]host[:port][,host…]/[database][?options]``.

Our own query options are taken out before the URL reaches the driver:
``driver=pymongo`` (default) or ``driver=motor``; ``namespace=NAME``, the collection prefix
(default ``tasks``). Everything else (``replicaSet``, ``w``, ``journal``, ``tls``…) goes to
the driver as given once PyMongo's check accepts it, the write concern it builds included,
and a ``readConcernLevel`` is one MongoDB has (else ``InvalidInput`` naming it); a ``w``,
``journal`` or ``fsync`` there replaces the default write concern ``{w: "majority", j:
true}`` (``_driver.write_concern_for``). ``mongodb+srv://`` works the same; ``mongo://`` is
an alias of ``mongodb://``. The database is the URL path (default ``tasks``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from pymongo import uri_parser
from pymongo.errors import ConfigurationError
from pymongo.write_concern import WriteConcern
from tasks_core.errors import InvalidInput

from tasks_store_mongo._driver import DRIVERS, Driver

__all__ = ["DEFAULT_DATABASE", "DEFAULT_NAMESPACE", "MongoURL", "check_namespace", "parse_url"]

DEFAULT_DATABASE = "tasks"
DEFAULT_NAMESPACE = "tasks"
_SCHEMES = {"mongodb": "mongodb", "mongo": "mongodb", "mongodb+srv": "mongodb+srv"}
_NAMESPACE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")
_DATABASE = re.compile(r"[^/\\. \"$\x00]{1,63}")
_OURS = ("driver", "namespace")
_WRITE_CONCERN = ("w", "wtimeoutms", "journal", "fsync")
READ_CONCERN_LEVELS = frozenset({"local", "available", "majority", "linearizable", "snapshot"})
"""The read concern levels MongoDB has: another is refused here, before anything connects
(the server would refuse it at the first read, after the store created its collections)."""


@dataclass(frozen=True)
class MongoURL:
    """A parsed store URL.

    Attributes:
        client_url: the URL for the driver (our options removed).
        database: the database name.
        driver: ``pymongo`` or ``motor``.
        namespace: the collection prefix given in the URL, if any.
    """

    client_url: str
    database: str
    driver: Driver
    namespace: str | None


def check_namespace(namespace: str) -> str:
    """Validate a collection prefix: 1-64 of ``A-Z a-z 0-9 _ - .``, not starting with a dot,
    and not ``system`` (nor ``system.…``): MongoDB reserves the collections named
    ``system.*``.

    Raises:
        InvalidInput: anything else.
    """
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise InvalidInput(
            "namespace must be 1-64 characters of A-Z a-z 0-9 _ - . (not starting with '.')"
        )
    if namespace == "system" or namespace.startswith("system."):
        raise InvalidInput("namespace 'system' is reserved: MongoDB keeps the collections "
                           "named system.* for itself")
    return namespace


def parse_url(url: str) -> MongoURL:
    """Split a store URL into what the driver gets and what the store keeps.

    Raises:
        InvalidInput: another scheme, an unknown driver, a bad database or namespace,
            ``driver`` or ``namespace`` given twice, a driver option the driver refuses.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput("MongoStore URLs look like 'mongodb://host:27017/tasks'")
    scheme, rest = url.split("://", 1)
    canonical = _SCHEMES.get(scheme.lower())
    if canonical is None:
        raise InvalidInput("MongoStore URLs start with mongodb:// or mongodb+srv://")
    parts = urlsplit(f"{canonical}://{rest}")
    ours: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.lower() in _OURS:
            if key.lower() in ours:  # never the last one silently
                raise InvalidInput(f"URL query option {key.lower()!r} is given more than once")
            ours[key.lower()] = value
        else:
            kept.append((key, value))
    driver = ours.get("driver", "pymongo").lower()
    if driver not in DRIVERS:
        raise InvalidInput(f"driver must be one of {', '.join(DRIVERS)}")
    database = unquote(parts.path.lstrip("/")) or DEFAULT_DATABASE
    if not _DATABASE.fullmatch(database):
        raise InvalidInput("Invalid MongoDB database name in the URL path")
    namespace = ours.get("namespace")
    if namespace is not None:
        check_namespace(namespace)
    _check_driver_options(kept)
    netloc = parts.netloc or "localhost"
    client_url = urlunsplit((canonical, netloc, f"/{database}", urlencode(kept), ""))
    return MongoURL(
        client_url=client_url,
        database=database,
        driver=driver,
        namespace=namespace,
    )


def _check_driver_options(options: list[tuple[str, str]]) -> None:
    """The driver's options as pymongo checks them (no connection, no DNS lookup).

    Raises:
        InvalidInput: an unknown option or a value pymongo refuses (its message names the
            option, never the URL's credentials).
    """
    if not options:
        return
    for given in [[pair] for pair in options] + [options]:  # each, named; then together
        try:
            parsed = uri_parser.split_options(urlencode(given), validate=True, warn=False,
                                              normalize=True)
        except (ValueError, ConfigurationError, OSError) as exc:
            named = f" {given[0][0]!r}" if len(given) == 1 else "s"
            raise InvalidInput(f"MongoDB URL option{named} refused by the driver: "
                               f"{exc}") from None
    concern = [key for key, _ in options if key.lower() in _WRITE_CONCERN]
    try:
        WriteConcern(parsed.get("w"), wtimeout=parsed.get("wtimeoutms"),
                     j=parsed.get("journal"), fsync=parsed.get("fsync"))
    except (ConfigurationError, TypeError, ValueError) as exc:
        raise InvalidInput(f"MongoDB URL options {', '.join(map(repr, concern))} refused "
                           f"by the driver: {exc}") from None
    level = parsed.get("readconcernlevel")
    if level is not None and level not in READ_CONCERN_LEVELS:
        [key] = {key for key, _ in options if key.lower() == "readconcernlevel"}
        raise InvalidInput(f"MongoDB URL option {key!r} refused: MongoDB has no read "
                           f"concern level {level!r:.40} (one of "
                           f"{', '.join(sorted(READ_CONCERN_LEVELS))})")
