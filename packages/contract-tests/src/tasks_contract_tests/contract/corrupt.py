"""Corrupt records: ``StoreCorrupt`` names the task, never quotes it, and costs only itself.

These tests need the ``corrupt_task`` fixture: ``async corrupt(store, task_id)`` damaging the
persisted record so that it fails validation (a non-number where a number belongs, a
truncated JSON document…). Write the marker :data:`CORRUPT_MARKER` into the damaged value:
the suite checks that no error ever quotes it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterator

import pytest
from tasks_core import (
    Cancelled,
    CapacityExceeded,
    ManualClock,
    StoreCorrupt,
    TaskNotFound,
    TaskQuery,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase, Corrupter
from tasks_contract_tests._kit import (
    LEASE_S,
    MALLORY,
    SYSTEM,
    access,
    created_and_claimed,
    finished_task,
    new_task,
)

CORRUPT_MARKER = "tasks-corrupt-secret"
"""Text a corrupter writes into the damaged record; no error may quote it."""
INPUT_SECRET = "input-secret-4b1d"
"""Text in the task's own input; no error may quote it either."""


def _corrupter(corrupt_task: Corrupter | None) -> Corrupter:
    if corrupt_task is None:
        pytest.fail(
            "Override the `corrupt_task` fixture in your StoreContract subclass: return "
            "`async corrupt(store, task_id)` that damages the persisted record (write "
            f"{CORRUPT_MARKER!r} into it), or set `StoreSpec.corrupt` for URL runs"
        )
    return corrupt_task


