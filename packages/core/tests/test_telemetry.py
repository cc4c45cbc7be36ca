"""Telemetry (tasks_core.telemetry): spans, metrics, the Prometheus endpoint, and nothing
at all — not even an import — while it is off."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from _runtime_kit import ALICE, TIMEOUT, fast_worker, make_app
from tasks_core import (
    InvalidInput,
    NewTask,
    RetryPolicy,
    System,
    TaskContext,
    Work,
    reports,
    rules,
    telemetry,
)
from tasks_core.runtime._scheduler import Scheduler
from tasks_store_memory import MemoryStore

otel_sdk = pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

pytestmark = pytest.mark.anyio


class Recorded:
    """The spans and metrics recorded while telemetry was on."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name``."""
        data = self.reader.get_metrics_data()
        return [point for resource in (data.resource_metrics if data else ())
                for scope in resource.scope_metrics for metric in scope.metrics
                if metric.name == name for point in metric.data.data_points]

    def count(self, name: str, **labels: str) -> float:
        """The sum of counter ``name`` over the points with ``labels``."""
        return sum(p.value for p in self.points(name)
                   if labels.items() <= dict(p.attributes).items())


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    """Telemetry on, into in-memory exporters; off again afterwards."""
    found = Recorded()
    telemetry.enable(tracer_provider=found.tracer_provider, meter_provider=found.meter_provider)
    try:
        yield found
    finally:
        telemetry.disable()


async def _run_until_done(app: Any, ids: list[str]) -> None:
    async with fast_worker(app):
        for task_id in ids:
            await app.wait(task_id, ALICE, timeout=TIMEOUT)


async def test_submit_and_run_spans_share_one_trace_through_the_stored_context(
    recorded: Recorded,
) -> None:
    """The ``submit`` span MUST be a PRODUCER, the ``run`` span a CONSUMER child of the
    trace context stored with the task, and spans the handler makes children of ``run``
    (async and sync handlers alike)."""
    app = make_app()
    inner = trace.get_tracer("test", tracer_provider=recorded.tracer_provider)

    @app.task
    async def hello(ctx: TaskContext) -> str:
        with inner.start_as_current_span("inside-async"):
            return "hi"

    @app.task
    def hello_sync(ctx: TaskContext) -> str:
        with inner.start_as_current_span("inside-sync"):
            return "hi"

    async with app:
        first = await app.submit(hello, None, ALICE)
        second = await app.submit(hello_sync, None, ALICE)
        stored = (await app.get(first.id, ALICE)).work.trace_context
        await _run_until_done(app, [first.id, second.id])
    spans = {span.name + ":" + str(span.attributes.get("tasks.id", "")): span
             for span in recorded.spans.get_finished_spans()}
    assert stored is not None
    assert stored["traceparent"].startswith("00-")
    for task_id, inside in ((first.id, "inside-async"), (second.id, "inside-sync")):
        submit, run = spans[f"submit:{task_id}"], spans[f"run:{task_id}"]
        child = spans[f"{inside}:"]
        assert (SpanKind.PRODUCER, SpanKind.CONSUMER) == (submit.kind, run.kind)
        assert submit.context.trace_id == run.context.trace_id == child.context.trace_id
        assert run.parent is not None
        assert submit.context.span_id == run.parent.span_id
        assert child.parent is not None
        assert run.context.span_id == child.parent.span_id
        assert ("created", "completed") == (submit.attributes["tasks.outcome"],
                                            run.attributes["tasks.outcome"])


async def test_a_worker_starts_the_series_its_alerts_read_at_zero(recorded: Recorded) -> None:
    """A counter series first seen at 1 is missed by Prometheus's ``increase`` and
    ``rate``: a worker MUST start, for each task of the queues it serves, ``started``,
    ``completed``, ``retried`` and ``failed`` by the runtime's own error types at 0."""
    app = make_app(store=MemoryStore(), queues=["mail", "other"])

    @app.task(queue="mail")
    async def ok(ctx: TaskContext) -> int:
        return 1

    @app.task(queue="other")
    async def elsewhere(ctx: TaskContext) -> int:
        return 1

    async with app:
        done = await app.submit(ok, None, ALICE)
        async with fast_worker(app, queues=["mail"]):
            await app.wait(done.id, ALICE, timeout=TIMEOUT)
    mail = {"queue": "mail", "task": "ok"}
    failed = {(point.attributes["error"], point.value) for point in recorded.points("tasks.failed")
              if mail.items() <= dict(point.attributes).items()}
    assert {("DeliveryLimitExceeded", 0), ("WorkerLost", 0), ("TaskTimeout", 0)} == failed
    for name in ("tasks.retried", "tasks.completed", "tasks.started"):
        assert [point.attributes for point in recorded.points(name)
                if point.attributes["task"] == "ok"] == [mail], name
    assert not [point for point in recorded.points("tasks.started")
                if point.attributes["task"] == "elsewhere"]


