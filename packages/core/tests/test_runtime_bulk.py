"""Bulk submit: ``app.submit_many`` decides each item as ``submit`` would, checks them all
before writing, creates the new tasks in one ``create_many`` (or a loop without the
capability), and joins or re-runs taken keys after (memory store)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CapabilityStore, DelegatingStore, make_app
from tasks_core import (
    App,
    AuthorizationError,
    CapacityExceeded,
    InvalidInput,
    Limits,
    NewTask,
    Policy,
    Snapshot,
    SubmitItem,
    System,
    TaskContext,
    TaskExists,
    TaskStore,
)
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


class _Counting(DelegatingStore):
    """Counts the writes: ``create`` calls and the sizes of ``create_many`` calls."""

    def __init__(self, inner: TaskStore) -> None:
        super().__init__(inner)
        self.creates = 0
        self.batches: list[int] = []

    async def create(self, new: NewTask, **options: Any) -> Snapshot:
        self.creates += 1
        return await self.inner.create(new, **options)

    async def create_many(self, news: Sequence[NewTask], **options: Any) -> list[Snapshot]:
        self.batches.append(len(news))
        return await self.inner.create_many(news, **options)


def _app(store: Any = None, **options: Any) -> tuple[App, _Counting]:
    counting = _Counting(store or MemoryStore(max_tasks=options.pop("max_tasks", None)))
    app = make_app(store=counting, queues=["mail"], **options)

    @app.task
    async def send(ctx: TaskContext, to: str) -> str:
        return to

    return app, counting


async def test_a_batch_is_one_create_many_in_order() -> None:
    app, store = _app()
    async with app:
        items: list[Any] = [SubmitItem("send", {"to": "a"}),
                            {"task": "send", "input": {"to": "b"}, "queue": "mail"},
                            SubmitItem("send", {"to": "c"}, key="c", priority=5)]
        done = await app.submit_many(items, ALICE)
        assert ["created"] * 3 == [s.outcome for s in done]
        assert "alice::c" == done[2].id
        assert ("mail", 5) == (done[1].snapshot.queue, done[2].snapshot.priority)
        assert ([3], 0) == (store.batches, store.creates)
        assert [] == await app.submit_many([], ALICE)


@pytest.mark.parametrize(("bad", "why"), [
    (SubmitItem("send", {"nope": 1}), "input does not match"),
    (SubmitItem("send", {"to": "x"}, queue="undeclared"), "not declared"),
    (SubmitItem("send", {"to": "x"}, delay=-1), "delay"),
    (SubmitItem("send", {"to": "x"}, delay=1, run_at=datetime(2030, 1, 1, tzinfo=UTC)),
     "not both"),
    (SubmitItem("send", {"to": "x"}, priority=101), "priority"),
    ({"task": "send", "input": {"to": "x"}, "when": 3}, "unknown item field"),
    ({"input": {"to": "x"}}, "needs a 'task'"),
    ("send", "SubmitItem"),
])
async def test_an_invalid_item_refuses_the_batch_before_any_write(bad: Any, why: str) -> None:
    app, store = _app()
    async with app:
        with pytest.raises(InvalidInput) as caught:
            await app.submit_many([SubmitItem("send", {"to": "ok"}), bad], ALICE)
        assert str(caught.value).startswith("item 1: ")
        assert why in str(caught.value)
        assert ([], 0) == (store.batches, store.creates)
        assert [] == (await app.list(System())).items


async def test_a_live_key_in_the_batch_is_joined_and_an_id_twice_joins_the_first() -> None:
    app, store = _app(policy=Policy(watch_authorizer=lambda *_: True))
    async with app:
        live = await app.submit("send", {"to": "x"}, BOB, key="k", dedup="global")
        items = [SubmitItem("send", {"to": "a"}),
                 SubmitItem("send", {"to": "b"}, key="k", dedup="global", watchers=[ALICE]),
                 SubmitItem("send", {"to": "c"}, key="twice"),
                 SubmitItem("send", {"to": "d"}, key="twice")]
        done = await app.submit_many(items, ALICE)
        assert ["created", "joined", "created", "joined"] == [s.outcome for s in done]
        assert (live.id, live.run_id) == (done[1].id, done[1].run_id)
        assert ALICE in done[1].snapshot.watchers
        assert done[2].id == done[3].id
        assert {"to": "c"} == (await app.get(done[3].id, ALICE)).work.input
        assert [2] == store.batches[-1:]


@pytest.mark.parametrize("batch_create", [True, False])
async def test_a_join_the_submitter_may_not_make_refuses_naming_the_item(
    batch_create: bool,
) -> None:
    """A join the submitter may not make MUST refuse the batch naming the item, as every
    other refusal of an item does, before anything is written — with ``batch_create`` or
    in the loop without it."""
    app, _ = _app(store=CapabilityStore(MemoryStore(), batch_create=batch_create))
    async with app:
        await app.submit("send", {"to": "x"}, BOB, key="k", dedup="global")
        items = [SubmitItem("send", {"to": "a"}),
                 SubmitItem("send", {"to": "b"}, key="k", dedup="global")]
        with pytest.raises(AuthorizationError, match=r"^item 1: Not authorized"):
            await app.submit_many(items, ALICE)
        assert 1 == len((await app.list(System())).items)


class _CancelledAtOnce(CapabilityStore):
    """Each task it creates is cancelled (finished) right after, before the batch goes on."""

    def __init__(self, inner: TaskStore, app: list[App], **flags: bool) -> None:
        super().__init__(inner, **flags)
        self._app = app

    async def create(self, new: NewTask, **options: Any) -> Snapshot:
        created = await self.inner.create(new, **options)
        await self._app[0].cancel(created.id, System())
        return created

    async def create_many(self, news: Sequence[NewTask], **options: Any) -> list[Snapshot]:
        created = await self.inner.create_many(news, **options)
        for snapshot in created:
            await self._app[0].cancel(snapshot.id, System())
        return created


@pytest.mark.parametrize("batch_create", [True, False])
async def test_an_id_twice_joins_the_batchs_own_task_even_once_it_finished(
    batch_create: bool,
) -> None:
    """The later item of an id given twice MUST join the task the earlier item made — the
    batch's own outcome — not start another run because that task finished meanwhile (a
    fast worker)."""
    holder: list[App] = []
    app, _ = _app(store=_CancelledAtOnce(MemoryStore(), holder, batch_create=batch_create))
    holder.append(app)
    async with app:
        done = await app.submit_many([SubmitItem("send", {"to": "x"}, key="dd"),
                                      SubmitItem("send", {"to": "y"}, key="dd")], ALICE)
        assert ["created", "joined"] == [s.outcome for s in done]
        assert done[0].run_id == done[1].run_id
        current = await app.get(done[0].id, ALICE)
        assert (done[0].run_id, {"to": "x"}) == (current.run_id, current.work.input)


async def test_a_capacity_refusal_in_the_loop_names_the_item() -> None:
    """Without ``batch_create`` a store's capacity refusal stops the loop: the refusal
    MUST name the item it stopped at and not say that nothing was stored."""
    app, _ = _app(store=CapabilityStore(MemoryStore(max_tasks=2), batch_create=False))
    async with app:
        with pytest.raises(CapacityExceeded, match=r"item 2") as caught:
            await app.submit_many([SubmitItem("send", {"to": n}) for n in "abc"], ALICE)
        assert "max_tasks" == caught.value.limit
        assert "nothing was stored" not in str(caught.value)
        listed = (await app.list(System())).items
        assert 2 == len(listed)
        assert {s.id for s in listed} == {s.id for s in caught.value.stored.values()}
        assert [0, 1] == sorted(caught.value.stored)


async def test_a_re_run_refused_for_capacity_names_what_the_batch_submitted() -> None:
    """A re-run (a key whose task is finished) comes after the batch's creates: refused
    for capacity, the refusal MUST name its item, MUST NOT claim that what was written came
    before it, and MUST carry every item the batch submitted (``.stored``, by index), so a
    caller does not submit them twice."""
    app, _ = _app(store=MemoryStore(max_active_tasks_per_scope=3))
    async with app:
        report = await app.submit("send", {"to": "r"}, ALICE, key="report")
        await app.cancel(report.id, ALICE)
        with pytest.raises(CapacityExceeded, match=r"^item 0: .*3 other items") as caught:
            await app.submit_many([SubmitItem("send", {"to": "r"}, key="report"),
                                   *(SubmitItem("send", {"to": n}) for n in "abc")], ALICE)
        assert "max_active_tasks_per_scope" == caught.value.limit
        assert "before it" not in str(caught.value)
        stored = {i: s.outcome for i, s in caught.value.stored.items()}
        assert {1: "created", 2: "created", 3: "created"} == stored
        pending = {s.id for s in (await app.list(ALICE, status="pending")).items}
        assert {s.id for s in caught.value.stored.values()} == pending


async def test_capacity_holds_for_the_batch_as_a_whole() -> None:
    app, _ = _app(max_tasks=3, limits=Limits(max_runs_per_owner=4))
    async with app:
        await app.submit("send", {"to": "x"}, ALICE)
        with pytest.raises(CapacityExceeded) as caught:
            await app.submit_many([SubmitItem("send", {"to": n}, key=n) for n in "abc"],
                                  ALICE)
        assert "max_tasks" == caught.value.limit
        with pytest.raises(CapacityExceeded) as runs:
            await app.submit_many([SubmitItem("send", {"to": str(n)}) for n in range(4)],
                                  ALICE)
        assert "max_runs_per_owner" == runs.value.limit
        assert 1 == len((await app.list(System())).items)


class _Racing(DelegatingStore):
    """Creates ``alice::raced`` just before the first ``create_many`` runs."""

    def __init__(self, inner: TaskStore, app: list[App]) -> None:
        super().__init__(inner)
        self._app = app

    async def create_many(self, news: Sequence[NewTask], **options: Any) -> list[Snapshot]:
        if self._app:
            await self._app.pop().submit("send", {"to": "first"}, ALICE, key="raced")
        return await self.inner.create_many(news, **options)


async def test_a_key_taken_by_a_race_is_decided_again() -> None:
    holder: list[App] = []
    app, _ = _app(store=_Racing(MemoryStore(), holder))
    holder.append(app)
    async with app:
        done = await app.submit_many([SubmitItem("send", {"to": "a"}),
                                      SubmitItem("send", {"to": "b"}, key="raced")], ALICE)
        assert ["created", "joined"] == [s.outcome for s in done]
        assert {"to": "first"} == done[1].snapshot.work.input


async def test_a_random_id_taken_refuses_the_batch() -> None:
    class Taken(DelegatingStore):
        async def create_many(self, news: Sequence[NewTask], **_: Any) -> list[Snapshot]:
            raise TaskExists(await self.inner.create(news[0]))

    app, _ = _app(store=Taken(MemoryStore()))
    async with app:
        with pytest.raises(TaskExists):
            await app.submit_many([SubmitItem("send", {"to": "a"})], ALICE)


async def test_a_store_without_batch_create_gets_a_loop() -> None:
    inner = MemoryStore()
    app, store = _app(store=CapabilityStore(inner, batch_create=False))
    async with app:
        await app.submit("send", {"to": "x"}, ALICE, key="k")
        done = await app.submit_many([SubmitItem("send", {"to": "a"}),
                                      SubmitItem("send", {"to": "b"}, key="k")], ALICE)
        assert ["created", "joined"] == [s.outcome for s in done]
        assert ([], 2) == (store.batches, store.creates)  # the taken key read, not tried


def test_the_sync_facade_submits_a_batch() -> None:
    app, store = _app()
    try:
        done = app.sync.submit_many([SubmitItem("send", {"to": "a"}),
                                     {"task": "send", "input": {"to": "b"}}], ALICE)
        assert ["created", "created"] == [s.outcome for s in done]
        assert [2] == store.batches
    finally:
        app.sync.close()


async def test_more_items_than_a_batch_are_refused_reading_one_past_the_limit() -> None:
    """``submit_many`` MUST refuse more than 1000 items as soon as it reads the 1001st — an
    iterator is never drained (an endless one would never return) — writing nothing; 1000
    items from an iterator are one batch."""
    app, store = _app()
    read = 0

    def items(count: int) -> Iterator[SubmitItem]:
        nonlocal read
        for n in range(count):
            read += 1
            yield SubmitItem("send", {"to": str(n)})

    async with app:
        with pytest.raises(InvalidInput, match="at most 1000 items; split the list"):
            await app.submit_many(items(3_000_000), ALICE)
        assert (1001, [], 0) == (read, store.batches, store.creates)
        read = 0
        assert 1000 == len(await app.submit_many(items(1000), ALICE))
        assert (1000, [1000]) == (read, store.batches)
