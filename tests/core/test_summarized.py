"""``app.core.summarized.Summarized``: a line per interval at most, the first event at once."""

from __future__ import annotations

import asyncio

from app.core.summarized import Summarized

INTERVAL = 0.02


class Told:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def first(self, event: int) -> None:
        self.lines.append(f"first {event}")

    def summary(self, events: list[int]) -> None:
        self.lines.append(f"{len(events)} more, last {events[-1]}")


async def test_the_first_event_at_once_the_rest_of_the_interval_in_one_line() -> None:
    told = Told()
    notes = Summarized(told.first, told.summary, INTERVAL)
    for n in range(5):
        notes.note(n)
    assert told.lines == ["first 0"]
    await asyncio.sleep(INTERVAL * 3)
    assert told.lines == ["first 0", "4 more, last 4"]


async def test_a_summary_opens_the_next_interval_and_a_quiet_one_ends_the_series() -> None:
    told = Told()
    notes = Summarized(told.first, told.summary, INTERVAL)
    notes.note(1)
    notes.note(2)
    notes.flush()  # the interval ends: its summary opens the next one
    notes.note(3)  # within that one: gathered
    assert told.lines == ["first 1", "1 more, last 2"]
    notes.flush()
    notes.flush()  # a quiet interval: the series ends
    notes.note(4)  # told at once again
    assert told.lines == ["first 1", "1 more, last 2", "1 more, last 3", "first 4"]
    notes.close()


async def test_close_tells_what_is_gathered_and_stops_the_interval() -> None:
    told = Told()
    notes = Summarized(told.first, told.summary, INTERVAL)
    notes.note(1)
    notes.note(2)
    notes.close()
    assert told.lines == ["first 1", "1 more, last 2"]
    await asyncio.sleep(INTERVAL * 3)
    assert told.lines == ["first 1", "1 more, last 2"]  # no timer left
