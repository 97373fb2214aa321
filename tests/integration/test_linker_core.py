"""The linker over the real store (Qdrant Edge), with vectors chosen so that cosines are known exactly."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryPoint, MemoryStore, Relation, SparseVec
from episodic.maintenance.linker import Linker
from episodic.store.edge import EdgeStore
from schemas.events import IndexedEvent
from tests.contract.conftest import mix as unit

pytestmark = pytest.mark.integration

DIM = 8
AT = datetime(2026, 11, 21, tzinfo=UTC)


def at_cos(cos: float, axis: int = 1) -> list[float]:
    """A unit vector whose cosine with e0 is `cos`."""
    return unit((0, cos), (axis, math.sqrt(1 - cos * cos)))


def point(entry_id: str, rows: list[list[float]] | None, ws: str = "ws-a", **extra: object) -> MemoryPoint:
    payload = {"entry_id": entry_id, "workspace_id": ws, "agent_id": "a1", "summary": entry_id, "aliases": []}
    payload.update(extra)
    return MemoryPoint(point_id(ws, entry_id), SparseVec([], []), payload, rows)


def vector_event(entry_id: str, ws: str = "ws-a", mode: str = "vector") -> IndexedEvent:
    return IndexedEvent(entry_id=entry_id, workspace_id=ws, point_id=point_id(ws, entry_id), indexed_at=AT, mode=mode)  # type: ignore[arg-type]


def similar(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> dict[str, float]:
    return {
        r.dst: round(r.weight, 4)
        for r in store.relations_of(ws, [entry_id])
        if r.src == entry_id and r.relation == "similar"
    }


@pytest.fixture
def store(fast_dir: Path) -> Iterator[MemoryStore]:
    s = EdgeStore(fast_dir / "edge")
    s.ensure_collection(DIM)
    try:
        yield s
    finally:
        s.close()


def test_top3_above_the_threshold_new_to_old_weighted_by_cosine(store: MemoryStore) -> None:
    store.upsert(
        [
            point("c95", [at_cos(0.95)]),
            point("c90", [at_cos(0.90, 2)]),
            point("c85", [at_cos(0.85, 3)]),
            point("c82", [at_cos(0.82, 4)]),  # fourth: not linked
            point("c80", [at_cos(0.80, 5)]),  # not above 0.80
            point("other-ws", [at_cos(0.99)], ws="ws-b"),
            point("new", [unit((0, 1.0))]),
        ]
    )
    result = Linker(store=store).link([vector_event("new")])
    assert (result.linked, result.edges) == (1, 3)
    assert similar(store, "new") == {"c95": 0.95, "c90": 0.9, "c85": 0.85}
    assert store.retrieve([point_id("ws-a", "new")])[point_id("ws-a", "new")]["linked_at"]


def test_chunked_memories_use_the_best_pair_of_chunks(store: MemoryStore) -> None:
    store.upsert(
        [
            point("long-old", [unit((6, 1.0)), at_cos(0.9, 3)]),  # second chunk close to the new first chunk
            point("new", [unit((0, 1.0)), unit((7, 1.0))]),
        ]
    )
    Linker(store=store).link([vector_event("new")])
    assert similar(store, "new") == {"long-old": 0.9}


def test_memories_that_share_one_stock_sentence_and_nothing_else_get_no_edge(store: MemoryStore) -> None:
    """Each has four pieces, one of them the same sentence (cosine 1): their mean vectors' cosine is 0.25,
    under 0.35, so no edge; a memory that shares two of its three pieces (mean cosine 0.58) is linked, and a
    one-piece memory equal to that sentence is linked (its mean is the sentence itself: 0.5 with the new)."""
    same = unit((0, 1.0))
    store.upsert(
        [
            point("stock", [same, unit((2, 1.0)), unit((3, 1.0)), unit((4, 1.0))], pieces=4),
            point("related", [same, unit((1, 1.0)), unit((7, 1.0))], pieces=3),
            point("phrase", [same], pieces=1),
            point("new", [same, unit((1, 1.0)), unit((5, 1.0)), unit((6, 1.0))], pieces=4),
        ]
    )
    Linker(store=store).link([vector_event("new")])
    assert similar(store, "new") == {"related": 1.0, "phrase": 1.0}
    Linker(store=store, min_mean_cosine=0.0).link([vector_event("stock")])  # the rule off: the best pair rules
    assert set(similar(store, "stock")) == {"related", "phrase", "new"}


def test_a_real_neighbour_behind_a_crowd_of_stock_sentences_is_still_found(store: MemoryStore) -> None:
    """Nine memories share a stock sentence with the new one (best pair 1.0) and nothing else: they fill the
    first list of candidates (3 x top_k) and are all turned down, so the linker asks once for a wider list,
    where the real neighbour (best pair 0.9, mean cosine ~0.64) is."""
    same = unit((0, 1.0))
    others = [unit((axis, 1.0)) for axis in (2, 3, 4, 5)]  # mean cosine with the new one: 1/sqrt(10) = 0.32
    crowd = [point(f"stock{i}", [same, *others], pieces=5) for i in range(9)]
    real = point("real", [at_cos(0.9, 1), unit((1, 0.3), (6, math.sqrt(0.91)))], pieces=2)
    store.upsert([*crowd, real, point("new", [unit((1, 1.0)), same], pieces=2)])
    Linker(store=store).link([vector_event("new")])
    assert set(similar(store, "new")) == {"real"}


def test_redelivery_and_a_second_densify_add_nothing_and_duplicates_get_no_edges(store: MemoryStore) -> None:
    store.upsert([point("old", [at_cos(0.9)]), point("new", [unit((0, 1.0))])])
    linker = Linker(store=store)
    assert linker.link([vector_event("new")]).edges == 1
    store.upsert([point("newer", [at_cos(0.95, 2)])])  # a closer memory arrives later
    again = linker.link([vector_event("new"), vector_event("new"), vector_event("dup", mode="duplicate")])
    assert (again.linked, again.already, again.ignored, again.edges) == (0, 2, 1, 0)  # once linked, once repeated
    assert similar(store, "new") == {"old": 0.9}
    assert linker.link([vector_event("new", mode="sparse-only")]).ignored == 1


def test_one_edge_per_pair_also_within_a_batch(store: MemoryStore) -> None:
    store.upsert([point("a", [unit((0, 1.0))]), point("b", [at_cos(0.9)])])
    result = Linker(store=store).link([vector_event("a"), vector_event("b")])
    assert result.edges == 1
    assert {(r.src, r.dst) for r in store.relations_of("ws-a", ["a", "b"])} in ({("a", "b")}, {("b", "a")})


def test_a_new_version_is_linked_again_replacing_its_similar_edges_and_keeping_supports(store: MemoryStore) -> None:
    other = unit((0, 0.9), (5, math.sqrt(0.19)))
    store.upsert([point("old", [at_cos(0.9)]), point("other", [other]), point("rule", [unit((0, 1.0))])])
    store.add_relations([Relation("rule", "evidence", "supports", 1.0, "t", "ws-a")])
    Linker(store=store).link([vector_event("rule")])
    assert similar(store, "rule") == {"old": 0.9, "other": 0.9}
    # the summary changed: the indexer writes a new version (its edges kept, no linked_at) near 'other' only
    version2 = unit((0, 0.6), (5, 0.8))
    edges = store.retrieve([point_id("ws-a", "rule")])[point_id("ws-a", "rule")]["relations"]
    store.upsert([point("rule", [version2], relations=edges)])
    Linker(store=store).link([vector_event("rule")])
    assert similar(store, "rule") == {"other": round(sum(a * b for a, b in zip(other, version2, strict=True)), 4)}
    assert ("evidence", "supports") in {(r.dst, r.relation) for r in store.relations_of("ws-a", ["rule"])}


def test_gone_or_vectorless_memories_are_counted_not_fatal(store: MemoryStore) -> None:
    store.upsert([point("sparse", None)])
    result = Linker(store=store).link([vector_event("sparse"), vector_event("never-written")])
    assert (result.missing, result.linked) == (2, 0)


def test_a_generation_switch_between_reading_and_searching_links_in_the_generation_read(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The linker searches the neighbours in the generation the new memory's rows were read from: a switch
    to a 3-d generation right after the read neither fails the link nor mixes the two."""
    assert isinstance(store, EdgeStore)
    store.upsert([point("c95", [at_cos(0.95)]), point("new", [unit((0, 1.0))])])
    store.add_dense_vector("dense_1", 3)
    store.set_vectors("dense_1", {point_id("ws-a", "c95"): [[0, 0, 1.0]], point_id("ws-a", "new"): [[1.0, 0, 0]]}, {})
    fetch = store.fetch

    def fetch_then_switch(ids: list[str], *, with_dense: bool = False) -> dict:
        got = fetch(ids, with_dense=with_dense)
        store.use_dense_vector("dense_1")
        return got

    monkeypatch.setattr(store, "fetch", fetch_then_switch)
    result = Linker(store=store).link([vector_event("new")])
    assert (result.linked, result.failed) == (1, 0)
    assert similar(store, "new") == {"c95": 0.95}  # the cosine in the generation read (0 in the new one)


