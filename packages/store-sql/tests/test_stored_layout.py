"""The layout of a stored snapshot (``_codec.encode_snapshot``): the keys a claim or a
completion writes first, ending at the first ``,"id":"``, then every other key — ASCII
text, whatever the values.

The PostgreSQL claim and completion statements rely on it to rewrite the head without
parsing the rest; every reader decodes it like text of any other key order.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from tasks_contract_tests._kit import BOB, new_task
from tasks_core import ManualClock, RetryPolicy, rules
from tasks_store_sql import _codec

TRAPS = {"x": 1, "id": "a", "quote": ',"id":"', "accent": "é\u2028", "emoji": "\U0001f600"}


@pytest.mark.parametrize("values", [{"n": 1}, TRAPS], ids=["ascii", "escaped"])
def test_the_head_holds_the_keys_claims_and_completions_write_and_ends_at_the_first_id_key(
    values: dict[str, object],
) -> None:
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(input=values), now)
    claimed, _, _, _ = rules.start_claim(snapshot, "w,\"id\":\"é", 30.0, now)

    text = _codec.encode_snapshot(claimed)

    assert text.isascii()
    cut = text.index(',"id":"')
    assert list(json.loads(text[:cut] + "}")) == list(_codec.HEAD_KEYS)
    rest = json.loads("{" + text[cut + 1:])
    assert next(iter(rest)) == "id"
    assert not set(rest) & set(_codec.HEAD_KEYS)
    assert _codec.decode_snapshot(claimed.id, text) == claimed


@pytest.mark.parametrize("at", [
    datetime(2030, 1, 1, tzinfo=UTC), datetime(1500, 6, 1, 12, 0, 0, 239000, tzinfo=UTC),
])
def test_an_instant_is_spelled_as_the_snapshot_spells_it(at: datetime) -> None:
    snapshot = rules.new_snapshot(new_task(), at)

    spelled = _codec.instant_json(at)

    assert f'"created_at":{spelled}' in _codec.encode_snapshot(snapshot)


def test_text_cut_at_its_instants_joins_back_with_them() -> None:
    at = datetime(1500, 6, 1, 12, 0, 0, 239000, tzinfo=UTC)
    ttl = timedelta(seconds=90)
    snapshot = rules.new_snapshot(new_task(input={"n": 1}, ttl_s=90), at)
    text = _codec.encode_snapshot(snapshot)

    cut = _codec.cut_at_instants(text, {at: (2, 0), at + ttl: (1, 90_000)})

    assert cut is not None
    parts, shifts = cut
    assert shifts == [0, 90_000, 0]  # updated_at, expires_at, created_at (milliseconds)
    spelled = [_codec.instant_json(at + timedelta(milliseconds=ms)) for ms in shifts]
    assert "".join(p + s for p, s in zip(parts, [*spelled, ""], strict=True)) == text


def test_text_that_spells_an_instant_once_more_is_not_cut() -> None:
    at = datetime(1500, 6, 1, 12, 0, 0, 239000, tzinfo=UTC)
    value = _codec.instant_json(at).strip('"')
    text = _codec.encode_snapshot(rules.new_snapshot(new_task(input={"v": value}), at))

    assert _codec.cut_at_instants(text, {at: (2, 0)}) is None
    assert _codec.cut_at_instants(text, {at: (3, 0)}) is not None


def _rest(text: str) -> dict[str, object]:
    """The keys after the head of stored text, as JSON."""
    rest: dict[str, object] = json.loads("{" + text[text.index(',"id":"') + 1:])
    return rest


@pytest.mark.parametrize("values", [{"n": 1}, TRAPS], ids=["ascii", "escaped"])
def test_the_rest_leaves_out_every_value_at_its_default_and_decodes_the_same(
    values: dict[str, object],
) -> None:
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(input=values), now)

    text = _codec.encode_snapshot(snapshot)

    rest = _rest(text)
    assert set(rest) == {"id", "tenant", "owner", "work", "run_id", "created_at"}
    assert rest["work"] == {"name": "job", "input": values}
    assert _codec.decode_snapshot(snapshot.id, text) == snapshot


def test_the_rest_keeps_every_value_that_is_not_its_default() -> None:
    now = rules.tick(ManualClock().now())
    snapshot = rules.new_snapshot(new_task(
        queue="q", watchers=(BOB,), max_deliveries=3, timeout_s=5.0, ttl_s=60.0,
        retention_s=0.0, delay_s=1.0, priority=-7, retry=RetryPolicy.exponential(1.0, attempts=2),
    ), now)

    text = _codec.encode_snapshot(snapshot)

    rest = _rest(text)
    assert {"queue": "q", "priority": -7, "ttl_s": 60.0, "retention_s": 0.0}.items() <= (
        rest.items())
    assert {"watchers", "run_at"} <= set(rest)
    work = rest["work"]
    assert isinstance(work, dict)
    assert {"max_deliveries": 3, "timeout_s": 5.0}.items() <= work.items()
    assert "retry_policy" in work
    assert _codec.decode_snapshot(snapshot.id, text) == snapshot
