"""The W3C trace context a task keeps (``Work.trace_context``): which keys, how long, and
how a propagator's output is cut to fit (the rule lives here once; ``models`` validates
stored records with it, telemetry fits what it stores to it)."""

from __future__ import annotations

__all__ = ["MAX_TRACE_CHARS", "TRACE_KEYS", "check_trace_context", "fitted_trace_context"]

TRACE_KEYS = frozenset({"traceparent", "tracestate"})
MAX_TRACE_CHARS = 512
"""A stored trace context's ``traceparent`` and ``tracestate``: at most this long each."""


def _keeps(key: str, value: str) -> bool:
    return key in TRACE_KEYS and len(value) <= MAX_TRACE_CHARS and value.isprintable()


def check_trace_context(value: dict[str, str] | None) -> dict[str, str] | None:
    """``value`` unchanged when a task may keep it.

    Raises:
        ValueError: a key but ``traceparent``/``tracestate``, or a value too long or not
            printable.
    """
    if value is not None and not all(_keeps(k, v) for k, v in value.items()):
        raise ValueError("trace_context holds traceparent and tracestate, printable, "
                         f"at most {MAX_TRACE_CHARS} characters each")
    return value


def fitted_trace_context(carrier: dict[str, str]) -> dict[str, str] | None:
    """``carrier`` (a W3C propagator's output) as a task keeps it: its ``tracestate`` cut
    to :data:`MAX_TRACE_CHARS` by whole entries as W3C asks (entries over 128 characters
    first, then from the end); anything else that does not fit left out (``None``: none).
    """
    state = [entry for entry in carrier.get("tracestate", "").split(",") if entry]
    while len(",".join(state)) > MAX_TRACE_CHARS:
        state.remove(next((e for e in state if len(e) > 128), state[-1]))
    fitted = {**carrier, "tracestate": ",".join(state)}
    return {k: v for k, v in fitted.items() if v and _keeps(k, v)} or None