def test_a_batch_searches_the_store_once_and_links_as_one_by_one(store: MemoryStore) -> None:
    """The neighbour searches of a batch of events go to the store as one batch (one engine query_batch for
    every memory of both workspaces), with the same edges as linking the memories one at a time."""
    assert isinstance(store, EdgeStore)
    cosines = (0.95, 0.9, 0.85, 0.82)
    for ws in ("ws-a", "ws-b"):
        store.upsert([point(f"old{i}", [at_cos(c, axis=1 + i)], ws=ws) for i, c in enumerate(cosines)])
        store.upsert([point(f"new{i}", [unit((0, 1.0), (5 + i, 0.05))], ws=ws) for i in range(3)])
    batches: list[int] = []
    engine_batch = store.engine.query_batch

    def counted(queries):  # type: ignore[no-untyped-def]
        batches.append(len(queries))
        return engine_batch(queries)

    store.engine.query_batch = counted  # type: ignore[method-assign]
    events = [vector_event(f"new{i}", ws=ws) for ws in ("ws-a", "ws-b") for i in range(3)]
    result = Linker(store=store).link(events)
    assert batches == [6, 6]  # one batch of six searches (one row each), not six calls; then their surprise
    assert (result.linked, result.failed) == (6, 0)
    for ws in ("ws-a", "ws-b"):
        edges = {e: similar(store, e, ws) for e in ("new0", "new1", "new2")}
        # one edge per pair: new0 -> new1/new2 first, then each later one skips the pair already linked
        assert set(edges["new0"]) == {"new1", "new2", "old0"}
        assert "new0" not in edges["new1"] and "new0" not in edges["new2"]
        assert all(len(v) == 3 for v in edges.values())


