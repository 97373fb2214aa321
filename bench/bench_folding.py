"""What folding and supersession cost: the linker per new memory, and a recall query, against the previous default.

Two Qdrant Edge stores are filled alike (`--memories`, one workspace, ten agents of one crew; a fifth of
the memories are rewordings of an earlier one by another agent: its vector the original's plus noise,
cosine ~0.93, and one word changed). Then `--batches` batches of 64 new memories (the same mix) are written
to both and linked: one store's linker folds and checks supersession (the default), the other's does
neither (the previous default);
which store goes first alternates per batch. The figure is the linker's time per memory, p50 over batches.

Recall: on the folding store, `--queries` hybrid queries in scope `own` with the scope filter that ships
(the agent's own memories or those folded from its entries, `agents`; absorbed memories passed over,
`folded_into` empty) against the previous scope filter (`agent_id` alone), alternating per query.

Vectors are synthetic (no model: the model's time is the same either way and would hide the difference).

    python -m bench.bench_folding            # 10k memories, 20 batches, 400 queries
    python -m bench.bench_folding --quick    # 2k memories, 6 batches, 100 queries
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Row, emit, median, percentile_rows, tmp_dir

DIM = 384
WS = "ws-bench"
AGENTS = [f"agent-{i}" for i in range(10)]
WORDS = ["checkout", "payments", "search", "billing", "ledger", "cache", "queue", "deploy", "canary", "rollback"]


class Corpus:
    """Memories of one workspace, a fifth of them near duplicates of an earlier one (another agent's)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.vecs: list[np.ndarray] = []
        self.texts: list[str] = []

    def next(self) -> tuple[str, np.ndarray, str, str]:
        i = len(self.texts)
        agent = self.rng.choice(AGENTS)
        if self.texts and self.rng.random() < 0.2:
            j = self.rng.randrange(len(self.texts))
            v = self.vecs[j] + self.np.normal(0, 0.4 / np.sqrt(DIM), DIM)
            words = self.texts[j].split()
            words[-1] = "again"
            text = " ".join(words)
        else:
            v = self.np.normal(0, 1, DIM)
            text = " ".join(self.rng.choice(WORDS) for _ in range(8)) + f" incident {i} seen"
        v = v / np.linalg.norm(v)
        self.vecs.append(v)
        self.texts.append(text)
        return f"m{i}", v, text, agent


def point(bm25: Any, entry_id: str, v: np.ndarray, text: str, agent: str) -> Any:
    from episodic.domain.identity import point_id
    from episodic.kernel.ports import MemoryPoint

    payload = {
        "entry_id": entry_id,
        "workspace_id": WS,
        "agent_id": agent,
        "crew_id": "crew-1",
        "entry_type": "summary.generated",
        "severity": "info",
        "summary": text,
        "ts": "2026-01-01T00:00:00Z",
        "indexed_at": "2026-01-01T00:00:01Z",
        "aliases": [],
        "importance_score": 0.7,
        "has_dense": True,
        "reference_count": 0,
    }
    return MemoryPoint(point_id(WS, entry_id), bm25.document(text), payload, dense=[v.tolist()])


def run(memories: int, batches: int, queries: int, root: Path) -> tuple[dict[str, list[float]], dict[str, Any]]:
    from datetime import UTC, datetime

    import episodic.store.query as Q
    from episodic.domain.folding import FoldRule
    from episodic.domain.supersession import SupersedeRule
    from episodic.kernel.ports import Fusion, ScopeFilter
    from episodic.maintenance.linker import Linker
    from episodic.store.edge import EdgeStore
    from episodic.store.sparse import Bm25Encoder
    from schemas.events import IndexedEvent

    bm25 = Bm25Encoder()
    corpus = Corpus(seed=3)
    stores = {name: EdgeStore(root / name) for name in ("fold", "nofold")}
    linkers = {
        "fold": Linker(store=stores["fold"], fold_rule=FoldRule()),
        "nofold": Linker(
            store=stores["nofold"], fold_rule=FoldRule(enabled=False), supersede_rule=SupersedeRule(enabled=False)
        ),
    }
    for s in stores.values():
        s.ensure_collection(DIM)
    first = [point(bm25, *corpus.next()) for _ in range(memories)]
    for s in stores.values():
        for k in range(0, len(first), 512):
            s.upsert(first[k : k + 512])
    lat: dict[str, list[float]] = {"fold": [], "nofold": [], "recall": [], "recall-previous": []}
    folded = 0
    now = datetime.now(UTC)
    try:
        for b in range(batches):
            new = [point(bm25, *corpus.next()) for _ in range(64)]
            events = [
                IndexedEvent(
                    entry_id=p.payload["entry_id"], workspace_id=WS, point_id=p.point_id, indexed_at=now, mode="vector"
                )
                for p in new
            ]
            for name in ("fold", "nofold") if b % 2 else ("nofold", "fold"):
                stores[name].upsert(new)
                t0 = time.perf_counter()
                result = linkers[name].link(events)
                lat[name].append((time.perf_counter() - t0) / len(new))
                folded += result.folded if name == "fold" else 0
        qs = [(corpus.vecs[i].tolist(), bm25.query(corpus.texts[i])) for i in range(0, len(corpus.texts), 7)]
        shipped = Q.who_filter

        def previous(scope: ScopeFilter) -> Q.Filter:  # the scope filter before folding
            return Q.in_workspace(scope.workspace_id, Q.Match("agent_id", str(scope.agent_id)))

        for i in range(queries):
            vec, sp = qs[i % len(qs)]
            scope = ScopeFilter(workspace_id=WS, scope="own", agent_id=AGENTS[i % len(AGENTS)])
            for name, who in (("recall", shipped), ("recall-previous", previous))[:: 1 if i % 2 else -1]:
                Q.who_filter = who  # type: ignore[assignment]
                try:
                    t0 = time.perf_counter()
                    stores["fold"].query_hybrid(vec, sp, scope, 10, Fusion())
                    lat[name].append(time.perf_counter() - t0)
                finally:
                    Q.who_filter = shipped
    finally:
        for s in stores.values():
            s.close()
    return lat, {"folded": folded, "linked": batches * 64}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--memories", type=int, default=None, help="memories in each store first (10000; quick 2000)")
    ap.add_argument("--batches", type=int, default=None, help="linked batches of 64 per store (20; quick 6)")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per filter (400; quick 100)")
    a = ap.parse_args(argv)
    memories = a.memories or (2000 if a.quick else 10_000)
    batches = a.batches or (6 if a.quick else 20)
    queries = a.queries or (100 if a.quick else 400)
    with tmp_dir() as d:
        lat, info = run(memories, batches, queries, d)
    rows = [
        Row(
            "folding",
            "linker per new memory (p50 over batches), folding and supersession on",
            median(lat["fold"]),
            "s",
            median(lat["nofold"]),
            "both off (previous default), same memories, alternating",
            note=f"{info['folded']} of {info['linked']} linked memories folded",
        )
    ]
    rows += percentile_rows(
        "folding",
        f"hybrid store query p{{p}}, scope own with folds (agents, folded_into), {memories // 1000}k memories",
        lat["recall"],
        lat["recall-previous"],
        "previous scope filter (agent_id only), same store, alternating",
    )
    emit(rows, f"near-duplicate folding: {memories} memories, {batches} x 64 linked, {queries} queries; synthetic")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
