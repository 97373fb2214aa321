"""The maintenance jobs wired from the Stack's resources: the nightly decay job and its archive sink.

Shared by the importance role (which runs the job on its schedule) and the recall service role (which runs
it on `POST /v1/admin/run/decay`); each builds its own `DecayJob`, and the job's lease in the state store
keeps two runs from overlapping, in one process or across several.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from episodic.kernel.errors import BrokerUnavailable, EpisodicError
from episodic.kernel.metrics import Metrics
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.kernel.settings import Settings
from episodic.maintenance.decay import ArchiveSink, DecayJob, RetentionPolicy
from episodic.maintenance.importance import ReferenceCounter
from episodic.maintenance.reviews import ReviewApplier
from schemas.events import ArchivedRecord
from schemas.topics import MEMORY_ARCHIVED

ARCHIVE_TIMEOUT_S = 120.0


Kafka = Callable[[], Awaitable[Any]]  # a started AIOKafkaProducer (raises while Kafka is unreachable)


def archive_sink(kafka: Kafka, loop: asyncio.AbstractEventLoop) -> ArchiveSink:
    """Publish archived memories on memory.archived (keyed by workspace) from the job's worker thread;
    returns once the broker acknowledged them all, so the job removes a memory only after that (while Kafka
    is unreachable the run fails, and the memories it was archiving stay)."""

    async def send_all(records: list[ArchivedRecord]) -> None:
        producer = await kafka()
        futures = [
            await producer.send(MEMORY_ARCHIVED, key=r.workspace_id.encode(), value=r.to_json()) for r in records
        ]
        await asyncio.gather(*futures)

    def sink(records: list[ArchivedRecord]) -> None:
        if not records:
            return
        try:
            asyncio.run_coroutine_threadsafe(send_all(records), loop).result(ARCHIVE_TIMEOUT_S)
        except EpisodicError:
            raise
        except Exception as e:  # Kafka away or slow: the run stops here (an admin run answers 503, not 500)
            raise BrokerUnavailable(f"cannot archive to {MEMORY_ARCHIVED}: {type(e).__name__}: {e}") from e

    return sink


def reference_counter(
    settings: Settings, store: MemoryStore, state: StateStore, clock: Callable[[], datetime]
) -> ReferenceCounter:
    return ReferenceCounter(store=store, state=state, horizon_days=settings.reference_ledger_days, clock=clock)


def review_applier(
    settings: Settings, store: MemoryStore, state: StateStore, clock: Callable[[], datetime]
) -> ReviewApplier:
    return ReviewApplier(
        store=store,
        state=state,
        horizon_days=settings.reference_ledger_days,
        ranking=settings.review_ranking,
        clock=clock,
        surprise_boost=settings.surprise_boost,
    )


def decay_job(
    settings: Settings,
    *,
    store: MemoryStore,
    state: StateStore,
    kafka: Kafka,
    loop: asyncio.AbstractEventLoop,
    metrics: Metrics,
    clock: Callable[[], datetime],
) -> DecayJob:
    """The configured job: decay every night, retention when EPISODIC_RETENTION_ENABLED, ledger pruning."""
    retention = RetentionPolicy(floor_days=settings.retention_floor_days) if settings.retention_enabled else None
    counter = reference_counter(settings, store, state, clock)
    reviews = review_applier(settings, store, state, clock)

    def prune(now: datetime) -> int:  # both ledgers of the importance agent
        return counter.prune(now) + reviews.prune(now)

    return DecayJob(
        store=store,
        state=state,
        clock=clock,
        page_size=settings.decay_page_size,
        retention=retention,
        archive=archive_sink(kafka, loop),
        prune=prune,
        metrics=metrics,
        reviews=settings.review_ranking,
        surprise_boost=settings.surprise_boost,
    )
