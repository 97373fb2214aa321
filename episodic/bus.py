"""Kafka plumbing shared by the stages: topic creation, producers, lag from high watermarks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from episodic.errors import BrokerUnavailable
from schemas.events import CONTROL_HEADER, FORGET, ForgetRecord
from schemas.topics import ALL_TOPICS, JOURNAL_EMBEDDABLE

log = logging.getLogger(__name__)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode()


async def ensure_topics(
    bootstrap: str, *, partitions: int = 4, replication: int = 1, topics: tuple[str, ...] = ALL_TOPICS
) -> list[str]:
    """Create the missing topics; return the ones created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        await admin.start()
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            try:
                await admin.create_topics(
                    [NewTopic(t, num_partitions=partitions, replication_factor=replication) for t in missing]
                )
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        await admin.close()


async def list_topics(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000)
    try:
        await admin.start()
        return set(await admin.list_topics())
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    finally:
        await admin.close()


def bootstrap_reachable(bootstrap: str, timeout: float = 1.0) -> bool:
    """True when a TCP connection to any of the bootstrap servers succeeds (a cheap liveness probe)."""
    import socket

    for hostport in bootstrap.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not port.isdigit():
            continue
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def make_producer(bootstrap: str, **kw: Any) -> AIOKafkaProducer:
    """A producer for the embedded broker and Kafka alike (no idempotence: Tansu lacks it)."""
    opts: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "linger_ms": 5,
        "enable_idempotence": False,
        "request_timeout_ms": 15_000,
    }
    opts.update(kw)
    return AIOKafkaProducer(**opts)


async def produce_json(producer: AIOKafkaProducer, topic: str, key: str | None, value: Any) -> asyncio.Future[Any]:
    """Queue one JSON record; the returned future resolves once the broker acknowledged it."""
    return await producer.send(topic, key=key.encode() if key is not None else None, value=dumps(value))


async def send_forget(producer: AIOKafkaProducer, record: ForgetRecord, *, topic: str = JOURNAL_EMBEDDABLE) -> None:
    """Produce a forget as a control record on `journal.embeddable`, keyed by its workspace like the entries
    (the same partition: it is applied in order with them), and return once the broker acknowledged it (the
    producer's acks; `make_producer` asks for all in-sync replicas)."""
    await producer.send_and_wait(
        topic, key=record.workspace_id.encode(), value=record.to_json(), headers=[(CONTROL_HEADER, FORGET)]
    )


async def send_all(producer: AIOKafkaProducer, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
    """Send (key, value) records and return once the broker acknowledged every one of them (the producer's
    acks; `make_producer` asks for all in-sync replicas). Raises the first failure."""
    futures = [await producer.send(topic, key=key, value=value) for key, value in records]
    await asyncio.gather(*futures)
