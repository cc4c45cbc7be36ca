"""Who is asking: principals, and the id rules that make (owner, key) -> id injective.

Principals: ``Owner(user_id, tenant="default")``, a user of one tenant, and
``System(tenant=None)``, the explicit, greppable bypass (``None``: every tenant). Every
client call takes one positionally with no default; a bare string is refused.

Ids: ``"alice::report_42"`` (``dedup="owner"``), the key verbatim (``dedup="global"``),
``"::"`` and 21 digits (no key: :mod:`tasks_core.random_ids`); the keyed ones prefixed
by the tenant outside ``default``. No two (tenant, owner, key) triples share an id,
:func:`owner_of` reads the owner back, and no key can name a random id
(:func:`scoped_task_key` says why).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, TypeAlias

from pydantic import AfterValidator

from tasks_core._errors_base import InvalidInput
from tasks_core._model import Model, plain_init

__all__ = [
    "DEFAULT_TENANT",
    "Access",
    "Authority",
    "Owner",
    "System",
    "check_dedup",
    "check_key",
    "check_name",
    "check_principal",
    "check_task_id",
    "names",
    "owner_of",
    "require_authority",
    "scoped_task_key",
]

DEFAULT_TENANT = "default"
SEPARATOR = "::"
MAX_NAME_BYTES = 256
MAX_ID_BYTES = 1024


def check_name(value: object, *, what: str = "name") -> str:
    """Validate a user id, tenant or queue name.

    Rules: non-empty and not blank (whitespace alone), no ``::``, not ending in ``:``, at
    most 256 UTF-8 bytes, printable.

    Raises:
        InvalidInput: naming the rule that failed.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string")
    if not value.strip():
        raise InvalidInput(f"{what} must not be {'blank' if value else 'empty'}")
    if SEPARATOR in value:
        raise InvalidInput(f"{what} must not contain '::'")
    if value.endswith(":"):
        raise InvalidInput(f"{what} must not end with ':'")
    if not value.isprintable():  # before encoding: lone surrogates are not printable
        raise InvalidInput(f"{what} must be printable")
    if len(value.encode()) > MAX_NAME_BYTES:
        raise InvalidInput(f"{what} must be at most {MAX_NAME_BYTES} bytes")
    return value


def check_key(key: str) -> str:
    """Validate a task key: non-empty and not blank (whitespace alone), neither beginning
    nor ending with whitespace (``"order-1 "`` from a form field would key a second task),
    printable, no ``::``, at most 256 UTF-8 bytes.

    Raises:
        InvalidInput: naming the rule that failed.
    """
    if not isinstance(key, str):
        raise InvalidInput("key must be a string")
    if not key.strip():
        raise InvalidInput(f"key must not be {'blank' if key else 'empty'}")
    if key != key.strip():
        raise InvalidInput("key must not begin or end with whitespace")
    if SEPARATOR in key:
        raise InvalidInput("key must not contain '::'")
    if not key.isprintable():  # before encoding: lone surrogates are not printable
        raise InvalidInput("key must be printable")
    if len(key.encode()) > MAX_NAME_BYTES:
        raise InvalidInput(f"key must be at most {MAX_NAME_BYTES} bytes")
    return key


