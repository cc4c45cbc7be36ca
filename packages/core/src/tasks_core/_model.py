"""The base of every core model: frozen, strict about unknown fields, JSON round-trippable.

Constructing a model with bad arguments raises :class:`~tasks_core.errors.InvalidInput`
(a ``ValueError``) whose message names the fields and rules, never the offending values.
``model_validate`` (used by stores to decode persisted records) keeps pydantic's
``ValidationError`` so a store can map it to ``StoreCorrupt``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from tasks_core._errors_base import InvalidInput

__all__ = ["Model", "built", "describe_validation_error", "plain_init", "replaced"]

_Init = TypeVar("_Init", bound=Callable[..., None])
_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__


def plain_init(init: _Init) -> _Init:
    """Mark a model ``__init__`` that only forwards its arguments (and translates the
    error): pydantic then validates nested instances of the model in pydantic-core
    without calling it. Without the mark every nested model of a decoded snapshot
    runs a Python ``__init__`` and a second validation — most of the decoding time. Only
    speed depends on the mark: a nested error still surfaces as the outer model's
    ``ValidationError`` (``InvalidInput`` from a direct call)."""
    init.__pydantic_base_init__ = True  # type: ignore[attr-defined]
    return init


def describe_validation_error(exc: ValidationError) -> str:
    """Summarize ``exc`` without quoting any input value."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or exc.title
        parts.append(f"{where}: {error['msg']}")
    return f"invalid {exc.title}: " + "; ".join(parts)


class Model(BaseModel):
    """Frozen pydantic model whose constructor raises ``InvalidInput``."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    @plain_init
    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidInput(describe_validation_error(exc)) from None


def replaced(model: _M, /, **changes: Any) -> _M:
    """A copy of the frozen ``model`` with ``changes``: what ``model_copy(update=changes)``
    makes — the same fields, fields set, equality and hash, nothing validated — in about
    half its time (pydantic's copy takes several Python steps per copy; the hot path makes
    a few per task). The copy shares the field values, which are immutable.

    Rule: ``changes`` are field values of their declared types, derived by the rules from
    validated ones (nothing checks them here, as ``model_copy`` checks nothing).
    """
    if model.__pydantic_private__ is not None or model.__pydantic_extra__ is not None:
        return model.model_copy(update=changes)  # (no core model has either)
    new = object.__new__(type(model))
    fields = model.__dict__.copy()
    fields.update(changes)
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


def built(cls: type[_M], /, **fields: Any) -> _M:
    """A ``cls`` of ``fields``, not validated: equal to ``cls(**fields)`` when they are
    valid, in a third of its time.

    Rule: ``fields`` are every field of the model, each a value of its declared type
    already in its validated form (an aware UTC instant, an enum member, a model) —
    validated before, or derived by the rules from validated values. Anything from a
    caller or a record goes through ``cls(...)``.

    Raises:
        TypeError: ``fields`` are not exactly the model's fields.
    """
    if fields.keys() != cls.__pydantic_fields__.keys():  # (model_fields, read directly)
        raise TypeError(f"built({cls.__name__}) takes exactly its fields")
    new = object.__new__(cls)
    _set(new, "__dict__", fields)
    _set(new, "__pydantic_fields_set__", set(fields))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new