async def test_a_periodic_tick_is_a_submit_and_its_run_a_child_of_it(recorded: Recorded) -> None:
    """A scheduler's tick is a submit like any other: it MUST count in ``tasks.submitted``
    and make a ``submit`` span whose child is the tick's ``run``."""
    app = make_app()

    @app.periodic(every=60)
    async def tick(ctx: TaskContext) -> int:
        return 1

    async with app:
        assert app._store is not None
        await Scheduler(app._store, app.tasks, app.schedules,
                        notify=app.notices.work.notify).run_once()
        [made] = await app.list(System())
        async with fast_worker(app, periodic=False):
            await app.wait(made.id, System(), timeout=TIMEOUT)
    assert 1 == recorded.count("tasks.submitted", queue="default", task="tick")
    spans = {span.name: span for span in recorded.spans.get_finished_spans()}
    run_parent = spans["run"].parent
    assert run_parent is not None
    assert spans["submit"].context.span_id == run_parent.span_id


async def test_counters_and_histograms_by_queue_and_task(recorded: Recorded) -> None:
    """Submitted, started, completed, failed (by error), retried and cancelled MUST count
    by queue and task name; run duration and queue lag MUST be recorded; each run span
    MUST say what the run made of its task (``retried``, then ``failed``)."""
    app = make_app(store=MemoryStore(), queues=["mail"])  # the system clock: retries come due

    @app.task(queue="mail")
    async def ok(ctx: TaskContext) -> int:
        return 1

    @app.task(retry=RetryPolicy.fixed(0.01, attempts=2))
    async def flaky(ctx: TaskContext) -> int:
        raise ValueError("no")

    async with app:
        done = await app.submit(ok, None, ALICE)
        bad = await app.submit(flaky, None, ALICE)
        later = await app.submit(ok, None, ALICE, delay=3600)
        await app.cancel(later.id, ALICE)
        await app.submit(ok, None, ALICE, key="k")
        await app.submit(ok, None, ALICE, key="k")  # joined: not a new run
        await _run_until_done(app, [done.id, bad.id])
    mail = {"queue": "mail", "task": "ok"}
    assert 3 == recorded.count("tasks.submitted", **mail)
    assert 1 == recorded.count("tasks.submitted", task="flaky", queue="default")
    assert 1 == recorded.count("tasks.cancelled", **mail)
    assert 1 <= recorded.count("tasks.completed", **mail)
    assert 1 == recorded.count("tasks.retried", task="flaky")
    assert 1 == recorded.count("tasks.failed", task="flaky", error="ValueError")
    assert 2 == recorded.count("tasks.started", task="flaky")
    durations = [p for p in recorded.points("tasks.run.duration")
                 if p.attributes["task"] == "flaky"]
    assert [2] == [p.count for p in durations]
    assert 1 <= sum(p.count for p in recorded.points("tasks.queue.lag"))
    runs = [span for span in recorded.spans.get_finished_spans()
            if span.name == "run" and span.attributes["tasks.id"] == bad.id]
    # What each run made of its task: the last retry request failed it.
    assert ["retried", "failed"] == [span.attributes["tasks.outcome"] for span in runs]
    assert StatusCode.ERROR == runs[-1].status.status_code


async def test_names_no_app_registered_count_under_one_label(recorded: Recorded) -> None:
    """The ``task`` label MUST be a name an App registered: names a submitter makes up (an
    unregistered name may be submitted) all count as ``(unregistered)``, so they add no
    series to any worker's metrics."""
    app = make_app(store=MemoryStore())
    made_up = [f"made-up-{secrets.token_hex(4)}" for _ in range(3)]
    async with app:
        ids = [(await app.submit(name, None, ALICE)).id for name in made_up]
        await _run_until_done(app, ids)  # each fails: UnknownTask
    labels = {point.attributes["task"] for name in ("tasks.submitted", "tasks.failed")
              for point in recorded.points(name)}
    assert {"(unregistered)"} == labels
    assert 3 == recorded.count("tasks.submitted", task="(unregistered)")
    assert 3 == recorded.count("tasks.failed", task="(unregistered)", error="UnknownTask")


