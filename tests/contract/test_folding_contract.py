"""Near-duplicate folding (episodic.maintenance.linker, episodic.indexing.folding) on every engine: the fold
itself, scopes exact across a fold, GET of an absorbed id, forgetting one agent's part, and export/import."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from episodic.domain.folding import FoldRule
from episodic.domain.identity import point_id
from episodic.kernel.ports import MemoryStore, ScopeFilter, StateStore
from episodic.lifecycle.check import check_store
from episodic.lifecycle.forget import Forgetter
from episodic.lifecycle.inspect import memory_detail
from episodic.lifecycle.portable import export_line
from episodic.maintenance.linker import Linker
from schemas.events import ForgetRecord, ForgetSelector, IndexedEvent
from tests.contract.conftest import Interleaved, MakePoint, e, mix

T = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)
OOM = "Checkout OOM-killed during the load test"
OOM_2 = "The checkout OOM-killed during load test"
OOM_3 = "checkout was OOM-killed during a load test!"


def vector_event(entry_id: str, ws: str = "ws-a") -> IndexedEvent:
    return IndexedEvent(
        entry_id=entry_id, workspace_id=ws, point_id=point_id(ws, entry_id), indexed_at=T, mode="vector"
    )


def linker(store: MemoryStore, **rule: Any) -> Linker:
    return Linker(store=store, clock=lambda: T, fold_rule=FoldRule(**rule))


def ids(store: MemoryStore, agent: str, ws: str = "ws-a") -> list[str]:
    hits = store.query_dense(e(0), ScopeFilter(ws, "own", agent_id=agent), 10)
    return sorted(str(h.payload["entry_id"]) for h in hits)


def payload(store: MemoryStore, entry_id: str, ws: str = "ws-a") -> dict[str, Any]:
    pid = point_id(ws, entry_id)
    return store.retrieve([pid])[pid]


def three_agents(store: MemoryStore, mk: MakePoint) -> None:
    """One event written by three agents of a crew (near duplicates), and an unrelated memory of a fourth."""
    store.upsert(
        [
            mk("a1", OOM, e(0), agent="agent-a", ts="2026-01-01T00:00:00Z"),
            mk("b1", OOM_2, mix((0, 1.0), (1, 0.2)), agent="agent-b", ts="2026-01-01T00:01:00Z"),
            mk("c1", OOM_3, mix((0, 1.0), (2, 0.2)), agent="agent-c", ts="2026-01-01T00:02:00Z"),
            mk("d1", "the release train leaves on Tuesday", mix((0, 1.0), (3, 1.0)), agent="agent-d"),
        ]
    )
    result = linker(store).link([vector_event("b1"), vector_event("c1")])
    assert result.folded == 2


def test_near_duplicates_from_three_agents_fold_into_the_first(store: MemoryStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    owner = payload(store, "a1")
    assert [p["entry_id"] for p in owner["folded"]] == ["b1", "c1"]
    assert owner["agents"] == ["agent-a", "agent-b", "agent-c"] and owner["occurrences"] == 3
    assert payload(store, "b1")["folded_into"] == "a1" and payload(store, "c1")["folded_into"] == "a1"
    assert payload(store, "b1")["summary"] == OOM_2  # the absorbed entry keeps its own point and text
    assert payload(store, "b1")["fold_scope"] == "crew"  # folded into another agent's memory
    # scope own (issue 47): each agent finds its own entry, in its own words, never another agent's text
    assert ids(store, "agent-a") == ["a1"] and ids(store, "agent-b") == ["b1"] and ids(store, "agent-c") == ["c1"]
    assert ids(store, "agent-d") == ["d1"]
    # crew_shared with an agent: its own entry, and the crew's memories in place of the others' entries
    crew = store.query_dense(e(0), ScopeFilter("ws-a", "crew_shared", agent_id="agent-b", crew_id="crew-x"), 10)
    assert "c1" not in {h.payload["entry_id"] for h in crew} and "b1" in {h.payload["entry_id"] for h in crew}


def test_a_new_version_of_an_absorbed_entry_is_decided_again(store: MemoryStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    # c1 rewritten to say something else (the indexer keeps folded_into, clears linked_at): no longer a duplicate
    store.upsert([mk("c1", "checkout is fine now", mix((0, 1.0), (2, 0.2)), agent="agent-c", folded_into="a1")])
    assert linker(store).link([vector_event("c1")]).folded == 0
    assert payload(store, "c1").get("folded_into") is None
    owner = payload(store, "a1")
    assert [p["entry_id"] for p in owner["folded"]] == ["b1"] and owner["agents"] == ["agent-a", "agent-b"]
    assert ids(store, "agent-c") == ["c1"]


def test_what_does_not_fold(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("t1", "the release train leaves on Tuesday", e(0)),
            mk("t2", "the release train now leaves on Thursday", mix((0, 1.0), (1, 0.1))),  # a change: not a repeat
            mk("x1", OOM, e(4), crew="crew-2"),
            mk("x2", OOM_2, mix((4, 1.0), (5, 0.1)), crew="crew-3"),  # another crew: crew_shared must not change
            mk("y1", OOM, e(6), priority="pin"),
            mk("y2", OOM_2, mix((6, 1.0), (5, 0.1))),  # another priority: its floor must not change
        ]
    )
    assert linker(store).link([vector_event(i) for i in ("t2", "x2", "y2")]).folded == 0
    assert linker(store, enabled=False).link([vector_event("t1")]).folded == 0


def test_get_of_an_absorbed_id_answers_with_its_memory(store: MemoryStore, state: StateStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    detail = memory_detail(store, state, "ws-a", "c1")
    assert detail is not None  # folded into another agent's memory: it answers itself (its agent's own text)
    assert (detail["entry_id"], detail["requested_id"], detail["summary"]) == ("c1", "c1", OOM_3)
    owner = memory_detail(store, state, "ws-a", "a1")
    assert owner is not None and [p["entry_id"] for p in owner["folded"]] == ["b1", "c1"]
    assert owner["agents"] == ["agent-a", "agent-b", "agent-c"] and owner["occurrences"] == 3


def forget(fid: str, **selector: Any) -> ForgetRecord:
    return ForgetRecord(forget_id=fid, workspace_id="ws-a", selector=ForgetSelector(**selector), requested_at=T)


def test_forgetting_an_agent_takes_only_its_part(store: MemoryStore, state: StateStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    forgetter = Forgetter(store=store, state=state, clock=lambda: T)
    forgetter.apply(forget("f-b", agent_id="agent-b"))
    owner = payload(store, "a1")
    assert [p["entry_id"] for p in owner["folded"]] == ["c1"] and owner["agents"] == ["agent-a", "agent-c"]
    assert owner["occurrences"] == 2
    assert ids(store, "agent-b") == [] and ids(store, "agent-c") == ["c1"]


def test_forgetting_the_owner_leaves_the_others_standing(store: MemoryStore, state: StateStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    Forgetter(store=store, state=state, clock=lambda: T).apply(forget("f-a1", entry_ids=["a1"]))
    heir = payload(store, "b1")
    assert heir.get("folded_into") is None
    assert [p["entry_id"] for p in heir["folded"]] == ["c1"] and heir["agents"] == ["agent-b", "agent-c"]
    assert payload(store, "c1")["folded_into"] == "b1"
    assert payload(store, "c1")["fold_scope"] == "crew"  # b1 is agent-b's: c1 stays agent-c's own
    assert ids(store, "agent-a") == [] and ids(store, "agent-b") == ["b1"] and ids(store, "agent-c") == ["c1"]


def test_an_export_line_carries_the_fold(store: MemoryStore, mk: MakePoint) -> None:
    three_agents(store, mk)
    owner = export_line(payload(store, "a1"), None)["memory"]["extra"]
    absorbed = export_line(payload(store, "b1"), None)["memory"]["extra"]
    assert [p["entry_id"] for p in owner["folded"]] == ["b1", "c1"] and owner["agents"][1:] == ["agent-b", "agent-c"]
    assert absorbed["folded_into"] == "a1"


def test_a_newer_fact_supersedes_the_older_whichever_arrives_first(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("t1", "the release train leaves on Tuesday", e(0), ts="2026-01-01T00:00:00Z"),
            mk("t2", "the release train now leaves on Thursday", mix((0, 1.0), (1, 0.2)), ts="2026-02-01T00:00:00Z"),
        ]
    )
    result = linker(store).link([vector_event("t2")])
    assert (result.folded, result.superseded) == (0, 1)
    assert [(r["dst"], r["relation"]) for r in payload(store, "t2")["relations"] if r["relation"] == "supersedes"] == [
        ("t1", "supersedes")
    ]
    assert payload(store, "t1")["superseded_by"] == "t2"
    # an older fact written late: the edge still goes from the newer memory
    store.upsert([mk("t0", "the release train leaves on Monday", mix((0, 1.0), (2, 0.2)), ts="2025-12-01T00:00:00Z")])
    assert linker(store).link([vector_event("t0")]).superseded == 1
    assert payload(store, "t0")["superseded_by"] in {"t1", "t2"}
    newer = payload(store, payload(store, "t0")["superseded_by"])
    assert "t0" in {r["dst"] for r in newer["relations"] if r["relation"] == "supersedes"}


def test_recall_puts_the_newer_fact_first_and_brings_it_in(store: MemoryStore, mk: MakePoint) -> None:
    from episodic.retrieval.engine import RecallEngine
    from episodic.store.sparse import Bm25Encoder
    from episodic_client.models import RecallRequest

    store.upsert(
        [
            mk("t1", "the release train leaves on Tuesday from platform nine", e(0), ts="2026-01-01T00:00:00Z"),
            mk("t2", "the release train now leaves on Thursday", mix((0, 1.0), (1, 0.2)), ts="2026-02-01T00:00:00Z"),
            mk("o1", "the platform nine lights are broken", e(5)),
        ]
    )
    assert linker(store).link([vector_event("t2")]).superseded == 1
    req = {"workspace_id": "ws-a", "agent_id": "agent-1", "mode": "sparse", "k": 2}
    engine = RecallEngine(store=store, embedder=None, bm25=Bm25Encoder())
    # both match: the newer right above the older, whatever BM25 thought
    both = engine.recall(RecallRequest.model_validate({**req, "query": "release train Tuesday platform"})).hits
    assert [(h.entry_id, h.via) for h in both] == [("t2", "direct"), ("t1", "direct")]
    assert [h.placed for h in both] == ["newer", "direct"]  # BM25 had the older first: the newer was moved up
    assert both[0].supersedes == ["t1"] and both[1].superseded_by == "t2" and both[0].score >= both[1].score
    # only the older matches: the newer is brought in above it, counted in k
    only = engine.recall(RecallRequest.model_validate({**req, "query": "Tuesday platform nine", "k": 3})).hits
    assert [(h.entry_id, h.via) for h in only] == [("t2", "supersedes"), ("t1", "direct"), ("o1", "direct")]
    assert [h.placed for h in only] == ["newer", "direct", "direct"]
    off = RecallEngine(store=store, embedder=None, bm25=Bm25Encoder(), newer_first=False)
    assert "t2" not in {
        h.entry_id for h in off.recall(RecallRequest.model_validate({**req, "query": "platform nine"})).hits
    }


def test_forgetting_the_newer_fact_makes_the_older_current_again(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    store.upsert(
        [
            mk("t1", "the release train leaves on Tuesday", e(0), ts="2026-01-01T00:00:00Z"),
            mk("t2", "the release train now leaves on Thursday", mix((0, 1.0), (1, 0.2)), ts="2026-02-01T00:00:00Z"),
        ]
    )
    assert linker(store).link([vector_event("t2")]).superseded == 1
    Forgetter(store=store, state=state, clock=lambda: T).apply(forget("f-t2", entry_ids=["t2"]))
    assert payload(store, "t1").get("superseded_by") is None


def test_a_newer_fact_forgotten_while_the_linker_writes_leaves_the_older_current(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    """t2 is forgotten after the linker decided that it supersedes t1 and before it wrote the mark (the
    forget's own clean-up found no `supersedes` edge yet): the linker clears t1's mark again."""
    store.upsert(
        [
            mk("t1", "the release train leaves on Tuesday", e(0), ts="2026-01-01T00:00:00Z"),
            mk("t2", "the release train now leaves on Thursday", mix((0, 1.0), (1, 0.2)), ts="2026-02-01T00:00:00Z"),
        ]
    )
    forgetter = Forgetter(store=store, state=state, clock=lambda: T)
    racing = Interleaved(
        store, "update_memories", lambda: forgetter.apply(forget("f-t2", entry_ids=["t2"])), before=True
    )
    result = Linker(store=racing, clock=lambda: T, state=state).link([vector_event("t2")])  # type: ignore[arg-type]
    assert result.superseded == 1 and store.retrieve([point_id("ws-a", "t2")]) == {}
    assert payload(store, "t1").get("superseded_by") is None
    assert check_store(store, state).ok


def test_an_owner_forgotten_while_the_linker_folds_hides_nothing(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    """a1 takes b1 and c1 in, then is forgotten before the linker marks them (the forget's unfold makes b1
    the heir of c1 and its marks come first): the linker's marks would hide both behind a1, which is gone.
    The linker puts them back: b1 stands alone holding c1, as the forget left them."""
    store.upsert(
        [
            mk("a1", OOM, e(0), agent="agent-a", ts="2026-01-01T00:00:00Z"),
            mk("b1", OOM_2, mix((0, 1.0), (1, 0.2)), agent="agent-b", ts="2026-01-01T00:01:00Z"),
            mk("c1", OOM_3, mix((0, 1.0), (2, 0.2)), agent="agent-c", ts="2026-01-01T00:02:00Z"),
        ]
    )
    forgetter = Forgetter(store=store, state=state, clock=lambda: T)
    racing = Interleaved(store, "set_payloads", lambda: forgetter.apply(forget("f-a1", entry_ids=["a1"])), before=True)
    linker = Linker(store=racing, clock=lambda: T, state=state)  # type: ignore[arg-type]
    assert linker.link([vector_event("b1"), vector_event("c1")]).folded == 2
    assert payload(store, "b1").get("folded_into") is None and payload(store, "c1")["folded_into"] == "b1"
    assert ids(store, "agent-b") == ["b1"] and ids(store, "agent-c") == ["c1"]
    assert check_store(store, state).ok, check_store(store, state).as_dict()


# -- an operator's unfold (issue 47, part 4: episodic.lifecycle.unfold) ----------------------------------------


def test_an_unfolded_part_is_its_own_memory_again_and_never_folds_back(
    store: MemoryStore, state: StateStore, mk: MakePoint
) -> None:
    import pytest

    from episodic.lifecycle.unfold import NotFolded, unfold_part

    three_agents(store, mk)
    owner = payload(store, "a1")
    assert all("same facts" in p["rule"] for p in owner["folded"])  # the rule's reason, kept with each part
    detail = memory_detail(store, None, "ws-a", "a1", T)
    assert detail is not None and [p["rule"] for p in detail["folded"]] == [p["rule"] for p in owner["folded"]]

    done = unfold_part(store, "ws-a", "a1", "b1", by="ops", now=T)
    assert (done.rewritten, done.owner_occurrences, done.agent_id) == (2, 2, "agent-b")
    part, owner = payload(store, "b1"), payload(store, "a1")
    assert part.get("folded_into") is None and part.get("fold_scope") is None
    assert part["unfolded"] == [{"from": "a1", "at": "2026-11-20T12:00:00Z", "by": "ops", "cosine": done.cosine}]
    assert [p["entry_id"] for p in owner["folded"]] == ["c1"]
    assert owner["agents"] == ["agent-a", "agent-c"] and owner["occurrences"] == 2
    edges = {(r.src, r.dst, r.relation) for r in store.relations_of("ws-a", ["b1"])}
    assert ("b1", "a1", "similar") in edges  # alike, only not one memory
    assert ids(store, "agent-b") == ["b1"]
    got = memory_detail(store, None, "ws-a", "b1", T)
    assert got is not None and got["entry_id"] == "b1" and got["summary"] == OOM_2

    # a new version of b1 (linked afresh) does not fold into a1 again: the operator said they are two
    store.upsert([mk("b1", OOM_2, mix((0, 1.0), (1, 0.2)), agent="agent-b", ts="2026-01-01T00:01:00Z",
                     unfolded=part["unfolded"])])  # fmt: skip
    assert linker(store).link([vector_event("b1")]).folded == 0
    assert payload(store, "b1").get("folded_into") is None
    with pytest.raises(NotFolded):
        unfold_part(store, "ws-a", "a1", "b1", by="ops", now=T)
    with pytest.raises(NotFolded):
        unfold_part(store, "ws-a", "a1", "d1", by="ops", now=T)  # never a part of it
    assert check_store(store, state).ok, check_store(store, state).as_dict()


def test_only_an_operator_unfolds() -> None:
    import pytest

    from episodic.kernel.auth import AuthError, Principal, authorize_unfold

    authorize_unfold(Principal("ops", admin=True), "ws-a")
    authorize_unfold(Principal("team", workspaces=frozenset({"ws-a"})), "ws-a")
    with pytest.raises(AuthError, match="only an operator"):
        authorize_unfold(Principal("bot", workspaces=frozenset({"ws-a"}), agent_id="a", role="agent"), "ws-a")
    with pytest.raises(AuthError, match="workspace_id"):
        authorize_unfold(Principal("team", workspaces=frozenset({"ws-b"})), "ws-a")
