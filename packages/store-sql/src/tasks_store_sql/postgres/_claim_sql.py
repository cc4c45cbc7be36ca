"""PostgreSQL's ``claim_next`` as one statement: ``rules.start_claim`` in SQL.

The statement locks the first claimable rows (claim order) (``SKIP LOCKED``), reads the store clock
over the locked rows, and writes each claim ``rules.start_claim`` would decide, in one
statement that is its own transaction. It rewrites only the head of the stored text
(:data:`tasks_store_sql._codec.HEAD_KEYS`) in the codec's spelling and copies the rest
byte for byte. A row it cannot claim exactly as the rules would is returned unclaimed,
for the claim decided in Python. Two forms: :func:`fresh_claim_statement` (tasks never
claimed, head not taken apart) and :func:`claim_statement` (any head).
``test_pg_claim_rules.py`` holds both to ``rules.start_claim`` field by field.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from tasks_core import rules
from tasks_core.models import NewTask, Work

from tasks_store_sql._codec import CLAIM_KEYS, HEAD_KEYS, encode, encode_snapshot
from tasks_store_sql._schema import Tables
from tasks_store_sql.postgres._statements import (
    Statement,
    instant_text,
    joined,
    later,
    oldest_claimable,
    store_clock,
)

__all__ = ["claim_statement", "fresh_claim_statement"]

_HEAD_START = '{"' + HEAD_KEYS[0] + '":'
_HEAD_END = ',"id":"'
_JSON = postgresql.JSON
_TEXTS = postgresql.ARRAY(sa.Text)
_KEPT = tuple(key for key in HEAD_KEYS if key not in CLAIM_KEYS)
"""The head's keys a claim leaves as they are (their text is copied)."""


_UNTIL_STARTED = HEAD_KEYS[: HEAD_KEYS.index("started_at") + 1]
"""The head's keys a fresh claim writes (the rest of the text, from ``finished_at`` on,
is copied)."""
_STARTED_NULL = ',"started_at":null'
_STARTED_AT = _STARTED_NULL + ',"finished_at":'
"""What follows a fresh head's ``updated_at``: ``started_at`` null, then ``finished_at``."""


_HELD = ',"held":true'
"""How the codec spells a held claim's last member (``ClaimInfo.held``, absent when false)."""


def _text(name: str, value: str | None = None) -> sa.BindParameter[str]:
    return sa.bindparam(name, value, type_=sa.Text)


@functools.cache
def _fresh_head() -> tuple[str, dict[str, str]]:
    """The text every new task's stored snapshot begins with, up to the opening quote of
    its ``updated_at`` — the codec's spelling of a task never claimed, whose values there
    are the same for every task — and the text of each head key's value in it.

    Raises:
        AssertionError: the codec's head is not laid out as the fresh claim assumes (the
            keys up to ``updated_at`` constant, then ``started_at`` null, then the rest).
    """
    new = NewTask(id="fresh", tenant="default", owner=None, work=Work(name="fresh", input=None))
    text = encode_snapshot(rules.new_snapshot(new, datetime(2000, 1, 1, tzinfo=UTC)))
    head = text[: text.index('"updated_at":"') + len('"updated_at":"')]
    values = json.loads(text[: text.index(',"id":"')] + "}")
    if (list(values)[: len(_UNTIL_STARTED)] != list(_UNTIL_STARTED)
            or _UNTIL_STARTED[-2:] != ("updated_at", "started_at")
            or f'Z"{_STARTED_AT}' not in text):
        raise AssertionError("the codec's head is not laid out as the fresh claim assumes")
    return head, {key: encode(values[key]) for key in _UNTIL_STARTED}


