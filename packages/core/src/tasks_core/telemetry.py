"""Telemetry: OpenTelemetry spans and metrics of submits and runs — off unless enabled.

The runtime reads :data:`active` at each hook site: ``None`` until :func:`enable`, so
without the extra (``tasks-core[otel]``), or with it and not enabled, nothing from
opentelemetry is imported and a hook site costs one module attribute read. :func:`enable`
builds the spans and instruments (:mod:`tasks_core._otel`) on the given providers, else
the global ones; :func:`serve_prometheus` starts a worker's Prometheus endpoint
(``tasks-core[prometheus]``). Rules: a run is counted whole or not at all, by the
telemetry active when its handler started; the series a serving worker's alerts read
start at 0 on any telemetry, enabled before or after the worker (:func:`serving`).
docs/operations.md names every span, metric and label.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tasks_core._hints import install_hint
from tasks_core._labels import UNREGISTERED, task_label
from tasks_core.errors import CapabilityNotSupported, InvalidInput
from tasks_core.sizes import MAX_PORT, check_limit

if TYPE_CHECKING:
    from tasks_core._otel import Telemetry
    from tasks_core._prometheus import PrometheusEndpoint

__all__ = ["UNREGISTERED", "active", "disable", "enable", "serve_prometheus", "serving",
           "task_label"]

active: Telemetry | None = None
"""The enabled telemetry, or ``None`` (off: every hook site skips)."""

_serving: PrometheusEndpoint | None = None
"""This process's Prometheus endpoint while it serves (one at most)."""

_served: Counter[tuple[str, str]] = Counter()
"""The ``(queue, task name)`` pairs the running workers of this process serve (a count
per pair: two workers may serve one)."""

OTEL_HINT = install_hint("tasks-core", "otel")
PROMETHEUS_HINT = install_hint("tasks-core", "prometheus")


def enable(*, tracer_provider: Any = None, meter_provider: Any = None) -> Telemetry:
    """Turn telemetry on in this process: spans ``submit`` and ``run``, and the task
    metrics, on ``tracer_provider`` and ``meter_provider`` (default: OpenTelemetry's
    global providers, which are no-ops until the application configures an SDK).
    Calling it again replaces the instruments. The workers of this process already
    serving start their alert series at 0 on it (:func:`serving`); a run under way is not
    counted by it (neither its start nor its outcome).

    Returns:
        The telemetry now active.

    Raises:
        CapabilityNotSupported: opentelemetry-api is not installed (the message says how
            to install it).
    """
    global active
    try:
        from tasks_core._otel import Telemetry
    except ImportError:
        raise CapabilityNotSupported(f"telemetry needs OpenTelemetry: {OTEL_HINT}") from None
    active = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    active.serving(list(_served))
    return active


def serving(tasks: Iterable[tuple[str, str]]) -> Callable[[], None]:
    """A worker serves ``tasks`` (``(queue, task name)`` pairs) until it calls the function
    returned: the telemetry active now, and any enabled meanwhile, start those pairs'
    alert series at 0 (:meth:`~tasks_core._otel.Telemetry.serving`)."""
    pairs = list(tasks)
    _served.update(pairs)
    if active is not None:
        active.serving(pairs)

    def stopped() -> None:
        _served.subtract(pairs)
        for pair in pairs:
            if _served[pair] <= 0:
                del _served[pair]

    return stopped


def disable() -> None:
    """Turn telemetry off: hook sites skip again (the instruments stay imported)."""
    global active
    active = None


def serve_prometheus(port: int, host: str = "127.0.0.1") -> PrometheusEndpoint:
    """Serve the task metrics for Prometheus at ``http://HOST:PORT/metrics`` from a thread,
    and enable telemetry with a meter provider that feeds it — keeping the tracer provider
    of the telemetry enabled before, if any (else the global one). ``port=0`` picks a free
    port (``endpoint.port`` says which). One endpoint per process: telemetry is the
    process's.

    Returns:
        The endpoint (``close()`` stops serving and puts back the telemetry enabled before
        it — off if none — unless another has been enabled since).

    Raises:
        InvalidInput: ``port`` not an integer in 0..65535, ``host`` not a string, or an
            endpoint of this process still serving (nothing bound).
        CapabilityNotSupported: the Prometheus extra is not installed.
        OSError: the address cannot be bound (in use, or not an address of this host).
    """
    global _serving
    port = check_limit(port, minimum=0, maximum=MAX_PORT, what="port")
    if not isinstance(host, str):
        raise InvalidInput("host must be a string: an address or name of this host")
    if _serving is not None:
        raise InvalidInput(f"this process already serves its metrics at {_serving.url}: "
                           "close that endpoint first")
    try:
        from tasks_core._prometheus import PrometheusEndpoint
    except ImportError:
        raise CapabilityNotSupported(
            f"the metrics endpoint needs OpenTelemetry's SDK and Prometheus exporter: "
            f"{PROMETHEUS_HINT}") from None
    before = active

    def closed() -> None:
        global active, _serving
        _serving = None
        if active is enabled:
            active = before

    endpoint = PrometheusEndpoint(port, host, on_close=closed)
    enabled = enable(tracer_provider=None if before is None else before.tracer_provider,
                     meter_provider=endpoint.meter_provider)
    _serving = endpoint
    return endpoint
