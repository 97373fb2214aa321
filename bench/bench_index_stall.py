"""How long an index cycle of the embedded store stops the whole process: each load of a Qdrant Edge shard
holds the interpreter lock, so every thread (the recall service, the gate, the consumers, the event loop)
waits for it (episodic.store.edge_index).

    python -m bench.bench_index_stall [--memories 100000] [--runs 2] [--write-rate 2000] [--quick]

The store: `--memories` memories over 10 workspaces seeded straight into a scratch Qdrant Edge store (the
recall benchmark's seeder: 512 texts embedded with the real model, every memory one of their vectors plus
noise), then indexed once. Each run copies it and runs one cycle (`EdgeEngine.index_in_worker`, 2 threads)
on the copy while a thread of the same process wakes every 10 ms and records each gap over 200 ms: a stall.
Two scenarios, nothing written during the cycle and a writer setting `--write-rate` payloads a second
throughout (a long journal, caught up before the swap), each with the copy's files read back into the page
cache after each close (`shard_files.warm`, the default) against **the same cycle without it** (the
baseline: Edge drops a shard's files from the page cache when it closes it, so the next load faults them in
from disk), alternating (from the second run), in the same run. Keep the scratch directory on disk, not
tmpfs (`TMPDIR`): on tmpfs there is no page cache to drop and the two give the same. Reported: the
process's longest stall, its stalls in all, and how long queries waited at the swap.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Self

from bench.common import Row, emit, load_embedder, tmp_dir

GAP_S = 0.2
BEAT_S = 0.01


class Background:
    """A daemon thread running `_run` from `with` entry until exit (`_stop` set)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Stalls(Background):
    """Sleeps `BEAT_S` at a time and records every gap over `GAP_S` (less the sleep)."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[float] = []

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(BEAT_S)
            now = time.perf_counter()
            if now - last > GAP_S:
                self.gaps.append(now - last - BEAT_S)
            last = now


class Writer(Background):
    """Sets `reference_count` on `rate` memories a second, in batches every 100 ms, until stopped."""

    def __init__(self, store: Any, ids: list[str], rate: int) -> None:
        super().__init__()
        self.store, self.ids, self.per_batch = store, ids, max(1, rate // 10)
        self.written = 0

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            start = (i * self.per_batch) % max(1, len(self.ids) - self.per_batch)
            batch = self.ids[start : start + self.per_batch]
            self.written += self.store.set_payloads({p: {"reference_count": i} for p in batch})
            i += 1
            self._stop.wait(0.1)


def one_cycle(src: Path, work: Path, warm: bool, write_rate: int) -> dict[str, Any]:
    """A cycle on a fresh copy of the store at `src`; `warm` False: the cycle without reading the copy's files
    back (the baseline)."""
    from episodic.store import edge as edge_module
    from episodic.store import shard_files
    from episodic.store.edge import EdgeStore

    shutil.rmtree(work, ignore_errors=True)
    shard_files.copy_shard(src, work)  # as the cycle copies: Edge's sparse files stay sparse
    store = EdgeStore(work)
    store.count()  # the live shard is loaded before the cycle
    real_warm, real_worker = shard_files.warm, edge_module.Worker
    if not warm:
        shard_files.warm = lambda path, chunk=0: 0  # type: ignore[assignment]
        edge_module.Worker = functools.partial(real_worker, warm=False)  # type: ignore[misc,assignment]
    try:
        ids = [pid for pid, _ in store.scroll_page(None, 5000, fields=())[0]] if write_rate else []
        with Stalls() as stalls:
            if write_rate:
                with Writer(store, ids, write_rate) as writer:
                    time.sleep(1.0)
                    cycle = store.index_now(2)
                written = writer.written
            else:
                cycle = store.index_now(2)
                written = 0
    finally:
        shard_files.warm, edge_module.Worker = real_warm, real_worker  # type: ignore[misc]
        store.close()
    gaps = stalls.gaps
    return {
        "longest_s": max(gaps, default=0.0),
        "total_s": sum(gaps),
        "stalls": len(gaps),
        "pause_s": cycle.pause_s,
        "writes_waited_s": cycle.copy_s + cycle.swap_s,
        "catch_up_s": cycle.catch_up_s,
        "replayed": cycle.replayed,
        "written": written,
    }


def seed(path: Path, memories: int) -> None:
    from bench.bench_recall_latency import Seeder
    from episodic.store.edge import EdgeStore

    store = EdgeStore(path)
    store.ensure_collection(384)
    Seeder(store, load_embedder(), 512).add(memories)
    t0 = time.perf_counter()
    cycle = store.index_now(2)
    print(f"  indexed in {time.perf_counter() - t0:.1f}s (worker build {cycle.build_s:.1f}s)", flush=True)
    store.close()


def run(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    with tmp_dir("episodic-bench-stall-") as tmp:
        src, work = tmp / "store", tmp / "copy"
        seed(src, args.memories)
        for label, rate in (("nothing written", 0), (f"{args.write_rate} writes/s", args.write_rate)):
            got: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
            for r in range(args.runs):
                for warm in (False, True) if r % 2 == 0 else (True, False):
                    res = one_cycle(src, work, warm, rate)
                    got[warm].append(res)
                    print(f"  {label}, {'warm' if warm else 'baseline'}: {res}", flush=True)
            for key, metric in (
                ("longest_s", "longest stall of the process"),
                ("total_s", "stalls of the process in all"),
                ("pause_s", "queries waited at the swap"),
            ):
                value = statistics.mean(x[key] for x in got[True])
                base = statistics.mean(x[key] for x in got[False])
                rows.append(
                    Row(
                        "index_stall",
                        f"{args.memories // 1000}k memories, {label}: {metric}",
                        round(value, 3),
                        "s",
                        round(base, 3),
                        "the cycle without reading the copy back (Edge's close drops its files from the page cache)",
                        note=f"mean of {args.runs} cycles each" + (", alternating" if args.runs > 1 else ""),
                    )
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--memories", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--write-rate", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="10k memories, one run each")
    args = ap.parse_args(argv)
    if args.quick:
        args.memories, args.runs = 10_000, 1
    emit(run(args), "index cycle: how long the process stalls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
