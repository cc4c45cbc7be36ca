"""Policy and limits: defaults, the error redactor, the cap on stored messages, hooks that
cannot answer (refused when built) or answer something else than a bool (deny)."""

from __future__ import annotations

import gc
import logging
import warnings
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, TIMEOUT, fast_worker, make_app
from tasks_core import AuthorizationError, InvalidInput, Limits, Policy, System, TaskContext

pytestmark = pytest.mark.anyio


async def _noop(ctx: TaskContext) -> None:
    return None


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


class _AsyncCall:
    async def __call__(self, *args: Any) -> bool:
        return True


async def _async_hook(*args: Any) -> bool:
    return True


@pytest.mark.parametrize("hook", ["queue_authorizer", "watch_authorizer", "error_redactor"])
@pytest.mark.parametrize("fn", [_async_hook, _AsyncCall(), "yes", True],
                         ids=["async-def", "async-call", "str", "bool"])
def test_a_hook_that_cannot_answer_at_once_is_refused_when_the_policy_is_built(
    hook: str, fn: Any
) -> None:
    """A coroutine function (or an object whose ``__call__`` is one) — or anything not
    callable — MUST be refused when the ``Policy`` is built, naming the hook: hooks are
    called without ``await``, and an async authorizer denied everything silently."""
    with pytest.raises(InvalidInput, match=hook):
        Policy(**{hook: fn})


class _Truthy:
    """A truthy answer that is not ``True`` (as ``numpy.bool_(True)`` is)."""

    def __bool__(self) -> bool:
        return True


class _ReturnsAwaitable:
    """A callable object whose (sync) ``__call__`` hands back a coroutine."""

    def __call__(self, *args: Any) -> Any:
        return _async_hook()


@pytest.mark.parametrize("answer", [lambda *a: 1, lambda *a: _Truthy(), lambda *a: None,
                                    _ReturnsAwaitable()],
                         ids=["one", "truthy", "none", "awaitable"])
async def test_an_authorizer_answer_that_is_not_a_bool_denies_with_a_warning(
    answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An authorizer answering anything but a ``bool`` MUST deny — never grant on a truthy
    non-``True`` — and log one WARNING per call naming the hook; an awaitable answer is
    closed, never left un-awaited."""
    caplog.set_level(logging.WARNING, logger="tasks_core")
    app = make_app(policy=Policy(queue_authorizer=answer, watch_authorizer=answer))
    app.task(name="noop")(_noop)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app:
            caplog.clear()
            with pytest.raises(AuthorizationError, match="queue"):
                await app.submit("noop", None, ALICE)
            assert not app.policy.allows_watch("t", (BOB,), ALICE)
        gc.collect()
    assert [] == [w for w in caught if "never awaited" in str(w.message)]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert ["queue_authorizer", "watch_authorizer"] == [
        r.getMessage().split(" ", 1)[0] for r in warned]
    assert all("not a bool" in r.getMessage() for r in warned)
    assert [] == (await app.list(System())).items


async def test_a_redactor_handing_back_an_awaitable_withholds_and_closes_it() -> None:
    """A redactor (a callable object, so not refused when built) that returns a coroutine
    MUST withhold the message as one returning anything but text does, and close the
    coroutine rather than leave it un-awaited."""
    app = make_app(policy=Policy(error_redactor=_ReturnsAwaitable()))

    @app.task
    async def leaky(ctx: TaskContext) -> None:
        raise ValueError("secret-token-123")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with app:
            t = await app.submit(leaky, None, ALICE)
            async with fast_worker(app):
                done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
        gc.collect()
    assert done.error is not None
    assert "ValueError (message withheld: the error redactor failed)" == done.error.message
    assert [] == [w for w in caught if "never awaited" in str(w.message)]
