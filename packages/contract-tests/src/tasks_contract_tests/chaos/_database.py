"""Faults of the database itself: cut the connections of given processes, restart the
server, or kill a second SQLite writer while it holds the write lock.

Connections are found by process: the TCP sockets a process holds (``/proc/<pid>/fd``)
towards the server's port give their local ports, which the server lists too
(``pg_stat_activity.client_port``, MariaDB's processlist ``host``). So only the workers'
and the client's connections are cut, never another user's of the same database. Linux
only, as is the whole chaos runner (signals, ``/proc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = [
    "can_restart_postgresql",
    "cut_connections",
    "local_ports",
    "other_clients",
    "restart_postgresql",
    "sqlite_path",
]

DEFAULT_PORTS = {"postgresql": 5432, "mariadb": 3306}
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _inodes(pid: int) -> set[int]:
    found = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    found.add(int(link[8:-1]))
    return found


def local_ports(pids: Iterable[int], remote_port: int) -> set[int]:
    """Local ports of the TCP connections that ``pids`` hold to ``remote_port``."""
    ports: set[int] = set()
    for pid in pids:
        inodes = _inodes(pid)
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(OSError):
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
                for line in lines:
                    fields = line.split()
                    local, remote, inode = fields[1], fields[2], int(fields[9])
                    if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                        ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def _server(url: str, family: str) -> tuple[str, int, str, str | None, str]:
    parts = urlsplit(url)
    return (parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS[family],
            unquote(parts.username or ""), unquote(parts.password) if parts.password else None,
            parts.path.lstrip("/"))


async def cut_connections(url: str, family: str, pids: Iterable[int]) -> int:
    """Terminate every connection ``pids`` hold to the server of ``url``; return how many.

    ``postgresql``: ``pg_terminate_backend``; ``mariadb``: ``KILL``.

    Raises:
        ValueError: another family.
    """
    host, port, user, password, database = _server(url, family)
    ports = sorted(local_ports(pids, port))
    if not ports:
        return 0
    if family == "postgresql":
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        conn = await asyncpg.connect(host=host, port=port, user=user, password=password,
                                     database=database)
        try:
            rows = await conn.fetch(
                "SELECT pg_terminate_backend(pid) AS cut FROM pg_stat_activity "
                "WHERE client_port = ANY($1::int[]) AND pid <> pg_backend_pid()", ports)
        finally:
            await conn.close()
        return sum(1 for row in rows if row["cut"])
    if family == "mariadb":
        import asyncmy  # type: ignore[import-untyped,unused-ignore]

        conn = await asyncmy.connect(host=host, port=port, user=user, password=password or "",
                                     db=database)
        cut = 0
        try:
            async with conn.cursor() as cursor:
                await cursor.execute("SELECT id, host FROM information_schema.processlist")
                for ident, client in await cursor.fetchall():
                    if client and client.rsplit(":", 1)[-1].isdigit() \
                            and int(client.rsplit(":", 1)[-1]) in ports:
                        with contextlib.suppress(Exception):
                            await cursor.execute(f"KILL {int(ident)}")
                            cut += 1
        finally:
            conn.close()
        return cut
    raise ValueError(f"no connection cutting for {family}")


async def other_clients(url: str, pids: Iterable[int]) -> int:
    """How many clients of the PostgreSQL server of ``url`` are not ``pids`` (nor this
    question): a restart would hurt them too."""
    host, port, user, password, database = _server(url, "postgresql")
    ours = sorted(local_ports(pids, port))
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    conn = await asyncpg.connect(host=host, port=port, user=user, password=password,
                                 database=database)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid() AND NOT (coalesce(client_port, -1) = ANY($1::int[]))",
            ours)
    finally:
        await conn.close()
    return int(count)


def _cluster() -> tuple[str, str] | None:
    try:
        out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            return fields[0], fields[1]
    return None


def can_restart_postgresql(url: str) -> str | None:
    """``None`` when this process may restart the server of ``url``; else why not."""
    host = urlsplit(url).hostname or ""
    if host not in LOCAL_HOSTS:
        return f"the server {host} is not on this machine"
    if not sys.platform.startswith("linux") or shutil.which("pg_ctlcluster") is None:
        return "pg_ctlcluster is not installed"
    if os.geteuid() != 0:
        return "restarting the server needs root"
    if _cluster() is None:
        return "no PostgreSQL cluster found (pg_lsclusters)"
    return None


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


async def restart_postgresql(url: str, *, timeout: float = 60.0) -> None:
    """Restart the local PostgreSQL cluster (``pg_ctlcluster … restart``) and wait until it
    accepts connections again; whatever happens, try to leave it running.

    Raises:
        RuntimeError: it did not come back within ``timeout``.
    """
    cluster = _cluster()
    assert cluster is not None
    host, port, *_ = _server(url, "postgresql")
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster]
    try:
        await asyncio.to_thread(subprocess.run, [*command, "restart"], capture_output=True,
                                timeout=timeout, check=False)
    finally:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not _reachable(host, port):
            if loop.time() > deadline:
                await asyncio.to_thread(subprocess.run, [*command, "start"],
                                        capture_output=True, timeout=timeout, check=False)
                if not _reachable(host, port):
                    raise RuntimeError("PostgreSQL did not come back after the restart")
                break
            await asyncio.sleep(0.2)


def sqlite_path(url: str) -> str | None:
    """The database file of a ``sqlite://`` URL (``None`` in memory)."""
    match = re.match(r"^sqlite(?:\+\w+)?:///(.*?)(?:\?.*)?$", url)
    if not match or match.group(1) in ("", ":memory:"):
        return None
    return match.group(1)


def hold_write_lock(path: str) -> None:
    """Body of the *other writer*: take SQLite's write lock on ``path``, write a row that is
    never committed, say ``holding`` and wait to be killed."""
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS chaos_other_writer (at REAL)")
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO chaos_other_writer VALUES (julianday('now'))")
    print("holding", flush=True)
    sys.stdin.readline()  # killed long before anyone writes here
