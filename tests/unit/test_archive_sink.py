"""The decay job's archive sink (stack.maintenance): records go to memory.archived before anything is
removed, and a Kafka failure stops the run as BrokerUnavailable (an admin run answers 503, not 500)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from episodic.kernel.errors import BrokerUnavailable
from schemas.events import ArchivedRecord
from schemas.topics import MEMORY_ARCHIVED
from stack.maintenance import archive_sink


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread of its own, as the Stack's is to the job's worker thread."""
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    try:
        yield lp
    finally:
        lp.call_soon_threadsafe(lp.stop)
        t.join(5)
        lp.close()


class Producer:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    async def send(self, topic: str, key: bytes | None = None, value: bytes = b"") -> asyncio.Future[Any]:
        if self.fail:
            raise KafkaConnectionError("connection refused")
        self.sent.append((topic, key, value))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def archived(entry_id: str) -> ArchivedRecord:
    return ArchivedRecord(
        entry_id=entry_id, workspace_id="ws", summary="s", archived_at=datetime(2026, 6, 1, tzinfo=UTC)
    )


def test_records_are_sent_keyed_by_workspace(loop: asyncio.AbstractEventLoop) -> None:
    producer = Producer()

    async def kafka() -> Producer:
        return producer

    archive_sink(kafka, loop)([archived("e1"), archived("e2")])
    assert [(t, k) for t, k, _ in producer.sent] == [(MEMORY_ARCHIVED, b"ws"), (MEMORY_ARCHIVED, b"ws")]


@pytest.mark.parametrize("where", ["connect", "send"])
def test_kafka_failures_stop_the_run_as_broker_unavailable(loop: asyncio.AbstractEventLoop, where: str) -> None:
    async def kafka() -> Producer:
        if where == "connect":
            raise KafkaConnectionError("connection refused")
        return Producer(fail=True)

    with pytest.raises(BrokerUnavailable, match=r"cannot archive to memory\.archived: KafkaConnectionError"):
        archive_sink(kafka, loop)([archived("e1")])