def _locked(tables: Tables, queue: sa.ColumnElement[bool]) -> sa.CTE:
    """The candidates, locked; ``now`` read after the locks (milliseconds), ``rank`` in
    claim order (``neg_priority``, ``available_at``, ``id``), ``neg_priority`` and
    ``available_at`` as they were (the claim order the caller merges tiers by) and
    ``cut``, where the head of the stored text ends (``0``: the text is not laid out with
    a head)."""
    t = tables.tasks
    found = oldest_claimable(
        [t.c.id, t.c.snapshot, t.c.claim_expires_at, t.c.updated_at, t.c.expires_at,
         t.c.max_deliveries, t.c.neg_priority, t.c.available_at],
        t, queue,
    )
    now = sa.func.date_trunc(_text("unit", "milliseconds"), store_clock())
    rank = sa.func.row_number().over(
        order_by=(found.c.neg_priority, found.c.available_at, found.c.id))
    laid_out = sa.func.left(found.c.snapshot, len(_HEAD_START)) == _text(
        "head_start", _HEAD_START)
    cut = sa.case((laid_out, sa.func.strpos(found.c.snapshot, _text("head_end", _HEAD_END))),
                  else_=0)
    head, _ = _fresh_head()
    started = sa.case(
        (sa.func.left(found.c.snapshot, len(head)) == _text("fresh_head", head),
         sa.func.strpos(found.c.snapshot, _text("started_null", _STARTED_AT))),
        else_=0,
    )  # where a fresh head's null `started_at` is (0: not a fresh head)
    return sa.select(
        found.c.id, found.c.snapshot, found.c.claim_expires_at, found.c.updated_at,
        found.c.expires_at, found.c.max_deliveries, found.c.neg_priority,
        found.c.available_at, now.label("now"),
        rank.label("rank"), cut.label("cut"), started.label("fresh_at"),
    ).cte("c").prefix_with("MATERIALIZED")


def _fresh(locked: sa.CTE) -> sa.ColumnElement[bool]:
    """The row's head is a fresh head (:func:`_fresh_head`) with one instant after it and
    then a null ``started_at``, all before the head ends: a task never claimed, stored by
    the codec, whose claim is written without taking its head apart."""
    n = len(_fresh_head()[0])
    instant_end = n + sa.func.strpos(
        sa.func.substr(locked.c.snapshot, n + 1, 40), _text("quote", '"'))
    return sa.and_(locked.c.fresh_at > 0, locked.c.fresh_at < locked.c.cut,
                   instant_end == locked.c.fresh_at - 1)


def _read(locked: sa.CTE) -> sa.FromClause:
    """What the claim reads from a head that is not fresh (:func:`_fresh`), in one pass:
    ``lease_generation``, ``deliveries``, the JSON text of ``started_at`` and of each key
    it keeps (``kept_…``; ``NULL`` where a key is missing), the number of keys and how many
    of them are the head's."""
    head = sa.case(
        (locked.c.cut > 0,
         sa.cast(sa.func.left(locked.c.snapshot, locked.c.cut - 1) + _text("close", "}"),
                 _JSON)),
    )  # NULL (no keys at all) for text without a head
    each = sa.func.json_each(head).table_valued("key", "value")

    def field(name: str) -> sa.ColumnElement[Any]:
        return sa.func.max(sa.cast(each.c.value, sa.Text)).filter(
            each.c.key == _text(f"key_{name}", name)
        )

    changed = sa.bindparam("changed", list(HEAD_KEYS), type_=_TEXTS)
    return sa.select(
        sa.cast(field("lease_generation"), sa.Integer).label("lease_generation"),
        sa.cast(field("deliveries"), sa.Integer).label("deliveries"),
        field("started_at").label("started_at"),
        *(field(key).label(f"kept_{key}") for key in _KEPT),
        sa.func.count().label("n_keys"),
        sa.func.count().filter(each.c.key == sa.any_(changed)).label("changes"),
    ).select_from(each).lateral("j")


Part = str | sa.ColumnElement[Any]
"""A piece of a text the statement puts together: constant text, or an expression."""


