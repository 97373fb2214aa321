"""`stack.roles.on_loop`: what the recall service (its own loop) awaits of Kafka runs on the stack's loop; a
caller's timeout cancels it there, and one cancelled there (the stack stopping) is BrokerUnavailable here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

from episodic.kernel.errors import BrokerUnavailable
from stack.roles import on_loop


async def test_calls_run_on_the_other_loop_and_cancellations_map_to_what_the_caller_can_answer() -> None:
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        ran_on: list[threading.Thread] = []

        async def double(x: int) -> int:
            ran_on.append(threading.current_thread())
            return 2 * x

        assert await on_loop(other, double)(21) == 42 and ran_on == [thread]

        started, cancelled = threading.Event(), threading.Event()

        async def slow() -> None:
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        with pytest.raises(TimeoutError):  # the caller's timeout ...
            await asyncio.wait_for(on_loop(other, slow)(), 0.2)
        assert await asyncio.to_thread(cancelled.wait, 5)  # ... cancels the send over there too

        in_flight: set[concurrent.futures.Future[Any]] = set()
        started.clear()
        call = asyncio.ensure_future(on_loop(other, slow, in_flight)())
        assert await asyncio.to_thread(started.wait, 5) and len(in_flight) == 1

        def cancel_all() -> None:
            for task in asyncio.all_tasks(other):
                task.cancel()

        other.call_soon_threadsafe(cancel_all)  # the stack's loop stopping
        with pytest.raises(BrokerUnavailable, match="stopping"):
            await call
        assert in_flight == set()
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()
