"""A cron schedule in UTC and the loop that runs a nightly job on it, with catch-up (no framework, no IO).

croniter does the calendar arithmetic (`30 3 * * *`, weekdays, steps), which is the part not worth writing
again. The loop is ours and small, for three things a scheduler library would make harder here:

- catch-up: the job is due when its last completed run is older than the latest fire time, so a process
  that was down at 03:30 runs it when it starts, and a run that crashed half way resumes (the job keeps
  its cursor in the state store; APScheduler's job stores would be a second copy of that state);
- a controllable clock: tests move `clock` and the loop follows, because it re-reads the clock every tick
  instead of sleeping until a computed wall time (Faust's `app.crontab` sleeps on the real clock, has no
  catch-up, and would tie the job to one Faust app);
- one question to the job, `due(now)`, whatever the reason (never run, missed, interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from croniter import croniter

log = logging.getLogger(__name__)

DEFAULT_TICK_S = 30.0


class Schedule:
    """A five-field cron expression, evaluated in UTC."""

    def __init__(self, expr: str) -> None:
        expr = expr.strip()
        if not croniter.is_valid(expr):
            raise ValueError(f"not a cron expression (minute hour day month weekday, UTC): {expr!r}")
        self.expr = expr

    def next_after(self, t: datetime) -> datetime:
        """The first fire time strictly after `t`."""
        nxt: datetime = croniter(self.expr, t.astimezone(UTC)).get_next(datetime)
        return nxt

    def last_due(self, now: datetime) -> datetime:
        """The latest fire time at or before `now`."""
        now = now.astimezone(UTC)
        prev: datetime = croniter(self.expr, now).get_prev(datetime)
        nxt = self.next_after(prev)
        return nxt if nxt <= now else prev

    def __repr__(self) -> str:
        return f"Schedule({self.expr!r} UTC)"


async def run_on_schedule(
    run: Callable[[], Awaitable[object]],
    due: Callable[[datetime], Awaitable[bool]],
    *,
    clock: Callable[[], datetime],
    stop: asyncio.Event,
    tick_s: float = DEFAULT_TICK_S,
    name: str = "job",
) -> None:
    """Until `stop`: every `tick_s`, ask `due(clock())` and, when it says so, await `run()`. A failing run
    is logged and asked about again at the next tick (its cursor lets it resume)."""
    while not stop.is_set():
        try:
            if await due(clock()):
                await run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("%s: scheduled run failed (retried at the next tick): %s", name, e)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), tick_s)
