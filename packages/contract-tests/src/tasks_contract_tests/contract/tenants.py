"""Tenant isolation and request authority."""

from __future__ import annotations

import pytest
from tasks_core import (
    AuthorizationError,
    Cancelled,
    Completed,
    Event,
    InputRequested,
    InputResponsesAccepted,
    InvalidInput,
    Owner,
    System,
    TaskNotFound,
    TaskQuery,
    TaskStatus,
    TaskStore,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import (
    BOB,
    MALLORY,
    SYSTEM,
    access,
    created_and_claimed,
    new_task,
)

MISSING = "no-such-task"


def shape(exc: BaseException, task_id: str) -> str:
    """The message of ``exc`` with the task id masked, to compare message shapes."""
    return str(exc).replace(task_id, "<id>")


async def missing_shape(store: TaskStore) -> tuple[type[BaseException], str]:
    """How the store reports a task id it has never seen, for request access."""
    with pytest.raises(TaskNotFound) as caught:
        await store.transition(MISSING, 0, Cancelled(event_id="x"), access(SYSTEM))
    return type(caught.value), shape(caught.value, MISSING)


class TenantContract(ContractBase):
    """Tenant isolation and request authority."""

    async def test_get_in_another_tenant_reads_as_missing(self, store: TaskStore) -> None:
        """``get`` and ``history`` in another tenant MUST raise exactly what an unknown id
        raises: the same exception type and the same message but for the id.

        Troubleshooting: filter by tenant in the lookup itself and raise
        ``TaskNotFound(task_id)``; a distinct "forbidden" or a different message tells an
        attacker the id exists.
        """
        created = await store.create(new_task())
        for read in (store.get, store.history):
            with pytest.raises(TaskNotFound) as unknown:
                await read(MISSING, tenant="evil")
            with pytest.raises(TaskNotFound) as foreign:
                await read(created.id, tenant="evil")
            assert type(unknown.value) is type(foreign.value)
            assert shape(unknown.value, MISSING) == shape(foreign.value, created.id)
        assert created == await store.get(created.id, tenant="default")

    async def test_tenants_that_differ_only_in_case_are_apart(self, store: TaskStore) -> None:
        """Tenants are compared exactly: a task of tenant ``Acme`` MUST read as missing in
        tenants ``acme`` and ``ACME`` (``get``, ``history``) and be left out of their
        listings.

        Troubleshooting: compare tenants byte for byte. A case-insensitive collation
        (MySQL's and MariaDB's default), a case-folding index or a lowercased key joins
        them — give the tenant column a binary collation, as the ids have.
        """
        created = await store.create(new_task(owner=Owner("carol", tenant="Acme")))
        for tenant in ("acme", "ACME"):
            for read in (store.get, store.history):
                with pytest.raises(TaskNotFound):
                    await read(created.id, tenant=tenant)
            assert [] == await store.list(TaskQuery(tenant=tenant))
        assert created == await store.get(created.id, tenant="Acme")

    @pytest.mark.parametrize("tenant", [5, b"default", ["default"]])
    async def test_get_and_history_refuse_a_tenant_that_is_not_a_string(
        self, store: TaskStore, tenant: object
    ) -> None:
        """``get`` and ``history`` MUST refuse a ``tenant`` that is neither a string nor
        ``None`` with ``InvalidInput`` — for a stored task and an unknown id alike, before
        anything is read.

        Troubleshooting: check the argument first (``rules.check_tenant``); comparing it
        with the stored tenant reads a bad argument as "another tenant".
        """
        created = await store.create(new_task())
        for read in (store.get, store.history):
            for task_id in (created.id, MISSING):
                with pytest.raises(InvalidInput):
                    await read(task_id, tenant=tenant)  # type: ignore[arg-type]

    async def test_listing_never_shows_another_tenants_tasks(self, store: TaskStore) -> None:
        """``list`` for one tenant MUST leave out every task of other tenants, whatever the
        other filters.

        Troubleshooting: apply the tenant filter in the query, before paging.
        """
        ours = await store.create(new_task())
        await store.create(new_task(owner=MALLORY))
        listed = await store.list(TaskQuery(tenant="default"))
        assert [ours.id] == [s.id for s in listed]
        assert [] == await store.list(TaskQuery(tenant="nobody"))

    async def test_request_from_another_tenant_reads_as_missing(self, store: TaskStore) -> None:
        """A cancel or answer from a principal (or a tenant-bound System) of another tenant
        MUST raise ``TaskNotFound`` shaped exactly like an unknown id, and change nothing.

        Troubleshooting: find the task by id *and* the caller's tenant (``rules.can_see``)
        before checking any right.
        """
        created = await store.create(new_task())
        expected = await missing_shape(store)
        answer = InputResponsesAccepted(event_id="a", responses={"k": 1})
        attempts: list[tuple[Event, Owner | System]] = [
            (Cancelled(event_id="c"), MALLORY),
            (answer, MALLORY),
            (Cancelled(event_id="c"), System("evil")),
        ]
        for event, principal in attempts:
            with pytest.raises(TaskNotFound) as caught:
                await store.transition(created.id, 0, event, access(principal))
            assert expected == (type(caught.value), shape(caught.value, created.id))
        assert created == await store.get(created.id, tenant="default")

    async def test_non_watcher_cannot_see_a_task_under_watchers_visibility(
        self, store: TaskStore
    ) -> None:
        """Under ``visibility="watchers"`` a principal of the same tenant who is neither
        owner nor watcher MUST get ``TaskNotFound`` (shaped like an unknown id) for cancel,
        answers and even worker events.

        Troubleshooting: invisibility is reported as absence, never as
        ``AuthorizationError``; check visibility before the right.
        """
        created = await store.create(new_task())
        expected = await missing_shape(store)
        events: list[Event] = [
            Cancelled(event_id="c"),
            InputResponsesAccepted(event_id="a", responses={"k": 1}),
            Completed(event_id="d"),
        ]
        for event in events:
            with pytest.raises(TaskNotFound) as caught:
                await store.transition(created.id, 0, event, access(BOB))
            assert expected == (type(caught.value), shape(caught.value, created.id))

    async def test_tenant_visibility_lets_others_read_but_not_cancel_or_respond(
        self, store: TaskStore
    ) -> None:
        """Under ``visibility="tenant"`` another principal of the tenant MUST see the task
        (refusals become ``AuthorizationError``, not ``TaskNotFound``) but MUST NOT cancel
        or answer it; nothing changes.

        Troubleshooting: ``tenant`` visibility grants read only; cancel and respond stay
        with the owner, the watchers and System (``rules.check_request``).
        """
        created = await store.create(new_task())
        answer = InputResponsesAccepted(event_id="a", responses={"k": 1})
        requests: list[Event] = [Cancelled(event_id="c"), answer]
        for event in requests:
            with pytest.raises(AuthorizationError):
                await store.transition(created.id, 0, event, access(BOB, "tenant"))
        cancel = Cancelled(event_id="c")
        with pytest.raises(TaskNotFound):
            await store.transition(created.id, 0, cancel, access(MALLORY, "tenant"))
        assert created == await store.get(created.id, tenant="default")

    async def test_watcher_can_respond_and_cancel(self, store: TaskStore) -> None:
        """A watcher granted at submit MUST be able to answer input requests and cancel,
        like the owner.

        Troubleshooting: membership is ``owner == principal or principal in watchers``,
        compared by user id and tenant.
        """
        snapshot, lease = await created_and_claimed(store, watchers=(BOB,))
        asked = await store.transition(
            snapshot.id, 0, InputRequested(event_id="ask", key="ok"), lease
        )
        answer = InputResponsesAccepted(event_id="a", responses={"ok": True})
        answered = await store.transition(snapshot.id, 1, answer, access(BOB))
        assert ("applied", {"ok": True}) == (
            answered.outcome,
            answered.snapshot.accepted_input_responses,
        )
        cancelled = await store.transition(snapshot.id, 2, Cancelled(event_id="c"), access(BOB))
        assert TaskStatus.CANCELLED == cancelled.snapshot.status
        assert TaskStatus.WAITING_INPUT == asked.snapshot.status

    async def test_system_sees_every_tenant_or_only_its_own(self, store: TaskStore) -> None:
        """``System()`` MUST act on tasks of every tenant (and ``get``/``list`` with
        ``tenant=None`` see them all); ``System("t")`` MUST act only on tenant ``t``.

        Troubleshooting: ``System(tenant=None)`` skips the tenant filter entirely; a
        tenant-bound System is filtered like any principal of that tenant but needs no
        membership.
        """
        ours = await store.create(new_task())
        theirs = await store.create(new_task(owner=MALLORY))
        assert ours == await store.get(ours.id, tenant=None)
        assert theirs == await store.get(theirs.id, tenant=None)
        listed = await store.list(TaskQuery(tenant=None))
        assert sorted([ours.id, theirs.id]) == [s.id for s in listed]
        with pytest.raises(TaskNotFound):
            await store.transition(ours.id, 0, Cancelled(event_id="c"), access(System("evil")))
        done = await store.transition(theirs.id, 0, Cancelled(event_id="c"), access(System("evil")))
        assert "applied" == done.outcome
        anywhere = await store.transition(ours.id, 0, Cancelled(event_id="c"), access(SYSTEM))
        assert "applied" == anywhere.outcome

    async def test_a_lease_ignores_tenant(self, store: TaskStore) -> None:
        """Worker operations with the lease MUST work on a task of any tenant: the lease
        itself is the authority.

        Troubleshooting: look leased tasks up by id alone; never filter worker operations
        by a default tenant.
        """
        snapshot, lease = await created_and_claimed(store, owner=Owner("eve", tenant="acme"))
        assert "acme" == (await store.worker_snapshot(lease)).tenant
        await store.report_progress(lease, 10, "started")
        done = await store.transition(snapshot.id, 0, Completed(event_id="d", result=1), lease)
        assert ("applied", TaskStatus.COMPLETED) == (done.outcome, done.snapshot.status)
