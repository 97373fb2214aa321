"""Reference counting from memory.referenced over the real store (Qdrant Edge on disk): once per event,
across a re-delivery, a crash between any two writes, and a restart; stale events; ledger pruning."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryStore, StateStore
from episodic.maintenance.importance import LEDGER_KIND, ReferenceCounter, event_key
from schemas.events import ReferencedEvent, ReferencedHit
from tests.integration.maint_helpers import Clock, Failing, iso, memory, open_edge

pytestmark = pytest.mark.integration


@pytest.fixture
def stores(edge_stores: tuple[MemoryStore, StateStore]) -> tuple[MemoryStore, StateStore]:
    edge_stores[0].upsert([memory("m1"), memory("m2"), memory("m1", ws="ws-b")])
    return edge_stores


def event(eid: str | None, *hits: str, clock: Clock, ws: str = "ws-a", hours: float = 0) -> tuple[str, ReferencedEvent]:
    ev = ReferencedEvent(
        workspace_id=ws,
        scope="own",
        mode="hybrid",
        at=clock() + timedelta(hours=hours),
        hits=[ReferencedHit(entry_id=h, score=0.5, cosine=0.5) for h in hits],
        event_id=eid,
    )
    return event_key(ev, ev.to_json()), ev


def counts(store: MemoryStore, *ids: str, ws: str = "ws-a") -> list[tuple[int, Any]]:
    got = store.retrieve([point_id(ws, i) for i in ids])
    return [(got[point_id(ws, i)]["reference_count"], got[point_id(ws, i)]["last_referenced_at"]) for i in ids]


def test_each_hit_counts_once_per_event_and_a_redelivery_counts_nothing(stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = stores
    clock = Clock()
    counter = ReferenceCounter(store=store, state=state, clock=clock)
    e1, e2 = event("e1", "m1", "m2", "m1", clock=clock), event("e2", "m1", clock=clock, hours=1)
    r = counter.apply([e1, e2, e1])  # the same event twice in one batch, too
    assert (r.events, r.applied, r.hits, r.duplicate, r.missing) == (3, 2, 3, 1, 0)
    assert counts(store, "m1", "m2") == [(2, iso(e2[1].at)), (1, iso(e1[1].at))]
    again = counter.apply([e1, e2])
    assert (again.applied, again.duplicate, again.hits) == (0, 2, 0)
    assert counts(store, "m1", "m2") == [(2, iso(e2[1].at)), (1, iso(e1[1].at))]
    # the other workspace's m1 is another memory
    assert counts(store, "m1", ws="ws-b") == [(0, None)]
    # only the two counter fields change; an older event does not move last_referenced_at back
    counter.apply([event("e3", "m1", clock=clock, hours=-5)])
    after = store.retrieve([point_id("ws-a", "m1")])[point_id("ws-a", "m1")]
    assert after["reference_count"] == 3 and after["last_referenced_at"] == iso(e2[1].at)
    assert after["summary"] == "memory m1" and after["importance_score"] == 0.7


def test_a_batch_reads_only_the_two_fields_it_writes(stores: tuple[MemoryStore, StateStore]) -> None:
    """The counter reads a memory's reference_count and last_referenced_at, not its whole payload (the text,
    the context, the relations: a conversion per hit under the interpreter lock, beside the recalls; issue 46
    item 5), and a memory written without either field (an older version's) still counts from 0."""
    store, state = stores
    bare = memory("m3")
    bare.payload.pop("reference_count", None)
    bare.payload.pop("last_referenced_at", None)
    store.upsert([bare])
    asked: list[Any] = []
    read = store.retrieve

    def retrieve(point_ids: list[str], **kw: Any) -> dict[str, dict[str, Any]]:
        asked.append(kw.get("fields"))
        return read(point_ids, **kw)

    store.retrieve = retrieve  # type: ignore[method-assign]
    clock = Clock()
    counter = ReferenceCounter(store=store, state=state, clock=clock)
    r = counter.apply([event("e1", "m1", "m3", clock=clock)])
    assert (r.hits, r.missing) == (2, 0)
    assert asked and all(f is not None and set(f) == {"reference_count", "last_referenced_at"} for f in asked)
    del store.retrieve  # the real one again
    assert counts(store, "m1", "m3") == [(1, iso(clock())), (1, iso(clock()))]
    assert store.retrieve([point_id("ws-a", "m3")])[point_id("ws-a", "m3")]["summary"] == "memory m3"


def test_an_event_without_an_id_is_keyed_by_its_bytes(stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = stores
    clock = Clock()
    counter = ReferenceCounter(store=store, state=state, clock=clock)
    key, ev = event(None, "m1", clock=clock)
    assert key.startswith("sha256:") and key == event_key(ev, ev.to_json())
    counter.apply([(key, ev)])
    counter.apply([(key, ev)])
    assert counts(store, "m1")[0][0] == 1


def test_missing_memories_and_stale_events_are_not_counted(stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = stores
    clock = Clock()
    counter = ReferenceCounter(store=store, state=state, clock=clock, horizon_days=7)
    r = counter.apply([event("e1", "m1", "gone", clock=clock), event("old", "m2", clock=clock, hours=-8 * 24)])
    assert (r.applied, r.hits, r.missing, r.stale) == (1, 1, 1, 1)
    assert counts(store, "m1", "m2") == [(1, iso(clock())), (0, None)]


@pytest.mark.parametrize(
    ("where", "method", "n"),
    [
        ("state", "put_many", 1),  # before anything was written
        ("store", "set_payloads", 1),  # after the ledger's pending mark, before the counts
        ("state", "put_many", 2),  # after the counts, before the ledger's done mark
    ],
)
def test_a_crash_between_any_two_writes_still_counts_each_event_once(
    stores: tuple[MemoryStore, StateStore], where: str, method: str, n: int
) -> None:
    store, state = stores
    clock = Clock()
    batch = [event("e1", "m1", "m2", clock=clock), event("e2", "m1", clock=clock)]
    broken = ReferenceCounter(
        store=Failing(store, method, n) if where == "store" else store,  # type: ignore[arg-type]
        state=Failing(state, method, n) if where == "state" else state,  # type: ignore[arg-type]
        clock=clock,
    )
    with pytest.raises(RuntimeError, match="crash"):
        broken.apply(batch)
    # the process restarts and the batch is delivered again, followed by a new event
    counter = ReferenceCounter(store=store, state=state, clock=clock)
    r = counter.apply([*batch, event("e3", "m1", clock=clock)])
    assert counts(store, "m1", "m2")[0][0] == 3 and counts(store, "m2")[0][0] == 1
    crashed_before_any_write = where == "state" and n == 1
    assert (r.applied, r.recovered) == ((3, 0) if crashed_before_any_write else (1, 2))
    assert {d["state"] for _, d in state.scan(LEDGER_KIND)} == {"done"}
    assert counter.apply(batch).duplicate == 2


def test_counts_and_the_ledger_survive_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    store, state = open_edge(tmp_path / "edge")
    store.upsert([memory("m1")])
    ReferenceCounter(store=store, state=state, clock=clock).apply([event("e1", "m1", clock=clock)])
    state.close()
    store.close()
    store, state = open_edge(tmp_path / "edge")
    try:
        r = ReferenceCounter(store=store, state=state, clock=clock).apply([event("e1", "m1", clock=clock)])
        assert r.duplicate == 1 and counts(store, "m1")[0][0] == 1
    finally:
        state.close()
        store.close()


def test_the_ledger_is_pruned_after_its_horizon(stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = stores
    clock = Clock()
    counter = ReferenceCounter(store=store, state=state, clock=clock, horizon_days=2)
    for day in range(5):
        counter.apply([event(f"d{day}-{i}", "m1", clock=clock, hours=24 * day - 96) for i in range(3)])
    # the two oldest days were stale already (older than 2 days), not ledgered
    assert sorted({d["day"] for _, d in state.scan(LEDGER_KIND)}) == ["2026-04-29", "2026-04-30", "2026-05-01"]
    assert counter.prune() == 0  # the first prune scans the whole ledger; nothing is older than 2 days
    clock.advance(days=1)
    assert counter.prune() == 3
    assert sorted({d["day"] for _, d in state.scan(LEDGER_KIND)}) == ["2026-04-30", "2026-05-01"]
    assert counter.prune() == 0  # the cursor: only days since the last prune are looked at
    clock.advance(days=2)
    assert counter.prune() == 6 and state.count(LEDGER_KIND) == 0
