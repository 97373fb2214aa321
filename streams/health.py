"""The health agent: the inputs of the daily memory-health snapshot, and its schedule (SPEC §5, §8).

Thin pipes around `episodic.maintenance.health_inputs` and `episodic.maintenance.health_job`:

- journal.embeddable -> the ledger of accepted embeddable entries (coverage's denominator);
- memory.referenced -> the daily tallies of the hits' query–memory cosines (efficiency);
- a timer: when today's scheduled time (EPISODIC_HEALTH_DAILY_AT, UTC) has passed and the daily run has not
  completed today, snapshot every workspace and crew that has no snapshot of today, then hand the
  snapshots to `on_snapshots` (the role publishes them on memory.health and updates the gauges).

Malformed records on either topic are counted in `episodic_agent_malformed_total{agent="health",topic}`,
logged and skipped. Runs in its own consumer group (`<prefix>-health`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faust

from episodic.kernel.metrics import Metrics
from episodic.maintenance.health_inputs import Ledger, RecallTally, Referenced
from episodic.maintenance.health_job import HealthJob
from schemas import topics as T
from schemas.events import EmbeddableRecord, HealthSnapshot, ReferencedEvent, control_of
from streams.agents import batch_agent, decode_batch, retrying
from streams.transport import RecordBatch

log = logging.getLogger(__name__)

AGENT = "health"
OnSnapshots = Callable[[list[HealthSnapshot]], None]


@dataclass(frozen=True, slots=True)
class HealthTopics:
    embeddable: str = T.JOURNAL_EMBEDDABLE
    referenced: str = T.MEMORY_REFERENCED
    health: str = T.MEMORY_HEALTH

    def all(self) -> tuple[str, str, str]:
        return (self.embeddable, self.referenced, self.health)


def install_health(
    app: faust.App,
    *,
    ledger: Ledger,
    tally: RecallTally,
    job: HealthJob,
    metrics: Metrics,
    on_snapshots: OnSnapshots,
    tick_s: float,
    topics: HealthTopics = HealthTopics(),
) -> None:
    """Declare the two input agents and the daily timer on `app`."""

    async def accepted(batch: RecordBatch) -> list[Any]:
        entries = [r for r in batch.records if control_of(r.headers) is None]  # forgets: see health_inputs
        pairs = decode_batch(entries, _parse(EmbeddableRecord), metrics=metrics, agent=AGENT, topic=topics.embeddable)
        records = [r for _, r in pairs]
        if records:
            n = await retrying(
                lambda: asyncio.to_thread(ledger.record, records), metrics=metrics, agent=AGENT, stage="store"
            )
            metrics.health_inputs.labels(input="accepted").inc(n)
        return [rec for rec, _ in pairs]

    async def referenced(batch: RecordBatch) -> list[Any]:
        pairs = decode_batch(
            batch.records, _parse(ReferencedEvent), metrics=metrics, agent=AGENT, topic=topics.referenced
        )
        items = [Referenced(rec.partition, rec.offset, int(rec.timestamp or 0), ev) for rec, ev in pairs]
        if items:
            done = await retrying(
                lambda: asyncio.to_thread(tally.apply, items), metrics=metrics, agent=AGENT, stage="store"
            )
            metrics.health_inputs.labels(input="recalls").inc(done.counted)
            metrics.health_inputs.labels(input="recalls_replayed").inc(done.replayed)
        return [rec for rec, _ in pairs]

    async def daily() -> None:
        try:
            if not await asyncio.to_thread(job.daily_due):
                return
            log.info("health agent: daily snapshot run")
            snaps, failed = await asyncio.to_thread(job.run_daily)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the next tick tries again
            metrics.agent_errors.labels(agent=AGENT, stage="schedule").inc()
            log.warning("health agent: the daily run failed: %s", e)
            return
        if failed:
            metrics.agent_errors.labels(agent=AGENT, stage="schedule").inc()
        on_snapshots(snaps)
        log.info(
            "health agent: %d snapshot(s) stored%s", len(snaps), f"; failed: {', '.join(failed)}" if failed else ""
        )

    batch_agent(app, topics.embeddable, agent=AGENT, handle=accepted, metrics=metrics, name="episodic.health.accepted")
    batch_agent(
        app,
        topics.referenced,
        agent=AGENT,
        handle=referenced,
        metrics=metrics,
        name="episodic.health.referenced",
    )
    app.timer(interval=tick_s, name="episodic.health.daily")(daily)


def _parse(kind: Any) -> Callable[[bytes | None], Any]:
    """`kind.from_json` over a record value (a tombstone reads as empty bytes, which is malformed)."""
    return lambda raw: kind.from_json(raw or b"")
