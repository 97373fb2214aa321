"""What the write discipline (issue 25) costs: ingestion, read-modify-writes and recall, against the previous
commit, in the same run.

The previous commit's tree (`--baseline`, default: the parent of the first `integrity (issue 25` commit) is
unpacked with `git archive` into a temporary directory; the same workload then runs in a child process on
each tree in turn, A B A B (`--rounds`), on its own Qdrant Edge store, and the figures are medians over the
rounds. The workload, the same code for both trees:

- ingestion: `--memories` new memories through the indexer in batches of 64 (a deterministic 384-d
  "model": the model's time is the same on both trees and would hide the difference), then a tenth of them
  again as new versions (changed summaries: whole-point writes that keep counters and edges);
- read-modify-writes: `add_relations` on 1,000 memories one at a time (the linker's and the run edges'
  path: read, merge, write; now conditional, with its read-back);
- recall: `--queries` hybrid queries (RRF) in scope `own`, p50 and p99.

    python -m bench.bench_integrity               # 5,000 memories, 2 rounds, 300 queries
    python -m bench.bench_integrity --quick       # 1,000 memories, 1 round, 100 queries
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

from bench.common import Row, emit, median

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, random, sys, time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from episodic.indexing.indexer import Indexer
from episodic.kernel.ports import Fusion, Relation, ScopeFilter
from episodic.store.edge import EdgeStore
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord

n, queries, path = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
DIM = 384
WORDS = "checkout payments search billing ledger cache queue deploy canary rollback dns kafka".split()


class Model:
    model_id, dim, pieces = "bench-hash", DIM, "whole"

    def _v(self, t):
        v = np.frombuffer(hashlib.sha512(t.encode()).digest() * 6, dtype=np.uint8)[:DIM].astype(np.float32) - 127.5
        return v / np.linalg.norm(v)

    def embed_documents(self, texts):
        return [self._v(t).reshape(1, -1) for t in texts]

    def embed_query(self, text):
        return self._v(text)


rng = random.Random(7)
t0 = datetime(2026, 11, 20, tzinfo=UTC)


def rec(i, summary, minutes=0):
    at = t0 + timedelta(seconds=i, minutes=minutes)
    return EmbeddableRecord.from_dict({
        "id": f"e{i}", "workspace_id": "ws", "agent_id": f"a{i % 5}", "crew_id": "c", "run_id": f"r{i // 40}",
        "ts": at.isoformat(), "entry_type": "summary.generated", "severity": "info", "summary": summary,
        "payload": {"i": i}, "base_importance": 0.7, "accepted_at": at,
    })


texts = [" ".join(rng.choice(WORDS) for _ in range(12)) + f" incident {i}" for i in range(n)]
store = EdgeStore(path / "edge")
store.ensure_collection(DIM)
ix = Indexer(store=store, embedder=Model(), bm25=Bm25Encoder())
out = {}
t = time.perf_counter()
for s in range(0, n, 64):
    ix.index_batch([rec(i, texts[i]) for i in range(s, min(n, s + 64))])
out["ingest_s_per_1k"] = (time.perf_counter() - t) / n * 1000
again = list(range(0, n, 10))
t = time.perf_counter()
for s in range(0, len(again), 64):
    ix.index_batch([rec(i, texts[i] + " (revised)", minutes=5) for i in again[s:s + 64]])
out["versions_s_per_1k"] = (time.perf_counter() - t) / len(again) * 1000
edges = min(1000, n - 1)
t = time.perf_counter()
for i in range(edges):
    store.add_relations([Relation(f"e{i}", f"e{i + 1}", "similar", 0.9, "2026-11-20T00:00:00Z", "ws")])
out["rmw_ms_each"] = (time.perf_counter() - t) / edges * 1000
m = Model()
fusion = Fusion()
lat = []
for q in range(queries):
    text = " ".join(rng.choice(WORDS) for _ in range(4))
    scope = ScopeFilter(workspace_id="ws", scope="own", agent_id=f"a{q % 5}")
    t = time.perf_counter()
    store.query_hybrid(m.embed_query(text).tolist(), Bm25Encoder().query(text), scope, 10, fusion)
    lat.append(time.perf_counter() - t)
lat.sort()
out["recall_p50_ms"] = lat[len(lat) // 2] * 1000
out["recall_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
out["conflicts"] = sum(getattr(store, "write_conflicts", {}).values()) if hasattr(store, "write_conflicts") else 0
store.close()
print("RESULT " + json.dumps(out))
"""


def baseline_rev() -> str:
    """The parent of the first integrity commit on HEAD (the previous commit of main), else HEAD~1."""
    log = subprocess.run(
        ["git", "log", "--format=%H %s", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    mine = [line.split()[0] for line in log if " integrity (issue 25" in f" {line.split(' ', 1)[1]}"]
    first = mine[-1] if mine else "HEAD"
    return f"{first}~1"


def unpack(rev: str, into: Path) -> str:
    """The tree of `rev` under `into` (git archive); returns the commit it resolved to."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    data = subprocess.run(["git", "archive", "--format=tar", sha.strip()], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(data.stdout)) as tar:
        tar.extractall(into, filter="data")
    return sha.strip()[:10]


def run_child(tree: Path, n: int, queries: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'clients' / 'python'}"}
    with tempfile.TemporaryDirectory(prefix="episodic-bench-integrity-") as d:
        res = subprocess.run(
            [sys.executable, "-c", CHILD, str(n), str(queries), d], env=env, cwd=tree, capture_output=True, text=True
        )
    if res.returncode != 0:
        raise SystemExit(f"the workload failed on {tree}:\n{res.stderr[-3000:]}")
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--memories", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", default=None, help="the commit to compare with (default: before issue 25)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.memories, args.queries, args.rounds = 1000, 100, 1
    with tempfile.TemporaryDirectory(prefix="episodic-baseline-") as base:
        sha = unpack(args.baseline or baseline_rev(), Path(base))
        runs: dict[str, list[dict[str, Any]]] = {"now": [], "before": []}
        for _ in range(args.rounds):
            runs["before"].append(run_child(Path(base), args.memories, args.queries))
            runs["now"].append(run_child(ROOT, args.memories, args.queries))
    label = f"commit {sha}, same run"
    metrics = [
        ("ingestion, s per 1k new memories", "ingest_s_per_1k", "s"),
        ("new versions, s per 1k", "versions_s_per_1k", "s"),
        ("read-modify-write (add_relations), ms each", "rmw_ms_each", "ms"),
        ("recall p50, ms", "recall_p50_ms", "ms"),
        ("recall p99, ms", "recall_p99_ms", "ms"),
    ]
    rows = [
        Row(
            "integrity",
            name,
            median([r[key] for r in runs["now"]]),
            unit,
            median([r[key] for r in runs["before"]]),
            label,
        )
        for name, key, unit in metrics
    ]
    conflicts = median([float(r.get("conflicts", 0)) for r in runs["now"]])
    rows.append(Row("integrity", "write conflicts (one writer: expected 0)", conflicts, ""))
    emit(rows, f"bench_integrity: the write discipline against {label} ({args.memories} memories)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
