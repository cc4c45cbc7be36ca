"""Input requests and the inbox of accepted answers."""

from __future__ import annotations

import pytest
from tasks_core import (
    Claim,
    InputRequested,
    InputResponsesAccepted,
    ManualClock,
    TaskStatus,
    TaskStore,
    Transition,
    Unavailable,
)

from tasks_contract_tests._base import ContractBase
from tasks_contract_tests._kit import ALICE, LEASE_S, access, claim, created_and_claimed


async def ask(store: TaskStore, claimed: Claim, revision: int, *keys: str) -> Transition:
    """The lease holder asks for input under each of ``keys`` in turn."""
    outcome: Transition | None = None
    for key in keys:
        request = InputRequested(event_id=f"ask-{key}", key=key, request={"question": key})
        outcome = await store.transition(claimed.snapshot.id, revision, request, claimed.lease)
        revision = outcome.snapshot.revision
    assert outcome is not None
    return outcome


async def answer(
    store: TaskStore, task_id: str, revision: int, event_id: str, **responses: object
) -> Transition:
    """The owner answers with ``responses``."""
    event = InputResponsesAccepted(event_id=event_id, responses=responses)
    return await store.transition(task_id, revision, event, access(ALICE))


class InboxContract(ContractBase):
    """Input requests and the inbox of accepted answers."""

    async def test_input_request_moves_the_task_to_waiting_input(self, store: TaskStore) -> None:
        """``input_requested`` by the lease holder MUST store the request under its key,
        add the key to ``input_history`` and make the task ``waiting_input``.

        Troubleshooting: the three fields change in the same write as the revision.
        """
        claimed = await created_and_claimed(store)
        asked = await ask(store, claimed, 0, "approve")
        stored = await store.get(claimed.snapshot.id, tenant="default")
        assert asked.snapshot == stored
        assert TaskStatus.WAITING_INPUT == stored.status
        assert {"approve": {"question": "approve"}} == stored.input_requests
        assert ("approve",) == stored.input_history
        assert asked.record is not None
        assert TaskStatus.WAITING_INPUT == asked.record.status

    async def test_asking_the_same_key_twice_is_unchanged(self, store: TaskStore) -> None:
        """A key MUST be asked once per task: asking it again — while outstanding, or after
        it was answered, by a later claim — answers ``unchanged`` and records nothing.

        Troubleshooting: check ``input_history`` (every key ever asked), not only the
        outstanding ``input_requests``; a re-run replays the stored answer instead.
        """
        claimed = await created_and_claimed(store)
        await ask(store, claimed, 0, "k")
        repeat = InputRequested(event_id="ask-again", key="k", request="different")
        twice = await store.transition(claimed.snapshot.id, 1, repeat, claimed.lease)
        assert ("unchanged", 1) == (twice.outcome, twice.snapshot.revision)
        await store.release(claimed.lease)
        await answer(store, claimed.snapshot.id, 1, "a1", k="yes")
        again = await claim(store, claimed.snapshot.id, "w2")
        later = InputRequested(event_id="ask-later", key="k")
        thrice = await store.transition(claimed.snapshot.id, 2, later, again.lease)
        assert "unchanged" == thrice.outcome
        stored = await store.get(claimed.snapshot.id, tenant="default")
        assert ({}, ("k",), {"k": "yes"}) == (
            stored.input_requests,
            stored.input_history,
            stored.accepted_input_responses,
        )
        assert 2 == len(await store.history(claimed.snapshot.id, tenant="default"))

    async def test_answers_are_accepted_into_the_inbox_and_the_task_becomes_runnable(
        self, store: TaskStore
    ) -> None:
        """Answers for the outstanding keys MUST be stored in ``accepted_input_responses``
        in the same applied step that clears the requests, and with none outstanding the
        task MUST be ``pending`` and claimable again, the answers visible to the claim.

        Troubleshooting: write the inbox and the status in one atomic update (a crash in
        between would lose the answer or strand the task in ``waiting_input``).
        """
        claimed = await created_and_claimed(store)
        await ask(store, claimed, 0, "approve")
        await store.release(claimed.lease)
        answered = await answer(store, claimed.snapshot.id, 1, "a1", approve={"ok": True})
        assert "applied" == answered.outcome
        assert ({}, {"approve": {"ok": True}}, TaskStatus.PENDING) == (
            answered.snapshot.input_requests,
            answered.snapshot.accepted_input_responses,
            answered.snapshot.status,
        )
        assert answered.snapshot == await store.get(claimed.snapshot.id, tenant="default")
        reclaimed = await claim(store, claimed.snapshot.id, "w2")
        assert {"approve": {"ok": True}} == reclaimed.snapshot.accepted_input_responses
        assert TaskStatus.RUNNING == reclaimed.snapshot.status

    async def test_answers_for_unknown_keys_only_are_unchanged(self, store: TaskStore) -> None:
        """Answers none of whose keys is outstanding MUST answer ``unchanged`` and record
        nothing, whether the task waits for other keys or waits for nothing.

        Troubleshooting: match answers against ``input_requests``; storing unsolicited
        answers lets anyone with respond rights pre-fill future questions.
        """
        claimed = await created_and_claimed(store)
        early = await answer(store, claimed.snapshot.id, 0, "a0", approve=True)
        assert ("unchanged", 0) == (early.outcome, early.snapshot.revision)
        await ask(store, claimed, 0, "approve")
        stray = await answer(store, claimed.snapshot.id, 1, "a1", other=True)
        assert ("unchanged", 1) == (stray.outcome, stray.snapshot.revision)
        stored = await store.get(claimed.snapshot.id, tenant="default")
        assert (TaskStatus.WAITING_INPUT, {}) == (stored.status, stored.accepted_input_responses)
        assert 1 == len(await store.history(claimed.snapshot.id, tenant="default"))

    async def test_partial_answers_keep_the_task_waiting(self, store: TaskStore) -> None:
        """Answering some of the outstanding keys MUST accept exactly those (ignoring any
        unknown key sent along) and keep ``waiting_input`` until the last is answered.

        Troubleshooting: remove only the answered keys from ``input_requests`` and decide
        the status from what remains.
        """
        claimed = await created_and_claimed(store)
        await ask(store, claimed, 0, "a", "b")
        first = await answer(store, claimed.snapshot.id, 2, "r1", a=1, stray=0)
        assert (TaskStatus.WAITING_INPUT, {"b": {"question": "b"}}, {"a": 1}) == (
            first.snapshot.status,
            first.snapshot.input_requests,
            first.snapshot.accepted_input_responses,
        )
        second = await answer(store, claimed.snapshot.id, 3, "r2", b=2)
        assert TaskStatus.RUNNING == second.snapshot.status  # runnable; the lease is live
        assert ({}, {"a": 1, "b": 2}) == (
            second.snapshot.input_requests,
            second.snapshot.accepted_input_responses,
        )

    async def test_history_says_which_answers_were_accepted(self, store: TaskStore) -> None:
        """An answer event's history record MUST keep the answers as sent and name the
        keys accepted (``accepted``): an answer to a question no longer outstanding, or
        to none, is ignored, and an auditor must not read it as accepted. A replay of the
        event returns that record.

        Troubleshooting: store the record ``rules.apply_event`` returns (with its
        ``accepted``) whole, and read it back whole.
        """
        claimed = await created_and_claimed(store)
        await ask(store, claimed, 0, "a", "b")
        await answer(store, claimed.snapshot.id, 2, "r1", a=1)
        both = await answer(store, claimed.snapshot.id, 3, "r2", a=9, b=2, stray=0)
        assert both.record is not None
        assert isinstance(both.record.event, InputResponsesAccepted)
        assert ({"a": 9, "b": 2, "stray": 0}, ("b",)) == (
            both.record.event.responses, both.record.accepted)
        again = await answer(store, claimed.snapshot.id, 3, "r2", a=9, b=2, stray=0)
        assert ("duplicate", both.record) == (again.outcome, again.record)
        history = await store.history(claimed.snapshot.id, tenant="default")
        assert [None, None, ("a",), ("b",)] == [r.accepted for r in history]
        stored = await store.get(claimed.snapshot.id, tenant="default")
        assert {"a": 1, "b": 2} == stored.accepted_input_responses

    async def test_a_waiting_task_cannot_be_claimed(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """A task in ``waiting_input`` MUST NOT be claimed, even after its lease expired:
        ``claim`` raises ``Unavailable`` and ``claim_next`` skips it.

        Troubleshooting: ``waiting_input`` is excluded from both claim paths regardless of
        the lease (``rules.is_claimable``).
        """
        claimed = await created_and_claimed(store)
        await ask(store, claimed, 0, "k")
        clock.advance(LEASE_S)
        with pytest.raises(Unavailable):
            await claim(store, claimed.snapshot.id, "w2")
        assert [] == await store.claim_next("w2", LEASE_S, queues=["default"])

    async def test_an_answer_ends_the_claim_of_a_holder_that_died_waiting(
        self, store: TaskStore, clock: ManualClock
    ) -> None:
        """An answer accepted after the holder's lease lapsed (its worker died while the
        run waited for input) MUST end that claim in the same step, so the next claim is no
        takeover (``claim.recovered`` false): a parked run would be re-run all the same.
        An answer within a live lease MUST leave the claim as it is (the run waits in its
        slot for it).

        Troubleshooting: apply ``rules.apply_event``'s whole result, the claim included.
        """
        claimed = await created_and_claimed(store)
        live = await answer(store, claimed.snapshot.id,
                            (await ask(store, claimed, 0, "a", "b")).snapshot.revision,
                            "live", a=1)
        assert live.snapshot.claim is not None
        assert not live.snapshot.claim.ended
        clock.advance(LEASE_S)
        late = await answer(store, claimed.snapshot.id, live.snapshot.revision, "late", b=2)
        assert late.snapshot.claim is not None
        assert late.snapshot.claim.ended
        reclaimed = await claim(store, claimed.snapshot.id, "w2")
        assert reclaimed.snapshot.claim is not None
        assert not reclaimed.snapshot.claim.recovered
