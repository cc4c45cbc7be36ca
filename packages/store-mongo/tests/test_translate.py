"""Server refusals that the caller can act on are named errors saying what to do."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure
from tasks_core import InvalidInput, StoreError
from tasks_store_mongo._driver import translate


def test_a_transaction_too_large_for_the_cache_says_to_split_the_batch() -> None:
    """A batch of valid items can pass what one MongoDB transaction holds in its cache
    (``TransactionTooLargeForCache``, code 388: 400 items of 256 KiB on a replica set): the
    refusal MUST be ``InvalidInput`` saying to submit smaller batches and that nothing was
    written, not a bare ``StoreError`` with a code."""
    with pytest.raises(InvalidInput, match="smaller batches; nothing was written"), \
            translate():
        raise OperationFailure("Transaction is too large", code=388,
                               details={"code": 388, "errorLabels": ["TransientTransactionError"]})


@pytest.mark.parametrize(("details", "said"), [
    ({"code": 79, "codeName": "UnknownReplWriteConcern"}, "(code 79 UnknownReplWriteConcern)"),
    ({"code": 79, "codeName": "a name quoting {stored: data}"}, "(code 79)"),
    ({"code": 79}, "(code 79)"),
])
def test_a_refusal_names_the_servers_code_name_never_other_text(
    details: dict[str, object], said: str
) -> None:
    """A refusal MUST name the server's ``codeName`` beside its code (a fixed name of the
    server's: ``UnknownReplWriteConcern`` says more than 79) — and only a name: anything
    else there is left out, as a server message may quote stored data."""
    with pytest.raises(StoreError) as refused, translate():
        raise OperationFailure("No write concern mode named 'x'", code=79, details=details)
    assert str(refused.value).endswith(said), str(refused.value)
