"""`episodic check` (episodic.lifecycle.check) on every adapter: a store the pipeline wrote holds every
invariant; each kind of damage the issue names is found, on the memory it concerns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import MemoryStore, Relation, StateStore
from episodic.lifecycle.check import check_store
from episodic.lifecycle.forget import Forgetter
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord, ForgetRecord, ForgetSelector
from tests.contract.conftest import DIM

T = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


class Unit:
    """A deterministic embedder for the check (the vector's text is what matters, not its quality)."""

    model_id, dim, pieces = "unit", DIM, "whole"

    def embed_documents(self, texts: list[str]) -> list[Any]:
        import numpy as np

        out = []
        for t in texts:
            v = np.zeros(DIM, dtype=np.float32)
            v[len(t) % DIM] = 1.0
            out.append(v.reshape(1, -1))
        return out

    def embed_query(self, text: str) -> Any:
        return self.embed_documents([text])[0][0]


def rec(i: str, summary: str, *, agent: str = "agent-1", accepted: datetime | None = None) -> EmbeddableRecord:
    at = accepted or T - timedelta(hours=1)
    return EmbeddableRecord.from_dict(
        {
            "id": i,
            "workspace_id": "ws-a",
            "agent_id": agent,
            "run_id": "r1",
            "ts": at.isoformat(),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {},
            "base_importance": 0.7,
            "accepted_at": at,
        }
    )


def kinds(store: MemoryStore, state: StateStore) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for v in check_store(store, state).violations:
        out.setdefault(v.kind, set()).add(v.entry_id)
    return out


def test_a_store_the_pipeline_wrote_holds_and_each_damage_is_found(
    store: MemoryStore, state: StateStore, bm25: Bm25Encoder
) -> None:
    ix = Indexer(store=store, embedder=Unit(), bm25=bm25)  # type: ignore[arg-type]
    ix.index_batch(
        [rec(f"e{i}", f"memory {i} about the checkout") for i in range(5)] + [rec("d1", "memory 0 about the checkout")]
    )
    store.add_relations([Relation("e1", "e2", "similar", 0.9, "2026-11-20T00:00:00Z", "ws-a")])
    forgetter = Forgetter(store=store, state=state, clock=lambda: T)
    forgetter.apply(
        ForgetRecord(forget_id="f1", workspace_id="ws-a", selector=ForgetSelector(entry_ids=["e3"]), requested_at=T)
    )
    report = check_store(store, state)
    assert report.ok, report.as_dict()
    assert report.memories == 4 and report.unverified_vectors == 0

    pid = point_id
    # the damage the issue lists, each done the way a lost update or a resurrection would leave it
    ix.index_batch([rec("e3-again", "memory 3 about the checkout")])  # the forgotten text, accepted before
    store.set_payloads({pid("ws-a", "e2"): {"aliases": ["d1"], "occurrences": 2}})  # d1 is e0's alias too
    store.set_payloads(
        {
            pid("ws-a", "e4"): {
                "relations": [{"dst": "ghost", "relation": "similar", "weight": 0.9, "created_at": "x"}],
                "links": ["ghost"],
            }
        }
    )
    store.set_payloads({pid("ws-a", "e1"): {"reference_count": -1, "importance_score": 1.5}})
    store.set_payloads({pid("ws-a", "e0"): {"summary": "a new summary the vector was not made from"}})
    store.set_payloads({pid("ws-a", "e2"): {"context_ids": ["e3"], "links": ["e3"]}})
    store.set_payloads({pid("ws-a", "e1"): {"folded_into": "ghost"}})  # hidden behind an owner that is gone
    found = kinds(store, state)
    assert found.get("forgotten_text") == {"e3-again"}
    assert found.get("alias_twice") == {"d1"}
    assert found.get("edge_to_missing") == {"e4"}
    assert found.get("edge_to_forgotten") == {"e2"} and found.get("forgotten_in_context") == {"e2"}
    assert found.get("counter_out_of_range") == {"e1"}
    assert found.get("vector_of_other_text") == {"e0"}
    assert found.get("folded_into_missing") == {"e1"}
    # a forgotten id back as a memory
    ix.index_batch([rec("e3", "memory 3 about the checkout, said again", accepted=T + timedelta(minutes=1))])
    assert "e3" in kinds(store, state).get("forgotten_present", set())
