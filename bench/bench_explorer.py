"""The memory explorer's pages at 100k memories, each against the JSON API call that reads the same thing,
measured in the same run on the same app.

Seeding: `bench.bench_recall_latency.Seeder` (N memories over ten workspaces in a Qdrant Edge store, real
all-MiniLM-L6-v2 vectors for S texts and noisy copies for the rest, each memory's own BM25), plus one run
of `RUN` memories and `EDGES` relations on the memory the pages open, and one health snapshot per
workspace (the HealthJob, timed once). The store is as written (not optimised), as `episodic up` serves it.

The app is `recall.app.create_app` over that store and its state store, in this process, driven through
Starlette's TestClient (no sockets: the same per-request overhead on both sides). Pairs, each `--requests`
times after a warm-up, p50 and p99:

  /ui                      the first screen: every workspace's count, health band and 14-day chart, lag
                           baseline: GET /v1/memory/stats (every workspace's counts)
  /ui/search               a hybrid search, k 10, with the why (its legs run once more, alone)
                           baseline: POST /v1/recall, the same request
  /ui/memory/ID            one memory, its importance curve and its relation graph
                           baseline: GET /v1/memory/ID
  /ui/run/RUN              a run's timeline (RUN memories, oldest first)
                           baseline: GET /v1/memories?run_id=RUN&limit=100

Target: every page p99 under 200 ms at 100k memories.

    python -m bench.bench_explorer               # 100k memories, 100 requests a page
    python -m bench.bench_explorer --quick       # 10k, 30 requests, S=128
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from bench.bench_recall_latency import NOISE_SIGMA, QUERY_WS, QUESTIONS, WORKSPACES, Seeder, short_summary
from bench.common import Row, emit, journal_entry, load_embedder, percentile, tmp_dir

TARGET_P99_MS = 200.0
RUN = "run-bench"
RUN_SIZE = 120
EDGES = 12
AGENT = f"agent-{QUERY_WS}"


def add_run(seeder: Seeder, n: int) -> list[str]:
    """`n` memories of one run of the queried workspace's agent, a minute apart; their entry ids."""
    from episodic.domain.identity import point_id
    from episodic.indexing.indexer import _payload
    from episodic.kernel.ports import MemoryPoint
    from schemas.events import EmbeddableRecord

    start = datetime.now(UTC) - timedelta(hours=3)
    src = seeder.np_rng.integers(0, len(seeder.base), size=n)
    vecs = seeder.base[src] + seeder.np_rng.normal(0, NOISE_SIGMA, size=(n, seeder.base.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    points, ids = [], []
    for j in range(n):
        e = journal_entry(entry_id=f"run-{j:04d}", workspace_id=QUERY_WS, agent_id=AGENT,
                          summary=short_summary(seeder.rng), run_id=RUN, ts=start + timedelta(minutes=j))  # fmt: skip
        rec = EmbeddableRecord.from_dict({**e, "base_importance": 0.7, "accepted_at": e["ts"]})
        payload = _payload(rec, indexed_at=e["ts"], model=seeder.embedder.model_id, key=f"run-{j}")
        payload["has_dense"] = True
        points.append(MemoryPoint(point_id(QUERY_WS, rec.id), seeder.bm25.document(rec.summary), payload,
                                  dense=[vecs[j].tolist()]))  # fmt: skip
        ids.append(rec.id)
    seeder.store.upsert(points)
    return ids


def timed(call: Any, n: int, warm: int = 5) -> list[float]:
    for _ in range(warm):
        call(0)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        r = call(i)
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, (r.status_code, r.text[:300])
    return out


def run(args: argparse.Namespace) -> list[Row]:
    from fastapi.testclient import TestClient

    from episodic.kernel.metrics import Metrics
    from episodic.kernel.ports import Relation
    from episodic.kernel.settings import Settings
    from episodic.maintenance.health_job import HealthConfig, HealthJob
    from episodic.store.edge import EdgeStore
    from episodic.store.sparse import Bm25Encoder
    from episodic.store.state import QdrantStateStore
    from recall.app import create_app

    embedder = load_embedder()
    rng = random.Random(11)
    with tmp_dir() as tmp:
        store = EdgeStore(tmp / "edge")
        store.ensure_collection(embedder.dim)
        state = QdrantStateStore.beside(store)
        seeder = Seeder(store, embedder, args.sample)
        print(f"bench_explorer: {args.size} memories over {WORKSPACES} workspaces, pages of {QUERY_WS}")
        seeder.add(args.size - RUN_SIZE)
        ids = add_run(seeder, RUN_SIZE)
        target = ids[RUN_SIZE // 2]
        now = datetime.now(UTC).isoformat()
        store.add_relations([Relation(target, ids[(RUN_SIZE // 2 + 7 * k) % RUN_SIZE], "similar", 0.8 + k / 100, now,
                                      QUERY_WS) for k in range(1, EDGES + 1)])  # fmt: skip
        settings = Settings(data_dir=tmp / "data")
        health = HealthJob(store, state, HealthConfig.from_settings(settings))
        t0 = time.perf_counter()
        health.run(None, trigger="admin", force=True)
        print(f"  health snapshots of {WORKSPACES} workspaces in {time.perf_counter() - t0:.1f}s")
        app = create_app(settings=settings, store=store, embedder=embedder, bm25=Bm25Encoder(),
                         publish=lambda t, k, v: None, status=lambda: {"kafka": "ok", "kafka_bootstrap": "-"},
                         metrics=Metrics(), state=state, health=health)  # fmt: skip
        queries = [rng.choice(QUESTIONS) for _ in range(args.requests + 5)]
        ws, n = QUERY_WS, args.requests
        with TestClient(app) as c:
            pairs = {
                "/ui (workspaces)": (
                    lambda i: c.get("/ui"),
                    lambda i: c.get("/v1/memory/stats"),
                    "GET /v1/memory/stats",
                ),
                "/ui/search (hybrid k 10, with why)": (
                    lambda i: c.get(
                        "/ui/search", params={"workspace_id": ws, "q": queries[i], "agent_id": AGENT, "k": "10"}
                    ),
                    lambda i: c.post(
                        "/v1/recall", json={"workspace_id": ws, "query": queries[i], "agent_id": AGENT, "k": 10}
                    ),
                    "POST /v1/recall (same request)",
                ),
                "/ui/memory/ID (with graph)": (
                    lambda i: c.get(f"/ui/memory/{target}", params={"workspace_id": ws}),
                    lambda i: c.get(f"/v1/memory/{target}", params={"workspace_id": ws}),
                    "GET /v1/memory/ID",
                ),
                f"/ui/run ({RUN_SIZE} memories)": (
                    lambda i: c.get(f"/ui/run/{RUN}", params={"workspace_id": ws}),
                    lambda i: c.get("/v1/memories", params={"workspace_id": ws, "run_id": RUN, "limit": 100}),
                    "GET /v1/memories?run_id= (limit 100)",
                ),
            }
            rows: list[Row] = []
            size = f"{args.size // 1000}k"
            for name, (page, api, label) in pairs.items():
                pt, at = timed(page, n), timed(api, n)
                for p in (50, 99):
                    value = percentile(pt, p) * 1000
                    rows.append(Row("explorer", f"{size} {name} p{p}", value, "ms", percentile(at, p) * 1000, label,
                                    target=f"p99 < {TARGET_P99_MS:.0f} ms" if p == 99 else "",
                                    ok=(value < TARGET_P99_MS) if p == 99 else None))  # fmt: skip
        state.close()
        store.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10k memories, 30 requests a page")
    ap.add_argument("--size", type=int, default=None, help="memories (default 100000)")
    ap.add_argument("--requests", type=int, default=None, help="timed requests a page (default 100)")
    ap.add_argument("--sample", type=int, default=None, help="texts embedded with the real model (1024, quick 128)")
    args = ap.parse_args(argv)
    args.size = args.size or (10_000 if args.quick else 100_000)
    args.requests = args.requests or (30 if args.quick else 100)
    args.sample = args.sample or (128 if args.quick else 1024)
    logging.basicConfig(level=logging.WARNING)
    rows = run(args)
    emit(rows, f"bench_explorer ({args.size} memories)")
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
