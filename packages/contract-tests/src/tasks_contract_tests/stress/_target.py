"""The store under test: its URL, a fresh namespace for one run, and how every process of
the run opens it (each with its own connections)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tasks_core import InvalidInput, StoreSpec, TaskStore, find_store

__all__ = ["HarnessError", "Target", "add_options_argument", "fresh_target", "redact"]


class HarnessError(Exception):
    """The harness itself could not do what a workload needs (a process that never got
    ready, a bound exceeded): the run is reported as failed with this message."""


def redact(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def store_family(url: str) -> str:
    """``sqlite``, ``postgresql``, ``mariadb``, ``mongodb`` or the URL's scheme."""
    scheme = urlsplit(url).scheme.split("+")[0].lower()
    return {"postgres": "postgresql", "mysql": "mariadb", "mongo": "mongodb"}.get(scheme, scheme)


@dataclass(frozen=True)
class Target:
    """One run's store: the user's URL plus a namespace of its own.

    Attributes:
        url: the store URL as given.
        namespace: the run's namespace (created fresh, dropped afterwards).
        spec: the store plugin.
        options: the options every process opens the store with (JSON-safe).
    """

    url: str
    namespace: str
    spec: StoreSpec
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """See :func:`store_family`."""
        return store_family(self.url)

    @property
    def options_json(self) -> str:
        """:attr:`options` for a child's command line."""
        return json.dumps(self.options)

    async def open(self) -> TaskStore:
        """Open the store in this namespace (the caller closes it).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return await self.spec.factory(self.url, **self.options)

    async def drop(self) -> None:
        """Remove the run's namespace (best effort is the caller's choice)."""
        if self.spec.drop_namespace is not None:
            await self.spec.drop_namespace(self.url, self.namespace)


async def fresh_target(url: str, *, prefix: str = "s") -> Target:
    """A new, empty namespace of the store at ``url``.

    Raises:
        UnknownStore: no installed plugin serves the URL.
        InvalidInput: the store is private to one process (``memory://``).
        StoreUnavailable: the store cannot be reached.
    """
    spec = find_store(url)
    if not spec.capabilities.multi_process:
        raise InvalidInput(
            f"{redact(url)}: the {spec.name} store is private to one process; the stress "
            "harness needs a store that several processes share (sqlite, postgresql, …)"
        )
    namespace = prefix + secrets.token_hex(5)
    if spec.create_namespace is not None:
        await spec.create_namespace(url, namespace)
    return Target(url=url, namespace=namespace, spec=spec, options={"namespace": namespace})


def add_options_argument(parser: Any) -> None:
    """The ``--store``/``--options``/``--ledger`` arguments every child process takes."""
    parser.add_argument("--store", required=True, help="store URL")
    parser.add_argument("--options", default="{}", help="store options (JSON)")
    parser.add_argument("--ledger", required=True, help="this process's ledger file")
