"""The task and queue registry of an ``App`` (``@app.task``, ``App(queues=…)``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, overload

from tasks_core.definitions import DEFAULT_QUEUE, UNSET, Queue, TaskDef, _Unset
from tasks_core.durations import MAX_KEEP_S, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.models import RetryPolicy, Work

__all__ = ["Registry"]


class Registry:
    """Registered tasks by name and declared queues by name (``default`` always).

    Raises:
        InvalidInput: a bad queue or default ``retention``.
    """

    def __init__(self, queues: Iterable[str | Queue], retention: float | None) -> None:
        self.retention = check_duration(retention, "retention", high=MAX_KEEP_S,
                                        allow_zero=True, allow_none=True)
        self.tasks: dict[str, TaskDef] = {}
        self._queues: dict[str, Queue] = {DEFAULT_QUEUE: Queue(DEFAULT_QUEUE)}
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
        timeout: float | None = None,
        max_deliveries: int = 25,
        ttl: float | None = None,
        retention: float | _Unset | None = UNSET,
    ) -> Callable[[Callable[..., Any]], TaskDef]: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        max_deliveries: int = 25,
        ttl: float | None = None,
        retention: float | _Unset | None = UNSET,
    ) -> TaskDef | Callable[[Callable[..., Any]], TaskDef]:
        """Register a handler: ``@app.task`` or ``@app.task(queue=…, retry=…, timeout=…)``.

        The registered name defaults to the function's ``__name__``; registering a second
        task under one name is refused (no silent override).

        Raises:
            InvalidInput: a duplicate name or a bad option.
        """

        def register(handler: Callable[..., Any]) -> TaskDef:
            definition = TaskDef(
                name=name or str(getattr(handler, "__name__", "")),
                fn=handler,
                queue=queue,
                retry=retry or RetryPolicy.none(),
                timeout=timeout,
                max_deliveries=max_deliveries,
                ttl=ttl,
                retention=self.retention if retention is UNSET else retention,
                app=self,  # type: ignore[arg-type]
            )
            Work(name=definition.name, timeout_s=timeout, max_deliveries=max_deliveries)
            if definition.name in self.tasks:
                raise InvalidInput(f"a task named {definition.name!r} is already registered")
            if queue not in self._queues:
                self.declare_queue(queue)
            self.tasks[definition.name] = definition
            return definition

        return register(fn) if fn is not None else register

    def _definition(self, task: TaskDef | str) -> TaskDef | None:
        if isinstance(task, TaskDef):
            if self.tasks.get(task.name) is not task:
                raise InvalidInput(f"task {task.name!r} is not registered with this app")
            return task
        if isinstance(task, str):
            return self.tasks.get(task)
        raise InvalidInput("task must be a registered task or a task name")
