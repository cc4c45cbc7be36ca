"""Telemetry that fails (a span processor or a meter with a bug) never breaks task
processing: every call into OpenTelemetry is guarded in one place, its failure logged
once per kind and swallowed; and a run counted by telemetry is counted whole."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker
from tasks_core import App, System, TaskContext, TaskStatus, telemetry
from tasks_store_memory import MemoryStore

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import ExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

pytestmark = pytest.mark.anyio


class BrokenProcessor(SpanProcessor):
    """A span processor with a bug: raises when span ``name`` starts or ends."""

    def __init__(self, name: str, when: str) -> None:
        self.name, self.when = name, when

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        if self.when == "start" and span.name == self.name:
            raise RuntimeError("span processor bug")

    def on_end(self, span: ReadableSpan) -> None:
        if self.when == "end" and span.name == self.name:
            raise RuntimeError("span processor bug")


class BrokenFilter(ExemplarFilter):
    """An exemplar filter with a bug: every measurement (``add``, ``record``) raises."""

    def should_sample(self, *args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("meter bug")


def broken(part: str) -> tuple[TracerProvider, MeterProvider]:
    """Real SDK providers, one of them broken: ``run-start`` or ``submit-end`` (the span
    processor) or ``meter`` (every counter and histogram)."""
    tracer_provider = TracerProvider()
    if part != "meter":
        name, when = part.split("-")
        tracer_provider.add_span_processor(BrokenProcessor(name, when))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()],
                                   exemplar_filter=BrokenFilter() if part == "meter" else None)
    return tracer_provider, meter_provider


@pytest.fixture
def off_afterwards() -> Iterator[None]:
    try:
        yield
    finally:
        telemetry.disable()


def telemetry_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "tasks_core.telemetry" and r.levelno == logging.WARNING]


@pytest.mark.usefixtures("off_afterwards")
@pytest.mark.parametrize("part", ["run-start", "run-end", "meter"])
@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_broken_run_span_or_meter_leaves_every_task_run_and_done(
    part: str, where: str, tmp_path: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``run`` span that cannot start or end, or a counter that raises, MUST NOT stop a
    handler from running nor keep a lease renewed: every task completes, and the failure
    is one WARNING of ``tasks_core.telemetry`` per kind (not one per task)."""
    caplog.set_level(logging.WARNING, logger="tasks_core")
    app = App(store=MemoryStore()) if where == "memory" else App(
        f"sqlite:///{tmp_path / 'tasks.db'}")
    calls = 0

    @app.task
    async def job(ctx: TaskContext) -> str:
        nonlocal calls
        calls += 1
        return "ok"

    tracer_provider, meter_provider = broken(part)
    telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    async with app:
        ids = [(await app.submit(job, None, ALICE)).id for _ in range(3)]
        async with fast_worker(app, lease_for=1.5):
            ended = [await app.wait(task_id, ALICE, timeout=TIMEOUT) for task_id in ids]
    assert [TaskStatus.COMPLETED] * 3 == [snapshot.status for snapshot in ended]
    assert 3 == calls
    warned = telemetry_warnings(caplog)
    assert warned
    assert len(warned) == len(set(warned)), warned  # once per kind
    assert all("telemetry" in line for line in warned)


@pytest.mark.usefixtures("off_afterwards")
@pytest.mark.parametrize("part", ["submit-end", "submit-start", "meter"])
async def test_a_broken_submit_span_or_counter_still_answers_the_submit(
    part: str, tmp_path: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``submit`` span or ``tasks.submitted`` counter that raises MUST NOT make a stored
    submit raise (a caller retrying would create the task twice): ``submit`` and
    ``submit_many`` return what they stored, and telemetry's failure is logged."""
    caplog.set_level(logging.WARNING, logger="tasks_core")
    app = App(f"sqlite:///{tmp_path / 'tasks.db'}")

    @app.task
    async def charge(ctx: TaskContext, amount: int) -> int:
        return amount

    tracer_provider, meter_provider = broken(part)
    telemetry.enable(tracer_provider=tracer_provider, meter_provider=meter_provider)
    async with app:
        one = await app.submit(charge, {"amount": 100}, ALICE)
        many = await app.submit_many([{"task": charge, "input": {"amount": n}}
                                      for n in range(3)], ALICE)
        stored = (await app.list(System())).items
    assert "created" == one.outcome
    assert ["created"] * 3 == [done.outcome for done in many]
    assert sorted([one.id, *(done.id for done in many)]) == sorted(s.id for s in stored)
    assert telemetry_warnings(caplog)


async def test_a_run_under_way_when_telemetry_is_enabled_is_not_counted_half(
    off_afterwards: None,
) -> None:
    """A run is counted by the telemetry that counted its start: one under way when
    telemetry is enabled MUST count neither ``started`` nor its outcome; the next counts
    both. A worker already serving MUST start its alert series at 0 on the new telemetry
    (``failed`` by the runtime's error types)."""
    app = App(store=MemoryStore())
    running, release = asyncio.Event(), asyncio.Event()

    @app.task
    async def job(ctx: TaskContext, wait: bool) -> int:
        if wait:
            running.set()
            await release.wait()
        return 1

    reader = InMemoryMetricReader()
    async with app, fast_worker(app):
        first = await app.submit(job, {"wait": True}, ALICE)
        await asyncio.wait_for(running.wait(), TIMEOUT)
        telemetry.enable(tracer_provider=TracerProvider(),
                         meter_provider=MeterProvider(metric_readers=[reader]))
        release.set()
        await app.wait(first.id, ALICE, timeout=TIMEOUT)
        counted = _counts(reader)
        assert counted.get(("tasks.started", "")) == counted.get(("tasks.completed", "")) == 0
        assert 0 == counted.get(("tasks.failed", "WorkerLost"))
        second = await app.submit(job, {"wait": False}, ALICE)
        await app.wait(second.id, ALICE, timeout=TIMEOUT)
    counted = _counts(reader)
    assert counted.get(("tasks.started", "")) == counted.get(("tasks.completed", "")) == 1


def _counts(reader: InMemoryMetricReader) -> dict[tuple[str, str], float]:
    """Counter values of task ``job`` by (metric, error label)."""
    data = reader.get_metrics_data()
    found: dict[tuple[str, str], float] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    labels = dict(point.attributes or {})
                    if labels.get("task") == "job" and hasattr(point, "value"):
                        key = (metric.name, str(labels.get("error", "")))
                        found[key] = found.get(key, 0) + point.value
    return found


def test_every_method_that_calls_into_opentelemetry_is_guarded() -> None:
    """One guard for every call into OpenTelemetry: each method of the spans and of the
    telemetry MUST be ``guarded`` — but the factories, which only build a span whose own
    start is."""
    from tasks_core._otel import GUARDED, RunSpan, SubmitSpan, Telemetry

    unguarded = {f"{cls.__qualname__}.{name}" for cls in (Telemetry, SubmitSpan, RunSpan)
                 for name, value in vars(cls).items()
                 if callable(value) and not name.startswith("__")} - GUARDED
    assert {"Telemetry.submit", "Telemetry.run"} == unguarded
