"""One decoded batch of journal.embeddable applied to the store: its forgets first, then the entries they
do not cover, with poison isolated (SPEC §11; the embedding consumer's delivery rules in consumers.embedding).

Order. The batch's forgets are applied (`Forgetter.apply`, in offset order) before any of its entries is
indexed; then every entry a tombstone or a forget rule covers is left out (`Forgetter.admit`) and the rest is
indexed. A forget covers the entries before it, so this is the same as applying the batch in offset order.

Errors are sorted by what retrying can do. Transient ones (the store unavailable) are retried by the
consumer's `retrying` (for ever; during a drain until it gives up: `Abandoned`, the batch is re-delivered).
Deterministic ones never wedge the partition:
- a forget the store refuses is marked failed (its status document carries the error, so the recall service
  answers `failed` and the caller can ask again) and goes to journal.dlq as
  `forget_failed`; the batch's other records go on;
- an entry whose id belongs to another agent's memory (episodic.indexing.indexer) goes to journal.dlq as
  `id_taken` with its original bytes; the rest of the batch is indexed;
- entries: the batch is split in halves until the records that fail alone are found; those go to
  journal.dlq as `store_rejected` with their original bytes. Each half is admitted again before it is
  indexed, so an entry a forget covers is never indexed (nor dead-lettered), whichever half it lands in.
- which entries a forget covers is asked of `Forgetter.admit`; the indexer decides them `tombstoned` with
  the rest of the batch (`episodic.indexing.decisions`), so its count of what it left out is its own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

from aiokafka import ConsumerRecord

from consumers.poison import FORGET_FAILED, ID_TAKEN, STORE_REJECTED, Abandoned, dead_letter, merged
from episodic.indexing.indexer import BatchResult, Indexer
from episodic.kernel.metrics import Metrics
from episodic.lifecycle.forget import ForgetOutcome, Forgetter, Position
from schemas.events import DlqRecord, EmbeddableRecord, ForgetRecord, ForgottenEvent

log = logging.getLogger(__name__)

Msg: TypeAlias = ConsumerRecord[bytes, bytes]
Item = tuple[EmbeddableRecord, Msg]
Forget = tuple[ForgetRecord, Msg]
# `fn(*args)` in a worker thread, transient store failures retried (the consumer's backoff)
Retrying = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class Applied:
    """What one batch did: the indexing result, the dead letters, what the forgets did and left out."""

    result: BatchResult = field(default_factory=BatchResult)
    dead: list[DlqRecord] = field(default_factory=list)
    outcomes: list[ForgetOutcome] = field(default_factory=list)
    left_out: int = 0  # entries a tombstone or a forget rule covers: not indexed
    rejections: int = 0  # deterministic failures met on the way (each split counts one)

    @property
    def forgotten(self) -> list[ForgottenEvent]:
        return [e for o in self.outcomes for e in o.events()]

    def add(self, other: Applied) -> None:
        self.result = merged(self.result, other.result)
        self.dead += other.dead
        self.outcomes += other.outcomes
        self.left_out += other.left_out
        self.rejections += other.rejections


def _position(msg: Msg) -> Position:
    return Position(msg.partition, msg.offset)


class BatchApplier:
    def __init__(self, *, indexer: Indexer, forgetter: Forgetter | None, metrics: Metrics, retrying: Retrying) -> None:
        self.indexer = indexer
        self.forgetter = forgetter
        self.metrics = metrics
        self.retrying = retrying

    async def apply(self, forgets: Sequence[Forget], items: Sequence[Item], *, defer: bool) -> Applied:
        """The batch's forgets, then its entries (see the module doc)."""
        done = Applied()
        for forget, msg in forgets:
            done.add(await self._forget(forget, msg))
        done.add(await self._entries(items, defer=defer))
        return done

    async def _forget(self, forget: ForgetRecord, msg: Msg) -> Applied:
        forgetter = self.forgetter
        if forgetter is None:  # pragma: no cover - the consumer dead-letters forgets it cannot apply
            raise RuntimeError("no forgetter")
        try:
            return Applied(outcomes=[await self.retrying(forgetter.apply, forget, _position(msg))])
        except Abandoned:
            raise
        except Exception as e:  # the store refuses this forget: it must not wedge the partition
            self.metrics.consumer_errors.labels(stage="store").inc()
            # The store's words go to the log and the dead letter; the status (which the API shows) gets
            # the error's kind and a reference to find them.
            ref = uuid.uuid4().hex[:12]
            log.error("forget %s in %s failed (ref %s; dead-lettered as %s): %s", forget.forget_id,
                      forget.workspace_id, ref, FORGET_FAILED, e)  # fmt: skip
            why = f"the store refused it ({type(e).__name__}; ref {ref}: see the embedding consumer's log)"
            try:
                await self.retrying(forgetter.fail, forget, _position(msg), why)
            except Abandoned:
                raise
            except Exception as again:  # its status stays pending; the dead letter still records it
                log.error("cannot mark forget %s failed: %s", forget.forget_id, again)
            return Applied(dead=[dead_letter(FORGET_FAILED, e, msg)], rejections=1)

    async def _entries(self, items: Sequence[Item], *, defer: bool) -> Applied:
        """Admit and index `items`; a deterministic failure splits them until the records that fail alone are
        found (dead-lettered with their original bytes)."""
        if not items:
            return Applied()
        try:
            forgotten = await self._admit(items)
            records = [r for r, _ in items]
            result = await self.retrying(self.indexer.index_batch, records, defer_dense=defer, forgotten=forgotten)
            return Applied(result=result, left_out=result.left_out, dead=_refused(result, items))
        except Abandoned:
            raise
        except Exception as e:  # the store (or the indexer) refuses something in these records
            self.metrics.consumer_errors.labels(stage="store").inc()
            if len(items) == 1:
                rec, msg = items[0]
                log.error("store rejected %s/%s (dead-lettered as %s): %s", rec.workspace_id, rec.id, STORE_REJECTED, e)
                return Applied(dead=[dead_letter(STORE_REJECTED, e, msg)], rejections=1)
            log.warning("store rejected a batch of %d (%s); splitting it to find the record(s)", len(items), e)
        mid = len(items) // 2
        done = Applied(rejections=1)
        done.add(await self._entries(items[:mid], defer=defer))
        done.add(await self._entries(items[mid:], defer=defer))
        return done

    async def _admit(self, items: Sequence[Item]) -> frozenset[int]:
        """The positions of the items a tombstone or a forget rule covers (the indexer decides them
        `tombstoned`: not indexed)."""
        if self.forgetter is None:
            return frozenset()
        records = [r for r, _ in items]
        _, out = await self.retrying(self.forgetter.admit, records, [_position(m) for _, m in items])
        gone = {id(r) for r in out}
        return frozenset(i for i, r in enumerate(records) if id(r) in gone)


