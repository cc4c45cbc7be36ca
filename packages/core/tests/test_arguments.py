"""The store-call argument checks of ``tasks_core.arguments`` (``rules.check_*``): each
limit at exactly the limit and one past it, with the values written out, and the name of
the bad argument in the message (the mutation run, ``nox -s mutants``, holds them to it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _runtime_kit import Count
from tasks_core import Access, Cancelled, InvalidInput, Lease, Owner, rules

LEASE = Lease(task_id="alice::job", worker_id="w1", token="t", generation=1,
              expires_at=datetime(2030, 1, 1, tzinfo=UTC))
CANCEL = Cancelled(event_id="e1")
ITEM = ("alice::job", 0, CANCEL, LEASE)


def test_a_lease_is_rounded_to_whole_milliseconds_and_at_least_one() -> None:
    """A lease MUST last ``lease_for`` rounded to the millisecond, and at least 1 ms."""
    assert timedelta(milliseconds=1) == rules.check_lease_for(0.0004)
    assert timedelta(milliseconds=1) == rules.check_lease_for(0.001)
    assert timedelta(milliseconds=2) == rules.check_lease_for(0.0016)
    assert timedelta(seconds=604800) == rules.check_lease_for(604800)


@pytest.mark.parametrize("seconds", [0, 604800.001, "30"])
def test_a_bad_lease_is_refused_naming_lease_for(seconds: object) -> None:
    """The refusal of a bad ``lease_for`` MUST name it."""
    with pytest.raises(InvalidInput, match=r"^lease_for "):
        rules.check_lease_for(seconds)  # type: ignore[arg-type]


def test_a_worker_id_of_256_characters_is_taken_and_257_refused() -> None:
    """A worker id MUST be a non-empty string of at most 256 characters."""
    assert "w" * 256 == rules.check_worker_id("w" * 256)
    assert "\u00e9" * 256 == rules.check_worker_id("\u00e9" * 256)  # characters, not bytes
    for bad in ("w" * 257, "", 7):
        with pytest.raises(InvalidInput):
            rules.check_worker_id(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["w-\x1b]52;c;AAAA\x07", "w\n", "w\u202e", "a\tb", "w\x00"])
def test_a_worker_id_with_a_character_that_is_not_printable_is_refused(bad: str) -> None:
    """A worker id MUST be printable: it is written to log lines and shown by the CLI and
    the dashboard, where an escape sequence or a line break would act on what shows it."""
    says = r"^worker_id must be printable: no control or bidi characters$"
    with pytest.raises(InvalidInput, match=says):
        rules.check_worker_id(bad)
    assert "host-1 pid 7 \u00e9" == rules.check_worker_id("host-1 pid 7 \u00e9")


def test_queues_are_a_non_empty_collection_of_names() -> None:
    """Queues MUST be a collection (not a bare string) of valid names, at least one unless
    ``allow_empty``; a bad name is refused naming the queue."""
    assert frozenset({"a", "b"}) == rules.check_queues(["a", "b", "a"])
    assert frozenset() == rules.check_queues([], allow_empty=True)
    with pytest.raises(InvalidInput):
        rules.check_queues("ab")
    with pytest.raises(InvalidInput):
        rules.check_queues([])
    with pytest.raises(InvalidInput, match=r"^queue must not contain '::'$"):
        rules.check_queues(["a::b"])


def test_a_limit_of_1000_is_taken_and_1001_refused() -> None:
    """A limit MUST be an integer from 1 to the maximum (when there is one)."""
    assert 1 == rules.check_limit(1)
    assert 1000 == rules.check_limit(1000, maximum=1000)
    assert 5000 == rules.check_limit(5000)
    for bad in (0, -1, 1001, True, 1.0):
        with pytest.raises(InvalidInput):
            rules.check_limit(bad, maximum=1000)  # type: ignore[arg-type]




def test_any_integral_size_is_taken_as_a_plain_int() -> None:
    """A ``numbers.Integral`` that is not an ``int`` (a NumPy integer) MUST be taken when in
    range, as a plain ``int``, and refused, shown as given, when not."""
    taken = rules.check_limit(Count(7), maximum=7)  # type: ignore[arg-type]
    assert (7, int) == (taken, type(taken))
    with pytest.raises(InvalidInput, match=r"^limit must be an integer in 1\.\.7, not Count\(8\)$"):
        rules.check_limit(Count(8), maximum=7)  # type: ignore[arg-type]


@pytest.mark.parametrize(("given", "options", "message"), [
    (0, {}, "limit must be a positive integer, not 0"),
    (1001, {"maximum": 1000, "what": "--scan"}, "--scan must be an integer in 1..1000, not 1001"),
    (2.5, {"maximum": 10}, "limit must be an integer in 1..10, not the float 2.5"),
    (1000.0, {"maximum": 10**6}, "limit must be an integer in 1..1000000, not the float "
                                 "1000.0"),
    ("5", {}, "limit must be a positive integer, not '5'"),
    (10**5000, {"maximum": 10}, "limit must be an integer in 1..10, not an integer too long "
                                "to print"),
    (1, {"minimum": 2, "what": "--writers"}, "--writers must be an integer from 2, not 1"),
    (-1, {"minimum": 0, "maximum": 9}, "limit must be an integer in 0..9, not -1"),
    (True, {"minimum": -9, "maximum": 9}, "limit must be an integer in -9..9, not a bool"),
], ids=["zero", "past-maximum", "float", "integral-float", "str", "too-long-to-print",
        "below-a-minimum", "below-zero", "bool"])
def test_a_refused_size_names_what_its_bounds_and_the_value_as_given(
    given: object, options: dict[str, Any], message: str
) -> None:
    """A refused size MUST say which size, its bounds and the value as it was given (never
    rounded into the bound: the CLI prints this line as its refusal)."""
    with pytest.raises(InvalidInput) as refused:
        rules.check_limit(given, **options)  # type: ignore[arg-type]
    assert message == str(refused.value)


def test_a_batch_of_1000_items_is_taken_and_1001_refused() -> None:
    """``transition_many`` MUST take at most 1000 items."""
    assert 1000 == len(rules.check_batch([ITEM] * 1000))
    assert [] == rules.check_batch([])
    with pytest.raises(InvalidInput):
        rules.check_batch([ITEM] * 1001)


@pytest.mark.parametrize("items", ["ab", b"ab", {ITEM}, iter([ITEM]), 7])
def test_a_batch_must_be_a_sequence(items: object) -> None:
    """The items of ``transition_many`` MUST come as a sequence (not a string, a set or an
    iterator), checked before anything is read."""
    with pytest.raises(TypeError):
        rules.check_batch(items)  # type: ignore[arg-type]


@pytest.mark.parametrize("item", [
    list(ITEM),  # a list, not a tuple
    ITEM[:3],  # too short
    (*ITEM, None),  # too long
    (7, 0, CANCEL, LEASE),  # task id
    ("alice::job", True, CANCEL, LEASE),  # a bool is no revision
    ("alice::job", "0", CANCEL, LEASE),
    ("alice::job", 0, "cancel", LEASE),
    ("alice::job", 0, CANCEL, Owner("alice")),
])
def test_each_batch_item_is_a_well_typed_tuple(item: object) -> None:
    """Each item MUST be a ``(str, int, Event, Lease | Access)`` tuple."""
    with pytest.raises(TypeError):
        rules.check_batch([ITEM, item])  # type: ignore[list-item]


def test_a_batch_takes_leases_and_accesses() -> None:
    access = Access(principal=Owner("alice"), visibility="watchers")
    items = [ITEM, ("alice::job", 3, CANCEL, access)]
    assert items == rules.check_batch(items)


def test_a_read_is_scoped_to_a_tenant_name_or_to_every_tenant() -> None:
    assert "acme" == rules.check_tenant("acme")
    assert rules.check_tenant(None) is None


@pytest.mark.parametrize("tenant", [7, b"acme", ["acme"], Owner("alice")])
def test_a_tenant_that_is_not_a_name_is_refused(tenant: object) -> None:
    with pytest.raises(InvalidInput, match="tenant"):
        rules.check_tenant(tenant)
