"""DecayAndReinforce over a whole store: the nightly job at 100k memories against a raw scroll of the same
points, measured in the same run on the same store.

Seeding (directly into a Qdrant Edge store in a temporary directory): N memories over ten workspaces with
the payload the indexer writes (a 1-3 sentence summary, a small JSON payload), a one-chunk dense vector of
the model's size (random unit vectors: the job never reads vectors, but the segments hold them), indexed
0-400 days before the run, 0-30 references, 2 % pinned / high / permanent. Every memory's importance
changes on the run (the store holds the base values), as on a real night when every age grew by a day.

Measured, in this order, on the same store:
  scroll    the store's raw scroll of every point with its whole payload (`engine.scroll`, pages of 256):
            the least a job that looks at every memory must do;
  decay     `DecayJob.run()`: field-selected pages, the formula, one batched payload write per page, the
            cursor saved after every page (the job as the importance role runs it, retention off);
  again     the same run a second time at the same reference time (nothing changes: no writes).

Target: decay <= 60 s at 100k on 2 cores.

    python -m bench.bench_decay            # 100k memories
    python -m bench.bench_decay --quick    # 10k
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from bench.common import Row, emit, iso, journal_summary, tmp_dir

TARGET_S = 60.0
WORKSPACES = 10
SEED_BATCH = 1000


def seed(store: Any, n: int, dim: int, now: datetime, rng: random.Random) -> None:
    from episodic.domain.identity import point_id
    from episodic.domain.policy import base_importance
    from episodic.kernel.ports import MemoryPoint, SparseVec

    gen = np.random.default_rng(7)
    types = [("summary.generated", "info"), ("peer.escalation", "warn"), ("keeper.decision", "error")]
    for start in range(0, n, SEED_BATCH):
        rows = gen.standard_normal((min(SEED_BATCH, n - start), dim)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        points = []
        for j, row in enumerate(rows):
            i = start + j
            ws = f"ws-{i % WORKSPACES}"
            et, sev = types[i % len(types)]
            priority = rng.choice(["pin", "high", "permanent"]) if rng.random() < 0.02 else None
            indexed = now - timedelta(days=rng.uniform(0, 400))
            base = base_importance(et, sev, priority)
            payload: dict[str, Any] = {
                "entry_id": f"m-{i}", "workspace_id": ws, "crew_id": "crew-1", "agent_id": f"agent-{i % 3}",
                "run_id": f"run-{i % 50}", "ts": iso(indexed), "entry_type": et, "severity": sev,
                "summary": journal_summary(rng, "short"), "payload": {"ticket": f"OPS-{i}", "attempt": i % 7},
                "refs": None, "priority": priority, "base_importance": base, "importance_score": base,
                "reference_count": rng.choice([0, 0, 0, 1, 2, 5, 30]), "last_referenced_at": None,
                "indexed_at": iso(indexed), "accepted_at": iso(indexed), "model": "all-MiniLM-L6-v2",
                "has_dense": True, "aliases": [], "occurrences": 1, "dedup_key": f"k-{i}", "relations": [],
                "links": [],
            }  # fmt: skip
            points.append(MemoryPoint(point_id(ws, f"m-{i}"), SparseVec([i % 5000], [1.0]), payload, [row.tolist()]))
        store.upsert(points)


def run(args: argparse.Namespace) -> list[Row]:
    from episodic.maintenance.decay import DecayJob
    from episodic.store.edge import EdgeStore
    from stack.stores import open_state

    now = datetime(2026, 11, 21, 3, 30, tzinfo=UTC)
    rng = random.Random(11)
    with tmp_dir("episodic-bench-decay-") as tmp:
        store = EdgeStore(tmp / "edge")
        store.ensure_collection(args.dim)
        state = open_state(store)
        try:
            t0 = time.perf_counter()
            seed(store, args.memories, args.dim, now, rng)
            store.flush()
            print(f"bench_decay: seeded {store.count():,} memories (dim {args.dim}) in {time.perf_counter() - t0:.1f}s")

            t0 = time.perf_counter()
            scrolled = sum(1 for _ in store._scroll(None))
            scroll_s = time.perf_counter() - t0
            print(f"  raw scroll: {scrolled:,} points with their payload in {scroll_s:.2f}s")

            job = DecayJob(store=store, state=state, clock=lambda: now, page_size=args.page, log_every_s=10.0)
            t0 = time.perf_counter()
            report = job.run()
            decay_s = time.perf_counter() - t0
            print(
                f"  decay: {report.scanned:,} scanned, {report.updated:,} updated in {decay_s:.2f}s "
                f"({report.pages} pages of {args.page})"
            )
            t0 = time.perf_counter()
            again = DecayJob(store=store, state=state, clock=lambda: now, page_size=args.page).run()
            again_s = time.perf_counter() - t0
            print(f"  again (nothing to write): {again.unchanged:,} unchanged in {again_s:.2f}s")
        finally:
            state.close()
            store.close()
    n = args.memories
    note = f"{n:,} memories over {WORKSPACES} workspaces, pages of {args.page}, {report.updated:,} written"
    return [
        Row(
            "decay",
            f"DecayAndReinforce over {n // 1000}k memories",
            decay_s,
            "s",
            scroll_s,
            "raw scroll of the same points (whole payload)",
            target="<= 60 s",
            ok=decay_s <= TARGET_S and report.scanned == n and report.updated > 0.9 * n,
            note=note,
        ),
        Row("decay", "the same run again (no writes)", again_s, "s", scroll_s, "raw scroll of the same points"),
        Row("decay", "decay throughput", n / decay_s, "memories/s", n / scroll_s, "raw scroll, points/s"),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10k memories instead of 100k")
    ap.add_argument("--memories", type=int, default=None)
    ap.add_argument("--dim", type=int, default=384, help="dense size of the seeded vectors (the model's: 384)")
    ap.add_argument("--page", type=int, default=512, help="the job's page size (EPISODIC_DECAY_PAGE_SIZE)")
    args = ap.parse_args(argv)
    args.memories = args.memories or (10_000 if args.quick else 100_000)
    logging.basicConfig(level=logging.WARNING)
    rows = run(args)
    emit(rows, f"decay (Qdrant Edge, {args.memories:,} memories, one process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
