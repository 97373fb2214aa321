"""Reference counts from `memory.referenced`, each event counted once (SPEC §8, §10). Over the ports, no Kafka.

For every hit an event lists (the recall service lists only hits it returned or rendered), the memory's
`reference_count` grows by one and `last_referenced_at` becomes the latest `at`. Nothing else of the memory
is written (`set_payloads` merges these two fields), so a re-index or the decay job running meanwhile keeps
its own fields.

**Once per event.** Each event has a key: its `event_id` (the recall service sets a uuid), or a digest of
its bytes for an event without one. The ledger (state kind `referenced`, beside the memories) records every
key it has applied, so a re-delivered event is recognised and skipped, also after a restart. A batch is
applied in three writes, so that a crash at any point still counts every event exactly once:

1. the ledger marks the batch's new events `pending`, with the counts each of their memories goes from
   and to (`targets`: point id -> [before, after, last_referenced_at]);
2. the memories get their new counts (one batched store call);
3. the ledger marks the events `done` (and drops the targets).

A re-delivered event found `pending` (a crash between 1 and 3) is finished: a memory still at `before`
gets `after`, one already at `after` (or beyond: later events) is left alone. Only this agent writes
`reference_count` (events of a workspace arrive in order on its partition), so `before` tells for sure.

**Bounded.** Ledger entries carry the UTC day of their event and are pruned `horizon_days` after it (the
nightly job calls `prune`). An event older than the horizon is not applied (counted `stale`): its ledger
entry could already be gone, so a replay of old records would otherwise count twice. Keep the horizon at
least the topic's retention.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from episodic.domain.identity import point_id
from episodic.domain.scoring import parse_time
from episodic.kernel.ports import MemoryStore, StateStore
from schemas.events import ReferencedEvent, ReviewedEvent

log = logging.getLogger(__name__)

LEDGER_KIND = "referenced"
JOB_KIND = "job"
PRUNE_KEY = "referenced-ledger"
DELETE_CHUNK = 1000
# the fields a batch reads of its memories: only those it writes (a memory's whole payload, its text, context
# and relations, would cost the process a conversion per hit under the interpreter lock, beside the recalls)
COUNTED = ("reference_count", "last_referenced_at")


class _Event(Protocol):
    @property
    def at(self) -> datetime: ...


E = TypeVar("E", bound=_Event)
R = TypeVar("R", bound="LedgerResult")


def _now() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_key(event: ReferencedEvent | ReviewedEvent, raw: bytes) -> str:
    """The ledger key of an event: its event_id, else a digest of the record's bytes (a re-delivered record
    has the same bytes)."""
    return event.event_id or f"sha256:{hashlib.sha256(raw).hexdigest()}"


@dataclass
class LedgerResult:
    """What a `Ledgered` batch did with its events (the subclasses' results add what their events carry)."""

    events: int = 0  # events in the batch
    applied: int = 0  # applied now
    duplicate: int = 0  # applied before (a re-delivery), or twice in the batch
    recovered: int = 0  # left half-applied by a crash, finished now
    stale: int = 0  # older than the ledger's horizon: not applied

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReferenceResult(LedgerResult):
    hits: int = 0  # references counted (memory x event)
    missing: int = 0  # hits on memories that no longer exist


def _later(a: Any, b: Any) -> Any:
    """The later of two RFC 3339 stamps (either may be missing)."""
    ta, tb = parse_time(a), parse_time(b)
    if ta is None:
        return b
    if tb is None:
        return a
    return a if ta >= tb else b


class Ledgered(Generic[E, R]):
    """Applies batches of keyed events to the store once per event, through a ledger in the state store (see
    the module doc): the reference counts here, the review state in `episodic.maintenance.reviews`. A subclass
    names its ledger (`ledger_kind`, `prune_key`), makes its result, and writes a batch's new events
    (`_count`: the ledger's `pending` docs with their targets, the memories, then `done`) and finishes the
    events a crash left pending (`_finish`)."""

    ledger_kind = LEDGER_KIND
    prune_key = PRUNE_KEY
    topic = "memory.referenced"

    def __init__(
        self,
        *,
        store: MemoryStore,
        state: StateStore,
        horizon_days: int = 7,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        if horizon_days < 1:
            raise ValueError("horizon_days must be at least 1")
        self.store = store
        self.state = state
        self.horizon = timedelta(days=horizon_days)
        self.clock = clock

    def _result(self) -> R:
        raise NotImplementedError

    def _count(self, new: dict[str, E], result: R) -> None:
        raise NotImplementedError

    def _finish(self, pending: dict[str, dict[str, Any]]) -> None:
        raise NotImplementedError

    def apply(self, events: Sequence[tuple[str, E]]) -> R:
        """Apply a batch of (key, event) in order; returns what happened to each."""
        result = self._result()
        batch: dict[str, E] = {}
        for key, ev in events:
            batch.setdefault(key, ev)
        result.events = len(events)
        repeats = len(events) - len(batch)  # the same event twice in one batch
        if not batch:
            return result
        cutoff = self.clock() - self.horizon
        fresh = {k: ev for k, ev in batch.items() if ev.at >= cutoff}
        result.stale = len(batch) - len(fresh)
        if result.stale:
            log.warning("importance: %d %s events older than %s not applied", result.stale, self.topic, cutoff)
        ledger = self.state.get_many(self.ledger_kind, list(fresh))
        pending = {k: d for k, d in ledger.items() if d.get("state") == "pending"}
        if pending:
            self._finish(pending)
            result.recovered = len(pending)
        result.duplicate = len(ledger) - len(pending) + repeats
        new = {k: ev for k, ev in fresh.items() if k not in ledger}
        if new:
            result.applied = len(new)
            self._count(new, result)
        return result

    @staticmethod
    def _done(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if k != "targets"} | {"state": "done"}

    # -- pruning ---------------------------------------------------------------------------------------

    def prune(self, now: datetime | None = None) -> int:
        """Forget ledger entries of days older than the horizon; returns how many were removed. The first
        prune scans the whole ledger; later ones only the days since the last (the `day` field is indexed)."""
        now = now or self.clock()
        cutoff = (now - self.horizon).astimezone(UTC).date()  # entries of days before this go
        cursor = self.state.get(JOB_KIND, self.prune_key) or {}
        since = cursor.get("pruned_before")
        keys: list[str] = []
        if since is None:
            keys = [k for k, d in self.state.scan(self.ledger_kind) if str(d.get("day", "")) < cutoff.isoformat()]
        else:
            day = date.fromisoformat(since)
            while day < cutoff:
                keys += [k for k, _ in self.state.scan(self.ledger_kind, where={"day": day.isoformat()})]
                day += timedelta(days=1)
        for i in range(0, len(keys), DELETE_CHUNK):
            self.state.delete(self.ledger_kind, keys[i : i + DELETE_CHUNK])
        if since is None or since < cutoff.isoformat():
            self.state.put(JOB_KIND, self.prune_key, {"pruned_before": cutoff.isoformat(), "at": iso(now)})
        if keys:
            log.info("importance: pruned %d %s ledger entries older than %s", len(keys), self.topic, cutoff)
        return len(keys)


class ReferenceCounter(Ledgered[ReferencedEvent, ReferenceResult]):
    """Applies batches of `memory.referenced` events to the store, once per event (see the module doc)."""

    def _result(self) -> ReferenceResult:
        return ReferenceResult()

    def _count(self, new: dict[str, ReferencedEvent], result: ReferenceResult) -> None:
        result.hits, result.missing = self._count_references(new)

    def _count_references(self, new: dict[str, ReferencedEvent]) -> tuple[int, int]:
        per_point: dict[str, list[Any]] = {}  # point id -> [references, latest at]
        touched: dict[str, list[str]] = {}  # event key -> its point ids
        for key, ev in new.items():
            pids = sorted({point_id(ev.workspace_id, h.entry_id) for h in ev.hits})
            touched[key] = pids
            for pid in pids:
                entry = per_point.setdefault(pid, [0, None])
                entry[0] += 1
                entry[1] = _later(entry[1], iso(ev.at))
        current = self.store.retrieve(sorted(per_point), fields=COUNTED)
        targets: dict[str, list[Any]] = {}
        for pid, (n, last) in per_point.items():
            payload = current.get(pid)
            if payload is None:
                continue
            before = int(payload.get("reference_count") or 0)
            targets[pid] = [before, before + n, _later(payload.get("last_referenced_at"), last)]
        docs = {
            key: {
                "workspace_id": ev.workspace_id,
                "day": ev.at.astimezone(UTC).date().isoformat(),
                "at": iso(ev.at),
                "state": "pending",
                "targets": {pid: targets[pid] for pid in touched[key] if pid in targets},
            }
            for key, ev in new.items()
        }
        self.state.put_many(self.ledger_kind, docs)
        self.store.set_payloads(
            {pid: {"reference_count": after, "last_referenced_at": last} for pid, (_, after, last) in targets.items()}
        )
        self.state.put_many(self.ledger_kind, {k: self._done(d) for k, d in docs.items()})
        hits = sum(len(d["targets"]) for d in docs.values())
        missing = sum(len(touched[k]) for k in new) - hits
        return hits, missing

    def _finish(self, pending: dict[str, dict[str, Any]]) -> None:
        """Complete events a crash left between the ledger's two writes."""
        targets: dict[str, list[Any]] = {}
        for doc in pending.values():
            for pid, t in (doc.get("targets") or {}).items():
                targets[pid] = t
        current = self.store.retrieve(sorted(targets), fields=COUNTED)
        fix = {
            pid: {"reference_count": after, "last_referenced_at": last}
            for pid, (before, after, last) in targets.items()
            if pid in current and int(current[pid].get("reference_count") or 0) == before
        }
        if fix:
            log.info("importance: finishing %d reference counts a crash left half-applied", len(fix))
            self.store.set_payloads(fix)
        self.state.put_many(self.ledger_kind, {k: self._done(d) for k, d in pending.items()})