def _members(fields: list[tuple[str, list[Part]]]) -> list[Part]:
    """The text of a JSON object's members, ``{"key":value,…`` without its closing brace."""
    parts: list[Part] = []
    for index, (key, value) in enumerate(fields):
        parts += [("{" if index == 0 else ",") + f'"{key}":', *value]
    return parts


def _concat(name: str, parts: list[Part]) -> sa.ColumnElement[str]:
    """``concat`` of ``parts``, each run of constant text bound as one literal (fewer
    arguments for every row)."""
    args: list[sa.ColumnElement[Any]] = []
    texts: list[str] = []
    for part in [*parts, None]:
        if isinstance(part, str):
            texts.append(part)
            continue
        if texts:
            args.append(_text(f"{name}_{len(args)}", "".join(texts)))
            texts = []
        if part is not None:
            args.append(part)
    return sa.func.concat(*args)


def _claim_members(plan: sa.FromClause, generation: Part) -> list[Part]:
    """The text of the claim's ``claim`` object: the worker, ``generation``, the lease's
    end, not ended, whether it takes over a lease that never ended (its expiry is still
    recorded), and ``held`` for a rank past ``start`` (written only when true, as the
    codec does)."""
    recovered = sa.case(
        (plan.c.claim_expires_at.is_not(None), _text("true", "true")),
        else_=_text("false", "false"),
    )
    held = sa.case(  # claims past the first ``start`` are held ahead of a slot
        (plan.c.rank > sa.bindparam("start", type_=sa.BigInteger), _text("held", _HELD)),
        else_=_text("started", ""),
    )
    return [*_members([
        ("worker_id", [sa.cast(sa.func.to_json(_text("worker")), sa.Text)]),
        ("generation", [generation]),
        ("expires_at", [instant_text(plan.c.lease_expires_at)]),
        ("ended", ["false"]),
        ("recovered", [recovered]),
    ]), held, "}"]


def _cleared() -> dict[str, list[Part]]:
    """The head's values every claim writes as constants: no progress, no retry."""
    return {"progress": ["null"], "retry_at": ["null"]}


def _first_claim(plan: sa.FromClause) -> sa.ColumnElement[str]:
    """A fresh task's claimed text (:func:`_fresh`): its head is not taken apart — its
    values up to ``started_at`` are those of every fresh head, so the new head is
    constant text but for the worker, the lease's end and two instants — and the rest of
    the text is copied from its ``,"finished_at":`` on."""
    _, fresh = _fresh_head()
    first: dict[str, list[Part]] = {
        **{key: [fresh[key]] for key in _UNTIL_STARTED},
        **_cleared(),
        "deliveries": ["1"],
        "claim": _claim_members(plan, "1"),
        "lease_generation": ["1"],
        "updated_at": [instant_text(plan.c.touched)],
        "started_at": [instant_text(plan.c.now)],
    }
    rest = sa.func.substr(plan.c.snapshot, plan.c.fresh_at + len(_STARTED_NULL))
    return _concat("f", [*_members([(key, first[key]) for key in _UNTIL_STARTED]), rest])


def _taken_apart(plan: sa.FromClause) -> sa.ColumnElement[str]:
    """The claimed text of a head read by :func:`_read`: a new head, in the codec's order
    (:data:`~tasks_store_sql._codec.HEAD_KEYS`: the claim's values, and the text of the
    keys it keeps), then the rest of the stored text as it is (which begins ``,"id":``)."""
    null = _text("null", "null")
    started = sa.case(
        (sa.func.coalesce(plan.c.started_at, null) == null, instant_text(plan.c.now)),
        else_=plan.c.started_at,
    )
    generation = sa.cast(plan.c.generation, sa.Text)
    values: dict[str, list[Part]] = {
        **_cleared(),
        "deliveries": [sa.cast(plan.c.deliveries + 1, sa.Text)],
        "claim": _claim_members(plan, generation),
        "lease_generation": [generation],
        "updated_at": [instant_text(plan.c.touched)],
        "started_at": [started],
        **{key: [plan.c[f"kept_{key}"]] for key in _KEPT},
    }
    return _concat("h", [*_members([(key, values[key]) for key in HEAD_KEYS]),
                         sa.func.substr(plan.c.snapshot, plan.c.cut)])


