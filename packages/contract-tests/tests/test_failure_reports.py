"""Failures say what is wrong (issue 33, item 5): a failed comparison of snapshots names
the fields that differ; the model check names the rule a store broke and spends at most
its shrink budget before reporting."""

from __future__ import annotations

from typing import Any

import pytest
from tasks_contract_tests._model_pair import AGREE
from tasks_contract_tests.state_machine import BrokenRule, run_model_check
from tasks_core import TaskStore

pytest_plugins = ["pytester"]


def test_a_failed_snapshot_comparison_lists_the_differing_fields(
    pytester: pytest.Pytester,
) -> None:
    """Two snapshots that differ in their status and one input value MUST be reported as
    those two paths with both values, not as two reprs."""
    pytester.makepyfile(test_it="""
        from datetime import UTC, datetime
        from tasks_core import NewTask, Owner, TaskStatus, Work, rules
        from tasks_core.models import replaced

        def test_it():
            now = datetime(2030, 1, 1, tzinfo=UTC)
            new = NewTask(id="alice::k", tenant="default", owner=Owner("alice"),
                          work=Work(name="job", input={"n": 1, "m": 2}))
            left = rules.new_snapshot(new, now)
            work = replaced(left.work, input={"n": 5, "m": 2})
            right = replaced(left, status=TaskStatus.FAILED, work=work)
            assert left == right
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    report = [line.removeprefix("E").strip() for line in result.outlines
              if line.startswith("E ")]
    assert ["assert Snapshot differs in 2 field(s):",
            "work.input['n']: 1 != 5",  # fields in the model's order: work before status
            "status: <TaskStatus.PENDING: 'pending'> != <TaskStatus.FAILED: 'failed'>"] \
        == [line.removeprefix("AssertionError: ") for line in report if "differs in" in line
            or line.startswith(("work.", "status:"))]


def test_a_plain_comparison_keeps_pytests_own_report(pytester: pytest.Pytester) -> None:
    """Values that hold no tasks model MUST keep pytest's own report."""
    pytester.makepyfile(test_it="""
        def test_it():
            assert {"a": 1} == {"a": 2}
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Differing items:*"])
    result.stdout.no_fnmatch_line("*differs in*")


BROKEN_LISTING = """
import builtins

from tasks_core.models import replaced
from tasks_store_memory import MemoryStore


class ListsWrongPriorities(MemoryStore):
    '''Lists every task one priority higher than stored: a listing the reference
    disagrees with from the first step of every program.'''

    async def list(self, query) -> builtins.list:
        return [replaced(s, priority=s.priority + 1) for s in await super().list(query)]
"""


def test_the_model_check_names_the_broken_rule(pytester: pytest.Pytester) -> None:
    """A store that breaks a rule MUST fail the model check with a report whose first
    lines name that rule and the step that broke it, then the differing field."""
    pytester.makepyfile(broken_listing=BROKEN_LISTING, test_it="""
        from broken_listing import ListsWrongPriorities
        from tasks_contract_tests.state_machine import run_model_check

        async def factory(**options):
            return ListsWrongPriorities(**options)

        def test_it():
            run_model_check(factory, max_examples=5, steps=3)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E*BrokenRule: broken rule: every call has the reference's outcome: the same "
        "result, or the same error",
        "E*step: list(all)",
        "E*the store and the reference disagree",
        "E*.priority: store=1 reference=None",
    ])


def _opens_while_failing(shrink_seconds: float | None) -> tuple[int, str]:
    """Run the model check of the broken listing store; how many stores it opened and
    the rule it reported."""
    namespace: dict[str, Any] = {}
    exec(BROKEN_LISTING, namespace)  # the same store as the report test
    store_class = namespace["ListsWrongPriorities"]
    opened = 0

    async def factory(**options: Any) -> TaskStore:
        nonlocal opened
        opened += 1
        return store_class(**options)  # type: ignore[no-any-return]

    with pytest.raises(BrokenRule) as caught:
        run_model_check(factory, max_examples=5, steps=3, shrink_seconds=shrink_seconds)
    return opened, caught.value.rule


def test_a_spent_shrink_budget_stops_the_shrinking_and_reports_the_first_failure() -> None:
    """With a shrink budget of 0 seconds, no program Hypothesis tries while shrinking
    opens a store: the run stops, and the run again without shrinking reports the first
    failing program — 3 stores in all (the first failing program, the same program run
    again, and its reported run), the report naming the rule. Without a budget of ours
    the shrinker opens more."""
    assert (3, AGREE) == _opens_while_failing(0)
    unbounded, rule = _opens_while_failing(None)
    assert (True, AGREE) == (unbounded > 3, rule), unbounded


def test_a_spent_budget_hypothesis_wraps_still_reports_the_first_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Hypothesis wraps the spent budget in its own error (a program stopped midway
    reads as ``FlakyStrategyDefinition`` on a loaded machine), the run MUST still be run
    again without shrinking, and that run's failure reported — never Hypothesis' error."""
    from hypothesis.errors import FlakyStrategyDefinition
    from tasks_contract_tests import _model_pair

    runs: list[bool] = []

    def run(machine: Any, settings: Any) -> None:
        runs.append(True)
        if len(runs) == 1:
            raise FlakyStrategyDefinition("Inconsistent data generation!") \
                from _model_pair.ShrinkBudgetSpent()
        raise ValueError("the first failing program, reported")

    monkeypatch.setattr(_model_pair, "run_state_machine_as_test", run)
    with pytest.raises(ValueError, match="the first failing program, reported"):
        _model_pair.run_within_budget(lambda budget: Any, lambda shrink: Any, 1.0, shrink=True)
    assert 2 == len(runs)
