"""Random task ids: their form, the time they carry, and the order of the instants' floors
(which the dashboard's newest-first windows read)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from tasks_core.authority import scoped_task_key
from tasks_core.errors import InvalidInput
from tasks_core.periodic import TICK_PREFIX, Schedule
from tasks_core.random_ids import random_id_floor, random_id_instant, random_task_id

instants = st.integers(min_value=0, max_value=2**44 - 1)  # milliseconds, to the year 2527


def test_a_random_id_is_23_characters_and_carries_the_instant_it_was_made() -> None:
    """A random id MUST be ``"::"`` and 21 digits (a 23-character key: one aligned index
    entry) and MUST carry the millisecond its process made it at."""
    before = time.time_ns() // 1_000_000
    made = random_task_id()
    after = time.time_ns() // 1_000_000
    assert 23 == len(made)
    assert made.startswith("::")
    assert ":" not in made[2:]
    instant = random_id_instant(made)
    assert instant is not None
    assert before <= instant <= after


@given(instants, instants)
def test_floors_sort_as_their_instants_and_read_back(first: int, second: int) -> None:
    """``random_id_floor`` MUST order as the instants do and read back as its instant."""
    assert (random_id_floor(first) < random_id_floor(second)) == (first < second)
    assert first == random_id_instant(random_id_floor(first))


def test_an_id_lies_between_the_floors_of_its_instant_and_the_next() -> None:
    """Every random id MUST sort at or after the floor of the millisecond it carries and
    before the next one's (the dashboard's windows hold exactly their milliseconds)."""
    for made in [random_task_id() for _ in range(2000)]:
        instant = random_id_instant(made)
        assert instant is not None
        assert random_id_floor(instant) <= made < random_id_floor(instant + 1)


@given(st.text(min_size=1, max_size=30).filter(lambda k: "::" not in k))
def test_no_key_built_id_reads_as_a_random_id(key: str) -> None:
    """Ids built from keys MUST NOT read as random ids (ticks: the test below)."""
    try:
        built = scoped_task_key(key, None, dedup="global")
    except InvalidInput:  # a key the rules refuse builds no id
        return
    assert random_id_instant(built) is None


def test_ticks_and_malformed_ids_are_not_random_ids() -> None:
    """A tick's id, a too short or too long id and one with a digit outside the alphabet
    MUST read as no random id; random ids made before the year 2400 MUST sort below every
    tick's id (the dashboard skips them in one step)."""
    made = random_task_id()
    hourly = Schedule(name="hourly", task="report", every=3600.0)
    tick = hourly.task_id(hourly.recent(datetime.now(UTC), 1)[0])
    for other in (tick, made[:-1], made + "a", made[:-1] + "+", made[:-1] + ":", "::"):
        assert random_id_instant(other) is None, other
    year_2400 = int(datetime(2400, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert made < random_id_floor(year_2400) < TICK_PREFIX < tick

