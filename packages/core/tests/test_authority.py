"""Principals and the id rules: validated names, explicit authority, injective ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tasks_core import (
    InvalidInput,
    Owner,
    System,
    owner_of,
    require_authority,
    scoped_task_key,
)
from tasks_core.authority import check_key, check_name
from tasks_core.random_ids import random_task_id

BAD_NAMES = {
    "empty": "",
    "blank": "   ",
    "separator": "a::b",
    "trailing colon": "alice:",
    "257 bytes": "a" * 257,
    "129 two-byte characters": "é" * 129,
    "newline": "ali\nce",
    "nul": "ali\x00ce",
}


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_owner_user_id_is_validated(bad: str) -> None:
    """A user id MUST be non-empty and not blank, ``::``-free, not end in ``:``, <= 256
    bytes, printable."""
    with pytest.raises(InvalidInput, match="user_id"):
        Owner(bad)


@pytest.mark.parametrize("bad", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_tenant_is_validated_for_owners_and_system(bad: str) -> None:
    """A tenant MUST follow the same rules, for Owner and System alike."""
    with pytest.raises(InvalidInput, match="tenant"):
        Owner("alice", tenant=bad)
    with pytest.raises(InvalidInput, match="tenant"):
        System(bad)


@pytest.mark.parametrize("good", ["a", "a" * 256, "é" * 128, ":alice", "a:b", "Ünïcode user"])
def test_valid_names_are_accepted_unchanged(good: str) -> None:
    """Names within the rules MUST be accepted as given (256 bytes is the limit)."""
    assert good == Owner(good, tenant=good).user_id
    assert good == check_name(good)


def test_message_names_the_rule_not_the_value() -> None:
    """A refusal MUST say which rule failed without quoting the refused value."""
    with pytest.raises(InvalidInput) as info:
        Owner("secret::value")
    assert "must not contain '::'" in str(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("bare", ["alice", None, 42, {"user_id": "alice"}])
def test_require_authority_refuses_anything_but_owner_or_system(bare: object) -> None:
    """A bare string (or anything else) MUST be refused with TypeError."""
    with pytest.raises(TypeError, match="Owner"):
        require_authority(bare)


def test_require_authority_returns_owner_and_system() -> None:
    """Owner and System MUST pass through unchanged."""
    alice, system = Owner("alice"), System()
    assert alice is require_authority(alice)
    assert system is require_authority(system)


def test_owner_dedup_scopes_the_key_to_the_owner() -> None:
    """``dedup="owner"`` MUST give ``user::key`` in the default tenant."""
    assert "alice::report_42" == scoped_task_key("report_42", Owner("alice"))


def test_other_tenants_prefix_the_tenant() -> None:
    """Outside the default tenant the id MUST be ``tenant::user::key``."""
    assert "acme::alice::report_42" == scoped_task_key("report_42", Owner("alice", "acme"))


def test_global_dedup_uses_the_key_verbatim() -> None:
    """``dedup="global"`` MUST use the key as the id in the default tenant, for an owner or
    for System, and scope it by tenant elsewhere."""
    assert "report_42" == scoped_task_key("report_42", Owner("alice"), dedup="global")
    assert "report_42" == scoped_task_key("report_42", None, dedup="global")
    assert "acme::::report_42" == scoped_task_key("report_42", Owner("a", "acme"), dedup="global")


@pytest.mark.parametrize("dedup", ["owner", "global"])
def test_keys_containing_the_separator_are_refused_in_both_modes(dedup: str) -> None:
    """A key with ``::`` MUST be refused whatever the dedup mode."""
    with pytest.raises(InvalidInput, match="'::'"):
        scoped_task_key("a::b", Owner("alice"), dedup=dedup)


@pytest.mark.parametrize("bad", ["", "k" * 257, "tab\there"])
def test_keys_are_validated(bad: str) -> None:
    """A key MUST be non-empty, at most 256 bytes and printable."""
    with pytest.raises(InvalidInput, match="key"):
        check_key(bad)


def test_owner_dedup_needs_an_owner_and_dedup_must_be_known() -> None:
    """System submits MUST use global dedup; an unknown dedup mode MUST be refused."""
    with pytest.raises(InvalidInput, match="needs an Owner"):
        scoped_task_key("k", None)
    with pytest.raises(InvalidInput, match="dedup must be"):
        scoped_task_key("k", Owner("alice"), dedup="tenant")


@pytest.mark.parametrize("owner", [Owner("alice"), Owner("alice", "acme"), Owner(":a", ":t")])
def test_owner_of_reads_the_owner_back(owner: Owner) -> None:
    """``owner_of`` MUST invert ``scoped_task_key`` for owner-scoped ids."""
    assert owner == owner_of(scoped_task_key("k:", owner))


@pytest.mark.parametrize(
    "task_id", ["report_42", random_task_id(), "a::b::c::d", "::k", "a::", "default::alice::k"]
)
def test_owner_of_is_none_for_global_random_and_malformed_ids(task_id: str) -> None:
    """Ids that no owner could have produced MUST have no owner."""
    assert owner_of(task_id) is None


# -- injectivity (property) --------------------------------------------------------------

# A tiny alphabet full of colons makes collisions likely if the rules allowed any.
_text = st.text(alphabet="a:é", min_size=1, max_size=6)
names = _text.filter(lambda s: "::" not in s and not s.endswith(":"))
keys = _text.filter(lambda s: "::" not in s)
tenants = st.one_of(st.just("default"), names)


@given(st.lists(st.tuples(tenants, names, keys), unique=True, min_size=2, max_size=12))
def test_distinct_tenant_user_key_triples_get_distinct_ids(
    triples: list[tuple[str, str, str]],
) -> None:
    """(tenant, user, key) -> id MUST be injective, and ``owner_of`` MUST invert it."""
    ids = [scoped_task_key(key, Owner(user, tenant)) for tenant, user, key in triples]
    assert len(triples) == len(set(ids))
    assert [Owner(u, t) for t, u, _ in triples] == [owner_of(i) for i in ids]


@given(tenants, names, keys, tenants, keys)
def test_global_keys_never_collide_with_owner_ids(
    tenant: str, user: str, key: str, global_tenant: str, global_key: str
) -> None:
    """A global id (in any tenant) MUST never equal an owner-scoped id, and has no owner."""
    owned = scoped_task_key(key, Owner(user, tenant))
    shared = scoped_task_key(global_key, None, dedup="global", tenant=global_tenant)
    assert owned != shared
    assert owner_of(shared) is None


@given(st.lists(st.tuples(tenants, keys), unique=True, min_size=2, max_size=12))
def test_global_keys_are_injective_across_tenants(pairs: list[tuple[str, str]]) -> None:
    """(tenant, global key) -> id MUST be injective: tenants never share a global key."""
    ids = [scoped_task_key(key, None, dedup="global", tenant=tenant) for tenant, key in pairs]
    assert len(pairs) == len(set(ids))


def test_random_ids_are_fresh_and_grow_in_the_order_they_are_made() -> None:
    """Random ids MUST differ, and sort in the order one process made them (FIFO within
    one store millisecond)."""
    ids = [random_task_id() for _ in range(1000)]
    assert 1000 == len(set(ids))
    assert sorted(ids) == ids


@given(tenants, names, keys, tenants, keys)
def test_no_key_names_a_random_id(
    tenant: str, user: str, key: str, global_tenant: str, global_key: str
) -> None:
    """No id built from a key — owner-scoped or global, in any tenant — MUST have the
    form of a random id (a global key equal to a random id would probe for, and join, a
    task submitted without a key)."""
    built = {scoped_task_key(key, Owner(user, tenant)),
             scoped_task_key(global_key, None, dedup="global", tenant=global_tenant)}
    assert [] == [i for i in built if i.startswith("::")]
    assert random_task_id().startswith("::")


def test_principals_print_apart_whatever_their_names() -> None:
    """Two different principals MUST never print the same (operators read owners in
    ``tasks ls`` and in logs): a name holding ``/`` or ``"``, or a tenant or user named
    ``system``, is quoted; plain names print as before."""
    from tasks_core import System

    principals = [Owner("x", "acme/y"), Owner("y/x", "acme"), Owner("x", "system"),
                  System("x"), Owner("system"), System(), Owner("acme/x"), Owner("x", "acme"),
                  Owner('a"b', "c"), Owner("b", 'c"/a')]
    printed = [str(p) for p in principals]
    assert len(set(printed)) == len(printed), printed
    assert ("acme/bob", "bob", "system", "system/acme") == (
        str(Owner("bob", "acme")), str(Owner("bob")), str(System()), str(System("acme")))
