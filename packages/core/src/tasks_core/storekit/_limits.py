"""Fleet-wide queue limits: what a queue allows (:class:`QueueLimits`) and how much room a
``claim_next`` call has in it (:class:`QueueRoom`).

A queue with ``max_running=N`` never has more than N live leases across every worker; one
with ``rate=(N, S)`` never has more than N claims in any window of S seconds, on the store
clock. The store counts both inside the claim's atomic step (live leases:
:func:`~tasks_core.storekit.holds_queue`; claims: its own log of claim instants) and hands
the counts to :class:`~tasks_core.storekit.ClaimScan`, which never claims past the room.
A refused claim is no error: the task stays pending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tasks_core.arguments import MAX_RUNNING
from tasks_core.durations import MAX_WAIT_S, MIN_INTERVAL_S, Seconds, as_seconds, check_duration
from tasks_core.errors import InvalidInput
from tasks_core.sizes import check_limit

__all__ = ["MAX_RUNNING", "QueueLimits", "QueueRoom"]




@dataclass(frozen=True)
class QueueLimits:
    """The fleet-wide limits of one queue, kept by the store in the claim's atomic step.

    Attributes:
        max_running: at most this many live leases in the queue at any instant, across
            every worker and process (``1``: an exclusive queue); ``None``: no bound.
        rate: ``(claims, seconds)``: at most ``claims`` claims of the queue in any window
            of ``seconds`` (store clock); ``None``: no bound.

    Raises:
        InvalidInput: neither limit, a count outside 1..:data:`MAX_RUNNING`, or a window
            that is not a number of seconds in [0.001, :data:`MAX_WAIT_S`].
    """

    max_running: int | None = None
    rate: tuple[int, Seconds] | None = None

    def __post_init__(self) -> None:
        if self.max_running is None and self.rate is None:
            raise InvalidInput("queue limits need max_running, rate or both")
        if self.max_running is not None:
            object.__setattr__(self, "max_running", check_limit(
                self.max_running, maximum=MAX_RUNNING, what="max_running"))
        if self.rate is not None:
            if not isinstance(self.rate, tuple) or len(self.rate) != 2:
                raise InvalidInput("rate must be a pair (claims, seconds), e.g. (100, 60)")
            claims = check_limit(self.rate[0], maximum=MAX_RUNNING, what="the claims of rate")
            seconds = check_duration(self.rate[1], "the window of rate", high=MAX_WAIT_S,
                                     low=MIN_INTERVAL_S)
            object.__setattr__(self, "rate", (claims, seconds))

    @property
    def window(self) -> timedelta | None:
        """The rate's window (``None``: no rate)."""
        return None if self.rate is None else timedelta(seconds=as_seconds(self.rate[1]))

    def window_start(self, now: datetime) -> datetime | None:
        """The claims of the window ending at ``now`` are those made after this instant
        (``None``: no rate)."""
        window = self.window
        return None if window is None else now - window


class QueueRoom:
    """How many more claims each limited queue allows in one ``claim_next`` call, from the
    counts the store read in its atomic step."""

    def __init__(
        self,
        limits: Mapping[str, QueueLimits],
        running: Mapping[str, int],
        recent: Mapping[str, int],
        full: set[str],
    ) -> None:
        self._room: dict[str, int] = {}
        for queue, limit in limits.items():
            bounds = []
            if limit.max_running is not None:
                bounds.append(limit.max_running - running.get(queue, 0))
            if limit.rate is not None:
                bounds.append(limit.rate[0] - recent.get(queue, 0))
            self._room[queue] = 0 if queue in full else max(0, min(bounds))

    def left(self, queue: str) -> int | None:
        """Claims the queue still allows (``None``: not limited)."""
        return self._room.get(queue)

    def take(self, queue: str) -> None:
        """One claim of ``queue`` decided."""
        if queue in self._room:
            self._room[queue] -= 1

    def give_back(self, queue: str) -> None:
        """A claim of ``queue`` withdrawn."""
        if queue in self._room:
            self._room[queue] += 1
