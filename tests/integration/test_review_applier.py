"""Reviews from memory.reviewed over the real store (Qdrant Edge on disk), issue 26: each event applied once
(a re-delivery, a crash between any two writes), a folded memory's review counts for its owner, missing
memories and stale events, and importance recomputed at once only when reviews drive ranking."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.domain.review import state_of
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.maintenance.importance import event_key
from episodic.maintenance.reviews import LEDGER_KIND, ReviewApplier
from schemas.events import ReviewedEvent, ReviewItem
from tests.integration.maint_helpers import Clock, Failing, memory

pytestmark = pytest.mark.integration


@pytest.fixture
def stores(edge_stores: tuple[MemoryStore, StateStore]) -> tuple[MemoryStore, StateStore]:
    edge_stores[0].upsert(
        [memory("m1", refs=4), memory("m2"), memory("m1", ws="ws-b"), memory("f1", folded_into="m2", axis=3)]
    )
    return edge_stores


def event(eid: str, *reviews: tuple[str, str], clock: Clock, ws: str = "ws-a", hours: float = 0) -> tuple[str, Any]:
    ev = ReviewedEvent(
        event_id=eid,
        workspace_id=ws,
        agent_id="agent-1",
        at=clock() + timedelta(hours=hours),
        reviews=[ReviewItem(entry_id=e, rating=r) for e, r in reviews],  # type: ignore[arg-type]
    )
    return event_key(ev, ev.to_json()), ev


def stored(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> dict[str, Any]:
    return store.retrieve([point_id(ws, entry_id)])[point_id(ws, entry_id)]


def test_each_review_applies_once_in_order_and_a_redelivery_applies_nothing(
    stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = stores
    clock = Clock()
    applier = ReviewApplier(store=store, state=state, clock=clock)
    e1 = event("e1", ("m1", "good"), ("m2", "again"), clock=clock)
    e2 = event("e2", ("m1", "again"), clock=clock, hours=30)
    r = applier.apply([e1, e2, e1])
    assert (r.events, r.applied, r.duplicate, r.reviews, r.missing) == (3, 2, 1, 3, 0)
    assert r.ratings == {"again": 2, "hard": 0, "good": 1, "easy": 0}
    m1 = state_of(stored(store, "m1"))
    assert (m1.review_count, m1.ratings, m1.last_rating) == (2, {"good": 1, "again": 1}, "again")
    assert m1.last_reviewed_at == e2[1].at
    assert stored(store, "m2")["review_ratings"] == {"again": 1, "hard": 0, "good": 0, "easy": 0}
    again = applier.apply([e1, e2])
    assert (again.applied, again.duplicate, again.reviews) == (0, 2, 0)
    assert state_of(stored(store, "m1")).review_count == 2
    # other fields untouched; with ranking off importance too; the other workspace's m1 is another memory
    assert stored(store, "m1")["reference_count"] == 4 and stored(store, "m1")["importance_score"] == 0.7
    assert state_of(stored(store, "m1", ws="ws-b")).review_count == 0
    assert {d["state"] for _, d in state.scan(LEDGER_KIND)} == {"done"}


def test_a_folded_memory_counts_for_its_owner_and_missing_or_stale_ones_for_nothing(
    stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = stores
    clock = Clock()
    applier = ReviewApplier(store=store, state=state, clock=clock, horizon_days=7)
    r = applier.apply(
        [
            event("e1", ("f1", "easy"), ("gone", "good"), clock=clock),
            event("old", ("m2", "good"), clock=clock, hours=-8 * 24),
        ]
    )
    assert (r.applied, r.reviews, r.missing, r.stale) == (1, 1, 1, 1)
    assert state_of(stored(store, "m2")).ratings == {"easy": 1}
    assert state_of(stored(store, "f1")).review_count == 0


@pytest.mark.parametrize(
    ("where", "method", "n"),
    [
        ("state", "put_many", 1),  # before anything was written
        ("store", "set_payloads", 1),  # after the ledger's pending mark, before the state
        ("state", "put_many", 2),  # after the state, before the ledger's done mark
    ],
)
def test_a_crash_between_any_two_writes_still_applies_each_event_once(
    stores: tuple[MemoryStore, StateStore], where: str, method: str, n: int
) -> None:
    store, state = stores
    clock = Clock()
    batch = [event("e1", ("m1", "good"), ("m2", "hard"), clock=clock), event("e2", ("m1", "good"), clock=clock)]
    broken = ReviewApplier(
        store=Failing(store, method, n) if where == "store" else store,  # type: ignore[arg-type]
        state=Failing(state, method, n) if where == "state" else state,  # type: ignore[arg-type]
        clock=clock,
    )
    with pytest.raises(RuntimeError, match="crash"):
        broken.apply(batch)
    applier = ReviewApplier(store=store, state=state, clock=clock)
    r = applier.apply([*batch, event("e3", ("m1", "easy"), clock=clock, hours=1)])
    assert state_of(stored(store, "m1")).ratings == {"good": 2, "easy": 1}
    assert state_of(stored(store, "m2")).ratings == {"hard": 1}
    crashed_before_any_write = where == "state" and n == 1
    assert (r.applied, r.recovered) == ((3, 0) if crashed_before_any_write else (1, 2))
    assert {d["state"] for _, d in state.scan(LEDGER_KIND)} == {"done"}


@pytest.mark.parametrize("ranking", ["reinforce", "fsrs"])
def test_when_reviews_drive_ranking_importance_moves_at_once(
    stores: tuple[MemoryStore, StateStore], ranking: str
) -> None:
    store, state = stores
    clock = Clock()
    clock.advance(days=1)
    applier = ReviewApplier(store=store, state=state, clock=clock, ranking=ranking)
    r = applier.apply([event("e1", ("m1", "again"), ("m2", "easy"), clock=clock)])
    assert r.rescored == 2
    m1, m2 = stored(store, "m1")["importance_score"], stored(store, "m2")["importance_score"]
    assert m1 < 0.7 < m2  # m1 (4 retrievals, no use) lost its boost; m2 gained one
    assert applier.prune(clock() + timedelta(days=30)) == 1