def _shown(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception a traceback of it would print."""
    current: BaseException | None = exc
    while current is not None:
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )


def _assert_names_only_the_id(exc: StoreCorrupt, task_id: str) -> None:
    assert task_id == exc.task_id
    assert task_id in str(exc)
    for shown in _shown(exc):
        for secret in (CORRUPT_MARKER, INPUT_SECRET):
            assert secret not in str(shown), f"{type(shown).__name__} quotes stored text"


class CorruptContract(ContractBase):
    """Corrupt records: ``StoreCorrupt`` names the task, never quotes it, costs only itself."""

    async def test_corrupt_record_reads_as_store_corrupt_naming_only_its_id(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """``get`` and ``history`` of a record that fails validation MUST raise
        ``StoreCorrupt`` whose message names the task id and quotes no stored text — not in
        the message, nor in any chained exception a traceback would print.

        Troubleshooting: catch the validation error in your codec and ``raise
        StoreCorrupt(task_id) from None``. Stored text may be secret or attacker-controlled;
        pydantic's ``ValidationError`` quotes the offending value.
        """
        corrupt = _corrupter(corrupt_task)
        victim = await store.create(new_task(input={"token": INPUT_SECRET}))
        await corrupt(store, victim.id)
        with pytest.raises(StoreCorrupt) as read:
            await store.get(victim.id, tenant=None)
        _assert_names_only_the_id(read.value, victim.id)
        with pytest.raises(StoreCorrupt) as listed:
            await store.history(victim.id, tenant=None)
        _assert_names_only_the_id(listed.value, victim.id)

    async def test_another_tenant_s_record_is_missing_before_it_is_decoded(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """``get`` and ``history`` for a reader of another tenant MUST answer
        ``TaskNotFound`` from the tenant the store keeps beside the document, before the
        document is decoded — so a corrupt record of tenant ``default`` reads as missing to
        tenant ``acme``, not as ``StoreCorrupt``, and another tenant's task costs a reader
        no decoding: no answer time that grows with the task's size tells it from a missing
        id.

        Troubleshooting: compare the tenant column or field first, and decode only a record
        the reader's tenant may see.
        """
        corrupt = _corrupter(corrupt_task)
        victim = await store.create(new_task(input={"token": INPUT_SECRET}))
        await corrupt(store, victim.id)
        with pytest.raises(TaskNotFound):
            await store.get(victim.id, tenant="acme")
        with pytest.raises(TaskNotFound):
            await store.history(victim.id, tenant="acme")

    async def test_operations_on_a_corrupt_record_raise_store_corrupt(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """``claim``, ``transition``, lease operations, ``delete`` and ``create`` of its id
        (with or without ``replace``) on a corrupt record MUST raise ``StoreCorrupt``
        (naming only the id) and never guess at the record.

        Troubleshooting: decode through the same codec on every path; a store that falls
        back to defaults for a broken field would run or change a task it cannot read.
        """
        corrupt = _corrupter(corrupt_task)
        victim, lease = await created_and_claimed(store, input={"token": INPUT_SECRET})
        await corrupt(store, victim.id)
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: store.claim(victim.id, "w2", LEASE_S),
            lambda: store.transition(victim.id, 0, Cancelled(event_id="c"), access(SYSTEM)),
            lambda: store.renew(lease, LEASE_S),
            lambda: store.worker_snapshot(lease),
            lambda: store.delete(victim.id, expected_revision=victim.revision),
            lambda: store.create(new_task(victim.id)),
            lambda: store.create(new_task(victim.id), replace=victim),
        ]
        for attempt in attempts:
            with pytest.raises(StoreCorrupt) as caught:
                await attempt()
            _assert_names_only_the_id(caught.value, victim.id)

    async def test_corrupt_record_costs_only_itself(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """A listing MUST still return every other matching task when one record is
        corrupt — before and after it in id order, across tenants and within one.

        Troubleshooting: decode row by row and skip (and log) the rows that fail; never let
        one bad record fail the whole page.
        """
        corrupt = _corrupter(corrupt_task)
        ids = [(await store.create(new_task())).id for _ in range(5)]
        await corrupt(store, ids[2])
        others = ids[:2] + ids[3:]
        everywhere = await store.list(TaskQuery(tenant=None, limit=100))
        in_tenant = await store.list(TaskQuery(tenant="default", limit=100))
        assert others == [s.id for s in everywhere]
        assert others == [s.id for s in in_tenant]

    async def test_a_corrupt_record_of_another_tenant_leaves_the_active_count_exact(
        self, make_store: Callable[..., Awaitable[TaskStore]],
        corrupt_task: Corrupter | None,
    ) -> None:
        """A corrupt record MUST NOT stop ``max_active_tasks_per_scope`` from counting the
        creating tenant's other tasks: with a limit of 2, another tenant's damaged record
        stored first and two live tasks of the tenant, its next create is refused.

        Troubleshooting: count with a query on the tenant's columns (or skip a record that
        fails to decode and go on counting); a count that stops at the first bad record
        lets a tenant past its limit.
        """
        corrupt = _corrupter(corrupt_task)
        store = await make_store(max_active_tasks_per_scope=2)
        damaged = await store.create(new_task(owner=MALLORY))
        await corrupt(store, damaged.id)
        await store.create(new_task())
        await store.create(new_task())
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(new_task())
        assert "max_active_tasks_per_scope" == caught.value.limit

    async def test_a_corrupt_record_counts_toward_the_active_limit_as_last_written(
        self, make_store: Callable[..., Awaitable[TaskStore]],
        corrupt_task: Corrupter | None,
    ) -> None:
        """A corrupt record MUST count toward ``max_active_tasks_per_scope`` as it was last
        written, never be dropped from the count: with a limit of 2, a tenant's damaged
        cancelled task (its lease still live) takes no slot, but with two live tasks, one
        of them damaged, the tenant's next create — and a batch of one, where
        ``batch_create`` is on — is refused with ``CapacityExceeded`` naming
        ``max_active_tasks_per_scope``, and nothing is stored.

        Troubleshooting: count from what the store keeps beside the document (the tenant,
        status and expiry columns or fields), which the damage leaves as last written; a
        count that decodes each document and skips the ones that fail lets a tenant past
        its limit (a limit errs on the side of protection).
        """
        corrupt = _corrupter(corrupt_task)
        store = await make_store(max_active_tasks_per_scope=2)
        cancelled = await finished_task(store, end="cancelled")
        await corrupt(store, cancelled.id)
        live = await store.create(new_task())
        damaged = await store.create(new_task())
        await corrupt(store, damaged.id)
        refused = new_task()
        with pytest.raises(CapacityExceeded) as caught:
            await store.create(refused)
        assert "max_active_tasks_per_scope" == caught.value.limit
        if store.capabilities.batch_create:
            with pytest.raises(CapacityExceeded) as batch:
                await store.create_many([refused])
            assert "max_active_tasks_per_scope" == batch.value.limit
        with pytest.raises(TaskNotFound):
            await store.get(refused.id, tenant=None)
        assert [live.id] == [s.id for s in await store.list(TaskQuery(tenant=None, limit=100))]

    async def test_a_corrupt_record_in_an_exclusive_queue_leaves_it_busy(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """A damaged record of a waiting task MUST NOT hide the live lease of another task
        of its exclusive queue: ``claim_next(exclusive=[q])`` serves nothing of ``q``
        while that lease lives.

        Troubleshooting: find the queue's live leases with a query on its lease columns
        (or skip a record that fails to decode and go on looking); stopping at the first
        bad record opens the queue to a second worker.
        """
        if not store.capabilities.exclusive_queues:
            pytest.skip("store capability 'exclusive_queues' is off")
        corrupt = _corrupter(corrupt_task)
        later = await store.create(new_task(queue="serial", delay_s=3600))
        await corrupt(store, later.id)
        running = await store.create(new_task(queue="serial"))
        got = await store.claim_next("w1", LEASE_S, queues=["serial"], exclusive=["serial"])
        assert [running.id] == [c.snapshot.id for c in got]
        await store.create(new_task(queue="serial"))
        assert [] == await store.claim_next("w2", LEASE_S, queues=["serial"],
                                            exclusive=["serial"])

    async def test_next_available_carries_on_past_a_corrupt_record(
        self, store: TaskStore, corrupt_task: Corrupter | None
    ) -> None:
        """A damaged record of a waiting task MUST NOT hide the other waiting tasks from
        ``next_available``: a task due in 60 s is still found beside a damaged one due
        later.

        Troubleshooting: read the instants from their columns (or skip a record that fails
        to decode and go on); an idle worker told "nothing waits" sleeps past its work.
        """
        corrupt = _corrupter(corrupt_task)
        damaged = await store.create(new_task(delay_s=120))
        await corrupt(store, damaged.id)
        due = await store.create(new_task(delay_s=60))
        assert due.run_at == await store.next_available(["default"])

    async def test_reap_carries_on_past_a_corrupt_record(
        self, store: TaskStore, clock: ManualClock, corrupt_task: Corrupter | None
    ) -> None:
        """``reap`` MUST still delete every other expired task when a record is corrupt.

        Troubleshooting: skip (and log) records that fail validation in the sweep; a sweep
        that raises on one bad record never frees anything again.
        """
        corrupt = _corrupter(corrupt_task)
        ids = [(await store.create(new_task(ttl_s=10))).id for _ in range(4)]
        await corrupt(store, ids[1])
        clock.advance(11)
        reaped = await store.reap(100)
        assert sorted([ids[0], *ids[2:]]) == sorted(reaped)

    async def test_claim_next_carries_on_past_a_corrupt_record(
        self, store: TaskStore, clock: ManualClock, corrupt_task: Corrupter | None,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """``claim_next`` MUST still claim the other tasks when the oldest record is
        corrupt, and MUST NOT claim the corrupt one — call after call, reporting the skip
        exactly once (a WARNING naming the id and the operation, ``claim_next``, through
        ``tasks_core.reports.corrupt_skipped``: a busy worker claims many times a second)
        and never quoting stored text.

        Troubleshooting: skip records that fail validation when choosing candidates (or
        filter in the query and decode each claimed row, skipping failures); report each
        skip through ``tasks_core.reports.corrupt_skipped`` — a skip nobody hears of
        leaves a task pending for ever without a trace.
        """
        corrupt = _corrupter(corrupt_task)
        ids = []
        for _ in range(3):
            ids.append((await store.create(new_task())).id)
            clock.advance(1)
        await corrupt(store, ids[0])
        with caplog.at_level("WARNING"):
            got = await store.claim_next("w1", LEASE_S, queues=["default"], limit=5)
            for _ in range(3):
                assert [] == await store.claim_next("w2", LEASE_S, queues=["default"], limit=5)
        assert ids[1:] == [c.snapshot.id for c in got]
        warning = _one_warning_about(caplog, ids[0])
        assert _names(warning, "claim_next"), warning
        assert [] == [m for m in caplog.messages if CORRUPT_MARKER in m]

    async def test_listing_and_reap_report_a_skipped_corrupt_record(
        self, store: TaskStore, clock: ManualClock, corrupt_task: Corrupter | None,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """A listing that skips a corrupt record MUST report it — once, however often it
        lists (``tasks_core.reports.corrupt_skipped``) — and so MUST ``reap`` when it
        passes over it; a WARNING naming the id and the operation (``list`` or "listing",
        ``reap``), never quoting stored text.

        Troubleshooting: call ``tasks_core.reports.corrupt_skipped(log, task_id, where)``
        wherever a record is skipped; skipping in silence leaves an operator no way to
        learn why a task never shows up (and why the store keeps growing).
        """
        corrupt = _corrupter(corrupt_task)
        ids = [(await store.create(new_task(ttl_s=10))).id for _ in range(3)]
        await corrupt(store, ids[1])
        with caplog.at_level("WARNING"):
            for _ in range(3):
                listed = await store.list(TaskQuery(tenant=None, limit=100))
                assert [ids[0], ids[2]] == [s.id for s in listed]
        warning = _one_warning_about(caplog, ids[1])
        assert _names(warning, "list") or _names(warning, "listing"), warning
        caplog.clear()
        clock.advance(10)
        with caplog.at_level("WARNING"):
            assert sorted([ids[0], ids[2]]) == sorted(await store.reap(100))
        assert [w for w in _warnings_about(caplog, ids[1]) if _names(w, "reap")], \
            caplog.messages
        assert [] == [m for m in caplog.messages if CORRUPT_MARKER in m]


def _warnings_about(caplog: pytest.LogCaptureFixture, task_id: str) -> list[str]:
    """The WARNING (or worse) messages naming ``task_id``."""
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and task_id in r.getMessage()]


def _one_warning_about(caplog: pytest.LogCaptureFixture, task_id: str) -> str:
    """The one WARNING naming ``task_id``; fails saying how many there were."""
    warnings = _warnings_about(caplog, task_id)
    assert len(warnings) == 1, (
        f"expected exactly one WARNING naming the skipped corrupt record {task_id!r} "
        f"(tasks_core.reports.corrupt_skipped), got {len(warnings)}: {warnings}")
    return warnings[0]


def _names(message: str, operation: str) -> bool:
    """Whether ``message`` names ``operation`` as a word of its own (``claim_next``, not
    ``CLAIM_NEXT`` or ``XXclaim_nextXX``)."""
    return re.search(rf"(?<!\w){re.escape(operation)}(?!\w)", message) is not None
