"""Kafka plumbing shared by the stages: topic creation, producers, lag from high watermarks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, UnknownError, UnsupportedVersionError

from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.settings import Settings
from schemas.events import CONTROL_HEADER, FORGET, ForgetRecord
from schemas.topics import (
    ALL_TOPICS,
    JOURNAL_DLQ,
    JOURNAL_DLQ_REPLAYS,
    JOURNAL_EMBEDDABLE,
    JOURNAL_ENTRIES,
    MEMORY_ARCHIVED,
)

log = logging.getLogger(__name__)


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode()


HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# The journal takes records far above any valid entry (a summary of 16 KiB, a payload of 64 KiB), so that a
# producer's garbage up to 8 MiB reaches the gate and is dead-lettered (cut to fit journal.dlq: gating.py)
# where an operator sees it, rather than refused at produce by Kafka's 1 MiB default, which a producer that
# ignores errors would lose silently.
JOURNAL_MAX_MESSAGE_BYTES = 8 * 1024 * 1024


def topic_configs(settings: Settings) -> dict[str, dict[str, str]]:
    """Every topic's retention (SPEC §5), from the settings: the journal and event topics
    `journal_retention_hours` (7 days), the dead letters and their replay ledger `dlq_retention_hours` (30
    days; the ledger, a table keyed `partition:offset`, also compacted), the archive `archive_retention_hours`
    (unset: forever, it is the only copy of what the decay retired).

    Retention deletes whole segments, so each topic rolls a segment at a quarter of its retention (at most a
    day): a record is gone between 1 and 1.25 retentions after it was written, not after two."""

    def deleting(hours: float | None, policy: str = "delete") -> dict[str, str]:
        if hours is None:
            return {"cleanup.policy": policy, "retention.ms": "-1"}
        ms = max(1000, int(hours * HOUR_MS))
        return {"cleanup.policy": policy, "retention.ms": str(ms), "segment.ms": str(max(1000, min(ms // 4, DAY_MS)))}

    journal = deleting(settings.journal_retention_hours)
    out = {topic: dict(journal) for topic in ALL_TOPICS}
    out[JOURNAL_ENTRIES]["max.message.bytes"] = str(JOURNAL_MAX_MESSAGE_BYTES)
    out[JOURNAL_DLQ] = deleting(settings.dlq_retention_hours)
    out[JOURNAL_DLQ_REPLAYS] = deleting(settings.dlq_retention_hours, "compact,delete")
    out[MEMORY_ARCHIVED] = deleting(settings.archive_retention_hours)
    return out


async def ensure_topics(
    bootstrap: str,
    *,
    partitions: int = 4,
    replication: int = 1,
    topics: tuple[str, ...] = ALL_TOPICS,
    options: Mapping[str, Any] | None = None,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    reconcile: bool = False,
) -> list[str]:
    """Create the missing topics, each with its `configs` (`topic_configs`); return the ones created.
    `reconcile`: also set the configs of the topics that exist where they differ (the embedded broker, whose
    topics are the stack's own; an operator's Kafka keeps what its operator set). `options`: the transport's
    (`episodic.kernel.transport_security.kafka_options`)."""
    configs = configs or {}
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **(options or {}))
    try:
        await admin.start()
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            new = [
                NewTopic(
                    t, num_partitions=partitions, replication_factor=replication, topic_configs=dict(configs.get(t, {}))
                )
                for t in missing
            ]
            try:
                await admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
        if reconcile:
            await _reconcile(admin, {t: configs[t] for t in topics if t in existing and t in configs})
        return missing
    finally:
        await admin.close()


async def _reconcile(admin: AIOKafkaAdminClient, wanted: Mapping[str, Mapping[str, str]]) -> None:
    """Alter the topics whose configs differ from `wanted` (a retention setting changed since they were made)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    if not wanted:
        return
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in wanted])
    have: dict[str, dict[str, str]] = {}
    for response in described:
        for _code, _msg, _type, name, entries in response.resources:
            have[name] = {entry[0]: entry[1] for entry in entries}
    stale = [t for t, conf in wanted.items() if any(have.get(t, {}).get(k) != v for k, v in conf.items())]
    if stale:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, dict(wanted[t])) for t in stale])
        log.info("topic configs set anew: %s", ", ".join(stale))


async def list_topics(bootstrap: str, *, options: Mapping[str, Any] | None = None) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000, **(options or {}))
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
    """A producer (not started): every record acknowledged by all in-sync replicas, idempotent (KIP-98: a
    retried batch is written once and in order) unless `enable_idempotence=False`; `kw` carries the
    transport's options (`**kafka_options(settings)`) and overrides. `start_producer` starts one and falls
    back where the broker lacks idempotence."""
    opts: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "linger_ms": 5,
        "enable_idempotence": True,
        "request_timeout_ms": 15_000,
    }
    opts.update(kw)
    return AIOKafkaProducer(**opts)


_said_no_idempotence: set[str] = set()


async def start_producer(bootstrap: str, **kw: Any) -> AIOKafkaProducer:
    """A started `make_producer`. A broker without idempotent producers (the Tansu fallback answers
    InitProducerId with an error) gets a plain one instead, said once per bootstrap: acks=all still holds, but
    a retried batch may then be written twice (indexing takes it as a re-delivery: idempotent by id)."""
    producer = make_producer(bootstrap, **kw)
    try:
        await producer.start()
        return producer
    except (UnknownError, UnsupportedVersionError) as e:
        with contextlib.suppress(Exception):
            await producer.stop()
        if kw.get("enable_idempotence", True) is False:  # a plain producer failed: not for want of idempotence
            raise
        if bootstrap not in _said_no_idempotence:
            _said_no_idempotence.add(bootstrap)
            log.warning("the broker at %s has no idempotent producers (%r): producing without", bootstrap, e)
    except BaseException:
        with contextlib.suppress(Exception):
            await producer.stop()
        raise
    producer = make_producer(bootstrap, **{**kw, "enable_idempotence": False})
    try:
        await producer.start()
    except BaseException:
        with contextlib.suppress(Exception):
            await producer.stop()
        raise
    return producer


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


async def stop_quietly(stop: Awaitable[None], what: str) -> None:
    """Await a Kafka client's `stop()`. After the broker is lost, aiokafka's fetcher cancels its fetch in
    retry and then awaits it, which raises CancelledError out of the consumer's `stop()`: that one is
    logged and dropped, unless this task itself is being cancelled (then it goes on)."""
    try:
        await stop
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug("%s: a fetch cancelled while stopping (the broker was gone)", what)
