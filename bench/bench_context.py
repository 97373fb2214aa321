"""What context-aware indexing costs: ingestion per entry and the fifth leg at recall (issue 11).

Ingestion: the same N journal entries (R runs written in turns, so a batch holds entries of many runs, as
a consumer batch of a busy workspace does) indexed by the real `Indexer` into a fresh Qdrant Edge store,
in batches of `--batch`, with `EPISODIC_CONTEXT_MODE` off and prev:2 in alternating rounds. The model is
left out (sparse-only) so the difference is the context's own work: one run look-up per run per batch,
the context vector, the neighbours' edges. The baseline in the same run is what the model costs per entry
(`embed_documents` on a sample of the same texts), which the pipeline pays on top.

Recall: a store of `--memories` entries indexed with prev:2 (every memory's vectors are real BM25 vectors
of its text; dense vectors are a real MiniLM vector of one of 512 sampled texts plus noise, as in
bench_recall_latency), queried with the five-leg fusion (the default) and the four-leg one (no context
leg), alternating, store query alone, on the store as production serves it (never optimised).

    python -m bench.bench_context              # 4000 entries, 20k memories, 300 queries
    python -m bench.bench_context --quick      # 800 entries, 2k memories, 60 queries
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Row, emit, journal_summary, load_embedder, percentile_rows, tmp_dir

WS = "ws-bench"
QUESTIONS = [
    "why was the checkout service OOM-killed",
    "which deploy broke the payments API",
    "what did the planner decide about the retry budget",
    "when did the database migration lock the orders table",
    "who escalated the DNS failure",
]


def records(n: int, runs: int, seed: int = 3) -> list[Any]:
    from schemas.events import EmbeddableRecord

    rng = random.Random(seed)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        run = i % runs
        out.append(
            EmbeddableRecord.from_dict(
                {
                    "id": f"e{i}",
                    "workspace_id": WS,
                    "agent_id": f"agent-{run % 7}",
                    "run_id": f"run-{run}",
                    "ts": (t0 + timedelta(seconds=i)).isoformat(),
                    "entry_type": "summary.generated",
                    "severity": "info",
                    "summary": journal_summary(rng, "short"),
                    "payload": {},
                    "base_importance": 0.5,
                    "accepted_at": t0 + timedelta(seconds=i, milliseconds=3),
                }
            )
        )
    return out


def index_all(path: Path, recs: list[Any], batch: int, mode: str, embedder: Any = None) -> tuple[float, float]:
    """Seconds for the whole stream (index_batch calls), and the part spent on context and adjacency."""
    from episodic.domain.context_mode import parse_mode
    from episodic.indexing.indexer import Indexer
    from episodic.store.edge import EdgeStore
    from episodic.store.sparse import Bm25Encoder

    store = EdgeStore(path)
    store.ensure_collection(384)
    ix = Indexer(store=store, embedder=embedder, bm25=Bm25Encoder(), context=parse_mode(mode))
    total = ctx = 0.0
    try:
        for i in range(0, len(recs), batch):
            t0 = time.perf_counter()
            r = ix.index_batch(recs[i : i + batch])
            total += time.perf_counter() - t0
            ctx += r.context_seconds
    finally:
        store.close()
    return total, ctx


class NoisyEmbedder:
    """Real MiniLM vectors of a sample of texts, reused with noise for the rest (cheap, realistic spread)."""

    def __init__(self, embedder: Any, texts: list[str], sample: int = 512, seed: int = 11) -> None:
        self.inner = embedder
        self.rng = np.random.default_rng(seed)
        self.base = np.stack([v[0] for v in embedder.embed_documents(texts[:sample])])
        self.dim, self.model_id, self.pieces = embedder.dim, embedder.model_id, embedder.pieces

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        rows = self.base[self.rng.integers(0, len(self.base), len(texts))]
        rows = rows + self.rng.normal(0, 0.02, rows.shape)
        return [(r / np.linalg.norm(r))[None, :].astype(np.float32) for r in rows]

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--entries", type=int, default=None)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memories", type=int, default=None)
    ap.add_argument("--queries", type=int, default=None)
    a = ap.parse_args(argv)
    n = a.entries or (800 if a.quick else 4000)
    memories = a.memories or (2000 if a.quick else 20_000)
    queries = a.queries or (60 if a.quick else 300)
    recs = records(n, a.runs)
    embedder = load_embedder()
    rows: list[Row] = []

    # the model's cost per entry on the same texts: what the pipeline pays on top of what is measured here
    sample = [r.summary for r in recs[:256]]
    t0 = time.perf_counter()
    embedder.embed_documents(sample)
    model_s = (time.perf_counter() - t0) / len(sample)

    took: dict[str, list[float]] = {"off": [], "prev:2": []}
    ctx_s: dict[str, list[float]] = {"off": [], "prev:2": []}
    with tmp_dir() as d:
        for r in range(a.rounds):
            for mode in ("off", "prev:2") if r % 2 == 0 else ("prev:2", "off"):
                total, ctx = index_all(d / f"{mode}-{r}".replace(":", ""), recs, a.batch, mode)
                took[mode].append(total / n)
                ctx_s[mode].append(ctx / n)
    off, on = float(np.median(took["off"])), float(np.median(took["prev:2"]))
    rows.append(
        Row("context", "ingestion per entry, prev:2 (sparse-only)", on * 1000, "ms", off * 1000, "mode off, same run")
    )
    rows.append(
        Row(
            "context",
            "context's extra work per entry",
            (on - off) * 1000,
            "ms",
            model_s * 1000,
            "MiniLM embed_documents per entry, same texts",
            note=f"the run step alone (look-ups, edges, context vector): {np.median(ctx_s['prev:2']) * 1000:.2f} "
            f"ms/entry; with mode off (adjacency edges only): {np.median(ctx_s['off']) * 1000:.2f} ms/entry",
        )
    )

    # recall: five legs (the default) vs four (no context leg), store query alone
    from episodic.kernel.ports import Fusion, ScopeFilter
    from episodic.store.edge import EdgeStore
    from episodic.store.sparse import Bm25Encoder

    many = records(memories, max(a.runs, memories // 50), seed=5)
    noisy = NoisyEmbedder(embedder, [r.summary for r in many])
    five = Fusion(k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True)
    four = Fusion(k=3, both_weight=0.5, head=5, head_weight=0.75)
    scope = ScopeFilter(workspace_id=WS, scope="own", agent_id="agent-3")
    bm25 = Bm25Encoder()
    with tmp_dir() as d:
        index_all(d / "recall", many, 512, "prev:2", noisy)
        store = EdgeStore(d / "recall")
        store.ensure_collection(384)  # not optimised: what production serves (docs/benchmarks.md, bench_recall_latency)
        qs = [(embedder.embed_query(q).tolist(), bm25.query(q)) for q in QUESTIONS]
        lat: dict[str, list[float]] = {"five": [], "four": []}
        for i in range(queries):
            vec, sp = qs[i % len(qs)]
            for name, fusion in (("five", five), ("four", four)) if i % 2 else (("four", four), ("five", five)):
                t0 = time.perf_counter()
                store.query_hybrid(vec, sp, scope, 10, fusion)
                lat[name].append(time.perf_counter() - t0)
        store.close()
    rows += percentile_rows(
        "context",
        f"hybrid store query p{{p}}, five legs, {memories // 1000}k memories",
        lat["five"],
        lat["four"],
        "four legs (no context leg), same store, alternating",
    )
    emit(rows, f"context-aware indexing: {n} entries in {a.runs} runs, batches of {a.batch}; machine shared")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
