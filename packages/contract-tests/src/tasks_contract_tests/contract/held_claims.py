"""claim_next(start=N): claims beyond the first N are held ahead of a free slot and read
``claimed`` — never ``running`` — until their holder renews them as the handler starts."""

from __future__ import annotations

import pytest
from tasks_core import InvalidInput, ManualClock, TaskQuery, TaskStatus, TaskStore

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import LEASE_S, new_task


async def _created(store: TaskStore, count: int, queue: str = "default") -> list[str]:
    return [(await store.create(new_task(queue=queue))).id for _ in range(count)]


async def _statuses(store: TaskStore, ids: list[str]) -> list[TaskStatus]:
    return [(await store.get(task_id, tenant=None)).status for task_id in ids]


async def _listed(store: TaskStore, status: TaskStatus) -> list[str]:
    query = TaskQuery(tenant=None, statuses=frozenset({status}))
    return [snapshot.id for snapshot in await store.list(query)]


class HeldClaimContract(ContractBase):
    """claim_next(start=N): what a claim ahead of a free slot reads as."""

    async def test_claims_beyond_start_read_claimed_and_the_first_running(
        self, store: TaskStore
    ) -> None:
        """``claim_next(limit=3, start=1)`` MUST return the first claim ``running`` and
        the other two ``claimed`` (``ClaimInfo.held``), and ``get`` MUST read the same.

        Troubleshooting: pass ``start`` to ``storekit.check_claim_next``; ``ClaimScan``
        holds every claim past the first ``start`` (``rules.start_claim(held=True)``).
        """
        ids = await _created(store, 3)
        claims = await store.claim_next("w1", LEASE_S, queues=["default"], limit=3, start=1)
        assert ids == [c.snapshot.id for c in claims]
        expected = [TaskStatus.RUNNING, TaskStatus.CLAIMED, TaskStatus.CLAIMED]
        assert expected == [c.snapshot.status for c in claims]
        assert [False, True, True] == [
            c.snapshot.claim is not None and c.snapshot.claim.held for c in claims
        ]
        assert expected == await _statuses(store, ids)

    @pytest.mark.parametrize(("start", "running"), [(None, 2), (0, 0), (5, 2)])
    async def test_start_none_starts_every_claim_and_zero_holds_every_claim(
        self, store: TaskStore, start: int | None, running: int
    ) -> None:
        """``start=None`` (the default) and a ``start`` past the claims MUST start every
        claim; ``start=0`` MUST hold every one.

        Troubleshooting: held is ``start is not None and claims so far >= start``.
        """
        ids = await _created(store, 2)
        await store.claim_next("w1", LEASE_S, queues=["default"], limit=2, start=start)
        statuses = await _statuses(store, ids)
        assert running == statuses.count(TaskStatus.RUNNING)
        assert 2 - running == statuses.count(TaskStatus.CLAIMED)

    async def test_a_listing_filters_claimed_and_running_apart(self, store: TaskStore) -> None:
        """``list`` by status MUST tell ``claimed`` from ``running`` and both from
        ``pending``, as ``get`` reads them.

        Troubleshooting: a SQL store needs the held flag in a column it can filter on.
        """
        running, claimed, pending = await _created(store, 3)
        await store.claim_next("w1", LEASE_S, queues=["default"], limit=2, start=1)
        assert [running] == await _listed(store, TaskStatus.RUNNING)
        assert [claimed] == await _listed(store, TaskStatus.CLAIMED)
        assert [pending] == await _listed(store, TaskStatus.PENDING)

    async def test_a_renew_starts_a_held_claim(self, store: TaskStore) -> None:
        """The holder's ``renew`` of a held claim MUST make the task read ``running`` (the
        worker renews it when the handler starts).

        Troubleshooting: ``rules.renew`` clears ``held``; write the new claim as a whole.
        """
        (task_id,) = await _created(store, 1)
        (held,) = await store.claim_next("w1", LEASE_S, queues=["default"], start=0)
        renewed = await store.renew(held.lease, LEASE_S)
        assert TaskStatus.RUNNING == renewed.snapshot.status
        assert [TaskStatus.RUNNING] == await _statuses(store, [task_id])
        assert [task_id] == await _listed(store, TaskStatus.RUNNING)
        assert [] == await _listed(store, TaskStatus.CLAIMED)

    async def test_a_held_claim_that_lapses_reads_pending(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A held claim whose lease expires MUST read ``pending`` and be claimable.

        Troubleshooting: ``claimed`` is derived from a live lease, like ``running``.
        """
        (task_id,) = await _created(store, 1)
        await store.claim_next("w1", LEASE_S, queues=["default"], start=0)
        clock.advance(LEASE_S + 1)
        assert [TaskStatus.PENDING] == await _statuses(store, [task_id])
        assert [task_id] == await _listed(store, TaskStatus.PENDING)
        (again,) = await store.claim_next("w2", LEASE_S, queues=["default"])
        assert TaskStatus.RUNNING == again.snapshot.status

    @pytest.mark.parametrize("start", [-1, True, 1.5, "1"])
    async def test_a_bad_start_is_invalid_and_claims_nothing(
        self, store: TaskStore, start: object
    ) -> None:
        """``start`` MUST be ``None`` or an integer from 0 (not a bool): anything else is
        ``InvalidInput`` before anything is claimed.

        Troubleshooting: ``storekit.check_claim_next`` checks it.
        """
        (task_id,) = await _created(store, 1)
        with pytest.raises(InvalidInput):
            await store.claim_next("w1", LEASE_S, queues=["default"],
                                   start=start)  # type: ignore[arg-type]
        assert [TaskStatus.PENDING] == await _statuses(store, [task_id])
