"""Calls that arrive while one is running are run together next: many creates of one
event loop in one statement (PostgreSQL's ``create``).

The first caller leads: it runs every call waiting (up to ``most`` at a time, oldest
first) and goes on while more arrive; the others wait for their own outcome. A leader
that is cancelled leaves a group of others it started to finish (shielded: their
outcomes ride on it; a run of its own call alone just stops) and hands the lead to the
oldest caller still waiting. A caller cancelled while it waits is dropped before its
group starts (nothing of it written); once its group runs, it is written or not with the
group. A group that fails gives every caller in it the same error.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

__all__ = ["Grouped"]

T = TypeVar("T")
R = TypeVar("R")
_LEAD = object()
"""What a waiting caller is handed when it is to lead."""


@dataclass(eq=False)
class _Call(Generic[T]):
    item: T
    outcome: asyncio.Future[object]


class Grouped(Generic[T, R]):
    """``await grouped(item)``: ``run(items)`` of this and the calls that arrive while
    another group runs; ``run`` returns one outcome per item, in order. One event loop."""

    def __init__(self, run: Callable[[list[T]], Awaitable[list[R]]], most: int) -> None:
        self._run = run
        self._most = most
        self._waiting: list[_Call[T]] = []
        self._leading = False
        self._running: set[asyncio.Future[list[R]]] = set()
        """Groups running (held here: a cancelled leader no longer holds its own)."""

    async def __call__(self, item: T) -> R:
        """The outcome of ``item``, run in a group.

        Raises:
            Exception: what ``run`` raised for the group.
        """
        loop = asyncio.get_running_loop()
        call = _Call(item, loop.create_future())
        self._waiting.append(call)
        if self._leading:
            try:
                outcome = await call.outcome
            except asyncio.CancelledError:
                if call in self._waiting:  # its group has not started: drop it
                    self._waiting.remove(call)
                if _handed_the_lead(call.outcome):  # cancelled as it was to lead: pass it on
                    self._hand_over()
                raise
            if outcome is not _LEAD:
                return cast(R, outcome)
            call.outcome = loop.create_future()  # still waiting: its group is next
        self._leading = True
        try:
            while self._waiting:
                group = self._waiting[: self._most]
                del self._waiting[: self._most]
                if group == [call]:  # alone: nobody else's outcome rides on this run
                    _deliver(group, await _ran(self._run([item])))
                    continue
                self._running.add(
                    running := asyncio.ensure_future(self._run([c.item for c in group]))
                )
                running.add_done_callback(self._running.discard)
                running.add_done_callback(functools.partial(_deliver, group))
                await asyncio.shield(running)  # (a cancelled leader leaves it to finish)
        except Exception:
            pass  # delivered to the group's callers, this one among them
        except BaseException:  # cancelled: nobody reads this caller's outcome
            call.outcome.add_done_callback(_retrieved)
            raise
        finally:
            self._hand_over()
        return cast(R, await call.outcome)

    def _hand_over(self) -> None:
        """Let the oldest caller still waiting lead, or stop leading."""
        while self._waiting:
            outcome = self._waiting[0].outcome
            if not outcome.done():
                outcome.set_result(_LEAD)
                return
            self._waiting.pop(0)  # cancelled meanwhile
        self._leading = False


async def _ran(outcomes: Awaitable[list[R]]) -> asyncio.Future[list[R]]:
    """A finished future of what ``outcomes`` gives (or raises)."""
    done: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
    try:
        done.set_result(await outcomes)
    except Exception as exc:  # handed to the caller through the future
        done.set_exception(exc)
    return done


def _handed_the_lead(outcome: asyncio.Future[object]) -> bool:
    return outcome.done() and not outcome.cancelled() and outcome.result() is _LEAD


def _retrieved(outcome: asyncio.Future[object]) -> None:
    if not outcome.cancelled():
        outcome.exception()


def _deliver(group: list[_Call[T]], running: asyncio.Future[list[R]]) -> None:
    """Give each caller of ``group`` its outcome (or the group's error)."""
    for index, call in enumerate(group):
        if call.outcome.done():  # its caller was cancelled while the group ran
            continue
        if running.cancelled():
            call.outcome.cancel()
        elif (error := running.exception()) is not None:
            call.outcome.set_exception(error)
        else:
            call.outcome.set_result(running.result()[index])
