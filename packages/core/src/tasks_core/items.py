"""``SubmitItem``: one task of a bulk submit (``app.submit_many``), what one ``submit``
call says — the task, its input and the same keyword options (no ``transaction``: the
batch has one). A plain dict with the same keys is taken too (``SubmitItem.of``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, fields
from datetime import datetime
from typing import Any, Literal

from tasks_core.authority import Owner
from tasks_core.definitions import TaskDef
from tasks_core.durations import Seconds
from tasks_core.errors import InvalidInput
from tasks_core.models import RetryPolicy
from tasks_core.options import UNSET, Unset

__all__ = ["SubmitItem"]


@dataclass(frozen=True)
class SubmitItem:
    """One task of ``app.submit_many``: ``SubmitItem(task, input, key=…, delay=…)``.

    ``task`` and ``input`` may be given by position; every other field is keyword-only
    and means what the keyword of the same name means to ``App.submit`` (``key``,
    ``dedup``, ``watchers``, ``queue``, ``ttl``, ``retention``, ``retry``, ``timeout``,
    ``max_deliveries``, ``idempotency_key``, ``delay``, ``run_at``, ``priority``). Nothing
    is checked here: ``submit_many`` checks every item as ``submit`` would, before it
    writes anything.
    """

    task: TaskDef | str
    input: Mapping[str, Any] | None = None
    _: KW_ONLY
    key: str | None = None
    dedup: Literal["owner", "global"] = "owner"
    watchers: Sequence[Owner] = ()
    queue: str | None = None
    ttl: Seconds | Unset | None = UNSET
    retention: Seconds | Unset | None = UNSET
    retry: RetryPolicy | None = None
    timeout: Seconds | Unset | None = UNSET
    max_deliveries: int | None = None
    idempotency_key: str | None = None
    delay: Seconds | None = None
    run_at: datetime | None = None
    priority: int | None = None

    @classmethod
    def of(cls, value: SubmitItem | Mapping[str, Any]) -> SubmitItem:
        """``value`` as an item: an item as it is, or a dict of its fields (``"task"``
        required; ``"input"`` and the options optional).

        Raises:
            InvalidInput: neither, a dict without ``"task"``, or an unknown key.
        """
        if isinstance(value, SubmitItem):
            return value
        if not isinstance(value, Mapping):
            raise InvalidInput("an item must be a SubmitItem or a dict of its fields")
        unknown = sorted(str(name) for name in set(value) - _FIELDS)
        if unknown:
            raise InvalidInput(f"unknown item field(s): {', '.join(unknown)}")
        if "task" not in value:
            raise InvalidInput("an item needs a 'task' (a registered task or a task name)")
        return cls(**value)

    def options(self) -> dict[str, Any]:
        """The keyword options of ``submit`` this item gives (everything but ``task`` and
        ``input``): the fields an item holds, in its ``__dict__``."""
        options = vars(self).copy()
        del options["task"], options["input"]
        return options


_FIELDS = frozenset(f.name for f in fields(SubmitItem))
