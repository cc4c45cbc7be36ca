"""How to install one of this repository's distributions, worded once for every message
that names one (a store plugin missing, a driver's extra, the telemetry extras).

A leaf: it imports nothing of ``tasks_core``, so any module may use it.
"""

from __future__ import annotations

__all__ = ["install_hint"]


def install_hint(distribution: str, extra: str | None = None) -> str:
    """How to install one of this repository's ``tasks-…`` distributions (with its
    ``extra``): from PyPI, and from a clone while they are not published there."""
    folder = distribution.removeprefix("tasks-")
    if extra is None:
        return (f"pip install {distribution} (not on PyPI yet: from a clone of the "
                f"repository, pip install ./packages/{folder})")
    return (f"pip install '{distribution}[{extra}]' (not on PyPI yet: from a clone of the "
            f"repository, pip install './packages/{folder}[{extra}]')")
