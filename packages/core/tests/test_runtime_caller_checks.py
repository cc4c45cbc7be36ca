"""What a caller gives the API, refused before anything is written: retry policies that
would not do what they say, handlers that cannot take the context, too many watchers, an
unknown dedup (memory store), the App's own arguments (a blank store URL or
``$TASKS_STORE``, ``store_options`` that name no option)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from _runtime_kit import ALICE, BOB, CAROL, TIMEOUT, fast_worker, make_app
from tasks_core import (
    App,
    InvalidInput,
    Owner,
    RetryPolicy,
    Snapshot,
    SubmitItem,
    System,
    TaskContext,
    TaskStatus,
    Work,
)
from tasks_core.policy import MAX_WATCHERS

pytestmark = pytest.mark.anyio


async def _noop(ctx: TaskContext) -> None:
    return None


async def _refused_everywhere(match: str, **options: Any) -> None:
    """``options`` MUST be refused by ``@app.task``, ``submit`` and ``submit_many``
    (``InvalidInput`` matching ``match``), and nothing written."""
    app = App("memory://")
    if "retry" in options:
        with pytest.raises(InvalidInput, match=match):
            app.task(name="refused", **options)(_noop)
        assert "refused" not in app.tasks
    app.task(name="noop")(_noop)
    async with app:
        with pytest.raises(InvalidInput, match=match):
            await app.submit("noop", None, ALICE, **options)
        with pytest.raises(InvalidInput, match=f"item 1: .*{match}"):
            await app.submit_many([SubmitItem("noop"), SubmitItem("noop", **options)], ALICE)
        with pytest.raises(InvalidInput, match=match):
            await app.submit_many([{"task": "noop", **options}], ALICE)
        assert [] == (await app.list(System())).items


# -- retry policies ----------------------------------------------------------------------


async def test_a_policy_of_kind_none_asking_for_retries_is_refused() -> None:
    """``RetryPolicy(attempts=3)`` (kind ``"none"``) never retries: it MUST be refused
    where a caller gives a policy — ``@app.task``, ``submit``, ``submit_many`` — naming
    what to use instead, and nothing written."""
    await _refused_everywhere(r"retry: kind 'none' never retries; use RetryPolicy\.fixed",
                              retry=RetryPolicy(attempts=3))
    await _refused_everywhere("kind 'none' never retries", retry=RetryPolicy(delay_s=5.0))


@pytest.mark.parametrize("retry", [{"attempts": 3}, {"kind": "fixed", "attempts": 3}, 3])
async def test_a_retry_that_is_not_a_retry_policy_is_refused(retry: Any) -> None:
    """A dict (or anything but a ``RetryPolicy``) MUST be refused, never coerced into a
    policy: ``{"attempts": 3}`` read as a policy that never retries."""
    await _refused_everywhere("retry must be a RetryPolicy", retry=retry)


async def test_an_exponential_cap_below_its_base_is_refused() -> None:
    """``RetryPolicy.exponential(10, cap=1)`` MUST be refused naming ``cap`` and ``base``
    (the cap would replace every delay); built by hand, at every caller-facing entry."""
    with pytest.raises(InvalidInput, match=r"cap \(1s\) must be at least the base delay"):
        RetryPolicy.exponential(10, attempts=3, cap=1)
    assert RetryPolicy.exponential(10, attempts=3, cap=10).cap_s == 10
    await _refused_everywhere("cap", retry=RetryPolicy(kind="exponential", attempts=3,
                                                       delay_s=10.0, cap_s=1.0))
    await _refused_everywhere("cap applies to exponential",
                              retry=RetryPolicy(kind="fixed", attempts=3, cap_s=1.0))


def test_a_stored_policy_the_callers_rules_refuse_still_decodes(snapshot: Snapshot) -> None:
    """A record written before these rules (a policy of kind ``none`` with attempts, a cap
    below the base) MUST still decode: the rules are the callers', not the model's."""
    for policy in ({"kind": "none", "attempts": 3},
                   {"kind": "exponential", "attempts": 3, "delay_s": 10.0, "cap_s": 1.0}):
        record = snapshot.model_dump(mode="json")
        record["work"]["retry_policy"] = policy
        assert Snapshot.model_validate(record).work.retry_policy == RetryPolicy(**policy)
    Work(name="job", retry_policy=RetryPolicy(attempts=3))


async def test_good_policies_are_taken_at_registration_and_submit() -> None:
    """``RetryPolicy.none()``, ``fixed``, ``exponential`` (cap at or above the base) and no
    policy at all MUST be taken."""
    app = App("memory://")
    app.task(name="default")(_noop)
    app.task(name="none", retry=RetryPolicy.none())(_noop)
    app.task(name="one", retry=RetryPolicy.fixed(1, attempts=1))(_noop)
    async with app:
        for retry in (None, RetryPolicy.none(), RetryPolicy.fixed(0, attempts=2),
                      RetryPolicy.exponential(1, attempts=3, cap=1),
                      RetryPolicy.exponential(1, attempts=3)):
            await app.submit("default", None, ALICE, retry=retry)


# -- handlers ----------------------------------------------------------------------------


class _NoRoom:
    async def __call__(self) -> None:
        return None


class _Room:
    async def __call__(self, ctx: TaskContext) -> None:
        return None


def _one(ctx: TaskContext) -> None:
    return None


def _kw_only(*, ctx: TaskContext) -> None:
    return None


async def _no_ctx() -> None:
    return None


def _sync_no_ctx() -> None:
    return None


@pytest.mark.parametrize("handler", [_no_ctx, _sync_no_ctx, _kw_only, _NoRoom(),
                                     functools.partial(_one, None)],
                         ids=["async", "sync", "keyword-only", "callable", "partial"])
def test_a_handler_that_cannot_take_the_context_is_refused_at_registration(
    handler: Any,
) -> None:
    """A handler called ``fn(ctx, **input)`` MUST take a positional parameter first:
    refused when registered (it failed every submit with "too many positional
    arguments"), and not registered."""
    app = App("memory://")
    with pytest.raises(InvalidInput, match=r"takes the context first: def handler\(ctx"):
        app.task(name="h")(handler)
    assert "h" not in app.tasks


def _args(*args: Any) -> None:
    return None


def _two(ctx: TaskContext, x: int) -> int:
    return x


@pytest.mark.parametrize("handler", [_one, _args, _Room(), functools.partial(_two, x=1),
                                     lambda ctx: None, print],
                         ids=["def", "*args", "callable", "partial", "lambda", "builtin"])
def test_a_handler_taking_the_context_is_registered(handler: Any) -> None:
    """A handler whose first parameter takes the context (``*args`` does; a builtin
    without a readable signature is taken as it is) MUST be registered."""
    app = App("memory://")
    assert app.task(name="h")(handler) is app.tasks["h"]


async def test_a_partial_handler_runs_with_its_bound_arguments() -> None:
    """A ``functools.partial`` handler binding a keyword MUST run with the context first."""
    app = make_app()
    app.task(name="two")(functools.partial(_two, x=7))
    async with app:
        t = await app.submit("two", None, ALICE)
        async with fast_worker(app):
            assert 7 == (await app.wait(t.id, ALICE, timeout=TIMEOUT)).result


class _AsyncCallable:
    """A handler that is an object whose ``__call__`` is an ``async def``."""

    async def __call__(self, ctx: TaskContext, x: int) -> int:
        return x * 2


async def test_a_callable_object_with_an_async_call_runs_on_the_loop() -> None:
    """A handler object whose ``__call__`` is an ``async def`` MUST be awaited like an
    ``async def`` handler (never run in a thread, where it would hand back a coroutine)."""
    app = make_app()
    definition = app.task(name="twice")(_AsyncCallable())
    assert definition.is_async
    async with app:
        t = await app.submit("twice", {"x": 21}, ALICE)
        async with fast_worker(app):
            done = await app.wait(t.id, ALICE, timeout=TIMEOUT)
    assert (TaskStatus.COMPLETED, 42) == (done.status, done.result)


# -- watchers ----------------------------------------------------------------------------


async def test_more_watchers_than_the_cap_are_refused_before_anything_is_written() -> None:
    """A submit naming more than ``MAX_WATCHERS`` watchers MUST be refused
    (``InvalidInput`` naming ``watchers`` and the cap); exactly the cap is taken."""
    assert 100 == MAX_WATCHERS
    many = [Owner(f"u{n}") for n in range(MAX_WATCHERS + 1)]
    await _refused_everywhere(f"watchers: at most {MAX_WATCHERS}", watchers=many)
    app = App("memory://")
    app.task(name="noop")(_noop)
    async with app:
        t = await app.submit("noop", None, ALICE, watchers=many[:MAX_WATCHERS])
        assert MAX_WATCHERS == len(t.snapshot.watchers)


async def test_duplicate_watchers_collapse_and_the_owner_is_left_out() -> None:
    """Watchers given twice (equal principals, distinct objects) MUST be granted once, in
    the order first given, and the owner never as its own watcher."""
    app = App("memory://")
    app.task(name="noop")(_noop)
    given = [BOB, Owner("carol"), Owner("bob"), ALICE, CAROL, Owner("bob")]
    async with app:
        t = await app.submit("noop", None, ALICE, watchers=given)
    assert (BOB, CAROL) == t.snapshot.watchers


# -- dedup -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "k"])
async def test_an_unknown_dedup_is_named_as_such_with_or_without_a_key(key: str | None) -> None:
    """``dedup="bogus"`` MUST be refused saying what ``dedup`` takes — also without a key
    (it said "dedup applies to a key"), and nothing written."""
    app = App("memory://")
    app.task(name="noop")(_noop)
    async with app:
        with pytest.raises(InvalidInput, match="dedup must be 'owner' or 'global'"):
            await app.submit("noop", None, ALICE, key=key, dedup="bogus")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="dedup applies to a key"):
            await app.submit("noop", None, ALICE, dedup="global")
        assert [] == (await app.list(System())).items


