"""The ledger: what each process of a run did, written durably before it can be lost.

Every process of a stress run or chaos scenario (worker, client, writer, the harness
itself) appends to its own SQLite file, one autocommitted row per fact. A process killed
with SIGKILL keeps every row it committed (the operating system holds the data; WAL mode
never leaves a torn file), so the checker reads after the fact what each process had done
up to its last instant — without asking the process, and without trusting the store. The
row kinds are listed on :class:`Entry`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["SUFFIX", "Entry", "Ledger", "read_ledger", "read_ledgers"]

SUFFIX = ".ledger"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    pid INTEGER NOT NULL,
    role TEXT NOT NULL,
    kind TEXT NOT NULL,
    task_id TEXT,
    delivery INTEGER,
    generation INTEGER,
    nonce TEXT,
    outcome TEXT,
    detail TEXT
)
"""
_SELECT = (
    "SELECT seq, at, pid, role, kind, task_id, delivery, generation, nonce, outcome, detail "
    "FROM entries ORDER BY seq"
)


@dataclass(frozen=True)
class Entry:
    """One ledger row.

    Row kinds (``kind``) and who writes them:

    =============  ===========  ============================================================
    kind           writer       meaning
    =============  ===========  ============================================================
    ``claim``      worker       ``claim_next``/``claim`` handed it ``task_id`` (``delivery``,
                                ``generation``; ``detail`` ``recovered`` when it took over an
                                expired lease)
    ``start``      handler      a handler run began (``nonce`` names the run)
    ``end``        handler      that run ended: ``returned``, ``raised:<Type>``,
                                ``stopped:<reason>``, ``cancelled`` or ``parked``
    ``write``      worker       a lease event (``detail`` its kind, ``nonce`` its event id) and
                                what the store said: ``applied``, ``duplicate``, ``unchanged``
                                or the error class (``LeaseLost``…)
    ``release``    worker       a lease given back (``outcome`` ``ok`` or the error class)
    ``exit``       worker       the worker process ends (``outcome`` its exit code)
    ``submit``     client       a task was submitted; ``detail`` holds its expectations (JSON)
    ``respond``    client       an answer was sent (``nonce`` the answer token)
    ``cancel``     client       a cancel was sent
    ``bad``        client       a deliberately invalid request (``detail`` what, ``outcome``
                                ``refused:<Type>``, ``unchanged`` or ``accepted``)
    ``cas``        writer       one racing write (``detail`` the phase, ``nonce`` the event id)
    =============  ===========  ============================================================
    """

    pid: int
    role: str
    kind: str
    task_id: str | None = None
    delivery: int | None = None
    generation: int | None = None
    nonce: str | None = None
    outcome: str | None = None
    detail: str | None = None
    seq: int = 0
    at: float = 0.0

    def details(self) -> dict[str, Any]:
        """``detail`` parsed as a JSON object (``{}`` when it is not one)."""
        try:
            value = json.loads(self.detail or "")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


class Ledger:
    """The append-only ledger of this process (thread-safe: handlers in threads write too).

    Args:
        path: the file (created); one per process.
        role: what this process is (``worker``, ``client``, ``writer``, ``harness``).
    """

    def __init__(self, path: str | Path, role: str) -> None:
        self.path = Path(path)
        self.role = role
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def record(
        self,
        kind: str,
        task_id: str | None = None,
        *,
        delivery: int | None = None,
        generation: int | None = None,
        nonce: str | None = None,
        outcome: str | None = None,
        detail: str | dict[str, Any] | None = None,
    ) -> None:
        """Append one row, committed before this returns."""
        text = json.dumps(detail, sort_keys=True) if isinstance(detail, dict) else detail
        with self._lock:
            self._db.execute(
                "INSERT INTO entries (at, pid, role, kind, task_id, delivery, generation, "
                "nonce, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), self.pid, self.role, kind, task_id, delivery, generation, nonce,
                 outcome, text),
            )

    def close(self) -> None:
        """Close the file (rows are already committed)."""
        with self._lock:
            self._db.close()


def read_ledger(path: str | Path) -> list[Entry]:
    """Every row of one ledger file, in order (a missing file reads as empty)."""
    path = Path(path)
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        try:
            rows = db.execute(_SELECT).fetchall()
        except sqlite3.OperationalError:  # created, table not yet there
            return []
    finally:
        db.close()
    return [
        Entry(seq=r[0], at=r[1], pid=r[2], role=r[3], kind=r[4], task_id=r[5], delivery=r[6],
              generation=r[7], nonce=r[8], outcome=r[9], detail=r[10])
        for r in rows
    ]


def read_ledgers(directory: str | Path) -> list[Entry]:
    """Every row of every ledger in ``directory`` (ordered by file, then by row)."""
    return list(_all(sorted(Path(directory).glob(f"*{SUFFIX}"))))


def _all(paths: Iterable[Path]) -> Iterator[Entry]:
    for path in paths:
        yield from read_ledger(path)
