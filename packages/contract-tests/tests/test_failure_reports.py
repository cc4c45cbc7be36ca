"""A failed comparison of snapshots names the fields that differ (issue 33, item 5)."""

from __future__ import annotations

import pytest

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
