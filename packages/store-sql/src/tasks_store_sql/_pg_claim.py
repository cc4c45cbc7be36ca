"""PostgreSQL's ``claim_next`` as one statement: ``rules.start_claim`` in SQL.

The statement locks the oldest claimable rows of the queues (``SKIP LOCKED``), reads the
store clock in the projection over the locked rows (after the locks), and writes each
claim that ``rules.start_claim`` would decide — generation, token, lease expiry,
``recovered``, deliveries, ``started_at`` kept, retry and progress cleared,
``updated_at`` — in the same statement, which is its own transaction (one round trip).

It reads and rewrites only the head of the stored text — the keys a claim or a
completion writes, which the codec writes first (:data:`tasks_store_sql._codec.HEAD_KEYS`;
the head ends at the first ``,"id":"``) — and copies the rest byte for byte, never
parsing it: the delivery limit comes from its own column. The new head is text put
together from the claim's values in the codec's spelling (never ``jsonb``, which would
respell the user's numbers); the head's other keys keep the text they had. A row the
statement cannot claim exactly as the rules would — past its delivery limit, stored in
another layout or before the delivery-limit column existed, its head not exactly the
head's keys, its TTL passed by the time it was locked — is returned unclaimed for the
claim decided in Python (``FastPath._claim_locked``), whose write lays it out anew.
``test_pg_claim.py`` holds the statement to ``rules.start_claim`` field by field.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from tasks_store_sql._codec import CLAIM_KEYS, HEAD_KEYS
from tasks_store_sql._pg_statements import (
    Statement,
    instant_text,
    joined,
    later,
    oldest_claimable,
    store_clock,
)
from tasks_store_sql._schema import Tables

__all__ = ["claim_statement"]

_HEAD_START = '{"' + HEAD_KEYS[0] + '":'
_HEAD_END = ',"id":"'
_JSON = postgresql.JSON
_TEXTS = postgresql.ARRAY(sa.Text)
_KEPT = tuple(key for key in HEAD_KEYS if key not in CLAIM_KEYS)
"""The head's keys a claim leaves as they are (their text is copied)."""


def _text(name: str, value: str | None = None) -> sa.BindParameter[str]:
    return sa.bindparam(name, value, type_=sa.Text)


def _locked(tables: Tables, queue: sa.ColumnElement[bool]) -> sa.CTE:
    """The candidates, locked; ``now`` read after the locks (milliseconds), ``rank`` in
    claim order and ``cut``, where the head of the stored text ends (``0``: the text is
    not laid out with a head)."""
    t = tables.tasks
    found = oldest_claimable(
        [t.c.id, t.c.snapshot, t.c.claim_expires_at, t.c.updated_at, t.c.expires_at,
         t.c.max_deliveries, t.c.created_at],
        t, queue,
    )
    now = sa.func.date_trunc(_text("unit", "milliseconds"), store_clock())
    rank = sa.func.row_number().over(order_by=(found.c.created_at, found.c.id))
    laid_out = sa.func.left(found.c.snapshot, len(_HEAD_START)) == _text(
        "head_start", _HEAD_START)
    cut = sa.case((laid_out, sa.func.strpos(found.c.snapshot, _text("head_end", _HEAD_END))),
                  else_=0)
    return sa.select(
        found.c.id, found.c.snapshot, found.c.claim_expires_at, found.c.updated_at,
        found.c.expires_at, found.c.max_deliveries, now.label("now"), rank.label("rank"),
        cut.label("cut"),
    ).cte("c").prefix_with("MATERIALIZED")


def _read(locked: sa.CTE) -> sa.FromClause:
    """What the claim reads from the head, in one pass: ``lease_generation``,
    ``deliveries``, the JSON text of ``started_at`` and of each key it keeps (``kept_…``;
    ``NULL`` where a key is missing), the number of keys and how many of them are the
    head's."""
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


def _members(
    name: str, fields: list[tuple[str, list[sa.ColumnElement[Any]]]]
) -> list[sa.ColumnElement[Any]]:
    """The text of a JSON object's members, ``{"key":value,…`` without its closing brace:
    each key a bound literal, each value the text parts given."""
    parts: list[sa.ColumnElement[Any]] = []
    for index, (key, value) in enumerate(fields):
        parts += [_text(f"{name}_{key}", ("{" if index == 0 else ",") + f'"{key}":'), *value]
    return parts


