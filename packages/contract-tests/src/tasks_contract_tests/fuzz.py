"""Hostile inputs for property tests, and an exact fingerprint of a store.

Hypothesis strategies for what an attacker or a buggy caller sends: :func:`hostile_texts`,
:func:`not_strings`, :func:`ids_like`, :func:`not_json`, :func:`odd_json` and
:func:`forged_leases`. :func:`store_fingerprint` captures everything a ``System`` reader
sees, so that "the store is unchanged" is an exact comparison; :func:`masked` reduces an
error to what a caller observes, the ids it named masked, so that the error about an
existing task can be compared with the one about a never-existing id (no existence oracle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st
from tasks_core import Lease, LeaseLost, TaskQuery, TaskStore

__all__ = [
    "Fingerprint",
    "forged_leases",
    "hostile_texts",
    "id_variants",
    "ids_like",
    "masked",
    "not_json",
    "not_strings",
    "odd_json",
    "printable_texts",
    "store_fingerprint",
]

Fingerprint = dict[str, Any]
"""``{"tasks": {id: {"snapshot": …, "history": […]}}, "leases": [bool, …]}``."""

SPECIAL_TEXTS: tuple[str, ...] = (
    "",
    " ",
    ":",
    "::",
    "a::",
    "::a",
    "a::b",
    "a:",
    ":a",
    "a:::b",
    "\x00",
    "a\x00b",
    "\n",
    "a\nb",
    "\t",
    "\x1b[2J\x1b[31mred",
    "\x7f",
    "\ud800",
    "a\udcffb",
    "\u202eevil",
    "a\u200db",
    "\ufeff",
    "e\u0301",
    "\u00e9",
    "\uff1a\uff1a",
    "\U0001f600",
    "%",
    "_",
    "'",
    '"',
    "\\",
    "'; DROP TABLE tasks; --",
    "' OR '1'='1",
    "$where",
    "$ne",
    "a.b",
    "{\"$gt\": \"\"}",
    "[/]",
    "[bold]x[/bold]",
    "../../etc/passwd",
    "default",
    "None",
    "null",
)
"""Fixed strings every hostile-text strategy draws from first."""


def hostile_texts(*, max_size: int = 40) -> st.SearchStrategy[str]:
    """Strings that break naive code — empty, ``::``, a trailing ``:``, very long, control
    characters, NUL, lone surrogates, bidi overrides, zero-width and combining characters,
    full-width colons, SQL and Mongo metacharacters, JSON-looking text; mostly short,
    sometimes far beyond every limit (1025..5000 characters)."""
    special = st.sampled_from(SPECIAL_TEXTS)
    return st.one_of(
        special,
        special,
        special,
        st.text(max_size=max_size),
        st.text(st.characters(codec="utf-8"), max_size=max_size),
        st.text(st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp", "Mn"]), min_size=1,
                max_size=8),
        st.integers(1025, 5000).map(lambda n: "x" * n),
        st.integers(129, 600).map(lambda n: "\u00e9" * n),
    )


def printable_texts(*, max_size: int = 24) -> st.SearchStrategy[str]:
    """Non-empty printable strings without ``::`` (valid keys), including odd Unicode."""
    return st.text(st.characters(codec="utf-8"), min_size=1, max_size=max_size).filter(
        lambda s: s.isprintable() and "::" not in s
    )


def not_strings() -> st.SearchStrategy[Any]:
    """Values of the wrong type where a string belongs: ``None``, numbers, bytes,
    containers, objects."""
    return st.one_of(
        st.none(),
        st.integers(),
        st.floats(),
        st.binary(max_size=8),
        st.lists(st.text(max_size=3), max_size=2),
        st.just({"$ne": None}),
        st.just(object()),
    )


def id_variants(known: str) -> list[str]:
    """Ids an attacker derives from the real id ``known``: padded, cut, extended, re-cased,
    with NUL or SQL wildcards, with its ``::`` scopes moved, dropped or swapped."""
    parts = known.split("::")
    out = [
        known,
        known + " ",
        " " + known,
        known[:-1],
        known + "x",
        known.upper(),
        known.swapcase(),
        known + "\x00",
        known.replace("::", ":"),
        known.replace("::", "::::"),
        "::".join(reversed(parts)),
        known + "%",
        known[: len(known) // 2] + "%",
    ]
    if len(parts) > 1:
        out += ["::".join(parts[1:]), "evil::" + known, "evil::" + "::".join(parts[-2:])]
    return out


def ids_like(known: Sequence[str]) -> st.SearchStrategy[Any]:
    """Task ids guessed from ``known`` (real ids: the ids themselves, prefixes, extensions,
    case and Unicode variants, another owner's or tenant's scope), mixed with hostile texts
    and non-strings."""
    guesses = sorted({v for k in known for v in id_variants(k)})
    choices: list[st.SearchStrategy[Any]] = [hostile_texts(), not_strings()]
    if known:
        choices.insert(0, st.sampled_from(sorted(known)))
    if guesses:
        choices.insert(1, st.sampled_from(guesses))
    return st.one_of(*choices)


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


class _Opaque:
    """An object with no JSON form."""


def not_json() -> st.SearchStrategy[Any]:
    """A value that is not JSON (NaN, infinities, non-string keys, tuples, sets, bytes,
    objects, nesting deeper than 64, integers beyond 8192 bits, lone surrogates, a huge
    string) somewhere inside an otherwise valid object: every one must be refused before
    anything is written."""
    bad = st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.just((1, 2)),
        st.just({1, 2}),
        st.just(b"bytes"),
        st.just(_Opaque()),
        st.just({1: "non-string key"}),
        st.just({None: "non-string key"}),
        st.just({("a",): "tuple key"}),
        st.just({"\ud800": "surrogate key"}),
        st.just("lone \udcff surrogate"),
        st.integers(66, 200).map(_deep),
        st.just(2**8193),
        st.just(-(10**5000)),
    )
    return st.one_of(
        bad.map(lambda v: {"x": v}),
        bad.map(lambda v: {"outer": [1, {"inner": v}]}),
    )


def odd_json() -> st.SearchStrategy[dict[str, Any]]:
    """A valid JSON object with odd content (which must read back exactly)."""
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8"), max_size=20),
        st.sampled_from([s for s in SPECIAL_TEXTS if s.encode("utf-8", "ignore").decode()
                         == s]),
    )
    value = st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=6), inner,
                          max_size=3),
        max_leaves=8,
    )
    return st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), value,
                           max_size=4)


def forged_leases(lease: Lease, other_task_ids: Sequence[str] = ()) -> st.SearchStrategy[Lease]:
    """Leases that are not ``lease``: another token, task, generation or worker — or several
    of those at once. Each is a valid ``Lease``; none may be accepted by the store."""
    tokens = st.one_of(
        st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=40),
        st.sampled_from([lease.token + "x", lease.token[:-1] or "x", lease.token.swapcase(),
                         lease.token[::-1], " " + lease.token]),
    ).filter(lambda t: t != lease.token and 0 < len(t) <= 256)
    task_ids = st.sampled_from(sorted({*other_task_ids, lease.task_id + "x"} - {lease.task_id}))
    generations = st.sampled_from(
        [g for g in (lease.generation - 1, lease.generation + 1, lease.generation + 100) if g >= 1]
    )
    workers = st.sampled_from([lease.worker_id + "x", "w-other", lease.worker_id.upper()]).filter(
        lambda w: w != lease.worker_id
    )

    @st.composite
    def forge(draw: st.DrawFn) -> Lease:
        changes: dict[str, Any] = {}
        which = draw(st.sets(st.sampled_from(["token", "task_id", "generation", "worker_id"]),
                             min_size=1))
        if "token" in which:
            changes["token"] = draw(tokens)
        if "task_id" in which:
            changes["task_id"] = draw(task_ids)
        if "generation" in which:
            changes["generation"] = draw(generations)
        if "worker_id" in which:
            changes["worker_id"] = draw(workers)
        return Lease(**{**lease.model_dump(), **changes})

    return forge()


async def _accepts(store: TaskStore, lease: Lease) -> bool:
    try:
        await store.worker_snapshot(lease)
    except LeaseLost:
        return False
    return True


async def store_fingerprint(
    store: TaskStore,
    *,
    tenant: str | None = None,
    ids: Sequence[str] | None = None,
    histories: Sequence[str] | None = None,
    leases: Sequence[Lease] = (),
) -> Fingerprint:
    """Everything a ``System`` reader can observe of ``store`` (or of one ``tenant``):
    every listed task's snapshot and history, and for each of ``leases`` whether the store
    still accepts it (``worker_snapshot``).

    Args:
        store: the store.
        tenant: one tenant, or ``None`` for all.
        ids: only these tasks (read one by one; a missing or unreadable one is recorded by
            its error type) instead of the whole listing.
        histories: read the history of only these tasks (default: of every task).
        leases: leases whose validity is part of the picture.

    Two fingerprints taken at the same store-clock instant are equal exactly when no
    observable write happened in between (lease tokens excepted: pass the leases whose
    validity matters).
    """
    tasks: dict[str, Any] = {}
    if ids is None:
        after: str | None = None
        while True:
            page = await store.list(TaskQuery(tenant=tenant, after=after, limit=1000))
            for snapshot in page:
                tasks[snapshot.id] = {"snapshot": snapshot.model_dump(mode="json")}
            if len(page) < 1000:
                break
            after = page[-1].id
    else:
        for task_id in ids:
            try:
                snapshot = await store.get(task_id, tenant=tenant)
            except Exception as exc:  # a missing (or corrupt) task is part of the picture
                tasks[task_id] = {"error": type(exc).__name__}
            else:
                tasks[task_id] = {"snapshot": snapshot.model_dump(mode="json")}
    for task_id in tasks if histories is None else histories:
        if "snapshot" not in tasks.get(task_id, {}):
            continue
        try:
            records = await store.history(task_id, tenant=tenant)
        except Exception as exc:
            tasks[task_id]["history"] = type(exc).__name__
        else:
            tasks[task_id]["history"] = [r.model_dump(mode="json") for r in records]
    return {"tasks": tasks, "leases": [await _accepts(store, lease) for lease in leases]}


def masked(exc: BaseException | None, *texts: object) -> tuple[str, str] | None:
    """``(error type, message)`` with each of ``texts`` (and its ``repr``) replaced by
    ``<id>``: what a caller observes of an error, independent of the ids it named.
    ``None`` for no error."""
    if exc is None:
        return None
    message = str(exc)
    needles: list[str] = []
    for text in texts:
        needles += [repr(text), str(text)]
    for needle in sorted({n for n in needles if n}, key=len, reverse=True):
        message = message.replace(needle, "<id>")
    return type(exc).__name__, message
