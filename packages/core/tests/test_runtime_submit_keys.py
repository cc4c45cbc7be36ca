"""Submit with keys: ids and dedup, joining, new runs, global keys, watchers (memory store)."""

from __future__ import annotations

from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CAROL, MALLORY, make_app
from _runtime_kit import reports_app as _app
from tasks_core import (
    AuthorizationError,
    CapacityExceeded,
    Completed,
    InvalidInput,
    Limits,
    ManualClock,
    Policy,
    SubmitItem,
    System,
    TaskContext,
    TaskNotFound,
    TaskStatus,
    Unavailable,
)
from tasks_core.random_ids import random_task_id
from tasks_store_memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_two_owners_with_one_key_get_different_ids_and_cannot_see_each_other() -> None:
    """The same key submitted by two owners MUST make two tasks, each invisible to the
    other owner (TaskNotFound, exactly like a missing task)."""
    app = _app()
    async with app:
        a = await app.submit("report", {"month": "11"}, ALICE, key="r-11")
        b = await app.submit("report", {"month": "11"}, BOB, key="r-11")
        assert ("alice::r-11", "bob::r-11") == (a.id, b.id)
        assert ("created", "created") == (a.outcome, b.outcome)
        with pytest.raises(TaskNotFound) as seen:
            await app.get(a.id, BOB)
        with pytest.raises(TaskNotFound) as missing:
            await app.get("alice::nothing", BOB)
        assert str(missing.value).replace("alice::nothing", "X") == str(seen.value).replace(
            a.id, "X"
        )
        assert [b.id] == [s.id for s in await app.list(BOB)]


async def test_owner_key_in_another_tenant_gets_a_tenant_scoped_id() -> None:
    """An owner of another tenant MUST get an id scoped to that tenant as well."""
    app = _app()
    async with app:
        m = await app.submit("report", None, MALLORY, key="r-11")
        assert "evil::mallory::r-11" == m.id
        assert "evil" == m.snapshot.tenant


async def test_resubmitting_a_live_key_joins_the_same_run() -> None:
    """Submitting a live key again MUST return the live run (outcome ``joined``), not a
    second task, and ignore the new input."""
    app = _app()
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("joined", first.id, first.run_id) == (again.outcome, again.id, again.run_id)
        assert {"month": "11"} == (await app.get(first.id, ALICE)).work.input


async def test_resubmitting_a_key_claimed_ahead_joins_the_same_run() -> None:
    """A task a worker holds ahead of a free slot (``claimed``) is live: submitting its
    key again MUST join it, and a listing of live work MUST count it."""
    app = _app(limits=Limits(max_runs_per_owner=1))
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        (held,) = await app.store.claim_next("w1", 30, queues=["reports"], start=0)
        assert TaskStatus.CLAIMED == (await app.get(first.id, ALICE)).status
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("joined", first.run_id) == (again.outcome, again.run_id)
        with pytest.raises(CapacityExceeded):
            await app.submit("report", {"month": "12"}, ALICE, key="other")
        assert held.snapshot.id == first.id


async def test_resubmitting_a_finished_key_starts_a_new_run() -> None:
    """A finished key MUST be replaced by a new run: new run_id, fresh history, new input."""
    app = _app()
    async with app:
        first = await app.submit("report", {"month": "11"}, ALICE, key="r")
        await app.cancel(first.id, ALICE)
        again = await app.submit("report", {"month": "12"}, ALICE, key="r")
        assert ("replaced", first.id) == (again.outcome, again.id)
        assert first.run_id != again.run_id
        snapshot = await app.get(first.id, ALICE)
        assert (TaskStatus.PENDING, {"month": "12"}) == (snapshot.status, snapshot.work.input)
        assert [] == await app.history(first.id, ALICE)


@pytest.mark.parametrize("finished", [False, True])
async def test_joining_a_foreign_global_key_is_refused(finished: bool) -> None:
    """Without the watch authorizer's approval, joining a global key owned by someone else
    MUST raise AuthorizationError, whether the task is live or finished, and change
    nothing."""
    app = _app()
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        if finished:
            await app.cancel(mine.id, ALICE)
        before = await app.get(mine.id, ALICE)
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert before == await app.get(mine.id, ALICE)
        with pytest.raises(TaskNotFound):
            await app.get(mine.id, BOB)