def _rebuilt(plan: sa.Subquery) -> sa.ColumnElement[Any]:
    """The claimed snapshot's text: a new head, in the codec's order
    (:data:`~tasks_store_sql._codec.HEAD_KEYS`: the claim's values, and the text of the
    keys it keeps), then the rest of the stored text as it is (which begins ``,"id":``)."""
    null = _text("null", "null")
    started = sa.case(
        (sa.func.coalesce(plan.c.started_at, null) == null, instant_text(plan.c.now)),
        else_=plan.c.started_at,
    )
    recovered = sa.case(
        (plan.c.claim_expires_at.is_not(None), _text("true", "true")),
        else_=_text("false", "false"),
    )  # the previous lease never ended (its expiry is still recorded)
    generation = sa.cast(plan.c.generation, sa.Text)
    claim = _members("c", [
        ("worker_id", [sa.cast(sa.func.to_json(_text("worker")), sa.Text)]),
        ("generation", [generation]),
        ("expires_at", [instant_text(plan.c.lease_expires_at)]),
        ("ended", [_text("false", "false")]),
        ("recovered", [recovered]),
    ])
    values: dict[str, list[sa.ColumnElement[Any]]] = {
        "progress": [null],
        "retry_at": [null],
        "deliveries": [sa.cast(plan.c.deliveries + 1, sa.Text)],
        "claim": [*claim, _text("close", "}")],
        "lease_generation": [generation],
        "updated_at": [instant_text(plan.c.touched)],
        "started_at": [started],
        **{key: [plan.c[f"kept_{key}"]] for key in _KEPT},
    }
    head = _members("h", [(key, values[key]) for key in HEAD_KEYS])
    return sa.func.concat(*head, sa.func.substr(plan.c.snapshot, plan.c.cut))


def claim_statement(tables: Tables, queue: sa.ColumnElement[bool]) -> Statement:
    """The claim of up to ``limit`` tasks of ``queue`` for ``worker`` (see the module
    docstring); parameters ``now``, ``limit``, ``worker``, ``lease`` (milliseconds),
    ``tokens`` (one per rank, joined: :func:`~tasks_store_sql._pg_statements.join_list`)
    and the queue's.

    Returns one row per locked candidate, oldest first: ``id``, ``now`` and, for the rows
    claimed, the new ``snapshot`` text, ``claim_token`` and ``row_version`` (``NULL`` for
    a row left alone). A head that is not a JSON object, or a counter in it that is not an integer,
    fails the statement before it writes anything (``DataError``).
    """
    t = tables.tasks
    locked = _locked(tables, queue)
    read = _read(locked)
    plan = sa.select(
        locked,
        (read.c.lease_generation + 1).label("generation"),
        read.c.deliveries, read.c.started_at, read.c.n_keys, read.c.changes,
        *(read.c[f"kept_{key}"] for key in _KEPT),
        later(locked.c.now, sa.bindparam("lease", type_=sa.BigInteger)).label(
            "lease_expires_at"),
        sa.func.greatest(locked.c.now, locked.c.updated_at).label("touched"),
    ).select_from(locked.join(read, sa.true())).subquery("d")
    tokens = sa.func.unnest(joined("tokens", sa.Text())).table_valued(
        "token", with_ordinality="rank"
    ).render_derived()
    decided = (
        sa.select(plan, _rebuilt(plan).label("new_snapshot"), tokens.c.token)
        .select_from(plan.join(tokens, tokens.c.rank == plan.c.rank))
        .cte("v")
        .prefix_with("MATERIALIZED")
    )
    claimed = (
        sa.update(t)
        .where(
            t.c.id == decided.c.id,
            decided.c.deliveries < decided.c.max_deliveries,
            sa.or_(decided.c.expires_at.is_(None), decided.c.expires_at > decided.c.now),
            decided.c.n_keys == len(HEAD_KEYS),
            decided.c.changes == len(HEAD_KEYS),
        )
        .values(
            row_version=t.c.row_version + 1,
            claim_token=decided.c.token,
            claim_generation=decided.c.generation,
            claim_expires_at=decided.c.lease_expires_at,
            retry_at=sa.null(),
            updated_at=decided.c.touched,
            snapshot=decided.c.new_snapshot,
        )
        .returning(t.c.id, t.c.snapshot, t.c.claim_token, t.c.row_version)
        .cte("u")
    )
    return Statement.of(
        sa.select(decided.c.id, decided.c.now, claimed.c.snapshot, claimed.c.claim_token,
                  claimed.c.row_version)
        .select_from(decided.outerjoin(claimed, claimed.c.id == decided.c.id))
        .order_by(decided.c.rank)
    )