def _refused(result: BatchResult, items: Sequence[Item]) -> list[DlqRecord]:
    """Dead letters (`id_taken`) of the entries the indexer left out: their id is another agent's memory."""
    if not result.refused:
        return []
    msgs = {id(rec): msg for rec, msg in items}
    dead = []
    for rec, error in result.refused:
        log.warning("%s/%s refused (dead-lettered as %s): the id belongs to another agent's memory",
                    rec.workspace_id, rec.id, ID_TAKEN)  # fmt: skip
        dead.append(dead_letter(ID_TAKEN, error, msgs[id(rec)]))
    return dead


def observe(metrics: Metrics, applied: Applied, items: Sequence[Item]) -> None:
    """Per-event metrics of a batch once its output is delivered: modes, index lag, produce-to-index."""
    result = applied.result
    metrics.observe_forgets(applied.outcomes, applied.left_out)
    now = datetime.now(UTC).timestamp()
    by_key = {(r.workspace_id, r.id): (r, msg.timestamp / 1000.0) for r, msg in items}
    for ev in result.events:
        metrics.indexed.labels(mode=ev.mode).inc()
        src = by_key.get((ev.workspace_id, ev.entry_id))
        if src is None:
            continue
        rec, produced = src
        if ev.mode != "duplicate":
            metrics.index_lag.observe(max(0.0, now - rec.ts_datetime.timestamp()))
        if produced:
            metrics.produce_to_index.observe(max(0.0, now - produced))
