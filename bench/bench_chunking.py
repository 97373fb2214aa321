"""What sentence pieces cost against the 256/32 windows: ingestion per entry and the hybrid query (issue 11).

Ingestion: the same N journal summaries (the benchmarks' mixed lengths: mostly one to four sentences, some
paragraphs, ~4 % long reports) through the embedder's ingestion path as production loads it (ONNX Runtime
batches when the export reproduces torch), `embed_documents` in batches of `--batch`, with
`EPISODIC_CHUNK_MODE=window` and `sentences` in alternating rounds on one loaded model. Reported: entries/s
and pieces (vectors) per entry of each mode.

Recall: two Qdrant Edge stores of `--memories` memories indexed by the real `Indexer` with prev:2 context,
one per mode. Each memory's dense rows are the real rows of one of `--sample` texts under that mode, plus
noise (as bench_context does), so each store holds the row count that mode gives real text. Queried with
the default hybrid through `query_hybrid`, alternating between the stores, on the stores as production
serves them (never optimised). On the sentence-pieces store the previous default fusion (five legs, the
dense leg by its raw max-sim: no piece prior) is timed too, alternating with the shipped one: what the
piece prior's nested prefetch and formula cost; and the shipped fusion without its lexical confidence: what
the top-1 BM25 search before the hybrid query costs (the count is reused for 30 s).

    python -m bench.bench_chunking               # 2048 texts x 3 rounds, 20k memories, 300 queries
    python -m bench.bench_chunking --quick       # 256 texts x 2 rounds, 2k memories, 60 queries
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_context import QUESTIONS, WS, index_all, records
from bench.common import Row, emit, journal_summaries, percentile_rows, tmp_dir

MODES = ("window", "sentences")


class SampledRows:
    """A memory's dense rows: the real rows of one sampled text under `mode` plus noise (row count kept)."""

    def __init__(self, embedder: Any, texts: list[str], mode: str, seed: int = 11) -> None:
        embedder.chunk_mode = mode
        self.base = embedder.embed_documents(texts)
        self.rng = np.random.default_rng(seed)
        self.inner, self.dim, self.model_id = embedder, embedder.dim, embedder.model_id

    @property
    def pieces(self) -> str:
        return self.inner.pieces

    def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        out = []
        for i in self.rng.integers(0, len(self.base), len(texts)):
            rows = self.base[i] + self.rng.normal(0, 0.02, self.base[i].shape)
            out.append((rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32))
        return out

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


def ingestion(embedder: Any, texts: list[str], batch: int, rounds: int) -> dict[str, tuple[float, float]]:
    """mode -> (median entries/s, pieces per entry)."""
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    pieces: dict[str, float] = {}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            embedder.chunk_mode = mode
            n_rows = 0
            t0 = time.perf_counter()
            for i in range(0, len(texts), batch):
                n_rows += sum(len(v) for v in embedder.embed_documents(texts[i : i + batch]))
            rates[mode].append(len(texts) / (time.perf_counter() - t0))
            pieces[mode] = n_rows / len(texts)
    return {m: (float(np.median(rates[m])), pieces[m]) for m in MODES}


PREVIOUS = "sentences, previous fusion"
NO_LEXICAL = "sentences, without lexical confidence"


def recall(embedder: Any, memories: int, sample: int, queries: int, root: Path) -> dict[str, list[float]]:
    from dataclasses import replace

    from episodic.kernel.ports import ScopeFilter
    from episodic.kernel.settings import Settings
    from episodic.retrieval.engine import fusions_by_mode
    from episodic.store.edge import EdgeStore
    from episodic.store.sparse import Bm25Encoder

    many = records(memories, max(40, memories // 50), seed=5)
    texts = journal_summaries(sample, seed=13)
    stores = {}
    for mode in MODES:
        index_all(root / mode, many, 512, "prev:2", SampledRows(embedder, texts, mode))
        stores[mode] = EdgeStore(root / mode)
        stores[mode].ensure_collection(384)  # not optimised: what production serves
    fusions = fusions_by_mode(Settings())  # each store ranked with its own mode's fusion, as production does
    fusion = fusions["sentences"]
    previous = replace(fusion, dense_weight=1.0, piece_penalty=0.0, head=5, head_weight=0.75, lexical_full=0.0)
    scope = ScopeFilter(workspace_id=WS, scope="own", agent_id="agent-3")
    bm25 = Bm25Encoder()
    qs = [(embedder.embed_query(q).tolist(), bm25.query(q)) for q in QUESTIONS]
    runs = [(m, m, fusions[m]) for m in MODES] + [(PREVIOUS, "sentences", previous)]
    runs.append((NO_LEXICAL, "sentences", replace(fusion, lexical_full=0.0)))
    lat: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    try:
        for i in range(queries):
            vec, sp = qs[i % len(qs)]
            for name, mode, f in runs if i % 2 else runs[::-1]:
                t0 = time.perf_counter()
                stores[mode].query_hybrid(vec, sp, scope, 10, f)
                lat[name].append(time.perf_counter() - t0)
    finally:
        for s in stores.values():
            s.close()
    return lat


def main(argv: list[str] | None = None) -> int:
    from episodic.embedding.embedder import load_embedder
    from episodic.kernel.settings import Settings

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None, help="texts embedded per round (default 2048, quick 256)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3, quick 2)")
    ap.add_argument("--memories", type=int, default=None, help="memories per store (default 20000, quick 2000)")
    ap.add_argument("--sample", type=int, default=512, help="real texts whose rows the stores reuse")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per store (default 300, quick 60)")
    a = ap.parse_args(argv)
    n = a.n or (256 if a.quick else 2048)
    rounds = a.rounds or (2 if a.quick else 3)
    memories = a.memories or (2000 if a.quick else 20_000)
    queries = a.queries or (60 if a.quick else 300)
    embedder = load_embedder(Settings())
    if embedder is None:
        raise SystemExit("the bundled model did not load")
    backend = embedder.backends["documents"]
    texts = journal_summaries(n, seed=7)
    ing = ingestion(embedder, texts, a.batch, rounds)
    (w_rate, w_pieces), (s_rate, s_pieces) = ing["window"], ing["sentences"]
    rows = [
        Row(
            "chunking",
            f"ingestion, sentence pieces ({backend} batches of {a.batch})",
            s_rate,
            "entries/s",
            w_rate,
            "256/32 windows, same texts, alternating rounds",
            note=f"vectors per entry: {s_pieces:.2f} (windows {w_pieces:.2f})",
        )
    ]
    with tmp_dir() as d:
        lat = recall(embedder, memories, a.sample, queries, d)
    rows += percentile_rows(
        "chunking",
        f"hybrid store query p{{p}}, sentence pieces, {memories // 1000}k memories",
        lat["sentences"],
        lat["window"],
        "256/32 windows, same memories, alternating",
    )
    rows += percentile_rows(
        "chunking",
        f"hybrid store query p{{p}}, shipped fusion (piece prior, four legs), {memories // 1000}k memories",
        lat["sentences"],
        lat[PREVIOUS],
        "previous fusion (five legs, raw max-sim), same store, alternating",
    )
    rows += percentile_rows(
        "chunking",
        f"hybrid store query p{{p}}, with lexical confidence (a top-1 BM25 search first), {memories // 1000}k memories",
        lat["sentences"],
        lat[NO_LEXICAL],
        "the same fusion without it, same store, alternating",
    )
    emit(rows, f"sentence pieces vs windows: {n} mixed summaries x {rounds} rounds; machine shared")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
