"""The nightly schedule: cron in UTC, the latest fire time, and the loop following a controllable clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from episodic.kernel.settings import Settings
from episodic.maintenance.schedule import Schedule, run_on_schedule

NIGHTLY = Schedule("30 3 * * *")


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, second, tzinfo=UTC)


def test_next_and_last_fire_times_in_utc() -> None:
    assert NIGHTLY.next_after(at(21, 1)) == at(21, 3, 30)
    assert NIGHTLY.next_after(at(21, 3, 30)) == at(22, 3, 30)  # strictly after
    assert NIGHTLY.last_due(at(21, 3, 30)) == at(21, 3, 30)  # at the fire time, it is due
    assert NIGHTLY.last_due(at(21, 3, 29, 59)) == at(20, 3, 30)
    assert NIGHTLY.last_due(at(21, 23)) == at(21, 3, 30)
    # another offset is the same instant: the schedule is UTC whatever the clock's zone
    cet = timezone(timedelta(hours=1))
    assert NIGHTLY.last_due(datetime(2026, 11, 21, 4, 45, tzinfo=cet)) == at(21, 3, 30)
    assert Schedule("0 */6 * * 1").next_after(at(21, 1)) == at(23, 0)  # Saturday -> Monday 00:00


@pytest.mark.parametrize("bad", ["", "bogus", "61 3 * * *", "* * *"])
def test_a_bad_expression_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="cron"):
        Schedule(bad)
    with pytest.raises(ValueError, match="decay_schedule"):
        Settings(decay_schedule=bad)


async def test_the_loop_runs_when_due_follows_the_clock_and_survives_a_failing_run() -> None:
    now = [at(21, 3, 0)]
    last_done: list[datetime] = []
    stop = asyncio.Event()
    attempts = 0

    async def due(t: datetime) -> bool:
        return not last_done or last_done[-1] < NIGHTLY.last_due(t)

    async def run() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 2:
            raise RuntimeError("store down")
        last_done.append(now[0])

    task = asyncio.create_task(run_on_schedule(run, due, clock=lambda: now[0], stop=stop, tick_s=0.01))
    deadline = asyncio.get_running_loop().time() + 5
    while not last_done and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert last_done == [at(21, 3, 0)]  # never run: due at once
    now[0] = at(21, 3, 29)
    await asyncio.sleep(0.05)
    assert len(last_done) == 1  # not yet 03:30
    now[0] = at(21, 3, 31)
    while len(last_done) < 2 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert attempts >= 3 and last_done[-1] == at(21, 3, 31)  # the failed attempt was retried
    stop.set()
    await asyncio.wait_for(task, 1)