def check_task_id(value: object, *, what: str = "task_id") -> str:
    """Return ``value`` if it could be a task id: 1..1024 UTF-8 bytes of printable text,
    what every store can look up. The rule depends on the string alone, so a refusal says
    nothing about stored tasks.

    Raises:
        InvalidInput: anything else (``None``, bytes, NUL, lone surrogates, too long).
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    # Printable first: lone surrogates (which no store can encode) are not printable.
    if not value.isprintable() or len(value.encode()) > MAX_ID_BYTES:
        raise InvalidInput(f"{what} must be 1..{MAX_ID_BYTES} bytes of printable text")
    return value


def _name(what: str) -> AfterValidator:
    def validate(value: str) -> str:
        try:
            return check_name(value, what=what)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(validate)


class Owner(Model):
    """A user of one tenant. Validated: see :func:`check_name`."""

    user_id: Annotated[str, _name("user_id")]
    tenant: Annotated[str, _name("tenant")] = DEFAULT_TENANT

    @plain_init
    def __init__(self, user_id: str, tenant: str = DEFAULT_TENANT, **extra: object) -> None:
        super().__init__(user_id=user_id, tenant=tenant, **extra)

    def __str__(self) -> str:
        user = _shown(self.user_id)
        return user if self.tenant == DEFAULT_TENANT else f"{_shown(self.tenant)}/{user}"


def _shown(name: str) -> str:
    """A name as a principal prints it: quoted (JSON) when it could be read as two names
    or as ``system`` — it holds ``/`` or ``"``, or is ``system`` — so that no two
    principals print alike."""
    return json.dumps(name, ensure_ascii=False) if (
        "/" in name or '"' in name or name == "system") else name


class System(Model):
    """The explicit bypass: sees and may do everything in ``tenant`` (``None``: every tenant)."""

    tenant: Annotated[str, _name("tenant")] | None = None

    @plain_init
    def __init__(self, tenant: str | None = None, **extra: object) -> None:
        super().__init__(tenant=tenant, **extra)

    def __str__(self) -> str:
        return "system" if self.tenant is None else f"system/{_shown(self.tenant)}"


Authority: TypeAlias = Owner | System


class Access(Model):
    """Request authority as a store sees it: a principal and the visibility in force.

    Built by core from the caller's authority and its ``Policy``; never defaulted.
    """

    principal: Owner | System
    visibility: Literal["watchers", "tenant"]


def require_authority(authority: object) -> Authority:
    """Return ``authority`` if it is an :class:`Owner` or :class:`System` whose names
    pass :func:`check_principal`.

    Raises:
        TypeError: for anything else — a bare string above all.
        InvalidInput: a principal copied past its checks (:func:`check_principal`).
    """
    if isinstance(authority, (Owner, System)):
        return check_principal(authority)
    raise TypeError(
        f"authority must be Owner(...) or System(...), not {type(authority).__name__}"
    )


def check_principal(principal: Authority) -> Authority:
    """``principal`` once its names pass :func:`check_name` again: pydantic's
    ``model_copy(update=…)`` and ``model_construct`` skip the model's checks, and a user
    ``"acme::alice"`` would make ids inside tenant acme's keys.

    Raises:
        InvalidInput: naming the rule that failed.
    """
    if isinstance(principal, Owner):
        check_name(getattr(principal, "user_id", None), what="user_id")
        check_name(getattr(principal, "tenant", None), what="tenant")
    elif (tenant := getattr(principal, "tenant", None)) is not None:
        check_name(tenant, what="tenant")
    return principal


def check_dedup(dedup: object) -> str:
    """Validate a dedup mode: ``"owner"`` or ``"global"`` (exactly; checked before the key
    it applies to, so an unknown mode is named as such with or without a key).

    Raises:
        InvalidInput: anything else.
    """
    if not isinstance(dedup, str) or dedup not in ("owner", "global"):
        raise InvalidInput(f"dedup must be 'owner' or 'global', not {dedup!r:.40}")
    return dedup


def scoped_task_key(
    key: str, owner: Owner | None, *, dedup: str = "owner", tenant: str | None = None
) -> str:
    """Build the task id of ``key`` submitted by ``owner``.

    Args:
        key: the caller's key.
        owner: the submitter; ``None`` (System) only with ``dedup="global"``.
        dedup: ``"owner"`` (scoped to owner and tenant) or ``"global"`` (one id per key in
            the tenant: the key verbatim in tenant ``default``, ``"tenant::::key"`` in any
            other, so that tenants never share — or probe — each other's global keys).
        tenant: the tenant of a global key (default: the owner's, else ``default``).

    Ids: ``dedup="owner"``: ``"alice::report_42"`` in tenant ``default``,
    ``"acme::alice::report_42"`` in tenant ``acme``; ``dedup="global"``: the key verbatim
    in ``default``, ``"acme::::report"`` in ``acme``; no key: a random id
    (:func:`tasks_core.random_ids.random_task_id`), ``"::"`` then 21 digits.

    User ids and tenants never contain ``::`` nor end with ``:``; keys never contain ``::``
    (refused for both dedup modes, see docs/design.md). So an owner id has exactly one
    ``::`` in the default tenant, two in any other tenant (with a non-empty user between),
    a global key none in ``default`` and two around an empty user elsewhere: no two
    (tenant, owner, key) triples share an id, and :func:`owner_of` reads the owner back. No
    id built from a key begins with ``::`` (a name or tenant is never empty and never
    begins with ``::``; a key never holds it), so a random id can never be named by a key:
    a global key cannot reach — or probe for — a task submitted without one.

    Raises:
        InvalidInput: bad key, tenant, unknown dedup, or owner dedup without an owner.
    """
    check_key(key)
    check_dedup(dedup)
    if dedup == "global":
        scope = check_name(tenant, what="tenant") if tenant is not None else None
        scope = scope or (owner.tenant if owner is not None else DEFAULT_TENANT)
        return key if scope == DEFAULT_TENANT else f"{scope}{SEPARATOR}{SEPARATOR}{key}"
    if owner is None:
        raise InvalidInput("dedup='owner' needs an Owner; use dedup='global' for System "
                           "(tasks submit --global)")
    if owner.tenant == DEFAULT_TENANT:
        return f"{owner.user_id}{SEPARATOR}{key}"
    return f"{owner.tenant}{SEPARATOR}{owner.user_id}{SEPARATOR}{key}"


def owner_of(task_id: str) -> Owner | None:
    """Read the owner back from an owner-scoped id; ``None`` for global or random ids, and
    for any id :func:`scoped_task_key` would not build (``"a::"``, ``"default::a::k"``)."""
    parts = task_id.split(SEPARATOR, 2)
    if len(parts) == 1:
        return None
    try:
        owner = Owner(parts[-2], tenant=parts[0] if len(parts) == 3 else DEFAULT_TENANT)
        rebuilt = scoped_task_key(parts[-1], owner)
    except InvalidInput:
        return None
    return owner if rebuilt == task_id else None


def names(task_id: str, authority: Owner | System) -> bool:
    """Whether ``task_id`` itself names ``authority``: ``System()`` always; an owner whose
    scoped id it is (:func:`owner_of`); ``System(tenant)`` when the id is an owner-scoped
    or global id of that tenant. Random ids name only ``System()``.

    Core uses it where a record cannot be read (``StoreCorrupt``): only those the id names
    may learn that it exists.
    """
    if isinstance(authority, Owner):
        return owner_of(task_id) == authority
    if authority.tenant is None:
        return True
    owner = owner_of(task_id)
    if owner is not None:
        return owner.tenant == authority.tenant
    return task_id.startswith(f"{authority.tenant}{SEPARATOR}{SEPARATOR}")
