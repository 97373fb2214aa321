"""Consumer lag from high watermarks and committed offsets (the arithmetic of episodic.bus.kafka.LagProbe)."""

from __future__ import annotations

from episodic.bus.offsets import group_lag


def test_lag_is_the_sum_over_partitions_of_high_watermark_minus_committed() -> None:
    assert group_lag({0: 120, 1: 40}, {0: 100, 1: 40}) == 20
    assert group_lag({0: 10, 1: 5}, {0: None, 1: None}) == 15  # nothing committed yet: from offset 0
    assert group_lag({0: 10}, {}) == 10


def test_a_commit_ahead_of_a_stale_watermark_is_no_negative_lag() -> None:
    assert group_lag({0: 50, 1: 70}, {0: 60, 1: 65}) == 5


def test_an_unknown_high_watermark_means_no_figure_rather_than_a_wrong_one() -> None:
    assert group_lag({0: 10, 1: None}, {0: 0, 1: 0}) is None
    assert group_lag({}, {}) == 0


async def test_a_stop_that_the_lost_broker_cancels_is_quiet_unless_the_task_is_being_cancelled() -> None:
    import asyncio

    import pytest

    from episodic.bus.kafka import stop_quietly

    async def cancelled_inside() -> None:  # aiokafka's fetcher close after the broker is gone
        raise asyncio.CancelledError

    await stop_quietly(cancelled_inside(), "probe")  # dropped: nobody cancelled this task

    started = asyncio.Event()

    async def stopping() -> None:
        started.set()
        await stop_quietly(asyncio.sleep(10), "probe")

    task = asyncio.create_task(stopping())
    await started.wait()
    task.cancel()  # a real cancellation goes on
    with pytest.raises(asyncio.CancelledError):
        await task
