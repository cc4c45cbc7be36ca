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

from tasks_core.errors import InvalidInput

__all__ = ["Model", "describe_validation_error", "plain_init"]

_Init = TypeVar("_Init", bound=Callable[..., None])


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
