"""A worker's Prometheus endpoint: an OpenTelemetry SDK meter provider whose reader is
scraped at ``/metrics`` (prometheus-client's HTTP server, in a thread). Imported only by
:func:`tasks_core.telemetry.serve_prometheus` (``tasks-core[prometheus]``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

__all__ = ["PrometheusEndpoint"]


class PrometheusEndpoint:
    """Serves the metrics of its own meter provider at ``http://host:port/metrics``.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(self, port: int, host: str = "127.0.0.1", *,
                 on_close: Callable[[], None] | None = None) -> None:
        self.on_close = on_close
        registry: Any = CollectorRegistry(auto_describe=True)
        try:
            self.reader = PrometheusMetricReader(registry=registry)
        except TypeError:  # an exporter older than its registry= argument: the global one
            registry = REGISTRY
            self.reader = PrometheusMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except BaseException:
            self.meter_provider.shutdown()
            raise
        self.host = host
        self.port: int = self._server.server_port
        """The port it listens on (the one picked when asked for 0)."""

    @property
    def url(self) -> str:
        """Where to scrape."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving, shut the meter provider down, then call ``on_close``."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):  # a provider already shut down
            self.meter_provider.shutdown()
        if self.on_close is not None:
            self.on_close()
