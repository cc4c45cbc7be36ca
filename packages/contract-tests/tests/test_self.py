"""The suite tests itself: every deliberately broken store fails the test meant to catch it.

Each case writes a small test module that subclasses ``StoreContract`` with a broken
store's factory, runs only the catching test in a subprocess (``pytester``), and checks
that this very test failed. The control case runs the same tests against the unmodified
``MemoryStore`` and checks that they all pass — so a catch is never a broken test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import broken_counts as counts
import broken_limits as limits
import broken_order as order
import broken_races as races
import broken_rules as bad
import broken_stores as broken
import broken_transactions as transactions
import pytest
from tasks_contract_tests.state_machine import run_model_check
from tasks_core import TaskStore

HERE = Path(__file__).parent

BROKEN: list[tuple[type, str]] = [
    (broken.NoReplayCheck, "test_duplicate_event_returns_original_outcome"),
    (broken.NoReplayCheck, "test_lease_holder_hears_duplicate_after_its_lease_ended"),
    (broken.NoTokenCheck, "test_stale_lease_is_refused_everywhere[completed-forged_token]"),
    (broken.NoTokenCheck, "test_stale_lease_is_refused_everywhere[renew-forged_token]"),
    (broken.NoTokenCheck, "test_renew_extends_the_lease_and_makes_the_old_one_stale"),
    (
        broken.OlderGenerationAccepted,
        "test_stale_lease_is_refused_everywhere[completed-older_generation]",
    ),
    (broken.GenerationNotBumped, "test_each_claim_has_a_higher_generation"),
    (broken.NoTenantFilter, "test_get_in_another_tenant_reads_as_missing"),
    (broken.NoTenantFilter, "test_listing_never_shows_another_tenants_tasks"),
    (broken.ExpiredTasksStayVisible, "test_expired_task_is_hidden_before_reap"),
    (broken.TenantsComparedWithoutCase, "test_tenants_that_differ_only_in_case_are_apart"),
    (broken.BatchRoomCountsOneTaskPerTenant, "test_bulk_holds_the_active_limit_per_tenant"),
    (broken.BatchStoredAtSeveralInstants, "test_bulk_stores_the_batch_at_one_instant"),
    (
        broken.CapacityCheckedOutsideTheAtomicStep,
        "test_capacity_holds_under_concurrent_creation[max_tasks]",
    ),
    (
        broken.CapacityCheckedOutsideTheAtomicStep,
        "test_capacity_holds_under_concurrent_creation[max_active_tasks_per_scope]",
    ),
    (broken.LastWriterWins, "test_stale_revision_raises_conflict"),
    (broken.LastWriterWins, "test_concurrent_writers_have_exactly_one_winner"),
    (broken.ClaimNextIgnoresLiveLeases, "test_concurrent_claim_next_never_shares_a_task"),
    (
        broken.ClaimNextIgnoresLiveLeases,
        "test_claim_next_skips_leased_terminal_waiting_and_deferred_tasks",
    ),
    (broken.ReleaseResetsDeliveries, "test_release_consumes_no_retry_but_counts_the_delivery"),
    (broken.ReleaseResetsDeliveries, "test_released_deliveries_count_towards_the_limit"),
    (broken.ReleaseConsumesARetry, "test_release_consumes_no_retry_but_counts_the_delivery"),
    (broken.ClaimNextIgnoresRetryAt, "test_claim_next_skips_retry_not_due"),
    (broken.DeliveryLimitIgnored, "test_claim_past_the_delivery_limit_fails_the_task"),
    (
        broken.DeliveryLimitIgnored,
        "test_claim_next_fails_a_task_past_the_delivery_limit_instead_of_serving_it",
    ),
    (broken.CorruptRecordBreaksListing, "test_corrupt_record_costs_only_itself"),
    (broken.NoTenantFilter, "test_store_agrees_with_the_reference_model"),
    (broken.BatchStopsAtFirstRefusal, "test_one_refused_item_does_not_stop_the_others"),
    (broken.BatchStopsAtFirstRefusal, "test_batch_results_equal_one_by_one_transitions"),
    (
        broken.BatchFencedByItsFirstLease,
        "test_stale_lease_in_a_batch_is_refused_while_the_rest_apply",
    ),
    # races from warm connections: each store checks, yields, then acts
    (races.ExclusiveQueueCheckedBeforeClaiming,
     "test_racing_exclusive_claims_hold_one_lease[warm]"),
    (races.ClaimNextChecksBeforeClaiming, "test_racing_claim_next_never_shares_a_task[warm]"),
    (races.QueueLimitsCheckedBeforeClaiming,
     "test_racing_claims_never_pass_max_running[warm]"),
    (races.QueueLimitsCheckedBeforeClaiming, "test_racing_claims_never_pass_the_rate[warm]"),
    (
        broken.CapacityCheckedOutsideTheAtomicStep,
        "test_racing_creators_stay_within_the_capacity[warm-max_tasks]",
    ),
    (
        broken.CapacityCheckedOutsideTheAtomicStep,
        "test_racing_creators_stay_within_the_capacity[warm-max_active_tasks_per_scope]",
    ),
    (races.RevisionCheckedBeforeWriting, "test_racing_writers_have_exactly_one_winner[warm]"),
    # what a claim serves and records
    (bad.ClaimNextServesCancelledPendingTasks, "test_a_cancelled_task_is_never_claimed[pending]"),
    (bad.ClaimNextServesDelayedTasksEarly, "test_a_delayed_task_is_never_served_early"),
    (
        bad.ClaimNextServesLapsedCancelledTasks,
        "test_a_cancelled_task_is_never_claimed[lapsed_lease]",
    ),
    (bad.BusyExclusiveQueueBlocksTheCall, "test_a_busy_exclusive_queue_holds_back_only_itself"),
    (bad.RecoveredNeverSet, "test_a_takeover_of_a_lapsed_lease_is_marked_recovered"),
    (bad.StartedAtResetByEveryClaim, "test_started_at_is_the_instant_of_the_first_claim"),
    (bad.DeliveryFailureOfClaimNextNotRecorded,
     "test_claim_next_fails_a_task_past_the_delivery_limit_instead_of_serving_it"),
    # capacity, timeouts, copies, reports
    (bad.WaitingTasksNotCounted, "test_waiting_and_running_tasks_count_as_active"),
    (bad.CorruptRecordsNotCounted,
     "test_a_corrupt_record_counts_toward_the_active_limit_as_last_written"),
    (bad.TimeoutRetriedWhenAttemptsLeft, "test_a_timeout_fails_the_task_even_with_retries_left"),
    (bad.TimeoutOverwritesACancel, "test_a_timeout_after_a_cancel_keeps_the_cancel"),
    (bad.ListAliasesStoredData, "test_snapshots_returned_by_every_call_are_the_callers_copies"),
    (
        bad.ClaimNextAliasesStoredData,
        "test_snapshots_returned_by_every_call_are_the_callers_copies",
    ),
    (
        bad.WorkerSnapshotAliasesStoredData,
        "test_snapshots_returned_by_every_call_are_the_callers_copies",
    ),
    (bad.CorruptSkipNotReported, "test_listing_and_reap_report_a_skipped_corrupt_record"),
    (bad.CorruptSkipNotReported, "test_claim_next_carries_on_past_a_corrupt_record"),
    (bad.CorruptSkipNamesNoOperation,
     "test_listing_and_reap_report_a_skipped_corrupt_record"),
    (bad.CorruptSkipNamesNoOperation, "test_claim_next_carries_on_past_a_corrupt_record"),
    (bad.TenantArgumentNotChecked,
     "test_get_and_history_refuse_a_tenant_that_is_not_a_string"),
    (bad.OtherTenantsRecordsDecoded,
     "test_another_tenant_s_record_is_missing_before_it_is_decoded"),
    # clocks
    (bad.NowIgnoresTheInjectedClock, "test_now_reads_the_injected_clock"),
    (
        bad.InstantsRoundedToTheMillisecond,
        "test_instants_of_an_injected_clock_are_truncated_to_milliseconds",
    ),
    (bad.WallClockInsteadOfTheStoreClock, "test_instants_come_from_the_store_clock"),
    # wakeups
    (
        bad.WakeupsOnlyOnCreateAndRelease,
        "test_wait_for_work_wakes_when_an_answer_or_a_retry_makes_work[answered]",
    ),
    (
        bad.WakeupsOnlyOnCreateAndRelease,
        "test_wait_for_work_wakes_when_an_answer_or_a_retry_makes_work[retry_scheduled]",
    ),
    # which refusal wins, what keeps a queue busy
    (order.CapacityCheckedBeforeTheId,
     "test_create_names_a_taken_id_before_a_full_store[max_tasks]"),
    (order.RevisionCheckedBeforeAuthorizing, "test_transition_refuses_in_the_order_of_its_steps"),
    (order.LeaseForCheckedBeforeTheLease, "test_a_stale_lease_is_refused_before_a_bad_argument"),
    (
        order.CancelledTasksFreeTheirQueue,
        "test_a_cancelled_task_holds_its_exclusive_queue_while_its_lease_lives",
    ),
    # limits, at the limit and one past it
    (limits.WorkerIdsCutAt255, "test_a_worker_id_of_256_characters_is_taken_and_257_refused"),
    (limits.WorkerIdsEscaped, "test_a_worker_id_that_is_not_printable_is_refused"),
    (limits.ClaimLimitBelow1000, "test_claim_next_takes_a_limit_of_1000_and_refuses_1001"),
    (limits.BatchOf1000Refused, "test_transition_many_takes_1000_items_and_refuses_1001"),
    (
        limits.LongLeasesCutTo7Days,
        "test_a_lease_of_exactly_7_days_is_taken_and_longer_refused[604800.001]",
    ),
    (
        limits.LongLeasesCutTo7Days,
        "test_a_lease_of_exactly_7_days_is_taken_and_longer_refused[604801]",
    ),
    # counts of several queues, what create returns, what reap takes
    (counts.RunningCountedOverEveryQueue,
     "test_each_queue_is_held_to_its_own_max_running_in_one_call"),
    (counts.RateCountedOverEveryQueue, "test_each_queue_is_held_to_its_own_rate_in_one_call"),
    (counts.CreateReturnsTheTaskAsRead,
     "test_create_returns_a_delayed_task_as_stored_pending"),
    (counts.ReapsARunPastItsTTL, "test_a_run_past_its_ttl_keeps_its_task_until_its_lease_ends"),
    # the application's transaction
    (transactions.TransactionIgnored,
     "test_a_task_created_in_a_transaction_is_stored_when_it_commits"),
    (transactions.TransactionIgnored,
     "test_a_task_created_in_a_rolled_back_transaction_is_never_stored"),
    (transactions.TransactionIgnored,
     "test_a_batch_created_in_a_rolled_back_transaction_is_never_stored"),
    (transactions.TransactionNotChecked, "test_a_handle_with_no_transaction_begun_is_refused"),
]
"""(broken store, the contract test that must fail against it)."""

MODEL_CATCHES: list[type] = [
    broken.LastWriterWins,
    broken.NoReplayCheck,
    broken.NoTokenCheck,
    broken.OlderGenerationAccepted,
    broken.GenerationNotBumped,
    broken.NoTenantFilter,
    broken.ExpiredTasksStayVisible,
    broken.ClaimNextIgnoresLiveLeases,
    broken.ReleaseResetsDeliveries,
    broken.ReleaseConsumesARetry,
]
"""Broken stores the model check catches on its own within the small budget. The rest need
races or corrupt records, which the model does not generate, or a longer program than the
budget reliably reaches (a retry deadline or delivery limit ignored: the contract tests
catch those)."""
MODEL_EXAMPLES, MODEL_STEPS = 100, 25
"""Small, fixed (seeded) budget: the run is deterministic."""

SUITE = '''
import sys

import pytest

sys.path.insert(0, {here!r})

from tasks_contract_tests import StoreContract
from {module} import {name} as Store


class TestStore(StoreContract):
    @pytest.fixture
    async def store_factory(self):
        async def factory(**options):
            return Store(**options)

        return factory

    @pytest.fixture
    def corrupt_task(self):
        async def corrupt(store, task_id):
            store._corrupt(task_id)

        return corrupt

    @pytest.fixture
    def begin_transaction(self):
        return getattr(Store, "begin_transaction", None)
'''


def _run_suite(pytester: pytest.Pytester, store: type, tests: list[str]) -> pytest.RunResult:
    """Run ``tests`` (test ids, optionally with a ``[param]`` part) of ``StoreContract``
    against ``store`` in a subprocess."""
    source = SUITE.format(here=str(HERE), module=store.__module__, name=store.__name__)
    pytester.makepyfile(test_contract=source)
    names = sorted({test.split("[")[0] for test in tests})
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "-rf", "-k", " or ".join(names)
    )


def _failed(result: pytest.RunResult) -> list[str]:
    """The test ids the run reported as failed."""
    prefix = "FAILED test_contract.py::TestStore::"
    return [
        line.removeprefix(prefix).split(" - ")[0]
        for line in result.outlines
        if line.startswith(prefix)
    ]


def _ids(cases: list[tuple[type, str]]) -> list[str]:
    return [f"{store.__name__}-{test.replace('[', ':').rstrip(']')}" for store, test in cases]


@pytest.mark.parametrize(("store", "catcher"), BROKEN, ids=_ids(BROKEN))
def test_broken_store_fails_the_test_meant_to_catch_it(
    pytester: pytest.Pytester, store: type, catcher: str
) -> None:
    """Each broken store MUST fail the contract test named for its defect.

    Troubleshooting: if this fails, the named contract test no longer detects the defect
    the broken store has (or was renamed): strengthen the test, do not weaken the store.
    """
    result = _run_suite(pytester, store, [catcher])
    failed = _failed(result)
    assert result.parseoutcomes().get("failed", 0) >= 1, result.stdout.str()
    if "[" in catcher:
        assert catcher in failed
    else:
        assert catcher in {test.split("[")[0] for test in failed}


def test_reference_store_passes_every_catching_test(pytester: pytest.Pytester) -> None:
    """The unmodified ``MemoryStore`` MUST pass every test that catches a broken store, so
    each catch above is the defect's doing, not a broken test."""
    from tasks_store_memory import MemoryStore

    catchers = [test for _, test in BROKEN]
    result = _run_suite(pytester, MemoryStore, catchers)
    outcomes = result.parseoutcomes()
    assert ([], 0) == (_failed(result), outcomes.get("failed", 0) + outcomes.get("errors", 0))
    assert outcomes.get("passed", 0) >= len({test.split("[")[0] for test in catchers})


