"""Random task ids: the id of a task submitted without a key, and the time it carries.

A random id is ``"::"`` and 21 digits of an alphabet of 64 characters in code-point order
(``-``, ``0-9``, ``A-Z``, ``_``, ``a-z``): 10 digits of a stamp that grows with every id
this process makes (the milliseconds since the epoch times 65,536, plus a count within
the millisecond), then 11 random digits (66 bits). Ids compare by code point on every
store, so one process's ids sort in the order made; the 23 characters keep a key of the
SQL indexes within one aligned 32-byte entry. No key-built id begins with ``"::"``, and
no random id holds ``":"`` after it (a periodic tick's id does: ``"::periodic:"``, above
every random id made before the year 2400).
"""

from __future__ import annotations

import base64
import secrets
import threading
import time

from tasks_core.authority import SEPARATOR

__all__ = ["random_id_floor", "random_id_instant", "random_task_id"]

_PREFIX = SEPARATOR  # "::": no key-built id begins with it
_DIGITS = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"
_STAMP_DIGITS = 10  # 60 bits: milliseconds << 16 until the year 2527
_RANDOM_BITS = 66  # 11 digits
_ID_DIGITS = 21
_FROM_BASE64 = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", _DIGITS.encode()
)
_VALUE = {digit: value for value, digit in enumerate(_DIGITS)}

_stamps = threading.Lock()
_last_stamp = 0


def _spelled(stamp: int, random_bits: int) -> str:
    """``"::"`` and the 21 digits of ``stamp`` (60 bits) then ``random_bits`` (66 bits):
    the 126 bits, shifted to 128, spelled in base 64 and cut to 21 digits."""
    value = ((stamp << _RANDOM_BITS) | random_bits) << 2
    text = base64.b64encode(value.to_bytes(16, "big"))[:_ID_DIGITS]
    return _PREFIX + text.translate(_FROM_BASE64).decode()


def random_task_id() -> str:
    """A fresh random task id (see the module docstring): the growing stamp makes ids one
    process submits one after another sort in submission order, so tasks created within
    the same store millisecond still run oldest first (claims order by ``(available
    instant, id)``)."""
    global _last_stamp
    with _stamps:
        _last_stamp = max(_last_stamp + 1, (time.time_ns() // 1_000_000) << 16)
        stamp = _last_stamp
    return _spelled(stamp, secrets.randbits(_RANDOM_BITS))


def random_id_floor(instant_ms: int) -> str:
    """The smallest random id made at ``instant_ms`` (milliseconds since the epoch;
    below 0 counts as 0): every random id made then or later sorts at or after it."""
    return _spelled(max(0, instant_ms) << 16, 0)


def random_id_instant(task_id: str) -> int | None:
    """The instant (milliseconds since the epoch) a random id was made at by its
    process's clock; ``None`` for an id that is not of the random form."""
    digits = task_id[len(_PREFIX):]
    if (not task_id.startswith(_PREFIX) or len(digits) != _ID_DIGITS
            or not all(digit in _VALUE for digit in digits)):
        return None
    stamp = 0
    for digit in digits[:_STAMP_DIGITS]:
        stamp = stamp * 64 + _VALUE[digit]
    return stamp >> 16