async def test_a_global_key_never_names_a_task_submitted_without_a_key() -> None:
    """A global key equal to the id of someone's key-less task MUST be refused exactly as
    for an id nobody uses — before anything is written — not answered with that task
    (no existence oracle; an approving watch authorizer must not let a stranger join it or
    re-run it with his input)."""
    app = _app(policy=Policy(watch_authorizer=lambda task_id, watchers, owner: True))
    async with app:
        private = await app.submit("report", {"month": "11"}, ALICE)
        unused = random_task_id()
        refusals = []
        for key in (private.id, unused):
            with pytest.raises(InvalidInput) as refused:
                await app.submit("report", {"month": "12"}, BOB, key=key, dedup="global")
            refusals.append(str(refused.value).replace(key, "KEY"))
        assert refusals[0] == refusals[1]
        assert private.snapshot == await app.get(private.id, ALICE)
        with pytest.raises(TaskNotFound):
            await app.get(unused, System())


async def test_watch_authorizer_lets_a_submitter_join_a_live_global_key() -> None:
    """An approved join MUST add the submitter as a watcher of the live run; the
    authorizer MUST be asked with (task_id, newcomers, submitter)."""
    asked: list[tuple[Any, ...]] = []

    def allow(task_id: str, newcomers: tuple[Any, ...], submitter: Any) -> bool:
        asked.append((task_id, newcomers, submitter))
        return True

    app = _app(policy=Policy(watch_authorizer=allow))
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        joined = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert ("joined", mine.run_id) == (joined.outcome, joined.run_id)
        assert [("nightly", (BOB,), BOB)] == asked
        assert (BOB,) == (await app.get(mine.id, BOB)).watchers
        again = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert "joined" == again.outcome
        assert 1 == len(asked), "an existing watcher needs no new approval"


async def test_approved_rerun_of_a_finished_global_key_keeps_the_owner() -> None:
    """A new run of someone else's finished key MUST keep its owner and add the submitter
    as a watcher."""
    app = _app(policy=Policy(watch_authorizer=lambda *_: True))
    async with app:
        mine = await app.submit("report", None, ALICE, key="nightly", dedup="global")
        await app.cancel(mine.id, ALICE)
        rerun = await app.submit("report", None, BOB, key="nightly", dedup="global")
        assert "replaced" == rerun.outcome
        assert (ALICE, (BOB,)) == (rerun.snapshot.owner, rerun.snapshot.watchers)


async def test_a_raising_watch_authorizer_denies() -> None:
    """A watch authorizer that raises MUST deny (AuthorizationError)."""

    def broken(*_: Any) -> bool:
        raise RuntimeError("bug")

    app = _app(policy=Policy(watch_authorizer=broken))
    async with app:
        await app.submit("report", None, ALICE, key="k", dedup="global")
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="k", dedup="global")


async def test_global_keys_are_separate_per_tenant() -> None:
    """The same global key in two tenants MUST name two different tasks: another tenant's
    submit neither joins nor learns of the first (no cross-tenant existence oracle)."""
    app = _app(policy=Policy(watch_authorizer=lambda *_: True))
    async with app:
        mine = await app.submit("report", None, ALICE, key="k", dedup="global")
        theirs = await app.submit("report", None, MALLORY, key="k", dedup="global")
        assert ("created", "created") == (mine.outcome, theirs.outcome)
        assert mine.id != theirs.id
        with pytest.raises(TaskNotFound):
            await app.get(mine.id, MALLORY)


async def test_watcher_granted_at_submit_can_read_and_cancel() -> None:
    """``watchers=`` MUST grant read and cancel; others still see nothing."""
    app = _app()
    async with app:
        t = await app.submit("report", None, ALICE, watchers=[BOB])
        assert t.id == (await app.get(t.id, BOB)).id
        assert [t.id] == [s.id for s in await app.list(BOB)]
        assert TaskStatus.CANCELLED == (await app.cancel(t.id, BOB)).status
        with pytest.raises(TaskNotFound):
            await app.get(t.id, CAROL)


async def test_watchers_must_be_owners_of_the_same_tenant() -> None:
    """A watcher of another tenant, or not an Owner, MUST be refused before anything is
    written."""
    app = _app()
    async with app:
        with pytest.raises(InvalidInput):
            await app.submit("report", None, ALICE, key="k", watchers=[MALLORY])
        with pytest.raises(InvalidInput):
            await app.submit("report", None, ALICE, key="k", watchers=["bob"])  # type: ignore[list-item]
        with pytest.raises(TaskNotFound):
            await app.get("alice::k", ALICE)


async def test_joining_owner_who_adds_watchers_grants_them() -> None:
    """The owner re-submitting a live key with new watchers MUST grant them."""
    app = _app()
    async with app:
        await app.submit("report", None, ALICE, key="k")
        joined = await app.submit("report", None, ALICE, key="k", watchers=[BOB])
        assert ("joined", (BOB,)) == (joined.outcome, joined.snapshot.watchers)


