"""Failures that say what is wrong: a failed ``==`` of two tasks models (a snapshot, an
event record, a claim…) is shown as the fields that differ, one a line, by their path
(``claim.expires_at``, ``work.input['n']``), instead of two long reprs side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

__all__ = ["MAX_LINES", "model_diff"]

MAX_LINES = 30
"""The most differing fields listed; the rest are counted."""


def model_diff(left: object, right: object) -> list[str] | None:
    """The lines of a failed ``left == right`` where either side holds a tasks model;
    ``None`` (pytest's own report) otherwise or when they do not differ field by field."""
    if not (_holds_model(left) or _holds_model(right)):
        return None
    found = list(_differences(left, right, ""))
    if not found:
        return None
    head = f"{type(left).__name__} differs in {len(found)} field(s):"
    lines = [f"{path or '(value)'}: {a!r} != {b!r}" for path, a, b in found[:MAX_LINES]]
    if len(found) > MAX_LINES:
        lines.append(f"… and {len(found) - MAX_LINES} more")
    return [head, *lines]


def _holds_model(value: object) -> bool:
    if isinstance(value, BaseModel):
        return type(value).__module__.startswith("tasks_core")
    if isinstance(value, (list, tuple)):
        return any(_holds_model(item) for item in value)
    return False


def _differences(left: Any, right: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(left, BaseModel) and type(left) is type(right):
        for name in type(left).model_fields:
            yield from _differences(getattr(left, name), getattr(right, name),
                                    f"{path}.{name}" if path else name)
    elif isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) | set(right), key=repr):
            yield from _differences(left.get(key, _MISSING), right.get(key, _MISSING),
                                    f"{path}[{key!r}]")
    elif (isinstance(left, (list, tuple)) and isinstance(right, (list, tuple))
          and len(left) == len(right) and type(left) is type(right)):
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            yield from _differences(a, b, f"{path}[{index}]")
    elif left != right:
        yield path, left, right


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
