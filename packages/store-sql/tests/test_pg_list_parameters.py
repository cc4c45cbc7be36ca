"""PostgreSQL list parameters of the hot path (``postgres._statements.joined``): a list sent as
one text, its elements joined by a control character, reads back as exactly the array
asyncpg would have sent — every element, in order, of every type the statements use,
with ``NULL`` only where the list said ``None``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from tasks_store_sql._url import parse_url
from tasks_store_sql.postgres._statements import SEPARATOR, Statement, join_list, joined

pytestmark = pytest.mark.anyio


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    dsn = parse_url(postgres_url).url.set(drivername="postgresql")
    connection = await asyncpg.connect(dsn.render_as_string(hide_password=False))
    try:
        yield connection
    finally:
        await connection.close()


async def _round_trip(
    conn: asyncpg.Connection, type_: sa.types.TypeEngine[Any], values: list[Any],
    *, nullable: bool = False,
) -> list[Any]:
    statement = Statement.of(sa.select(joined("values", type_, nullable=nullable)))
    read = await conn.fetchval(statement.sql, *statement.args(values=join_list(values)))
    return list(read)


TEXTS = [
    'plain', 'null', 'NULL', '', '{"a":[1,2],"b":"q\\"uote"}', "back\\slash", 'com,ma',
    '{braces}', ' spaced ', 'ünïcödé ✓', "'single'", '"', "\\",
]


async def test_texts_come_back_exactly(conn: asyncpg.Connection) -> None:
    values = [value for value in TEXTS if value]  # elements are never empty
    assert await _round_trip(conn, sa.Text(), values) == values
    assert await _round_trip(conn, sa.Text(), ["one"]) == ["one"]


async def test_integers_and_nulls_come_back_exactly(conn: asyncpg.Connection) -> None:
    values = [0, -1, 2**62, None, 7]
    assert await _round_trip(conn, sa.BigInteger(), values, nullable=True) == values
    assert await _round_trip(conn, sa.BigInteger(), [None], nullable=True) == [None]
    assert await _round_trip(conn, sa.Integer(), [3, 1, 2]) == [3, 1, 2]


async def test_instants_come_back_exactly(conn: asyncpg.Connection) -> None:
    await conn.execute("SET TIME ZONE 'America/New_York'")  # the session's zone plays no part
    at = datetime(2026, 3, 8, 6, 59, 59, 999_000, tzinfo=UTC)
    values = [at, None, at + timedelta(microseconds=1),
              datetime(2026, 11, 1, 1, 30, tzinfo=timezone(timedelta(hours=-4)))]
    read = await _round_trip(conn, postgresql.TIMESTAMP(timezone=True), values, nullable=True)
    assert read == values


def test_the_separator_is_a_control_character_json_never_holds_raw() -> None:
    import json

    assert not SEPARATOR.isprintable()
    assert SEPARATOR not in json.dumps({"k": SEPARATOR})


async def test_a_forged_token_holding_the_separator_is_refused_and_shifts_nothing(
    postgres_url: str,
) -> None:
    """A lease token is any text of 1..256 characters: one holding the separator would
    split into two elements and pair later columns with the wrong completion. It is
    refused (``LeaseLost``) and nothing of it is written, while the other completions of
    the same group apply with their own results. (Two guards keep it so: the completion
    statement leaves such a token to the transaction, and a misaligned row would fail its
    own token condition and go there too.)"""
    from tasks_core import Completed, LeaseLost, NewTask, Owner, Work
    from tasks_store_sql import SQLStore
    from tasks_store_sql.plugin import drop_namespace

    namespace = "listparams"
    await drop_namespace(postgres_url, namespace)
    store = await SQLStore.open(postgres_url, namespace=namespace)
    try:
        for n in range(3):
            await store.create(NewTask(id=f"t{n}", tenant="default", owner=Owner("alice"),
                                       work=Work(name="job")))
        claims = await store.claim_next("w1", 30, queues=["default"], limit=3)
        assert [c.snapshot.id for c in claims] == ["t0", "t1", "t2"]
        forged = claims[0].lease.model_copy(update={"token": f"x{SEPARATOR}y"})
        items = [(c.snapshot.id, c.snapshot.revision,
                  Completed(event_id=f"done{n}", result=n), c.lease)
                 for n, c in enumerate(claims)]
        items[0] = (*items[0][:3], forged)
        results = await store.transition_many(items)
        assert isinstance(results[0], LeaseLost)
        for n in (1, 2):
            result = results[n]
            assert not isinstance(result, Exception)
            assert result.outcome == "applied"
            assert result.snapshot.result == n
            stored = await store.get(f"t{n}", tenant="default")
            assert stored.result == n
        untouched = await store.get("t0", tenant="default")
        assert untouched.status.value == "running"
        assert untouched.revision == 0
    finally:
        await store.aclose()
        await drop_namespace(postgres_url, namespace)
