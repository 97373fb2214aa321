"""The embedded store's index build: graphs per value of every payload index (Qdrant's default, the build
before issue 27) against graphs for the fields that scope a recall only with ACORN for the other filters
(today's default, `episodic.store.rules.GRAPH_FIELDS`), on the same memories in the same run.

    python -m bench.bench_index_build [--memories 40000] [--workspaces 1] [--threads 2] [--queries 100] [--quick]

Real memories: paragraphs of LongMemEval's haystack conversations (../shared/datasets/longmemeval, the
`s` set), at most 300 characters each, embedded with the real model (all-MiniLM-L6-v2: about 5 minutes for
40k on 2 cores). Each gets a severity (info 50 %, warn 30 %, error 15 %, debug 5 %), an entry type (one of
three) and a `ts` in the last 60 days, so that recall's filters keep 10 to 33 % of a workspace: enough
memories, at 40k in one workspace, for Qdrant to search the graph with the filter rather than scan what the
filter's payload index selects (it scans below `full_scan_threshold`, 6,666 memories at 384 dimensions).

The seeded store is never indexed (every query scans: the exact answers), then copied twice and each copy
built by the index worker (`python -m episodic.store.edge_worker`): **previous** with every payload index's
graphs (`--keep-graphs` over indexes created as before; searched without ACORN, as before), **default**
with today's indexes (searched with ACORN). Per filter
(scope `own`; no filter; severity; entry type; a time window; two combined), queries are the dev set's
questions and the first sentence of sampled paragraphs: recall@10 of the index against the exact answers,
and the store query's p50 / p99. The default is also queried without ACORN (the ablation).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Row, emit, iso, journal_entry, load_embedder, percentile, record_generation, tmp_dir

SEVERITIES = (("info", 0.5), ("warn", 0.3), ("error", 0.15), ("debug", 0.05))
TYPES = ("summary.generated", "decision.made", "error.raised")
DAYS = 60


def paragraphs(limit: int) -> tuple[list[str], list[str]]:
    """Up to `limit` distinct paragraphs of the `s` set's haystacks, and its questions."""
    from eval.data import DATA_DIR, FILES

    texts: list[str] = []
    questions: list[str] = []
    seen: set[str] = set()
    with gzip.open(Path(DATA_DIR) / FILES["s"], "rt") as fh:
        for line in fh:
            item = json.loads(line)
            questions.append(item["question"])
            for session in item["haystack_sessions"]:
                for turn in session:
                    for para in turn["content"].split("\n"):
                        text = para.strip()[:300]
                        if len(text) >= 40 and text not in seen and len(texts) < limit:
                            seen.add(text)
                            texts.append(text)
    return texts, questions


def embedded(embedder: Any, texts: list[str], cache: Path | None) -> np.ndarray:
    """The texts' vectors, from `cache` (a .npy of the same texts embedded before) when it has them."""
    if cache is not None and cache.exists():
        vecs = np.load(cache)
        if vecs.shape == (len(texts), embedder.dim):
            print(f"  {len(texts)} paragraphs' vectors from {cache}", flush=True)
            return vecs
    t0 = time.perf_counter()
    vecs = np.stack([v[0] for v in embedder.embed_documents(texts)]).astype(np.float32)
    print(f"  embedded {len(texts)} paragraphs in {time.perf_counter() - t0:.0f}s", flush=True)
    if cache is not None:
        np.save(cache, vecs)
    return vecs


def seed(
    store: Any, embedder: Any, texts: list[str], workspaces: int, now: datetime, cache: Path | None = None
) -> None:
    from episodic.domain.identity import point_id
    from episodic.indexing.indexer import _payload
    from episodic.kernel.ports import MemoryPoint
    from episodic.store.sparse import Bm25Encoder
    from schemas.events import EmbeddableRecord

    rng = random.Random(9)
    bm25 = Bm25Encoder()
    vecs = embedded(embedder, texts, cache)
    for start in range(0, len(texts), 1000):
        points = []
        for i in range(start, min(len(texts), start + 1000)):
            ws = f"ws-{i % workspaces}"
            e = journal_entry(
                entry_id=f"p{i:07d}",
                workspace_id=ws,
                agent_id=f"agent-{ws}",
                summary=texts[i],
                severity=rng.choices([s for s, _ in SEVERITIES], [w for _, w in SEVERITIES])[0],
                entry_type=rng.choice(TYPES),
                ts=now - timedelta(days=rng.uniform(0, DAYS)),
            )
            rec = EmbeddableRecord.from_dict({**e, "base_importance": 0.7, "accepted_at": e["ts"]})
            payload = _payload(rec, indexed_at=e["ts"], model=embedder.model_id, key=f"bench-{i}")
            payload["has_dense"] = True
            points.append(MemoryPoint(point_id(ws, rec.id), bm25.document(rec.summary), payload, [vecs[i].tolist()]))
        store.upsert(points)


def filters(now: datetime) -> dict[str, Any]:
    from episodic.kernel.ports import RecallFilter

    return {
        "no filter": RecallFilter(),
        "severity warn (30 %)": RecallFilter(severities=("warn",)),
        "entry type (33 %)": RecallFilter(entry_types=("decision.made",)),
        "last 15 of 60 days (25 %)": RecallFilter(since=iso(now - timedelta(days=15))),
        "severity error or debug (20 %)": RecallFilter(severities=("error", "debug")),
        "warn and one type (10 %)": RecallFilter(severities=("warn",), entry_types=("decision.made",)),
    }