def test_a_delivery_limit_failure_counts_as_failed(recorded: Recorded, now: Any) -> None:
    """A claim failing a task past its delivery limit MUST count as ``failed`` with
    error ``DeliveryLimitExceeded`` (the store reports it through ``reports``)."""
    app = make_app()

    @app.task(name="job")  # a registered name: the label it counts under
    async def job(ctx: TaskContext) -> None:
        return None

    new = NewTask(id="t", tenant="default", owner=ALICE,
                  work=Work(name="job", max_deliveries=1))
    delivered = rules.new_snapshot(new, now).model_copy(update={"deliveries": 1})
    failed, _, lease, record = rules.start_claim(delivered, "w", 30.0, now)
    assert lease is None
    assert record is not None
    reports.delivery_limit(failed.id, record, snapshot=failed)
    assert 1 == recorded.count("tasks.failed", task="job", error="DeliveryLimitExceeded")


async def test_a_task_stored_without_telemetry_has_no_trace_field() -> None:
    """Off, a task's stored JSON MUST be what it always was: no ``trace_context`` key."""
    app = make_app()
    async with app:
        submitted = await app.submit("job", None, ALICE)
        snapshot = await app.get(submitted.id, ALICE)
    assert snapshot.work.trace_context is None
    assert "trace_context" not in json.loads(snapshot.model_dump_json())["work"]


