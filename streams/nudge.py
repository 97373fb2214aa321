"""The nudge agent: journal.entries (every entry) -> per-run counters -> memory.nudges (SPEC §5, §8, §10).

A thin pipe around `episodic.maintenance.nudge` (the counting rules, the outbox and why each nudge is published exactly
once are documented there). Per fetched batch: decode every record with `schemas.journal.parse_entry`
(malformed ones are counted in `episodic_agent_malformed_total{agent="nudge"}` and skipped: the gate
dead-letters them), fold the batch and write the touched runs (nudges go into their outboxes in the same
write), publish the new nudges and wait for the broker, take them out of the outboxes, ack the batch. At
start, nudges left in outboxes by a crash are confirmed against memory.nudges (`published_ids`) and only
the missing ones are published. A timer forgets the runs that have been idle for EPISODIC_NUDGE_RUN_IDLE_S.

Runs in its own consumer group (`<prefix>-nudge`), independent of the gate's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import faust
from aiokafka.errors import KafkaError

from episodic.bus.offsets import read_to, topic_ends
from episodic.kernel.errors import BrokerUnavailable
from episodic.kernel.metrics import Metrics
from episodic.maintenance.nudge import NudgeBook, Observed
from schemas import topics as T
from schemas.events import InvalidRecord, NudgeEvent
from schemas.journal import InvalidEntry, JournalEntry, parse_entry
from streams.agents import batch_agent, decode_batch, retrying
from streams.transport import RecordBatch

log = logging.getLogger(__name__)

AGENT = "nudge"
PublishNudge = Callable[[NudgeEvent], Awaitable[None]]  # returns once the broker acknowledged it
CONFIRM_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class NudgeTopics:
    entries: str = T.JOURNAL_ENTRIES
    nudges: str = T.MEMORY_NUDGES

    def all(self) -> tuple[str, str]:
        return (self.entries, self.nudges)


def observed(pairs: list[tuple[Any, JournalEntry]]) -> tuple[list[Observed], int]:
    """What the counters need from decoded entries, and how many entries had no run (set aside)."""
    out: list[Observed] = []
    for rec, entry in pairs:
        if entry.run_id is not None:
            out.append(
                Observed(
                    partition=rec.partition,
                    offset=rec.offset,
                    ts_ms=int(rec.timestamp or 0),
                    workspace_id=entry.workspace_id,
                    agent_id=entry.agent_id,
                    run_id=entry.run_id,
                    entry_type=entry.entry_type,
                )
            )
    return out, len(pairs) - len(out)


def install_nudge(
    app: faust.App,
    *,
    book: NudgeBook,
    publish: PublishNudge,
    metrics: Metrics,
    clock: Callable[[], datetime],
    sweep_every_s: float,
    topics: NudgeTopics = NudgeTopics(),
) -> None:
    """Declare the nudge agent and its idle-run sweeper on `app`."""
    lock = asyncio.Lock()  # one batch or one sweep at a time over the book

    async def handle(batch: RecordBatch) -> list[Any]:
        pairs = decode_batch(
            batch.records, parse_entry, metrics=metrics, agent=AGENT, topic=topics.entries, errors=(InvalidEntry,)
        )
        seen, no_run = observed(pairs)
        metrics.nudge_entries.labels(outcome="no_run").inc(no_run)
        if seen:
            await fold(seen)
        return [rec for rec, _ in pairs]

    async def fold(seen: list[Observed]) -> None:
        async with lock:
            now = clock()
            applied = await retrying(
                lambda: asyncio.to_thread(book.apply, seen, now=now), metrics=metrics, agent=AGENT, stage="store"
            )
            metrics.nudge_entries.labels(outcome="counted").inc(applied.counted)
            metrics.nudge_entries.labels(outcome="replayed").inc(applied.replayed)
            await deliver(applied.nudges, book=book, publish=publish, metrics=metrics)

    async def sweep() -> None:
        async with lock:
            try:
                forgotten = await asyncio.to_thread(book.forget_idle, now=clock())
                metrics.nudge_forgotten.inc(forgotten)
                metrics.nudge_runs.set(await asyncio.to_thread(book.tracked))
            except Exception as e:  # the next sweep tries again
                metrics.agent_errors.labels(agent=AGENT, stage="schedule").inc()
                log.warning("nudge agent: forgetting idle runs failed: %s", e)

    batch_agent(app, topics.entries, agent=AGENT, handle=handle, metrics=metrics)
    app.timer(interval=sweep_every_s, name="episodic.nudge.sweep")(sweep)


async def publish_once(event: NudgeEvent, *, publish: PublishNudge, metrics: Metrics) -> None:
    """Publish one nudge, retried until the broker acknowledged it."""
    await retrying(lambda: publish(event), metrics=metrics, agent=AGENT, stage="publish", errors=(KafkaError, OSError))
    metrics.nudges.inc()


async def deliver(events: list[NudgeEvent], *, book: NudgeBook, publish: PublishNudge, metrics: Metrics) -> None:
    """Publish decided nudges (retried until the broker acknowledges), then take them out of the outboxes."""
    if not events:
        return
    for event in events:
        await publish_once(event, publish=publish, metrics=metrics)
        log.info(
            "nudge: run %s of %s (%s) has %d entries since its last memory.updated",
            event.run_id,
            event.workspace_id,
            event.agent_id,
            event.count,
        )
    await retrying(lambda: asyncio.to_thread(book.mark_sent, events), metrics=metrics, agent=AGENT, stage="store")


async def published_ids(
    bootstrap: str,
    topic: str,
    wanted: set[str],
    *,
    timeout: float = CONFIRM_TIMEOUT_S,
    options: Mapping[str, Any] | None = None,
    exact: bool = True,
) -> set[str] | None:
    """Which of the `wanted` nudge ids are already on `topic`: reads it from the start to the end offsets seen
    first (`episodic.bus.offsets.topic_ends` + `read_to`; `exact=False` on Tansu), stopping early once every
    wanted id is found. A topic that does not exist holds none of them. None when that could not be established
    within `timeout` overall (the caller then publishes: a nudge repeated beats a nudge lost)."""
    found: set[str] = set()
    try:
        async with asyncio.timeout(timeout):
            ends = await topic_ends(bootstrap, topic, wait_s=timeout, options=options, exact=exact)
            async with contextlib.aclosing(read_to(bootstrap, topic, ends, stall_s=timeout, options=options)) as recs:
                async for rec in recs:
                    try:
                        nid = NudgeEvent.from_json(rec.value or b"").nudge_id
                    except InvalidRecord:
                        continue
                    if nid in wanted:
                        found.add(nid)
                        if found >= wanted:
                            break
        return found
    except (BrokerUnavailable, KafkaError, OSError, TimeoutError) as e:
        log.warning("nudge agent: cannot read %s to confirm unsent nudges: %s", topic, e or type(e).__name__)
        return None


async def recover(
    *,
    book: NudgeBook,
    bootstrap: str,
    topic: str,
    publish: PublishNudge,
    metrics: Metrics,
    options: Mapping[str, Any] | None = None,
    exact: bool = True,
) -> tuple[int, int]:
    """Before consuming: publish the nudges left in outboxes that are not on `topic` yet, and clear the
    outboxes. Returns (left in outboxes, published now)."""
    unsent = await asyncio.to_thread(book.unsent)
    if not unsent:
        return 0, 0
    on_topic = await published_ids(bootstrap, topic, {e.nudge_id for e in unsent}, options=options, exact=exact)
    missing = [e for e in unsent if on_topic is None or e.nudge_id not in on_topic]
    log.info("nudge agent: %d nudge(s) left in outboxes, %d not on %s yet", len(unsent), len(missing), topic)
    for event in missing:
        await publish_once(event, publish=publish, metrics=metrics)
    await retrying(lambda: asyncio.to_thread(book.mark_sent, unsent), metrics=metrics, agent=AGENT, stage="store")
    return len(unsent), len(missing)