def answers(
    path: Path, embedder: Any, vectors: list[list[float]], kinds: dict[str, Any], workspaces: int, *, acorn: bool = True
) -> dict[str, tuple[list[list[str]], list[float]]]:
    """Per filter: each query's top-10 point ids and the store query's seconds."""
    from episodic.kernel.ports import ScopeFilter
    from episodic.store import edge
    from episodic.store.edge import EdgeStore

    saved = edge._ACORN_PARAMS
    if not acorn:
        edge._ACORN_PARAMS = None  # type: ignore[assignment]  # the ablation: the same index searched without ACORN
    store = EdgeStore(path)
    store.ensure_collection(embedder.dim)
    out: dict[str, tuple[list[list[str]], list[float]]] = {}
    try:
        for name, flt in kinds.items():
            ids: list[list[str]] = []
            secs: list[float] = []
            for i, v in enumerate(vectors):
                ws = f"ws-{i % workspaces}"
                scope = ScopeFilter(workspace_id=ws, scope="own", agent_id=f"agent-{ws}", filters=flt)
                t0 = time.perf_counter()
                hits = store.query_dense(v, scope, 10)
                secs.append(time.perf_counter() - t0)
                ids.append([h.point_id for h in hits])
            out[name] = (ids, secs)
    finally:
        store.close()
        edge._ACORN_PARAMS = saved
    return out


def with_every_graph(path: Path) -> None:
    """Create the copy's payload indexes again as before issue 27: every one with its graphs."""
    import qdrant_edge as qe

    from episodic.store.edge import set_value_graphs

    shard = qe.EdgeShard.load(str(path), None)
    try:
        set_value_graphs(shard, lambda _field: True)
        shard.flush()
    finally:
        shard.close()


def build(path: Path, threads: int, keep_graphs: bool) -> dict[str, Any]:
    from episodic.store.edge_index import Worker

    t0 = time.perf_counter()
    report = Worker(path, threads, keep_graphs=keep_graphs).run()
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return report


def row(metric: str, value: float, unit: str, baseline: float | None = None, note: str = "") -> Row:
    return Row("index_build", metric, value, unit, baseline, "previous" if baseline is not None else "", note=note)


def ms(secs: list[float], p: float) -> float:
    return percentile(secs, p) * 1000


def p99(secs: list[float]) -> str:
    return f"p99 {ms(secs, 99):.2f} ms"


def recall_at_10(got: list[list[str]], exact: list[list[str]]) -> float:
    return float(np.mean([len(set(a) & set(e)) / max(1, len(e)) for a, e in zip(got, exact, strict=True)]))


def run(args: argparse.Namespace) -> list[Row]:
    embedder = load_embedder()
    texts, questions = paragraphs(args.memories)
    rng = random.Random(3)
    queries = questions[: args.queries // 2]
    queries += [t.split(".")[0] for t in rng.sample(texts, args.queries - len(queries))]
    vectors = [embedder.embed_query(q).tolist() for q in queries]
    now = datetime.now(UTC)
    kinds = filters(now)
    rows: list[Row] = []
    with tmp_dir() as tmp:
        from episodic.store.edge import EdgeStore

        flat = tmp / "flat"
        store = EdgeStore(flat)
        store.ensure_collection(embedder.dim)
        record_generation(store, embedder)
        seed(store, embedder, texts, args.workspaces, now, args.vectors_cache)
        store.close()
        exact = answers(flat, embedder, vectors, kinds, args.workspaces)
        builds: dict[str, dict[str, Any]] = {}
        found: dict[str, dict[str, tuple[list[list[str]], list[float]]]] = {}
        for label, keep in (("previous", True), ("default", False)):
            copy = tmp / label
            shutil.copytree(flat, copy)
            if keep:
                with_every_graph(copy)
            builds[label] = build(copy, args.threads, keep)
            print(f"  {label}: {builds[label]}", flush=True)
            # the previous default searched without ACORN
            found[label] = answers(copy, embedder, vectors, kinds, args.workspaces, acorn=not keep)
            if not keep:
                found["default without ACORN"] = answers(copy, embedder, vectors, kinds, args.workspaces, acorn=False)
        prev, new = builds["previous"], builds["default"]
        rows.append(row("index build (worker), previous", prev["seconds"], "s"))
        rows.append(row("index build (worker), default", new["seconds"], "s", prev["seconds"]))
        rows.append(row("worker peak RSS, previous", prev["max_rss_mib"], "MiB"))
        rows.append(row("worker peak RSS, default", new["max_rss_mib"], "MiB", prev["max_rss_mib"]))
        for name in kinds:
            ex, flat_secs = exact[name]
            rows.append(
                row(f"{name}: store query p50, never indexed (exact)", ms(flat_secs, 50), "ms", note=p99(flat_secs))
            )
            base_recall = base_p50 = None
            for label, got in found.items():
                ids, secs = got[name]
                r10 = recall_at_10(ids, ex)
                rows.append(row(f"{name}: recall@10 vs exact, {label}", r10, "", base_recall))
                rows.append(row(f"{name}: store query p50, {label}", ms(secs, 50), "ms", base_p50, note=p99(secs)))
                if base_recall is None:
                    base_recall, base_p50 = r10, ms(secs, 50)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=40_000, help="real paragraphs embedded (at most ~60k)")
    ap.add_argument("--workspaces", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="the worker's indexing threads")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--vectors-cache", type=Path, default=None, help="a .npy of the paragraphs' vectors (reused)")
    ap.add_argument("--quick", action="store_true", help="10k memories, 40 queries (a sanity check)")
    args = ap.parse_args(argv)
    if args.quick:
        args.memories, args.queries = min(args.memories, 10_000), min(args.queries, 40)
    emit(run(args), f"bench_index_build: {args.memories} memories over {args.workspaces} workspace(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
