"""JSON-safety: every payload the model carries is plain JSON.

Allowed: dicts with string keys, lists, str, int (at most ``MAX_INT_BITS`` bits, so every
JSON encoder can write it), float (finite), bool, None — nested at most ``MAX_DEPTH``
levels. Tuples are refused rather than silently turned into lists so a value reads back
exactly as it was written.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeAlias

from tasks_core._errors_base import InvalidInput

JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None

MAX_DEPTH = 64
MAX_INT_BITS = 8192
"""Integers beyond this many bits are refused: Python refuses to turn integers of more than
4300 digits into text (``sys.get_int_max_str_digits``), so no store could write them."""


def check_json(value: Any, *, what: str = "value") -> Any:
    """Return ``value`` unchanged if it is JSON-safe.

    Raises:
        ValueError: naming the first offending path (never quoting the data).
    """
    _check(value, what, 0)
    return value


def parse_json(text: str, what: str) -> Any:
    """``text`` that a person typed or wrote to a file, parsed as JSON.

    Rules: an object that gives one key twice is refused, not read as its last value (what
    the ``json`` module would do): the person meant one of the two. ``NaN`` and
    ``Infinity``, which the ``json`` module reads, are not JSON: text holding them is not
    JSON at all (so an answer ``NaN`` is the string it reads as).

    Raises:
        json.JSONDecodeError: not JSON at all (its ``msg`` says where).
        InvalidInput: JSON that Python cannot read (nested too deeply, a number too long),
            or an object giving a key twice, named as ``what``.
    """
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in pairs:
            if key in document:
                raise InvalidInput(f"{what} gives the key {key!r} twice")
            document[key] = value
        return document

    def not_json(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not JSON", text, text.find(name))

    try:
        return json.loads(text, object_pairs_hook=unique, parse_constant=not_json)
    except (json.JSONDecodeError, InvalidInput):
        raise
    except (ValueError, RecursionError):
        raise InvalidInput(f"{what} cannot be read: nested too deeply or a number too "
                           "long") from None


class _Unsendable(Exception):
    """A JSON number that no payload can carry."""


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # more digits than Python reads (sys.get_int_max_str_digits)
        raise _Unsendable from None
    if value.bit_length() > MAX_INT_BITS:  # more than a payload carries
        raise _Unsendable
    return value


def _real(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # it overflowed: 1e999
        raise _Unsendable
    return value


def parse_answer(text: str, what: str = "an answer") -> Any:
    """An answer to an input request as a person typed it (``tasks respond KEY=VALUE``,
    the dashboard's answer box): its JSON value when it parses as JSON, else the string as
    typed — the one reading of both. Rule: text that is not JSON (``NaN``, ``Infinity``
    among it) or whose JSON holds a number no payload can carry — one that overflows to
    infinity (``1e999``), an integer of more digits than Python reads or more than
    ``MAX_INT_BITS`` bits, anywhere in it — is not a JSON value to send, so it is the
    string. The text is parsed once; an object giving a key twice is refused (as
    :func:`parse_json` does) unless such a number made the whole answer a string.

    Raises:
        InvalidInput: JSON nested too deeply to read, or an object giving a key twice,
            named as ``what``.
    """
    twice: list[str] = []

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        document: dict[str, Any] = {}
        for key, value in pairs:
            if key in document:
                twice.append(key)
            document[key] = value
        return document

    def not_json(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not JSON", text, text.find(name))

    try:
        value = json.loads(text, object_pairs_hook=unique, parse_constant=not_json,
                           parse_int=_whole, parse_float=_real)
    except (_Unsendable, json.JSONDecodeError):
        return text
    except (ValueError, RecursionError):
        raise InvalidInput(f"{what} cannot be read: nested too deeply") from None
    if twice:
        raise InvalidInput(f"{what} gives the key {twice[0]!r} twice")
    return value


def check_text(value: str, *, what: str = "text") -> str:
    """Return ``value`` if it encodes as UTF-8 (no lone surrogates), the encoding every
    store persists text in.

    Raises:
        ValueError: naming ``what``.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what}: text must be valid Unicode (no lone surrogates)") from None
    return value


def _check(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_text(value, what=path)
        return
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise ValueError(f"{path}: integers must fit in {MAX_INT_BITS} bits")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: NaN and infinities are not JSON")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: dict keys must be strings")
            check_text(key, what=f"{path} key")
            _check(item, f"{path}[{key[:32]!r}]", depth + 1)
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1)
        return
    raise ValueError(f"{path}: {type(value).__name__} is not JSON")


def check_payload(value: Any, what: str, max_bytes: int) -> Any:
    """Return ``value`` if it is a payload a caller may hand the runtime — a submit's
    input, ``respond``'s answers, a handler's input request: plain JSON
    (:func:`check_json`), at most ``max_bytes`` of it (:func:`json_size`, counted only once
    the value is known to be JSON). The one check of all three.

    Raises:
        InvalidInput: not JSON (naming the first offending path under ``what``), or larger
            than ``max_bytes``.
    """
    try:
        check_json(value, what=what)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    if json_size(value) > max_bytes:
        raise InvalidInput(f"{what} must be at most {max_bytes} bytes of JSON")
    return value


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def json_size(value: Any) -> int:
    """Bytes of the compact UTF-8 JSON encoding of ``value``."""
    if value is None:  # ("null": what most handlers return, at no encoder's cost)
        return 4
    return len(_COMPACT.encode(value).encode())
