"""Relations on every adapter: stored on the source memory, read in both directions, scoped reads."""

from __future__ import annotations

from episodic.kernel.ports import MemoryStore, Relation, ScopeFilter
from tests.contract.conftest import MakePoint, e

OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1")


def rel(src: str, dst: str, kind: str = "similar", weight: float = 0.9, ws: str = "ws-a") -> Relation:
    return Relation(src=src, dst=dst, relation=kind, weight=weight, created_at="2026-11-21T00:00:00Z", workspace_id=ws)  # type: ignore[arg-type]


def edges(rels: list[Relation]) -> set[tuple[str, str, str, float]]:
    return {(r.src, r.dst, r.relation, round(r.weight, 3)) for r in rels}


def test_relations_are_read_in_both_directions(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"e{i}", f"text {i}", e(i)) for i in range(4)])
    assert store.add_relations([rel("e2", "e1"), rel("e3", "e1", "supports", 1.0), rel("e2", "e0", weight=0.85)]) == 3
    assert edges(store.relations_of("ws-a", ["e1"])) == {("e2", "e1", "similar", 0.9), ("e3", "e1", "supports", 1.0)}
    assert edges(store.relations_of("ws-a", ["e2"])) == {("e2", "e1", "similar", 0.9), ("e2", "e0", "similar", 0.85)}
    assert store.relations_of("ws-a", ["e9"]) == []


def test_add_relations_is_idempotent_and_skips_missing_sources(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e1", "one", e(0)), mk("e2", "two", e(1))])
    assert store.add_relations([rel("e2", "e1")]) == 1
    assert store.add_relations([rel("e2", "e1"), rel("e2", "e2")]) == 0  # a repeat and a self-loop
    assert store.add_relations([rel("ghost", "e1")]) == 0
    assert len(store.relations_of("ws-a", ["e1"])) == 1
    # the source memory keeps its other payload
    assert store.retrieve([mk("e2", "two", e(1)).point_id])[mk("e2", "two", e(1)).point_id]["summary"] == "two"


def test_relations_never_cross_workspaces(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [mk("e1", "one", e(0)), mk("e2", "two", e(1)), mk("e1", "one", e(0), ws="ws-b"), mk("e3", "x", e(2), ws="ws-b")]
    )
    store.add_relations([rel("e3", "e1", ws="ws-b")])
    assert store.relations_of("ws-a", ["e1"]) == []
    assert edges(store.relations_of("ws-b", ["e1"])) == {("e3", "e1", "similar", 0.9)}


def test_find_entries_respects_scope_and_workspace(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("e1", "mine", e(0)),
            mk("e2", "another agent's", e(1), agent="agent-2"),
            mk("e1", "other workspace", e(0), ws="ws-b"),
        ]
    )
    got = store.find_entries(OWN, ["e1", "e2", "missing"], with_dense=True)
    assert [(h.payload["entry_id"], h.payload["workspace_id"]) for h in got] == [("e1", "ws-a")]
    assert got[0].dense is not None and len(got[0].dense) == 1
    crew = ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="crew-1", high_value=0.5)
    assert {h.payload["entry_id"] for h in store.find_entries(crew, ["e1", "e2"])} == {"e1", "e2"}
    assert store.find_entries(OWN, []) == []


def test_the_walk_reads_the_rows_of_the_vector_its_query_ran_on(store: MemoryStore, mk: MakePoint) -> None:
    """During a switch the request's query vector names its generation (`using`): the memories the walk or
    adjacency bring in, and the dense mode's count of memories without a vector, read that one too."""
    from episodic.domain.identity import point_id
    from tests.contract.conftest import DIM
    from tests.contract.conftest import as_qdrant as q

    s = q(store)
    s.upsert([mk("e1", "one", e(0)), mk("e2", "two", e(1))])
    s.add_dense_vector("dense_1", DIM)
    s.set_dense(point_id("ws-a", "e1"), [e(2)], {}, vector="dense_1")  # e2 not re-embedded yet
    [old] = s.find_entries(OWN, ["e1"], with_dense=True)
    [new] = s.find_entries(OWN, ["e1"], with_dense=True, using="dense_1")
    assert old.dense == [e(0)] and new.dense == [e(2)] and new.vector == "dense_1"
    assert s.count_without_dense(OWN) == 0 and s.count_without_dense(OWN, using="dense_1") == 1
    s.use_dense_vector("dense_1")  # switched: a whole-workspace scan (the health job's) reads the new rows
    scanned = {h.payload["entry_id"]: h.dense for h in s.scan_workspace("ws-a", with_dense=True)}
    assert scanned == {"e1": [e(2)], "e2": None}
