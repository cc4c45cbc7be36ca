"""Persisted garbage: a record damaged by hand costs that record, and only that record.

For a store that keeps a task's snapshot as JSON text (SQL): :func:`seed` creates the
tasks, :data:`JSON_GARBAGE` lists ways to damage the victim's text, a backend test writes
one into its row behind the store's back, and :func:`check_contained` asserts that reading
the victim fails with ``StoreCorrupt`` quoting nothing stored, that everything else carries
on past it, and that nobody who cannot be shown to own it learns that it exists.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tasks_core import (
    App,
    ManualClock,
    Owner,
    StoreCorrupt,
    System,
    TaskNotFound,
    TaskQuery,
    TaskStore,
)

from tasks_contract_tests._kit import new_task

__all__ = ["JSON_GARBAGE", "SECRET", "Seeded", "check_contained", "seed"]

SECRET = "garbage-secret-5e1f"
"""Written into the victim's input and into every damage: no error may quote it."""
OWNER = Owner("olga", tenant="acme")


def _set(field: str, value: Any) -> Callable[[str], str]:
    def damage(text: str) -> str:
        document = json.loads(text)
        document[field] = value
        return json.dumps(document)

    return damage


JSON_GARBAGE: dict[str, Callable[[str], str]] = {
    "not json": lambda text: "{" + SECRET,
    "empty": lambda text: "",
    "a list": lambda text: json.dumps([SECRET]),
    "revision is text": _set("revision", SECRET),
    "status unknown": _set("status", SECRET),
    "another task's id": _set("id", "someone-else"),
    "owner is a string": _set("owner", SECRET),
    "nested too deep": lambda text: "[" * 100_000 + "]" * 100_000,
    "number too long": lambda text: '{"revision": ' + "9" * 5000 + "}",
    "truncated": lambda text: text[: len(text) // 2],
}
"""Damage to a snapshot kept as JSON text: ``name -> f(stored text) -> garbage text``."""


@dataclass
class Seeded:
    """The victim and the healthy tasks around it."""

    victim: str
    others: list[str]


async def seed(store: TaskStore, clock: ManualClock) -> Seeded:
    """Five tasks of tenant ``acme`` (TTL 10 s, one per millisecond) on a store driven by
    ``clock``; the third is the victim (in the middle, in id and creation order), owned by
    ``olga`` with :data:`SECRET` in its input and a history of one event."""
    ids = []
    for number in range(5):
        secret = {"token": SECRET} if number == 2 else None
        new = new_task(f"acme::olga::t{number}", owner=OWNER, input=secret, ttl_s=10)
        ids.append((await store.create(new)).id)
        clock.advance(0.001)
    victim = ids[2]
    _, lease = await store.claim(victim, "w1", 30)
    await store.release(lease)
    return Seeded(victim, [i for i in ids if i != victim])


def _shown(exc: BaseException) -> Iterator[BaseException]:
    current: BaseException | None = exc
    while current is not None:
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )


def _names_only(exc: BaseException, task_id: str) -> None:
    assert isinstance(exc, StoreCorrupt), f"{type(exc).__name__}: expected StoreCorrupt"
    assert task_id == exc.task_id
    for shown in _shown(exc):
        assert SECRET not in str(shown), f"{type(shown).__name__} quotes stored text"


async def _error(call: Any) -> BaseException | None:
    try:
        await call
    except Exception as exc:
        return exc
    return None


async def check_contained(
    store: TaskStore, clock: ManualClock, seeded: Seeded, *, history: bool = True
) -> None:
    """On a store whose victim was just damaged (one of :data:`JSON_GARBAGE`), assert that

    - reading the victim (``get``, ``history``, ``claim``) raises ``StoreCorrupt`` naming
      its id and quoting nothing stored, in no chained exception either;
    - listings, ``claim_next`` and ``reap`` carry on past it, serving every other task;
    - through an ``App``, nobody who cannot be shown (by the id alone) to own the victim
      learns that it exists: a principal of another tenant, or a non-member, gets exactly
      the ``TaskNotFound`` a missing id gets; ``System()`` and the owner get
      ``StoreCorrupt``.

    ``history=False`` when the damage leaves the history readable by design."""
    victim, others = seeded.victim, seeded.others
    reads: list[Callable[[], Awaitable[Any]]] = [
        lambda: store.get(victim, tenant=None),
        lambda: store.claim(victim, "w2", 30),
    ]
    for read in reads:
        error = await _error(read())
        assert error is not None, "a damaged record was read as if it were whole"
        _names_only(error, victim)
    if history:
        error = await _error(store.history(victim, tenant=None))
        assert error is not None
        _names_only(error, victim)
    for tenant in (None, "acme"):
        listed = await store.list(TaskQuery(tenant=tenant, limit=100))
        assert others == [s.id for s in listed], "a listing stopped at the damaged record"
    app = App(store=store)
    ghost = "acme::olga::t9"
    for outsider in (Owner("olga", tenant="evil"), Owner("bob", tenant="acme"), System("evil")):
        got = await _error(app.get(victim, outsider))
        missing = await _error(app.get(ghost, outsider))
        assert isinstance(got, TaskNotFound), f"{outsider}: {got!r}"
        assert str(missing).replace(ghost, victim) == str(got), "an existence oracle"
    for entitled in (OWNER, System(), System("acme")):
        error = await _error(app.get(victim, entitled))
        assert error is not None
        _names_only(error, victim)
    claimed = await store.claim_next("w3", 30, queues=["default"], limit=10)
    assert others == [c.snapshot.id for c in claimed], "claim_next stopped at the record"
    clock.advance(31)  # every lease and TTL has passed
    reaped = await store.reap(100)
    assert set(others) <= set(reaped), "reap stopped at the damaged record"
