"""Dense vectors after the fact: the embedding consumer's densify loop (SPEC §5, §10 "Sparse-only").

Memories written BM25-first (a deferred batch, sparse-only mode, a batch whose embedding failed) get their
dense vectors here, oldest first, whenever the model is free, and a second `memory.indexed` ("vector")
each: DENSIFY_BULK a round while the process's core budget is unclaimed (a backlog, a backfill: the
model's passes take every core), DENSIFY_BATCH while a recall or the gate claims one. The missing vectors
are found in the store, so a crash in between loses nothing; the same loop is the backfill after
sparse-only mode.

A text the model cannot embed must not stall the others: `Indexer.densify` embeds one by one after a
failed batch, counts each failure in the memory's payload and quarantines a memory after
`EPISODIC_DENSIFY_MAX_ATTEMPTS` failures (it stays BM25-only). The loop exports the failures
(`episodic_densify_failures_total`) and the number quarantined (`episodic_densify_quarantined`, also in
/v1/memory/stats and `episodic doctor`).

When no vector is missing, the loop records the row count (`pieces`, the hybrid's piece prior reads it) of
memories whose vectors were written before the store recorded it, DENSIFY_BULK a round, no model needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from episodic.bus.kafka import dumps
from episodic.embedding.cores import CoreBudget
from episodic.indexing.indexer import DensifyRound, Indexer
from episodic.kernel.metrics import Metrics

log = logging.getLogger(__name__)

DENSIFY_BATCH = 32  # while a recall or the gate claims a core: small rounds, the model soon free again
DENSIFY_BULK = 128  # while the cores are free: fewer rounds (each one scans the store and waits for the acks)
DENSIFY_IDLE_S = 30.0  # look for missing vectors at least this often (backfill after sparse-only mode)
DENSIFY_STOP_S = 30.0  # on stop, wait this long for the vectors being computed


class Speed(Protocol):
    def observe(self, chars: int, seconds: float) -> None: ...


Publish = Callable[[Sequence[tuple[str, bytes | None, bytes]]], Awaitable[None]]


@dataclass(frozen=True)
class _Writing:
    ids: frozenset[str]  # the round's point ids: the next round leaves them out
    task: asyncio.Task[int]


class Densifier:
    def __init__(
        self,
        *,
        indexer: Indexer,
        metrics: Metrics,
        speed: Speed,
        publish: Publish,
        quarantine_after: int,
        stopping: asyncio.Event,
        indexed_topic: str | None = None,
        cores: CoreBudget | None = None,
    ) -> None:
        from schemas import topics

        self.indexer = indexer
        self.metrics = metrics
        self.speed = speed
        self.publish = publish
        self.quarantine_after = quarantine_after
        self.stopping = stopping
        self.indexed_topic = indexed_topic or topics.MEMORY_INDEXED
        self.cores = cores  # the process's core budget (episodic.embedding.cores): how big a round may be
        self.busy = False  # the model is computing vectors for the backlog
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Fill missing dense vectors whenever the model is free; look again at least every DENSIFY_IDLE_S.
        Store errors are retried on the next round. A round's vectors are written (and its events
        published) while the next round embeds, so the model does not wait for the store and the broker."""
        await self._count_quarantined()
        writing: _Writing | None = None  # the last round's write, while the next one embeds
        try:
            while not self.stopping.is_set():
                self._wake.clear()
                filled = 0
                try:
                    work = await self._pick(writing.ids if writing else frozenset())
                    if work is not None:
                        await self._embed(work)
                    if writing is not None:
                        done, writing = writing, None
                        filled += await done.task
                    if work is not None:
                        writing = _Writing(work.point_ids, asyncio.create_task(self._write(work)))
                        filled += len(work.todo)
                    if not filled:  # no vector missing: record the piece count of memories written before it
                        filled = await asyncio.to_thread(self.indexer.store.backfill_pieces, DENSIFY_BULK)
                        if filled:
                            log.info("recorded the piece count of %d memories written before it existed", filled)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.metrics.consumer_errors.labels(stage="densify").inc()
                    log.warning("adding dense vectors failed (retried later): %s", e)
                if filled:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), DENSIFY_IDLE_S)
        finally:
            if writing is not None:  # stopping: the vectors computed land before the store closes
                with contextlib.suppress(Exception):
                    await writing.task

    def round_size(self) -> int:
        """Memories per round: DENSIFY_BULK while nothing claims a core, else DENSIFY_BATCH."""
        if self.cores is None or self.cores.claimed():
            return DENSIFY_BATCH
        return DENSIFY_BULK

    async def once(self) -> int:
        """One round, not overlapped with another; returns how many memories it handled (filled, or failed
        and counted)."""
        work = await self._pick(frozenset())
        if work is None:
            return 0
        await self._embed(work)
        return await self._write(work)

    async def _pick(self, skip: frozenset[str]) -> DensifyRound | None:
        size = self.round_size()
        work = await asyncio.to_thread(
            self.indexer.densify_pick, size, quarantine_after=self.quarantine_after, skip=skip
        )
        if self.cores is not None:  # a full round means more are waiting: background work (the linker) yields
            self.cores.backlog(work is not None and len(work.todo) >= size)
        return work

    async def _embed(self, work: DensifyRound) -> None:
        self.busy = True
        try:
            await asyncio.to_thread(self.indexer.densify_embed, work)
        finally:
            self.busy = False
        self.speed.observe(work.chars, work.embed_seconds)

    async def _write(self, work: DensifyRound) -> int:
        """Write a round's vectors and publish its events; how many memories it filled or failed on."""
        result = await asyncio.to_thread(self.indexer.densify_write, work, quarantine_after=self.quarantine_after)
        if result.failed:
            self.metrics.densify_failures.inc(result.failed)
            await self._count_quarantined()
        events = result.events
        if events:
            self.metrics.densified.inc(len(events))
            await self.publish(
                [(self.indexed_topic, ev.workspace_id.encode(), dumps(ev.to_json_dict())) for ev in events]
            )
        return len(events) + result.failed

    async def _count_quarantined(self) -> None:
        try:
            n = await asyncio.to_thread(self.indexer.store.count_quarantined, None, self.quarantine_after)
        except Exception as e:  # only a gauge: the next round tries again
            log.debug("cannot count quarantined memories: %s", e)
            return
        self.metrics.densify_quarantined.set(n)

    async def finish(self, task: asyncio.Task[Any]) -> None:
        """On stop: let a batch of vectors in flight land before the store closes, then cancel."""
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), DENSIFY_STOP_S)
        except BaseException:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