@pytest.mark.parametrize("bulk", [False, True])
async def test_a_watcher_cannot_start_a_new_run_of_a_finished_key_without_approval(
    bulk: bool,
) -> None:
    """A watcher re-submitting a finished key MUST need the watch authorizer, asked with
    the watcher as submitter: the new run is the owner's, with the watcher's input. Without
    approval it is ``AuthorizationError`` and the finished task stays as it was (submit and
    submit_many alike)."""
    asked: list[tuple[str, tuple[Any, ...], Any]] = []

    def deny(task_id: str, newcomers: tuple[Any, ...], submitter: Any) -> bool:
        asked.append((task_id, newcomers, submitter))
        return False

    app = _app(policy=Policy(watch_authorizer=deny))
    async with app:
        mine = await app.submit("report", {"month": "11"}, ALICE, key="k", dedup="global",
                                watchers=[BOB])
        await app.cancel(mine.id, ALICE)
        before = await app.get(mine.id, ALICE)
        rerun = (app.submit_many([{"task": "report", "input": {"month": "12"}, "key": "k",
                                   "dedup": "global"}], BOB) if bulk
                 else app.submit("report", {"month": "12"}, BOB, key="k", dedup="global"))
        with pytest.raises(AuthorizationError):
            await rerun
        assert before == await app.get(mine.id, ALICE)
        assert [(mine.id, (), BOB)] == asked


async def test_a_watcher_cannot_grant_further_watchers_without_approval() -> None:
    """A watcher re-submitting a key with new watchers MUST need the watch authorizer."""
    app = _app()
    async with app:
        await app.submit("report", None, ALICE, key="k", dedup="global", watchers=[BOB])
        assert "joined" == (await app.submit("report", None, BOB, key="k",
                                             dedup="global")).outcome
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="k", dedup="global", watchers=[CAROL])


async def test_a_key_whose_run_outlived_its_ttl_waits_for_that_run_to_end() -> None:
    """A key whose task is past its ttl while a worker still runs it MUST NOT start a
    second run beside the first: ``submit`` and a ``submit_many`` item raise
    ``Unavailable`` (saying to try again once that run ended), writing nothing; once the
    run has ended, the key starts a new run.

    Troubleshooting: ``check_join`` refuses a task ``rules.gone`` says is not gone yet;
    stores refuse the replacement too (``rules.check_replace``) and the reaper leaves it.
    """
    clock = ManualClock()
    app = make_app(clock)

    @app.task()
    async def charge(ctx: TaskContext, order: int) -> str:
        return "charged"

    async with app:
        first = await charge.submit({"order": 1}, ALICE, key="order-1", ttl=2)
        (held,) = await app.store.claim_next("w1", 30, queues=["default"])
        clock.advance(2.5)
        with pytest.raises(Unavailable, match="a run still holds its lease"):
            await charge.submit({"order": 1}, ALICE, key="order-1")
        batch = [SubmitItem(task="charge", input={"order": 2}),
                 SubmitItem(task="charge", input={"order": 1}, key="order-1")]
        with pytest.raises(Unavailable, match="a run still holds its lease"):
            await app.submit_many(batch, ALICE)
        assert [] == (await app.list(System())).items  # nothing written
        assert [] == await app.reap(System())
        await app.store.transition(first.id, 0, Completed(event_id="done"), held.lease)
        again = await charge.submit({"order": 1}, ALICE, key="order-1")
        assert ("replaced", TaskStatus.PENDING) == (again.outcome, again.snapshot.status)
        assert again.run_id != first.run_id


async def test_a_global_key_whose_task_expired_is_a_new_task_of_the_submitter() -> None:
    """An expired task is a missing one, before the reaper as after it: submitting its
    global key MUST start a new run owned by the submitter, without the watch authorizer
    (which refuses a finished task's re-run by a stranger while it is retained).

    Troubleshooting: ``check_join`` asks nothing of an expired task, and ``_existing``
    replaces it with the submitter's own task (its owner and watchers).
    """
    clock = ManualClock()
    app = _app(store=MemoryStore(clock=clock))
    async with app:
        mine = await app.submit("report", None, ALICE, key="g", dedup="global", retention=10)
        await app.cancel(mine.id, ALICE)
        with pytest.raises(AuthorizationError):
            await app.submit("report", None, BOB, key="g", dedup="global")
        clock.advance(11)
        before_reap = await app.submit("report", None, BOB, key="g", dedup="global")
        assert ("replaced", BOB, ()) == (before_reap.outcome, before_reap.snapshot.owner,
                                         before_reap.snapshot.watchers)
        with pytest.raises(TaskNotFound):
            await app.get(mine.id, ALICE)
