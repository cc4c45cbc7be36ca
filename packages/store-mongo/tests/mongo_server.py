"""Test support: the MongoDB server (``TASKS_TEST_MONGO_URL`` or a SecantusDB we start).

Set ``TASKS_TEST_MONGO_URL=mongodb://host:port/`` to run everything against a server you
run (a genuine mongod replica set, say). Otherwise each test session starts SecantusDB
(``secantusd-py``, a pinned test-only dependency) on a free loopback port with in-memory
storage, and stops it at the end. The library never imports SecantusDB.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

ENV = "TASKS_TEST_MONGO_URL"
DATABASE = "tasks_test"


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def secantusd() -> str:
    """The ``secantusd-py`` next to this interpreter (the venv), else on PATH."""
    local = Path(sys.executable).with_name("secantusd-py")
    return str(local) if local.exists() else "secantusd-py"


class Server:
    """A SecantusDB process on 127.0.0.1 (``--standalone`` drops the replica set)."""

    def __init__(self, storage: str = ":memory:", *, standalone: bool = False) -> None:
        self.storage = storage
        self.standalone = standalone
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL (no database)."""
        return f"mongodb://127.0.0.1:{self.port}/"

    def start(self) -> Server:
        """Start the process and wait until it answers ``hello`` (at most 30 s)."""
        args = [
            secantusd(),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--storage-path", self.storage,
            "--log-level", "WARNING",
            "--enable-test-commands",
        ]
        if self.standalone:
            args.append("--standalone")
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"secantusd-py exited with {self.process.returncode}")
            try:
                client: MongoClient[dict[str, Any]] = MongoClient(
                    self.url, directConnection=True, serverSelectionTimeoutMS=500
                )
                with client:
                    client.admin.command("hello")
                return self
            except PyMongoError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.1)

    def kill(self) -> None:
        """Kill the process with SIGKILL (no shutdown, no flush) and reap it; ``start``
        brings it back on the same port and storage."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 20 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


def store_url(base: str, driver: str, database: str = DATABASE) -> str:
    """``base`` with ``database`` as path and ``driver=`` added to the options."""
    head, _, query = base.partition("?")
    head = head.rstrip("/")
    if head.count("/") > 2:  # the base URL names a database: replace it
        head = head.rsplit("/", 1)[0]
    options = "&".join(p for p in (query, f"driver={driver}") if p)
    return f"{head}/{database}?{options}"
