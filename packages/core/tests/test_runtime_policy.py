"""Policy and limits: defaults, the error redactor, the cap on stored messages."""

from __future__ import annotations

from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app
from tasks_core import InvalidInput, Limits, Policy, TaskContext

pytestmark = pytest.mark.anyio


def test_limits_have_the_documented_defaults() -> None:
    """Defaults MUST be: input 256 KiB, runs per owner off, concurrency 8, the store's
    task and per-tenant limits off (opt-in protections)."""
    limits = Limits()
    assert (256 * 1024, None, 8, None, None) == (
        limits.max_input_bytes, limits.max_runs_per_owner, limits.concurrency,
        limits.max_tasks, limits.max_active_tasks_per_scope)


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"max_input_bytes": -1},
                                 {"max_runs_per_owner": 0}, {"max_tasks": True},
                                 {"max_tasks": 0}, {"max_active_tasks_per_scope": 2**62 + 1},
                                 {"max_active_tasks_per_scope": 1.5}])
def test_bad_limits_are_refused(bad: dict[str, Any]) -> None:
    """A non-positive (or non-integer) limit MUST raise InvalidInput."""
    with pytest.raises(InvalidInput):
        Limits(**bad)


def test_visibility_is_watchers_or_tenant() -> None:
    """Visibility MUST be ``watchers`` (the default) or ``tenant``."""
    assert "watchers" == Policy().visibility
    with pytest.raises(InvalidInput):
        Policy(visibility="everyone")  # type: ignore[arg-type]


async def test_error_messages_go_through_the_redactor_and_are_capped() -> None:
    """A handler's error text MUST be stored after the redactor, cut to 2048 chars."""
    seen: list[tuple[str, str]] = []

    def redact(exc: BaseException, text: str) -> str:
        seen.append((type(exc).__name__, text[:12]))
        return text.replace("hunter2", "***") + "x" * 5000

    app = make_app(policy=Policy(error_redactor=redact))

    @app.task
    async def leaky(ctx: TaskContext) -> None:
        raise PermissionError("password hunter2 rejected")

    async with app:
        t = await app.submit(leaky, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert done.error.message.startswith("password *** rejected")
    assert 2048 == len(done.error.message)
    assert [("PermissionError", "password hun")] == seen


async def test_a_raising_redactor_withholds_the_message() -> None:
    """A redactor that raises MUST NOT leak the original text."""

    def broken(exc: BaseException, text: str) -> str:
        raise RuntimeError("bug")

    app = make_app(policy=Policy(error_redactor=broken))

    @app.task
    async def leaky(ctx: TaskContext) -> None:
        raise ValueError("secret-token-123")

    async with app:
        t = await app.submit(leaky, None, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert done.error is not None
    assert "secret" not in done.error.message
    assert ("ValueError", "ValueError (message withheld: the error redactor failed)") == (
        done.error.type, done.error.message)