def _timing(locked: sa.CTE) -> list[sa.ColumnElement[Any]]:
    """The claim's instants: the lease's end and the new ``updated_at`` (never earlier
    than the stored one)."""
    return [
        later(locked.c.now, sa.bindparam("lease", type_=sa.BigInteger)).label(
            "lease_expires_at"),
        sa.func.greatest(locked.c.now, locked.c.updated_at).label("touched"),
    ]


def _within_limits(plan: sa.FromClause, deliveries: Any) -> sa.ColumnElement[bool]:
    """The claim is the rules' own: the delivery limit not reached, the TTL not passed at
    the clock read after the lock."""
    return sa.and_(
        deliveries < plan.c.max_deliveries,
        sa.or_(plan.c.expires_at.is_(None), plan.c.expires_at > plan.c.now),
    )


def _tokens() -> Any:
    """The lease tokens, one per rank."""
    return sa.func.unnest(joined("tokens", sa.Text())).table_valued(
        "token", with_ordinality="rank"
    ).render_derived()


def _update(tables: Tables, decided: Any, new_snapshot: sa.ColumnElement[str],
            generation: Any, where: sa.ColumnElement[bool], name: str) -> sa.CTE:
    """The claim's write of the rows of ``decided`` that meet ``where``, returning
    ``rank``, ``id``, ``now``, the new text, the token, the row's new version, its
    ``neg_priority`` and its ``available_at`` before the claim. A claim clears
    ``retry_at``: ``available_at`` becomes ``run_at``, else the creation
    (``rules.available_at``)."""
    t = tables.tasks
    return (
        sa.update(t)
        .where(t.c.id == decided.c.id, where)
        .values(
            row_version=t.c.row_version + 1,
            claim_token=decided.c.token,
            claim_generation=generation,
            claim_expires_at=decided.c.lease_expires_at,
            retry_at=sa.null(),
            available_at=sa.func.coalesce(t.c.run_at, t.c.created_at),
            updated_at=decided.c.touched,
            snapshot=new_snapshot,
        )
        .returning(decided.c.rank, t.c.id, decided.c.now, t.c.snapshot, t.c.claim_token,
                   t.c.row_version, decided.c.neg_priority, decided.c.available_at)
        .cte(name)
    )


