"""The task, queue and schedule registry of an ``App`` (``@app.task``, ``App(queues=…)``,
``@app.periodic``). Everything is checked where it is declared: a refusal registers
nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

from tasks_core._labels import note_registered
from tasks_core.definitions import DEFAULT_QUEUE, Queue, TaskDef
from tasks_core.durations import MAX_KEEP_S, Seconds, as_seconds, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.models import RetryPolicy
from tasks_core.options import UNSET, Unset
from tasks_core.periodic import Schedule
from tasks_core.policy import Limits
from tasks_core.runtime._submit import check_input

__all__ = ["Registry"]


class Registry:
    """Registered tasks by name and declared queues by name (``default`` always).

    Raises:
        InvalidInput: a bad queue or default ``retention``.
    """

    def __init__(self, queues: Iterable[str | Queue], retention: Seconds | None) -> None:
        self.retention = check_duration(retention, "retention", high=MAX_KEEP_S,
                                        allow_zero=True, allow_none=True)
        self.tasks: dict[str, TaskDef] = {}
        self.schedules: dict[str, Schedule] = {}
        """Periodic schedules by name (``@app.periodic``)."""
        self._queues: dict[str, Queue] = {DEFAULT_QUEUE: Queue(DEFAULT_QUEUE)}
        given: object = queues
        if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
            raise InvalidInput("queues must be a list of queue names or Queue(...)")
        for queue in queues:
            self.declare_queue(queue)

    @property
    def queues(self) -> Mapping[str, Queue]:
        """Declared queues by name."""
        return dict(self._queues)

    def declare_queue(self, queue: str | Queue) -> Queue:
        """Declare a queue (a name, or a :class:`Queue` with options).

        Raises:
            InvalidInput: a bad name, or a conflicting second declaration.
        """
        spec = Queue(queue) if isinstance(queue, str) else queue
        if not isinstance(spec, Queue):
            raise InvalidInput("a queue is a name or a Queue(...)")
        current = self._queues.get(spec.name)
        plain = Queue(spec.name)
        if current is None or current == plain:
            self._queues[spec.name] = spec
        elif spec not in (plain, current):
            raise InvalidInput(f"queue {spec.name!r} is declared twice, differently")
        return self._queues[spec.name]

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        max_running: int | None = None,
        rate: tuple[int, Seconds] | None = None,
        exclusive: bool = False,
    ) -> Queue:
        """Declare a queue with options: ``app.queue("emails", max_running=5)``,
        ``app.queue("partner-api", rate=(100, 60))`` (see :class:`Queue`).

        Raises:
            InvalidInput: a bad name or option, or a conflicting second declaration.
        """
        return self.declare_queue(Queue(name, concurrency=concurrency, exclusive=exclusive,
                                        max_running=max_running, rate=rate))

    @overload
    def task(self, fn: Callable[..., Any], /) -> TaskDef: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
        timeout: Seconds | None = None,
        max_deliveries: int = 25,
        ttl: Seconds | None = None,
        retention: Seconds | Unset | None = UNSET,
        priority: int = 0,
    ) -> Callable[[Callable[..., Any]], TaskDef]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
        timeout: Seconds | None = None,
        max_deliveries: int = 25,
        ttl: Seconds | None = None,
        retention: Seconds | Unset | None = UNSET,
        priority: int = 0,
    ) -> TaskDef | Callable[[Callable[..., Any]], TaskDef]:
        """Register a handler: ``@app.task`` or ``@app.task(queue=…, retry=…, timeout=…,
        priority=…)``.

        The registered name defaults to the function's ``__name__``; registering a second
        task under one name is refused (no silent override).

        Raises:
            InvalidInput: a duplicate name or a bad option.
        """

        def register(handler: Callable[..., Any]) -> TaskDef:
            definition = TaskDef(
                name=str(getattr(handler, "__name__", "")) if name is None else name,
                fn=handler,
                queue=queue,
                retry=RetryPolicy.none() if retry is None else retry,
                timeout=as_seconds(timeout),
                max_deliveries=max_deliveries,
                ttl=as_seconds(ttl),
                retention=self.retention if retention is UNSET else as_seconds(retention),
                priority=priority,
                app=self,  # type: ignore[arg-type]
            )
            if definition.name in self.tasks:
                raise InvalidInput(f"a task named {definition.name!r} is already registered")
            if queue not in self._queues:
                self.declare_queue(queue)
            self.tasks[definition.name] = definition
            note_registered(definition.name)
            return definition

        return register(fn) if fn is not None else register

    @overload
    def periodic(
        self, task: TaskDef | Callable[..., Any], /, *, cron: str | None = None,
        every: Seconds | None = None, tz: str | None = None, name: str | None = None,
        queue: str | None = None, input: Mapping[str, Any] | None = None, catch_up: int = 1,
    ) -> TaskDef: ...

    @overload
    def periodic(
        self, task: None = None, /, *, cron: str | None = None, every: Seconds | None = None,
        tz: str | None = None, name: str | None = None, queue: str | None = None,
        input: Mapping[str, Any] | None = None, catch_up: int = 1,
    ) -> Callable[[TaskDef | Callable[..., Any]], TaskDef]: ...

    def periodic(
        self,
        task: TaskDef | Callable[..., Any] | None = None,
        /,
        *,
        cron: str | None = None,
        every: Seconds | None = None,
        tz: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        input: Mapping[str, Any] | None = None,
        catch_up: int = 1,
    ) -> TaskDef | Callable[[TaskDef | Callable[..., Any]], TaskDef]:
        """Run a task on a schedule: ``@app.periodic(cron="0 9 * * mon-fri",
        tz="Europe/Paris")`` or ``@app.periodic(every=300)``.

        On a plain function it registers the task as ``@app.task`` does (its name, and
        ``queue`` when given); on a task (``@app.periodic(...)`` above ``@app.task(...)``,
        or ``app.periodic(task, every=60, name="fast")``) it only adds a schedule, so one
        task may have several. It returns the task. Every worker runs the schedules
        (``Worker(periodic=False)``, ``tasks worker --no-periodic``: not this one); see
        :class:`~tasks_core.periodic.Schedule` and docs/runtime.md, Periodic tasks.

        Args:
            task: the handler or registered task (or none: a decorator).
            cron: a cron expression read in ``tz``; or ``every``: seconds between ticks.
            tz: the IANA time zone of ``cron`` (default UTC).
            name: the schedule's name (default: the task's name); unique in the app.
            queue: the queue of the ticks (default: the task's).
            input: the handler's keyword arguments, the same for every tick (JSON).
            catch_up: at most this many missed ticks run after a downtime (default 1).

        Raises:
            InvalidInput: a bad or duplicate schedule (see ``Schedule``), an input that
                does not bind to the handler, a task of another app; nothing registered.
        """

        def register(target: TaskDef | Callable[..., Any]) -> TaskDef:
            existing = target if isinstance(target, TaskDef) else None
            if existing is not None:
                self._definition(existing)
            elif not callable(target):
                raise InvalidInput("@app.periodic decorates a task handler or a task")
            fn = existing.fn if existing else target
            task_name = existing.name if existing else str(getattr(fn, "__name__", ""))
            task_queue = existing.queue if existing else DEFAULT_QUEUE
            schedule = Schedule(name=task_name if name is None else name, task=task_name,
                                cron=cron, every=every, tz=tz, catch_up=catch_up,
                                queue=task_queue if queue is None else queue,
                                input=input)
            if schedule.name in self.schedules:
                raise InvalidInput(f"a schedule named {schedule.name!r} is already declared")
            limits = getattr(self, "limits", None)
            probe = existing or TaskDef(name=task_name or "?", fn=fn, queue=schedule.queue)
            check_input(schedule.input, probe, limits if isinstance(limits, Limits)
                        else Limits())
            definition = existing or self.task(queue=schedule.queue)(fn)
            if schedule.queue not in self._queues:
                self.declare_queue(schedule.queue)
            self.schedules[schedule.name] = schedule
            return definition

        return register(task) if task is not None else register

    def _definition(self, task: TaskDef | str) -> TaskDef | None:
        if isinstance(task, TaskDef):
            if self.tasks.get(task.name) is not task:
                raise InvalidInput(f"task {task.name!r} is not registered with this app")
            return task
        if isinstance(task, str):
            return self.tasks.get(task)
        raise InvalidInput("task must be a registered task or a task name")
