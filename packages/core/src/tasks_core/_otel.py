"""The OpenTelemetry side of :mod:`tasks_core.telemetry`; imported only by ``enable``.

Spans: ``submit`` (PRODUCER), whose W3C trace context is stored with the task
(``Work.trace_context``), and ``run`` (CONSUMER), one per run of a handler, a child of
that context (one trace per task: its submit and every attempt). Counters by ``queue`` and
``task`` (a registered name, else ``(unregistered)``: :mod:`tasks_core._labels`):
submitted (new runs: ``created`` or ``replaced``), started, completed, failed (also by
``error``, the error type), cancelled, retried. Histograms, in seconds: run
duration (the handler's own time) and queue lag (from the available instant to the claim
that starts a task's first run, both by the store's clock). Telemetry never breaks task
processing: every method that calls into OpenTelemetry is :func:`guarded` (its failure a
WARNING of ``tasks_core.telemetry`` once per kind, then swallowed).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tasks_core._inert import inert
from tasks_core._labels import task_label
from tasks_core._model import replaced
from tasks_core._trace_context import fitted_trace_context
from tasks_core.events import Event, Transition, ended_as
from tasks_core.models import NewTask, Snapshot, TaskStatus
from tasks_core.rules import available_at

__all__ = ["GUARDED", "SCOPE", "SECONDS_BUCKETS", "RunSpan", "SubmitSpan", "Telemetry",
           "guarded"]

log = logging.getLogger("tasks_core.telemetry")
P = ParamSpec("P")

SCOPE = "tasks_core"
"""The instrumentation scope of every span and instrument."""

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   60.0, 300.0, 900.0, 3600.0)
"""The histograms' bucket boundaries (an advisory: a view of the SDK may replace them)."""

_PROPAGATOR = TraceContextTextMapPropagator()

RUNTIME_ERRORS = ("DeliveryLimitExceeded", "WorkerLost", "TaskTimeout")
"""The error types the runtime itself fails tasks with, which docs/operations.md's alerts
read: a worker starts their ``failed`` series at 0 (:meth:`Telemetry.serving`)."""


GUARDED: set[str] = set()
"""The qualified names of the :func:`guarded` methods (a test holds every method that
calls into OpenTelemetry to be one)."""

_said: set[tuple[str, str]] = set()
"""The kinds of failure said since telemetry was last enabled (a new one says them
again)."""
_said_lock = threading.Lock()


def guarded(method: Callable[P, None]) -> Callable[P, None]:
    """The one guard of every call into OpenTelemetry from the runtime: telemetry never
    breaks task processing. An exception ``method`` raises (a span processor's, an
    exporter's, a meter's bug) is swallowed; the first of each kind — this method, this
    error type — since telemetry was last enabled is a WARNING of ``tasks_core.telemetry``
    with its traceback, the rest DEBUG (a broken processor fails at every task)."""
    where = method.__qualname__
    GUARDED.add(where)

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception as exc:
            kind = (where, type(exc).__qualname__)
            with _said_lock:
                first = kind not in _said
                _said.add(kind)
            log.log(logging.WARNING if first else logging.DEBUG,
                    "telemetry failed in %s (%s) and was skipped; tasks are processed "
                    "as usual%s", where, inert(type(exc).__qualname__),
                    " (said once per kind: fix the span processor, exporter or meter "
                    "provider)" if first else "", exc_info=first)

    return call


def _labels(snapshot: Snapshot | NewTask) -> dict[str, str]:
    return {"queue": snapshot.queue, "task": task_label(snapshot.work.name)}


class SubmitSpan:
    """The ``submit`` span of one task being submitted."""

    def __init__(self, telemetry: Telemetry, new: NewTask) -> None:
        self.telemetry = telemetry
        self.labels = _labels(new)
        self.span: Span = trace.INVALID_SPAN
        self.new = new
        """``new`` carrying the span's trace context (unchanged when the span records
        nothing: a no-op tracer provider, or one that failed to start it)."""
        self._start(new)

    @guarded
    def _start(self, new: NewTask) -> None:
        self.span = self.telemetry.tracer.start_span(
            "submit", kind=SpanKind.PRODUCER,
            attributes={"tasks.queue": new.queue, "tasks.task": new.work.name,
                        "tasks.id": new.id, "messaging.system": "tasks",
                        "messaging.destination.name": new.queue})
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self.span))
        self.new = replaced(new, work=replaced(new.work,
                                               trace_context=fitted_trace_context(carrier)))

    @guarded
    def end(self, outcome: str | None, error: BaseException | None = None) -> None:
        """End the span with the submit's outcome (``created``, ``joined``, ``replaced``)
        or its refusal; a new run counts."""
        try:
            if outcome is not None:
                self.span.set_attribute("tasks.outcome", outcome)
                if outcome != "joined":
                    self.telemetry.submitted.add(1, self.labels)
            if error is not None:
                self.span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        finally:
            self.span.end()