def test_a_transactional_store_passes_the_transaction_tests(pytester: pytest.Pytester) -> None:
    """The toy ``TransactionalMemoryStore`` MUST pass (not skip) every transaction test,
    so the catches of its broken variants above are their defects' doing."""
    catchers = sorted({test for store, test in BROKEN if store.__module__ == "broken_transactions"})
    result = _run_suite(pytester, transactions.TransactionalMemoryStore, catchers)
    outcomes = result.parseoutcomes()
    assert (len(catchers), 0, 0) == (
        outcomes.get("passed", 0), outcomes.get("skipped", 0),
        outcomes.get("failed", 0) + outcomes.get("errors", 0)), result.stdout.str()


@pytest.mark.parametrize("store", MODEL_CATCHES, ids=lambda store: store.__name__)
def test_model_check_catches_a_broken_store(store: type[TaskStore]) -> None:
    """The model check MUST find a disagreement with the reference for a broken store,
    within a small budget."""

    async def factory(**options: Any) -> TaskStore:
        return store(**options)

    with pytest.raises(AssertionError, match=r"disagree|revision|terminal|live lease"):
        run_model_check(factory, max_examples=MODEL_EXAMPLES, steps=MODEL_STEPS, shrink=False)


def test_model_check_passes_for_the_reference_store() -> None:
    """The model check of ``MemoryStore`` against itself MUST pass (the control case)."""
    from tasks_store_memory import MemoryStore

    async def factory(**options: Any) -> TaskStore:
        return MemoryStore(**options)

    run_model_check(factory, max_examples=MODEL_EXAMPLES, steps=MODEL_STEPS)


SHARED = '''
import pytest
from tasks_contract_tests import StoreContract
from tasks_store_memory import MemoryStore

SHARED = MemoryStore()


class TestStore(StoreContract):
    @pytest.fixture
    async def store_factory(self):
        async def factory(**options):
            return SHARED  # one store for every test: they leak into each other

        return factory
'''


def test_the_fixture_checks_fail_first_when_stores_leak(pytester: pytest.Pytester) -> None:
    """``StoreContract`` MUST run its fixture checks before every other test, so that with
    ``-x`` a factory that shares one store between tests is named for what it is, not
    for whichever test its leftovers break first (writing-a-store.md promises it)."""
    pytester.makepyfile(test_contract=SHARED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-x", "-rf")
    failed = [line.split(" ")[1] for line in result.outlines if line.startswith("FAILED ")]
    assert ["test_contract.py::TestStore::test_stores_from_the_factory_are_isolated"] == (
        failed), result.stdout.str()
    assert {"passed": 1, "failed": 1} == result.parseoutcomes(), "the fixture checks ran first"
