"""Reviews from use (`memory.reviewed`, issue 26): each event applied once to its memories' FSRS state. Over
the ports, no Kafka (the importance agent in `streams/importance.py` runs it).

For every review an event lists, in the event's order and events in the partition's order, the memory's
review state (`episodic.domain.review.REVIEW_FIELDS`: review_count, review_ratings, last_rating,
last_reviewed_at, stability, difficulty) goes one FSRS step further (`episodic.domain.review.review`). This
agent owns those fields and writes only them (`set_payloads`), so a re-index, decay or the reference counts
running meanwhile keep their own. A review of a memory that was folded into another after the recall
service resolved its id counts for the owner (its `folded_into`), as the service's own resolution does.

When reviews drive ranking (`EPISODIC_REVIEW_RANKING` `reinforce` or `fsrs`), the reviewed memories'
`importance_score` is recomputed at once, with the decay's own formula and write (`decay.rescore`, computed from
the memory as it is at the write, writer `reviews`), so that the next recall ranks by the review rather than
after the nightly job. With `off` importance is not touched.

**Once per event**: the importance agent's ledger (`episodic.maintenance.importance.Ledgered`), kind
`reviewed`: the batch's new events are marked `pending` with each memory's review count before and its
whole review state after, the memories are written, the events are marked `done`. A re-delivered event
found `pending` (a crash in between) is finished: a memory still at its `before` count gets the state, one
already past it is left alone. Events older than the ledger's horizon (`EPISODIC_REFERENCE_LEDGER_DAYS`) are
not applied (`stale`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from episodic.domain.identity import point_id
from episodic.domain.review import RATINGS, REVIEW_FIELDS, ReviewState, review, state_of
from episodic.domain.surprise import BOOST
from episodic.indexing.folding import FOLDED_INTO
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.maintenance.decay import rescore
from episodic.maintenance.importance import Ledgered, LedgerResult, _now, iso
from schemas.events import ReviewedEvent

log = logging.getLogger(__name__)

LEDGER_KIND = "reviewed"
PRUNE_KEY = "reviewed-ledger"


@dataclass
class ReviewResult(LedgerResult):
    reviews: int = 0  # reviews applied to a memory
    missing: int = 0  # reviews of memories that no longer exist
    ratings: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RATINGS, 0))  # applied, by rating
    rescored: int = 0  # memories whose importance_score the reviews changed


class ReviewApplier(Ledgered[ReviewedEvent, ReviewResult]):
    """Applies batches of `memory.reviewed` events to the memories' review state, once per event."""

    ledger_kind = LEDGER_KIND
    prune_key = PRUNE_KEY
    topic = "memory.reviewed"

    def __init__(
        self,
        *,
        store: MemoryStore,
        state: StateStore,
        horizon_days: int = 7,
        ranking: str = "off",
        clock: Callable[[], datetime] = _now,
        surprise_boost: float = BOOST,
    ) -> None:
        super().__init__(store=store, state=state, horizon_days=horizon_days, clock=clock)
        self.ranking = ranking
        self.surprise_boost = surprise_boost  # EPISODIC_SURPRISE_BOOST (episodic.domain.surprise)

    def _result(self) -> ReviewResult:
        return ReviewResult()

    def _owners(self, pids: list[str], workspace_of: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
        """point id reviewed -> the point id whose state it changes (the owner of a folded memory), and the
        current payloads of those owners."""
        current = self.store.retrieve(sorted(set(pids)))
        redirect: dict[str, str] = {}
        for pid in pids:
            payload = current.get(pid)
            into = payload.get(FOLDED_INTO) if payload is not None else None
            if isinstance(into, str) and into:
                redirect[pid] = point_id(workspace_of[pid], into)
        if redirect:
            current.update(self.store.retrieve(sorted(set(redirect.values()) - set(current))))
        return {pid: redirect.get(pid, pid) for pid in pids}, current

    def _count(self, new: dict[str, ReviewedEvent], result: ReviewResult) -> None:
        order: list[tuple[str, str, str, datetime]] = []  # (event key, point id, rating, at), in order
        workspace_of: dict[str, str] = {}
        for key, ev in new.items():
            for item in ev.reviews:
                pid = point_id(ev.workspace_id, item.entry_id)
                workspace_of[pid] = ev.workspace_id
                order.append((key, pid, item.rating, ev.at))
        owner, current = self._owners(sorted(workspace_of), workspace_of)
        states: dict[str, ReviewState] = {}
        before: dict[str, int] = {}
        touched: dict[str, set[str]] = {key: set() for key in new}
        for key, pid, rating, at in order:
            target = owner[pid]
            payload = current.get(target)
            if payload is None:
                result.missing += 1
                continue
            if target not in states:
                states[target] = state_of(payload)
                before[target] = states[target].review_count
            states[target] = review(states[target], rating, at)
            touched[key].add(target)
            result.reviews += 1
            result.ratings[rating] += 1
        targets: dict[str, list[Any]] = {pid: [before[pid], st.fields()] for pid, st in states.items()}
        docs = {
            key: {
                "workspace_id": ev.workspace_id,
                "day": ev.at.astimezone(UTC).date().isoformat(),
                "at": iso(ev.at),
                "state": "pending",
                "targets": {pid: targets[pid] for pid in sorted(touched[key])},
            }
            for key, ev in new.items()
        }
        self.state.put_many(self.ledger_kind, docs)
        self.store.set_payloads({pid: fields for pid, (_, fields) in targets.items()})
        result.rescored = self._rescore(targets)
        self.state.put_many(self.ledger_kind, {k: self._done(d) for k, d in docs.items()})

    def _finish(self, pending: dict[str, dict[str, Any]]) -> None:
        """Complete events a crash left between the ledger's two writes."""
        targets: dict[str, list[Any]] = {}
        for doc in pending.values():
            for pid, t in (doc.get("targets") or {}).items():
                targets[pid] = t
        current = self.store.retrieve(sorted(targets), fields=REVIEW_FIELDS)
        fix = {
            pid: fields
            for pid, (before, fields) in targets.items()
            if pid in current and state_of(current[pid]).review_count == before
        }
        if fix:
            log.info("importance: finishing %d review states a crash left half-applied", len(fix))
            self.store.set_payloads(fix)
        self._rescore(targets)
        self.state.put_many(self.ledger_kind, {k: self._done(d) for k, d in pending.items()})

    def _rescore(self, pids: Iterable[str]) -> int:
        """Recompute the importance of reviewed memories now, when reviews drive ranking."""
        if self.ranking == "off":
            return 0
        now = self.clock()
        return len(
            rescore(
                self.store, sorted(pids), now, reviews=self.ranking, writer="reviews", boost=self.surprise_boost
            ).applied
        )