def test_nothing_from_opentelemetry_is_imported_while_off(tmp_path: Any) -> None:
    """Without ``enable`` a submit, a run and the CLI's modules MUST import nothing from
    opentelemetry (checked in a fresh interpreter)."""
    script = textwrap.dedent("""
        import asyncio, sys
        import tasks_core.cli.main
        from tasks_core import App, Owner
        from tasks_store_memory import MemoryStore

        async def main():
            app = App(store=MemoryStore())

            @app.task
            async def job(ctx):
                return 1

            async with app:
                done = await app.submit(job, None, Owner("a"))
                async with app.worker(poll_interval=0.02, reap_interval=None):
                    await app.wait(done.id, Owner("a"), timeout=10)

        asyncio.run(main())
        loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "prometheus")))
        print(",".join(loaded) or "none")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=60, cwd=tmp_path)
    assert "none" == out.stdout.strip()


async def _run_one_task() -> None:
    """Submit one task, ``ok``, of a fresh app and run it to its end."""
    app = make_app()

    @app.task
    async def ok(ctx: TaskContext) -> int:
        return 1

    async with app:
        done = await app.submit(ok, None, ALICE)
        await _run_until_done(app, [done.id])


async def test_the_prometheus_endpoint_serves_the_task_metrics() -> None:
    """``serve_prometheus`` MUST serve the counters and histograms at ``/metrics`` over
    HTTP, by queue and task, and ``close`` MUST turn telemetry off (none was on before)."""
    endpoint = telemetry.serve_prometheus(0)
    try:
        await _run_one_task()
        body = await asyncio.to_thread(_scrape, endpoint.url)
    finally:
        endpoint.close()
    assert telemetry.active is None
    for name in ("tasks_submitted_total", "tasks_started_total", "tasks_completed_total",
                 "tasks_run_duration_seconds_count", "tasks_queue_lag_seconds_count"):
        assert 1.0 == _sample(body, name, queue="default", task="ok"), name


def test_a_second_prometheus_endpoint_in_one_process_is_refused() -> None:
    """Telemetry is one per process: a second ``serve_prometheus`` while one serves MUST be
    refused with ``InvalidInput`` naming the first (it took the first's metrics away), the
    first left serving."""
    first = telemetry.serve_prometheus(0)
    try:
        serving = telemetry.active
        with pytest.raises(InvalidInput, match=re.escape(first.url)):
            telemetry.serve_prometheus(0)
        assert serving is telemetry.active
    finally:
        first.close()


async def test_the_prometheus_endpoint_keeps_the_tracer_enabled_before_and_gives_it_back(
    recorded: Recorded,
) -> None:
    """After ``enable(tracer_provider=…)``, ``serve_prometheus`` (``tasks worker
    --metrics-port``) MUST keep that tracer provider for its spans, and its ``close`` MUST
    put back the telemetry enabled before it, not turn telemetry off."""
    before = telemetry.active
    endpoint = telemetry.serve_prometheus(0)
    try:
        await _run_one_task()
    finally:
        endpoint.close()
    assert {"submit", "run"} <= {span.name for span in recorded.spans.get_finished_spans()}
    assert before is telemetry.active


@pytest.mark.parametrize(("port", "host"), [(70000, "127.0.0.1"), (-1, "127.0.0.1"),
                                            ("9464", "127.0.0.1"), (True, "127.0.0.1"),
                                            (0, 127001)])
def test_a_bad_prometheus_address_is_refused_by_name(port: Any, host: Any) -> None:
    """``serve_prometheus`` MUST refuse a port that is not an integer in 0..65535, or a
    host that is not a string, with ``InvalidInput`` — before binding, telemetry left
    off (not the socket's ``OverflowError`` or ``TypeError``)."""
    with pytest.raises(InvalidInput, match=r"^(port must be an integer in 0\.\.65535|host must)"):
        telemetry.serve_prometheus(port, host)
    assert telemetry.active is None


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
        return str(response.read().decode())


def _sample(body: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with ``labels`` (among others) in a scrape."""
    for line in body.splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if match and match[1] == name and all(f'{k}="{v}"' in match[2].split(",")
                                              for k, v in labels.items()):
            return float(match[3])
    return None


async def test_submit_many_makes_a_submit_span_per_item(recorded: Recorded) -> None:
    """``submit_many`` MUST trace each item as ``submit`` would: a span and a stored
    context per item; a joined item is not a new run."""
    app = make_app()

    @app.task(name="job")
    async def job(ctx: TaskContext) -> None:
        return None

    async with app:
        done = await app.submit_many([{"task": "job"}, {"task": "job", "key": "k"},
                                      {"task": "job", "key": "k"}], ALICE)
        stored = [(await app.get(s.id, ALICE)).work.trace_context for s in done]
    submits = [s for s in recorded.spans.get_finished_spans() if s.name == "submit"]
    assert ["created", "created", "joined"] == [s.attributes["tasks.outcome"] for s in submits]
    assert all(carrier and "traceparent" in carrier for carrier in stored)
    assert 2 == recorded.count("tasks.submitted", task="job")


async def test_tasks_worker_metrics_port_serves_on_localhost_by_default() -> None:
    """``tasks worker --metrics-port`` MUST serve on 127.0.0.1 unless ``--metrics-host``
    says otherwise; a port out of range is refused."""
    from tasks_core.cli import _worker_cmd
    from tasks_core.cli._options import check_options
    from tasks_core.cli.main import build_parser

    args = build_parser().parse_args(["worker", "m:app", "--metrics-port", "0"])
    endpoint = _worker_cmd._metrics(args)
    assert endpoint is not None
    try:
        assert endpoint.url.startswith("http://127.0.0.1:")
        await asyncio.to_thread(_scrape, endpoint.url)  # answers (nothing recorded yet)
    finally:
        endpoint.close()
    bad = build_parser().parse_args(["worker", "m:app", "--metrics-port", "70000"])
    with pytest.raises(InvalidInput, match=r"--metrics-port must be an integer in 0\.\.65535"):
        check_options(bad)


@pytest.mark.parametrize(("argv", "says"), [
    (["--metrics-host", "0.0.0.0"], r"^--metrics-host needs --metrics-port"),
    (["--metrics-port", "0", "--metrics-host", "no.such.host.invalid"],
     r"^--metrics-host: cannot listen on no\.such\.host\.invalid:0: "),
    (["--metrics-port", "0", "--metrics-host", " "], r"^--metrics-host must not be blank"),
])
def test_a_metrics_host_that_cannot_serve_is_refused_naming_it(
    argv: list[str], says: str
) -> None:
    """``--metrics-host`` without ``--metrics-port`` MUST be refused (it would be ignored,
    no metrics served); a host the endpoint cannot listen on is refused naming
    ``--metrics-host``, not the port."""
    from tasks_core.cli import _worker_cmd
    from tasks_core.cli.main import build_parser

    with pytest.raises(InvalidInput, match=says):
        _worker_cmd._metrics(build_parser().parse_args(["worker", "m:app", *argv]))