def test_one_search_the_store_refuses_fails_that_memory_alone(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from episodic.kernel.errors import StoreError

    store.upsert([point("old", [at_cos(0.9)]), point("good", [unit((0, 1.0))]), point("bad", [unit((0, 1.0))])])
    many = store.similar_to_many

    def refuse_bad(requests):  # type: ignore[no-untyped-def]
        if any("bad" in r.exclude_entry_ids for r in requests):
            raise StoreError("refused")
        return many(requests)

    monkeypatch.setattr(store, "similar_to_many", refuse_bad)
    result = Linker(store=store).link([vector_event("good"), vector_event("bad")])
    assert (result.linked, result.failed) == (1, 1)
    assert similar(store, "good") == {"bad": 1.0, "old": 0.9}  # 'bad' is still a neighbour, only unlinked
    assert similar(store, "bad") == {}


def test_with_the_core_budget_a_batch_waits_for_quiet_cores_before_searching(store: MemoryStore) -> None:
    from episodic.embedding.cores import CoreBudget

    calls: list[str] = []

    class Budget(CoreBudget):
        def wait_quiet(self, max_s: float = 30.0, *, sleep=None) -> float:  # type: ignore[no-untyped-def,override]
            calls.append("wait")
            return 0.0

    store.upsert([point("old", [at_cos(0.9)]), point("new", [unit((0, 1.0))])])
    fetch = store.fetch

    def fetch_logged(ids, *, with_dense=False, using=None):  # type: ignore[no-untyped-def]
        calls.append("fetch")
        return fetch(ids, with_dense=with_dense, using=using)

    store.fetch = fetch_logged  # type: ignore[method-assign]
    assert Linker(store=store, cores=Budget(cores=2)).link([vector_event("new")]).linked == 1
    assert calls[:2] == ["wait", "fetch"]


def test_a_backlog_is_linked_in_chunks_each_after_a_wait_for_quiet_cores(store: MemoryStore) -> None:
    """A fetched batch of a whole backfill is linked CHUNK memories at a time, each chunk waiting for the
    recalls in flight; every memory of it linked."""
    from episodic.embedding.cores import CoreBudget
    from episodic.maintenance.linker import CHUNK

    waits: list[int] = []

    class Budget(CoreBudget):
        def wait_quiet(self, max_s: float = 30.0, *, sleep=None) -> float:  # type: ignore[no-untyped-def,override]
            waits.append(len(waits))
            return 0.0

    n = CHUNK + 5
    store.upsert([point("old", [at_cos(0.9)]), *(point(f"new{i}", [at_cos(0.95, 1 + i % 6)]) for i in range(n))])
    events = [vector_event(f"new{i}", mode=m) for i in range(n) for m in ("sparse-only", "vector")]
    result = Linker(store=store, cores=Budget(cores=2)).link_all(events)
    assert len(waits) == 2  # one per chunk of vector events
    assert (result.events, result.ignored, result.linked) == (2 * n, n, n)
    stored = store.retrieve([point_id("ws-a", f"new{i}") for i in range(n)], fields=("linked_at",))
    assert len(stored) == n and all(p.get("linked_at") for p in stored.values())


def test_under_a_load_that_never_pauses_a_batch_waits_its_budget_and_is_all_linked(store: MemoryStore) -> None:
    from episodic.embedding.cores import CoreBudget
    from episodic.maintenance.linker import BATCH_WAIT_S, CHUNK

    asked: list[float] = []

    class Busy(CoreBudget):  # a recall always in flight: every wait runs to the bound it is given
        def wait_quiet(self, max_s: float = 30.0, *, sleep=None) -> float:  # type: ignore[no-untyped-def,override]
            asked.append(max_s)
            return max_s

    n = CHUNK * 12
    store.upsert([point(f"m{i}", [at_cos(0.5 + 0.04 * (i % 10), 1 + i % 6)]) for i in range(n)])
    result = Linker(store=store, cores=Busy(cores=2)).link_all([vector_event(f"m{i}") for i in range(n)])
    assert result.linked == n
    assert sum(asked) == BATCH_WAIT_S and len(asked) < 12  # the later chunks are linked without a wait