# -- the App's own arguments -------------------------------------------------------------


@pytest.mark.parametrize(("options", "error", "named"), [
    ({"url": 5}, TypeError, "URL"),
    ({"store": "memory://"}, TypeError, "store="),
    ({"policy": "strict"}, TypeError, "policy="),
    ({"limits": 5}, TypeError, "limits="),
    ({"store_options": 5}, TypeError, "store_options="),
    ({"store_options": {1: 2}}, InvalidInput, "store_options"),
    ({"store_options": {("create",): False}}, InvalidInput, "store_options"),
    ({"queues": "emails"}, InvalidInput, "queues"),
    ({"retention": "1d"}, InvalidInput, "retention"),
    ({"poll_interval": None}, InvalidInput, "poll_interval"),
])
def test_an_app_argument_of_the_wrong_kind_is_refused_when_the_app_is_made(
    options: dict[str, Any], error: type[Exception], named: str
) -> None:
    """Every argument of ``App`` MUST be refused when the app is made, naming it, as its
    docstring says — ``TypeError`` for a url, store, policy, limits or store_options of
    the wrong class, ``InvalidInput`` for a malformed one: ``store_options={1: 2}`` made an
    app whose first call failed deep in the store's opening (``TypeError: keywords must be
    strings``)."""
    url = options.pop("url", None if "store" in options else "memory://")
    with pytest.raises(error, match=named) as info:
        App(url, **options)
    assert error is TypeError or isinstance(info.value, InvalidInput)


@pytest.mark.parametrize("url", ["", "  ", "\t"])
async def test_a_blank_store_url_is_refused_not_taken_for_the_default(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``App("")`` (an unset variable in ``App(os.environ.get(...,""))``) opened the default
    store, ``sqlite:///tasks.db`` here. A blank URL MUST be refused when the app is made
    (``InvalidInput``), and by ``use_store``, nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKS_STORE", raising=False)
    with pytest.raises(InvalidInput, match="store URL is blank"):
        App(url)
    app = App()
    with pytest.raises(InvalidInput, match="store URL is blank"):
        app.use_store(url)
    assert (None, []) == (app.url, os.listdir(tmp_path))


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
async def test_a_blank_tasks_store_is_refused_when_the_app_opens(
    blank: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``App()`` reads ``$TASKS_STORE`` when it opens; set but blank, it fell back to the
    default store. It MUST be refused (``InvalidInput`` naming the variable), nothing
    created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TASKS_STORE", blank)
    app = App()
    with pytest.raises(InvalidInput, match=r"\$TASKS_STORE is set but blank"):
        await app.submit("job", None, ALICE)
    await app.aclose()
    assert [] == os.listdir(tmp_path)