class RunSpan:
    """The ``run`` span of one run of a handler, current while the handler runs."""

    def __init__(self, telemetry: Telemetry, snapshot: Snapshot) -> None:
        self.telemetry = telemetry
        """The telemetry that counted the run's start: it counts its outcome too."""
        self.labels = _labels(snapshot)
        self.span: Span = trace.INVALID_SPAN
        self._start(snapshot)

    @guarded
    def _start(self, snapshot: Snapshot) -> None:
        telemetry = self.telemetry
        parent = (_PROPAGATOR.extract(snapshot.work.trace_context)
                  if snapshot.work.trace_context else None)
        self.span = telemetry.tracer.start_span(
            "run", context=parent, kind=SpanKind.CONSUMER,
            attributes={"tasks.queue": snapshot.queue, "tasks.task": snapshot.work.name,
                        "tasks.id": snapshot.id, "tasks.attempt": snapshot.retry_count + 1,
                        "tasks.delivery": snapshot.deliveries, "messaging.system": "tasks",
                        "messaging.destination.name": snapshot.queue})
        telemetry.started.add(1, self.labels)
        if snapshot.retry_count == 0 and snapshot.deliveries == 1 \
                and snapshot.started_at is not None:
            # The first claim of a task: started_at is its instant (the store's clock).
            lag = (snapshot.started_at - available_at(snapshot)).total_seconds()
            telemetry.queue_lag.record(max(lag, 0.0), self.labels)

    @guarded
    def activate(self) -> None:
        """Make the span current in the calling context (the run's own task, or the
        fresh context of a sync handler's thread): the handler's spans are its children."""
        otel_context.attach(trace.set_span_in_context(self.span))

    @guarded
    def activate_in(self, fresh: contextvars.Context) -> None:
        """:meth:`activate` inside ``fresh`` (a sync handler's context, before its thread)."""
        fresh.run(self.activate)

    @guarded
    def written(self, event: Event, transition: Transition) -> None:
        """The run wrote ``event``, applied: counted by the telemetry that counted its
        start (:meth:`Telemetry.written`), and what it made of the task on the span
        (:func:`~tasks_core.events.ended_as`)."""
        self.telemetry.written(event, transition)
        self.span.set_attribute("tasks.outcome", ended_as(event, transition.snapshot))
        if transition.snapshot.status == TaskStatus.FAILED:
            self.span.set_status(Status(StatusCode.ERROR, transition.snapshot.error.type
                                        if transition.snapshot.error else "failed"))

    @guarded
    def end(self, duration: float) -> None:
        """The run's slot is over: record the handler's time, end the span."""
        try:
            self.telemetry.run_duration.record(duration, self.labels)
        finally:
            self.span.end()


class Telemetry:
    """The tracer and instruments (see the module docstring)."""

    def __init__(self, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.tracer_provider = tracer_provider
        """The tracer provider it was given (``None``: the global one)."""
        with _said_lock:
            _said.clear()
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = (meter_provider.get_meter(SCOPE) if meter_provider is not None
                 else metrics.get_meter(SCOPE))
        counter = meter.create_counter
        self.submitted = counter("tasks.submitted", "{task}", "Tasks submitted (new runs)")
        self.started = counter("tasks.started", "{task}", "Runs whose handler started")
        self.completed = counter("tasks.completed", "{task}", "Tasks completed")
        self.failed = counter("tasks.failed", "{task}", "Tasks failed, by error type")
        self.cancelled = counter("tasks.cancelled", "{task}", "Tasks cancelled")
        self.retried = counter("tasks.retried", "{task}", "Retries scheduled")
        self.run_duration = meter.create_histogram(
            "tasks.run.duration", "s", "The handler's own time per run (input waits left "
            "out)", explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)
        self.queue_lag = meter.create_histogram(
            "tasks.queue.lag", "s", "From a task's available instant to the claim that "
            "starts its first run", explicit_bucket_boundaries_advisory=SECONDS_BUCKETS)

    def submit(self, new: NewTask) -> SubmitSpan:
        """Start the ``submit`` span of ``new`` (``.new`` carries its trace context)."""
        return SubmitSpan(self, new)

    def run(self, snapshot: Snapshot) -> RunSpan:
        """Start the ``run`` span of the claimed ``snapshot``; count the start."""
        return RunSpan(self, snapshot)

    @guarded
    def written(self, event: Event, transition: Transition) -> None:
        """Count what an applied worker event did: completed, failed or retried."""
        snapshot = transition.snapshot
        labels = _labels(snapshot)
        if snapshot.status == TaskStatus.COMPLETED:
            self.completed.add(1, labels)
        elif snapshot.status == TaskStatus.FAILED:
            error = snapshot.error.type if snapshot.error is not None else "unknown"
            self.failed.add(1, {**labels, "error": error})
        elif event.kind == "retry_requested":
            self.retried.add(1, labels)

    @guarded
    def serving(self, tasks: Iterable[tuple[str, str]]) -> None:
        """Start at 0 the series a worker's alerts read, for each ``(queue, task name)`` it
        serves: ``started``, ``completed``, ``retried``, and ``failed`` by each of
        :data:`RUNTIME_ERRORS` (a series first seen at 1 is missed by Prometheus's
        ``increase`` and ``rate``: the first dead letter after a restart would be)."""
        for queue, name in tasks:
            labels = {"queue": queue, "task": task_label(name)}
            for counter in (self.started, self.completed, self.retried):
                counter.add(0, labels)
            for error in RUNTIME_ERRORS:
                self.failed.add(0, {**labels, "error": error})

    @guarded
    def cancelled_task(self, snapshot: Snapshot) -> None:
        """Count a cancel that this process recorded."""
        self.cancelled.add(1, _labels(snapshot))

    @guarded
    def delivery_limit(self, snapshot: Snapshot) -> None:
        """Count a task a claim failed past its delivery limit (a dead letter)."""
        error = snapshot.error.type if snapshot.error is not None else "DeliveryLimitExceeded"
        self.failed.add(1, {**_labels(snapshot), "error": error})