def _left_alone(decided: Any, claimed: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The rows of ``decided`` the claim leaves alone (``claimed`` not true: false, or
    ``NULL`` for a row without a delivery limit): rank, id, ``now``, no text, and its
    ``neg_priority`` and ``available_at``."""
    return sa.select(decided.c.rank, decided.c.id, decided.c.now, sa.null(), sa.null(),
                     sa.null(), decided.c.neg_priority, decided.c.available_at,
                     ).where(claimed.is_not(sa.true()))


def _fresh_claims(tables: Tables, locked: sa.CTE) -> tuple[sa.CTE, sa.Subquery,
                                                            sa.ColumnElement[bool]]:
    """The write of the fresh candidates' claims (:func:`_fresh`, :func:`_first_claim`),
    the fresh candidates themselves, and the condition they are claimed on."""
    tokens = _tokens()
    first = (
        sa.select(locked, *_timing(locked), tokens.c.token)
        .select_from(locked.join(tokens, tokens.c.rank == locked.c.rank))
        .where(_fresh(locked))
        .subquery("f")
    )
    ok = _within_limits(first, sa.literal_column("0"))
    return _update(tables, first, _first_claim(first), sa.literal_column("1"), ok, "uf"), first, ok


def fresh_claim_statement(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
    """The claim of up to ``limit`` tasks of ``queue`` for ``worker`` that claims only
    fresh rows (:func:`_fresh`) and leaves every other candidate alone, locked until the
    statement ends — the claim of a queue of new tasks, with nothing in it but the fresh
    form. Parameters and rows returned as :func:`claim_statement`'s.

    Every new task's text begins with the same characters up to its ``updated_at`` — the
    codec's spelling of a task never claimed (:func:`_fresh_head`) — then one instant and
    a null ``started_at``: its new head is constant text but for the worker, the lease's
    end and two instants, and the rest is copied from ``finished_at`` on. *Why a
    statement of its own:* PostgreSQL prepares every expression of a plan each time it
    runs it, rows or not, and taking a head apart takes many (bench/LOG.md); most claims
    are of new tasks."""
    locked = _locked(tables, queue)
    claimed, _, _ = _fresh_claims(tables, locked)
    fresh_ok = sa.and_(_fresh(locked), _within_limits(locked, sa.literal_column("0")))
    return Statement.of(sa.union_all(sa.select(claimed), _left_alone(locked, fresh_ok)))


def claim_statement(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
    """The claim of up to ``limit`` tasks of ``queue`` for ``worker``; parameters ``now``,
    ``limit``, ``start`` (ranks past it are held ahead of a slot), ``worker``, ``lease``
    (milliseconds), ``tokens`` (one per rank, joined:
    :func:`~tasks_store_sql.postgres._statements.join_list`) and the queue's.

    It writes generation, token, lease expiry, ``recovered``, deliveries, ``started_at``
    kept, retry and progress cleared and ``updated_at``. It reads and rewrites only the
    head of the stored text — the keys a claim or a completion writes, which the codec
    writes first (the head ends at the first ``,"id":"``) — and copies the rest byte for
    byte, never parsing it: the delivery limit comes from its own column. The new head is
    text put together from the claim's values in the codec's spelling (never ``jsonb``,
    which would respell the user's numbers); the head's other keys keep their text. A row
    it cannot claim exactly as the rules would — past its delivery limit, another layout
    or stored before the delivery-limit column existed, a head not exactly the head's
    keys, a TTL passed by the time it was locked — is returned unclaimed for the claim
    decided in Python, whose write lays it out anew.

    Fresh rows (:func:`_fresh`) and the others are written by two updates of disjoint
    rows: only the others pass through the reading of a head (:func:`_read`).

    Returns one row per locked candidate, in no order: ``rank`` (claim order, from 1),
    ``id``, ``now``, for the rows claimed the new ``snapshot`` text, ``claim_token`` and
    ``row_version`` (``NULL`` for a row left alone), and ``neg_priority`` and
    ``available_at`` before the claim. A head that is not a JSON object,
    or a counter in it that is not an integer, fails the statement before it writes
    anything (``DataError``).
    """
    locked = _locked(tables, queue)
    fresh_claimed, first, first_ok = _fresh_claims(tables, locked)
    read = _read(locked)
    plan = sa.select(
        locked,
        (read.c.lease_generation + 1).label("generation"),
        read.c.deliveries, read.c.started_at, read.c.n_keys, read.c.changes,
        *(read.c[f"kept_{key}"] for key in _KEPT),
        *_timing(locked),
    ).select_from(locked.join(read, sa.true())).where(sa.not_(_fresh(locked))).subquery("d")
    tokens = _tokens()
    decided = (
        sa.select(plan, _taken_apart(plan).label("new_snapshot"), tokens.c.token)
        .select_from(plan.join(tokens, tokens.c.rank == plan.c.rank))
        .cte("v")
        .prefix_with("MATERIALIZED")
    )
    other_ok = sa.and_(
        _within_limits(decided, decided.c.deliveries),
        decided.c.n_keys == len(HEAD_KEYS),
        decided.c.changes == len(HEAD_KEYS),
    )
    other_claimed = _update(tables, decided, decided.c.new_snapshot, decided.c.generation,
                            other_ok, "uo")
    return Statement.of(sa.union_all(
        sa.select(fresh_claimed),
        sa.select(other_claimed),
        _left_alone(first, first_ok),
        _left_alone(decided, other_ok),
    ))
