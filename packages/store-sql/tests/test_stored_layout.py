"""The layout of a stored snapshot (``_codec.encode_snapshot``): the claim's keys first,
ending at the first ``,"id":"``, then every other key — ASCII text, whatever the values.

The PostgreSQL claim statement relies on it to rewrite the head without parsing the
rest; every reader decodes it like text of any other key order.
"""

from __future__ import annotations

import json

import pytest
from tasks_contract_tests._kit import new_task
from tasks_core import ManualClock, rules
from tasks_store_sql import _codec

TRAPS = {"x": 1, "id": "a", "quote": ',"id":"', "accent": "é\u2028", "emoji": "\U0001f600"}


@pytest.mark.parametrize("values", [{"n": 1}, TRAPS], ids=["ascii", "escaped"])
def test_the_head_holds_the_claims_keys_and_ends_at_the_first_id_key(
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
