"""Hybrid recall latency over HTTP at 10k to 1M memories spread over ten workspaces, querying one.

Seeding (directly into the Qdrant Edge store of a temporary data directory, not through Kafka): N
synthetic but realistic journal summaries, one agent per workspace, `summary.generated` at info, the
payload the Indexer writes. Embedding 100k texts on a CPU takes too long, so S texts (default 1024) get
real all-MiniLM-L6-v2 vectors and every other memory gets the vector of one of them plus Gaussian noise
(cosine ≈ 0.93 to its source), renormalised; every memory's BM25 vector is computed from its own text.
Measured in the same run, for each size, twice: first on the store as written (the previous default, before
issue 27: never indexed, every dense leg a flat scan of its workspace; the stack started with
`EPISODIC_EDGE_INDEX_AFTER=0`), then on a copy of it indexed by the background cycle the stack now runs (a
worker process over a copy of the shard, swapped in: episodic.store.edge_index; timed, with the worker's peak
RSS) and served by a stack with the default settings:
  direct    in this process, on the seeded store: the bare query embedding (`embed_query`), the store
            query alone (`query_hybrid`, precomputed vectors) and both through `RecallEngine.recall`;
  http      `episodic up` as a child process on that data directory (free loopback ports), sequential
            `POST /v1/recall` (hybrid, scope own, k 5) with a keep-alive client: idle, then under
            ingestion load (20 embeddable + 400 filtered entries/s produced to its broker meanwhile).

Target: HTTP p99 <= 25 ms at 100k with ingestion idle, as production serves it (indexed in the background).
Sizes above `--http-max` are measured in the store alone (no stack is started), and `--index-budget S` skips the
index build at a size whose estimate (the previous size's build scaled linearly) is over S seconds: it says so.

    python -m bench.bench_recall_latency            # 10k and 100k, 300 queries each
    python -m bench.bench_recall_latency --quick    # 2k and 10k, 60 queries, S=128
    python -m bench.bench_recall_latency --sizes 10000 100000 300000 1000000 --queries 200 --sample 512
    python -m bench.bench_recall_latency --sizes 300000 1000000 --http-max 300000 --index-threads 2 \
        --index-budget 1800 --queries 150 --sample 512      # the curve's large sizes (docs/scale.md)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    LOOPBACK,
    Deadline,
    Row,
    child_process,
    emit,
    episodic_up_cmd,
    exec_noise,
    journal_entry,
    journal_summary,
    load_embedder,
    pending_generation,
    percentile,
    record_generation,
    rss_mib,
    stack_env,
    tmp_dir,
    wait_http,
)

TARGET_P99_S = 0.025
SETTLE_S = 12.0
CATCH_UP_TIMEOUT_S = 1800.0
WORKSPACES = 10
QUERY_WS = "ws-3"
NOISE_SIGMA = 0.02  # per dimension: noise norm ≈ 0.39 on 384 dims, cosine ≈ 0.93
QUESTIONS = [
    "why was the checkout service OOM-killed",
    "what did we decide about the payments ledger migration",
    "which deploy was rolled back last week",
    "connection pool exhausted on the gateway",
    "who raised the memory limit",
    "eval regression on the support bot",
    "approval denied for dropping a production table",
    "consumer lag after the rebalance",
    "stale prices served from cache",
    "how did we fix the double charge incident",
    "partition count increase for the queue",
    "circuit breaker on fraud scoring",
]


def short_summary(rng: random.Random) -> str:
    """Seeded memories: the common case, one to four sentences (long reports would need chunk vectors)."""
    for _ in range(20):
        s = journal_summary(rng)
        if len(s) < 900:
            return s
    return s[:900]


class Seeder:
    def __init__(self, store: Any, embedder: Any, sample: int, seed: int = 5) -> None:
        from episodic.store.sparse import Bm25Encoder

        self.store, self.embedder = store, embedder
        self.bm25 = Bm25Encoder()
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        texts = [short_summary(self.rng) for _ in range(sample)]
        t0 = time.perf_counter()
        self.base = np.stack([v[0] for v in embedder.embed_documents(texts)]).astype(np.float32)
        print(f"  embedded {sample} seed texts with the real model in {time.perf_counter() - t0:.1f}s")
        self.count = 0

    def add(self, n: int, batch: int = 1000) -> None:
        from episodic.domain.identity import point_id
        from episodic.indexing.indexer import _payload
        from episodic.kernel.ports import MemoryPoint
        from schemas.events import EmbeddableRecord

        t0 = time.perf_counter()
        for start in range(0, n, batch):
            points = []
            m = min(batch, n - start)
            src = self.np_rng.integers(0, len(self.base), size=m)
            vecs = self.base[src] + self.np_rng.normal(0, NOISE_SIGMA, size=(m, self.base.shape[1])).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            for j in range(m):
                i = self.count + j
                ws = f"ws-{i % WORKSPACES}"
                e = journal_entry(
                    entry_id=f"m{i:07d}", workspace_id=ws, agent_id=f"agent-{ws}", summary=short_summary(self.rng)
                )
                rec = EmbeddableRecord.from_dict({**e, "base_importance": 0.7, "accepted_at": e["ts"]})
                key = f"bench-{i}"
                payload = _payload(rec, indexed_at=e["ts"], model=self.embedder.model_id, key=key)
                payload["has_dense"] = True
                points.append(
                    MemoryPoint(
                        point_id=point_id(ws, rec.id),
                        sparse=self.bm25.document(rec.summary),
                        payload=payload,
                        dense=[vecs[j].tolist()],
                    )
                )
            self.store.upsert(points)
            self.count += m
        print(f"  seeded {n} memories in {time.perf_counter() - t0:.1f}s (total {self.count})")


def time_direct(store: Any, embedder: Any, queries: list[str]) -> dict[str, list[float]]:
    from episodic.kernel.ports import ScopeFilter
    from episodic.kernel.settings import Settings
    from episodic.retrieval.engine import RecallEngine, fusion_from_settings
    from episodic.store.sparse import Bm25Encoder
    from episodic_client.models import RecallRequest

    settings = Settings()
    bm25 = Bm25Encoder()
    fusion = fusion_from_settings(settings)
    engine = RecallEngine.from_settings(settings, store=store, embedder=embedder, bm25=bm25)
    scope = ScopeFilter(workspace_id=QUERY_WS, scope="own", agent_id=f"agent-{QUERY_WS}")
    out: dict[str, list[float]] = {"embed": [], "store": [], "engine": [], "embed_torch": []}
    for q in queries[:10]:  # warm-up
        store.query_hybrid(embedder.embed_query(q).tolist(), bm25.query(q), scope, 5, fusion)
    for q in queries:
        t0 = time.perf_counter()
        vec = embedder.embed_query(q)
        t1 = time.perf_counter()
        sparse = bm25.query(q)
        store.query_hybrid(vec.tolist(), sparse, scope, 5, fusion)
        t2 = time.perf_counter()
        req = RecallRequest(workspace_id=QUERY_WS, agent_id=f"agent-{QUERY_WS}", scope="own", query=q, k=5)
        engine.recall(req)
        t3 = time.perf_counter()
        out["embed"].append(t1 - t0)
        out["store"].append(t2 - t1)
        out["engine"].append(t3 - t2)
        embedder.embed_query_torch(q)  # the torch path, for comparison
        out["embed_torch"].append(time.perf_counter() - t3)
    return out


def time_http(url: str, queries: list[str]) -> list[float]:
    import httpx

    lat = []
    with httpx.Client(timeout=10.0) as c:
        body = {"workspace_id": QUERY_WS, "agent_id": f"agent-{QUERY_WS}", "scope": "own", "k": 5, "mode": "hybrid"}
        for q in queries[:20]:
            c.post(url, json={**body, "query": q}).raise_for_status()
        for q in queries:
            t0 = time.perf_counter()
            r = c.post(url, json={**body, "query": q})
            lat.append(time.perf_counter() - t0)
            r.raise_for_status()
            if not r.json()["hits"]:
                raise RuntimeError(f"no hits for {q!r}: the seeded workspace is not visible")
    return lat


class IngestLoad:
    """20 embeddable + 400 filtered journal entries per second into the stack's broker, on a thread."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="ingest-load", daemon=True)

    def __enter__(self) -> IngestLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as e:  # reported by the caller
            self.error = e

    async def _produce(self) -> None:
        from episodic.bus.kafka import make_producer
        from schemas import topics

        rng = random.Random(9)
        producer = make_producer(self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            t0 = time.monotonic()
            k = 0
            while not self.stop.is_set():
                delay = t0 + k * 0.05 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                ws = f"ws-{k % WORKSPACES}"
                e = journal_entry(
                    entry_id=f"load-{k}", workspace_id=ws, agent_id=f"agent-{ws}", summary=journal_summary(rng)
                )
                await producer.send(topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(e).encode())
                for j in range(20):
                    noise = exec_noise(f"load-{k}-x{j}", ws, f"stdout chunk {j} of step {k}")
                    await producer.send(topics.JOURNAL_ENTRIES, key=ws.encode(), value=json.dumps(noise).encode())
                self.sent += 21
                k += 1
        finally:
            await producer.stop()


def metric_total(text: str, name: str) -> float:
    """The sum of a counter's samples (every label set) in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[-1])
    return total


def catch_up_jobs() -> tuple[str, ...]:
    """The daily jobs a stack started now on a freshly seeded store runs at once, as the counters that say
    each ran: the nightly decay always (never run on the store, it is due since its schedule's last fire
    time, yesterday's 03:30 UTC before today's) and today's health snapshots once `EPISODIC_HEALTH_DAILY_AT`
    (03:00 UTC) has passed."""
    from datetime import UTC, datetime

    jobs: tuple[str, ...] = ("episodic_decay_runs_total",)
    if datetime.now(UTC).strftime("%H:%M") >= "03:00":
        jobs += ("episodic_health_snapshots_total",)
    return jobs


def wait_catch_up(base: str, proc: Any, timeout: float = CATCH_UP_TIMEOUT_S) -> float:
    """Wait for the jobs a stack started on a freshly seeded store catches up on (`catch_up_jobs`). They go
    over every memory, once a day in a deployment; measured while they run, "idle" would time them. The
    indexed copy carries the state they wrote (they ran today), so its stack runs neither. Returns the
    seconds waited."""
    import httpx

    t0 = time.monotonic()
    jobs = catch_up_jobs()
    d = Deadline(timeout)
    while not d.passed():
        if proc.poll() is not None:
            raise RuntimeError(f"the stack exited with {proc.returncode} during its start-up jobs")
        with contextlib.suppress(httpx.HTTPError):
            text = httpx.get(f"{base}/metrics", timeout=10.0).text
            if all(metric_total(text, job) >= 1 for job in jobs):
                return time.monotonic() - t0
        time.sleep(1.0)
    raise RuntimeError(f"the stack's start-up jobs ({', '.join(jobs)}) did not finish in {timeout:.0f}s")


def measure_http(
    data_dir: Path, queries: list[str], log_path: Path, start_timeout: float, *, catch_up: bool, **env_extra: str
) -> dict[str, Any]:
    from infra.broker import free_port

    broker_port, http_port = free_port(LOOPBACK), free_port(LOOPBACK)
    env = stack_env(data_dir, broker_port=broker_port, http_port=http_port, **env_extra)
    base = f"http://{LOOPBACK}:{http_port}"
    with child_process(episodic_up_cmd(), env=env, log_path=log_path) as proc:
        wait_http(f"{base}/healthz", timeout=start_timeout, proc=proc, log_path=log_path)
        catch_up_s = wait_catch_up(base, proc) if catch_up else 0.0
        # /healthz answers before the gate and the consumer have joined their groups (about half the
        # session timeout): let the start-up work finish, so that "idle" measures an idle stack
        time.sleep(SETTLE_S)
        idle = time_http(f"{base}/v1/recall", queries)
        rss_idle = rss_mib(proc.pid)
        with IngestLoad(f"{LOOPBACK}:{broker_port}") as load:
            d = Deadline(5)  # let the gate and the consumer start working
            while not d.passed() and load.sent < 1000:
                time.sleep(0.1)
            loaded = time_http(f"{base}/v1/recall", queries)
        if load.error:
            raise RuntimeError(f"ingest load failed: {load.error}")
        if proc.poll() is not None:
            raise RuntimeError(f"the stack exited with {proc.returncode}")
        rss_load = rss_mib(proc.pid)
    return {
        "idle": idle,
        "load": loaded,
        "load_sent": load.sent,
        "rss_idle": rss_idle,
        "rss_load": rss_load,
        "catch_up_s": catch_up_s,
    }


def phase_rows(
    size: str, direct: dict[str, list[float]], http: dict[str, Any], query_backend: str, *, headline: bool
) -> list[Row]:
    """The rows of one size on the store as production serves it (not optimised)."""
    p50 = {k: percentile(v, 50) for k, v in direct.items()}
    p99 = {k: percentile(v, 99) for k, v in direct.items()}
    return [
        Row(
            "recall",
            f"{size} http hybrid p50 (idle)",
            percentile(http["idle"], 50),
            "s",
            p50["embed"] + p50["store"],
            f"direct: embed {p50['embed'] * 1000:.1f} + store {p50['store'] * 1000:.1f} ms",
            note=f"not optimised (as production); RecallEngine in-process p50 {p50['engine'] * 1000:.1f} ms",
        ),
        Row(
            "recall",
            f"{size} http hybrid p99 (idle)",
            percentile(http["idle"], 99),
            "s",
            p99["embed"] + p99["store"],
            "direct p99: embed + store",
            target="p99 <= 25 ms" if headline else "",
            ok=(percentile(http["idle"], 99) <= TARGET_P99_S) if headline else None,
            note=f"not optimised (as production); RecallEngine in-process p99 {p99['engine'] * 1000:.1f} ms",
        ),
        Row(
            "recall",
            f"{size} direct query_hybrid p99 (store only)",
            p99["store"],
            "s",
            note=f"store p50 {p50['store'] * 1000:.1f} ms; bare embed_query ({query_backend}) p50/p99 "
            f"{p50['embed'] * 1000:.1f}/{p99['embed'] * 1000:.1f} ms; torch forward p50/p99 "
            f"{p50['embed_torch'] * 1000:.1f}/{p99['embed_torch'] * 1000:.1f} ms",
        ),
        Row(
            "recall",
            f"{size} http hybrid p50 (ingest load)",
            percentile(http["load"], 50),
            "s",
            percentile(http["idle"], 50),
            "http p50 idle",
        ),
        Row(
            "recall",
            f"{size} http hybrid p99 (ingest load)",
            percentile(http["load"], 99),
            "s",
            percentile(http["idle"], 99),
            "http p99 idle",
            note=f"{http['load_sent']} entries produced at 420/s (20/s embeddable) during the queries",
        ),
    ]


def indexed_rows(
    size: str,
    raw: dict[str, list[float]],
    raw_http: dict[str, Any],
    idx: dict[str, list[float]],
    idx_http: dict[str, Any],
    cycle_s: float,
    build_s: float,
    headline: bool,
) -> list[Row]:
    """The default (indexed in the background) against the previous one (a flat scan), same store, same run."""

    def ms(v: list[float], q: int) -> str:
        return f"{percentile(v, q) * 1000:.1f}"

    rows = []
    for q in (50, 99):
        rows.append(
            Row(
                "recall",
                f"{size} store query_hybrid p{q}, indexed (default)",
                percentile(idx["store"], q),
                "s",
                percentile(raw["store"], q),
                f"store p{q}, flat scan (previous default)",
            )
        )
    for phase in ("idle", "load"):
        for q in (50, 99):
            rows.append(
                Row(
                    "recall",
                    f"{size} http hybrid p{q} ({'idle' if phase == 'idle' else 'ingest load'}), indexed (default)",
                    percentile(idx_http[phase], q),
                    "s",
                    percentile(raw_http[phase], q),
                    f"http p{q}, flat scan (previous default)",
                    target="p99 <= 25 ms" if headline and q == 99 and phase == "idle" else "",
                    ok=(percentile(idx_http[phase], q) <= TARGET_P99_S)
                    if headline and q == 99 and phase == "idle"
                    else None,
                    note=f"index cycle {cycle_s:.1f}s (worker build {build_s:.1f}s), queries not stopped"
                    if q == 99 and phase == "idle"
                    else "",
                )
            )
    return rows


def check_no_reembed(path: Path, dim: int) -> None:
    """The stacks measured this store as it was seeded: none of them started re-embedding it."""
    from episodic.store.edge import EdgeStore

    store = EdgeStore(path)
    store.ensure_collection(dim)
    try:
        pending = pending_generation(store)
    finally:
        store.close()
    if pending:
        raise RuntimeError(f"a stack started a re-embed of the seeded store ({pending}): the figures are not valid")


def store_only_row(size: str, d: dict[str, list[float]], label: str, base: dict[str, list[float]] | None = None) -> Row:
    """A size measured in the store alone (no stack started: the HTTP phases cost more than the budget)."""
    return Row(
        "recall",
        f"{size} store query_hybrid p99, {label}",
        percentile(d["store"], 99),
        "s",
        percentile(base["store"], 99) if base else None,
        "store p99, flat scan (previous default)" if base else "",
        note=f"store p50 {percentile(d['store'], 50) * 1000:.1f} ms; no HTTP phase at this size",
    )


def summary(size: str, label: str, d: dict[str, list[float]], h: dict[str, Any] | None) -> None:
    line = (
        f"  {size} {label}: store p50/p99 {percentile(d['store'], 50) * 1000:.1f}/"
        f"{percentile(d['store'], 99) * 1000:.1f} ms"
    )
    if h is not None:
        line += (
            f"; http idle p50/p99 {percentile(h['idle'], 50) * 1000:.1f}/{percentile(h['idle'], 99) * 1000:.1f} ms; "
            f"load {percentile(h['load'], 50) * 1000:.1f}/{percentile(h['load'], 99) * 1000:.1f} ms; "
            f"stack RSS {h['rss_idle']:.0f} MiB idle, {h['rss_load']:.0f} MiB after the load; start-up jobs "
            f"(decay, health snapshots) took {h['catch_up_s']:.0f}s before the idle phase"
        )
    print(line, flush=True)


def run(args: argparse.Namespace) -> list[Row]:
    from episodic.kernel.settings import Settings
    from episodic.store.edge import EdgeStore

    sizes = args.sizes
    rng = random.Random(3)
    queries = [
        rng.choice(QUESTIONS) + ("" if rng.random() < 0.5 else f" in {rng.choice(['may', 'june', 'q3'])}")
        for _ in range(args.queries)
    ]
    embedder = load_embedder()
    # the query path the service uses (ONNX Runtime when it reproduces the torch vector)
    from episodic.embedding.embedder import attach_query_encoder

    query_backend = "onnx" if attach_query_encoder(embedder, Settings()) else "torch"
    rows: list[Row] = []
    with tmp_dir() as tmp:
        data_dir = tmp / "data"
        store_path = data_dir / "qdrant-edge" / Settings().collection
        first = EdgeStore(store_path)
        first.ensure_collection(embedder.dim)
        record_generation(first, embedder)  # else the stack re-embeds the seeded store while it is measured
        seeder = Seeder(first, embedder, args.sample)
        store: EdgeStore | None = first
        prev_build: tuple[int, float] | None = None  # (memories, seconds) of the last index build
        first_stack = True  # the daily jobs run in the first stack on the store (they record it in its state)
        for n in sizes:
            print(
                f"bench_recall_latency: {n} memories over {WORKSPACES} workspaces, "
                f"querying {QUERY_WS} ({n // WORKSPACES})",
                flush=True,
            )
            if store is None:
                store = EdgeStore(store_path)
                store.ensure_collection(embedder.dim)
                seeder.store = store
            seeder.add(n - seeder.count)
            size = f"{n // 1000}k" if n < 1_000_000 else f"{n / 1_000_000:g}M"
            http = n <= args.http_max
            seed_rss = rss_mib(os.getpid())
            print(f"  {size}: the benchmark's process holds the seeded store in {seed_rss:.0f} MiB (RSS)", flush=True)
            # the previous default: the store as written, never indexed (every dense leg scans its workspace)
            raw = time_direct(store, embedder, queries)
            store.close()
            store = None
            raw_http = (
                measure_http(
                    data_dir,
                    queries,
                    tmp / f"stack-{n}-raw.log",
                    args.start_timeout,
                    catch_up=first_stack,
                    EPISODIC_EDGE_INDEX_AFTER="0",
                )
                if http
                else None
            )
            check_no_reembed(store_path, embedder.dim)
            first_stack = first_stack and raw_http is None
            if raw_http is not None:
                rows += phase_rows(f"{size}", raw, raw_http, query_backend, headline=False)
            else:
                rows.append(store_only_row(size, raw, "flat scan (previous default)"))
            summary(size, "flat scan (previous default)", raw, raw_http)
            # an honest skip: the build grows at least linearly with the store
            estimate = prev_build[1] * n / prev_build[0] if prev_build else 0.0
            if n > args.index_max:
                print(f"  {size}: index build NOT run (--index-max {args.index_max})", flush=True)
                continue
            if prev_build and args.index_budget and estimate > args.index_budget:
                print(
                    f"  {size}: index build NOT run: estimated {estimate:.0f}s (the {prev_build[0] // 1000}k build "
                    f"scaled linearly) is over --index-budget {args.index_budget:.0f}s",
                    flush=True,
                )
                continue
            # the default: a copy of the same store indexed by the background cycle (a worker process over a
            # copy, swapped in: episodic.store.edge_index), then served by a stack with the default settings
            idx_dir = tmp / "indexed"
            shutil.rmtree(idx_dir, ignore_errors=True)
            shutil.copytree(data_dir, idx_dir)
            idx_store = EdgeStore(idx_dir / "qdrant-edge" / Settings().collection)
            idx_store.ensure_collection(embedder.dim)
            t0 = time.perf_counter()
            cycle = idx_store.index_now(args.index_threads)
            cycle_s = time.perf_counter() - t0
            prev_build = (n, cycle.build_s)
            print(f"  indexed a copy in a worker in {cycle_s:.1f}s: {cycle.as_dict()}", flush=True)
            idx = time_direct(idx_store, embedder, queries)
            idx_store.close()
            idx_http = (
                measure_http(idx_dir, queries, tmp / f"stack-{n}-idx.log", args.start_timeout, catch_up=False)
                if http
                else None
            )
            check_no_reembed(idx_dir / "qdrant-edge" / Settings().collection, embedder.dim)
            shutil.rmtree(idx_dir, ignore_errors=True)
            if raw_http is not None and idx_http is not None:
                rows += indexed_rows(size, raw, raw_http, idx, idx_http, cycle_s, cycle.build_s, n >= 100_000)
            else:
                rows.append(store_only_row(size, idx, "indexed (default)", raw))
            summary(size, "indexed (default)", idx, idx_http)
            print(
                f"  {size}: index cycle {cycle_s:.1f}s "
                f"(worker build {cycle.build_s:.1f}s on {args.index_threads} thread(s), worker peak RSS "
                f"{cycle.worker_rss_mib:.0f} MiB)",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="2k and 10k memories, 60 queries (a sanity check)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="total memories (default 10000 100000)")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per phase (default 300, quick 60)")
    ap.add_argument("--sample", type=int, default=None, help="texts embedded with the real model (1024, quick 128)")
    ap.add_argument("--start-timeout", type=float, default=180.0)
    ap.add_argument("--index-threads", type=int, default=1, help="the index worker's threads (default 1, as the stack)")
    ap.add_argument(
        "--http-max", type=int, default=10**9, help="sizes above this are measured in the store alone (no stack)"
    )
    ap.add_argument("--index-max", type=int, default=10**9, help="sizes above this are measured unindexed only")
    ap.add_argument(
        "--index-budget",
        type=float,
        default=0.0,
        help="skip the index build at a size whose estimate (the previous build scaled linearly) is over this many s",
    )
    args = ap.parse_args(argv)
    args.sizes = sorted(args.sizes or ([2_000, 10_000] if args.quick else [10_000, 100_000]))
    args.queries = args.queries or (60 if args.quick else 300)
    args.sample = args.sample or (128 if args.quick else 1024)
    logging.basicConfig(level=logging.WARNING)
    rows = run(args)
    emit(rows, f"recall latency (hybrid, HTTP, {args.queries} queries per phase)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
