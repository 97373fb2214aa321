"""The index worker process (episodic.store.edge_index): `python -m episodic.store.edge_worker <copy>` loads the
copy of a Qdrant Edge shard with the index settings, turns off the per-value graphs of the payload indexes
that do not scope a recall (a shard written before `rules.GRAPH_FIELDS`), runs its optimizers (segment
merge, HNSW), flushes and closes it, fsyncs its files (`shard_files.sync_tree`: the copy must be on disk before
the stack renames it into place), reads them back into the page cache (closing it dropped them:
`shard_files.warm`, so the stack's load of the copy need not fault them in from disk with its interpreter lock
held) and prints a JSON report on its last line (with its peak resident memory). Niced: it runs behind the
stack's own work; it dies with the stack (`die_with`) and goes first when memory runs out (`first_to_go`)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from episodic.store.edge import graphs_for_scope_only, layout_config
from episodic.store.edge_index import index_hnsw
from episodic.store.shard_files import sync_tree, warm


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM, Linux), 0 where /proc has none. Not getrusage's maxrss:
    Linux carries that across exec, so a worker forked from a large stack would report the stack's."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # kB
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _build(path: str, threads: int, keep_graphs: bool = False, warm_after: bool = True) -> dict[str, Any]:
    """The worker: the copy at `path` loaded with the index settings, optimised, flushed, closed and read
    back into the page cache. `keep_graphs`: build the graphs of every payload index as the shard has them
    (bench_index_build's baseline: the build before issue 27); not `warm_after`: leave the files out of
    the cache (bench_index_stall's baseline)."""
    t0 = time.perf_counter()
    shard = qe.EdgeShard.load(path, layout_config(Path(path), index_hnsw(threads)))
    # a shard written before: graphs for the scoping fields only
    graphs_off = [] if keep_graphs else graphs_for_scope_only(shard)
    changed = shard.optimize()
    info = shard.info()
    shard.flush()
    shard.close()
    sync_tree(Path(path))  # on disk before the stack renames it into place (a power cut then keeps it whole)
    t1 = time.perf_counter()
    warmed = warm(Path(path)) if warm_after else 0  # never raises
    return {
        "optimized": bool(changed),
        "seconds": round(t1 - t0, 3),
        "warm_s": round(time.perf_counter() - t1, 3),
        "warm_mib": round(warmed / 2**20, 1),
        "points": int(info.points_count),
        "segments": int(info.segments_count),
        "indexed_vectors": int(info.indexed_vectors_count),
        "max_rss_mib": peak_rss_mib(),
        "graphs_off": graphs_off,
    }


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with(parent: int) -> bool:
    """Have Linux SIGKILL this worker when the thread that started it ends, that is when the stack dies (a
    kill -9, the OOM killer: the worker holds a whole copy, the stack its own shard): an orphaned build
    would go on for minutes, taking a core and that memory, and write into a copy directory that the next
    stack's recovery deletes and its next cycle makes anew. prctl(PR_SET_PDEATHSIG) through ctypes: the
    package that wraps it (python-prctl) needs libcap headers to build, for one call. Returns whether it
    is set (not on other systems). Exits if `parent` is already gone (it died before the call)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:
        raise SystemExit(f"the stack that started this index build ({parent}) is gone")
    return armed


def first_to_go() -> bool:
    """Offer this worker to the OOM killer before anything else (oom_score_adj 1000, Linux; raising it needs
    no privilege): it holds a whole copy of the shard (1.6 GiB at 100k memories, 13.5 GiB at 1M), and when
    memory runs out it is the process to lose, a cycle retried later, not the stack with its shard (where
    the kernel kills one process: not under systemd's `OOMPolicy=stop` or a cgroup that kills as a group,
    docs/operations.md). Returns whether it is set."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="build the dense index of a copy of a Qdrant Edge shard")
    ap.add_argument("path")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep-graphs", action="store_true", help="keep every payload index's graphs (a baseline)")
    ap.add_argument("--no-warm", action="store_true", help="leave the copy's files out of the page cache (a baseline)")
    ap.add_argument("--parent", type=int, default=0, help="the stack's pid: the worker dies with it (Linux)")
    args = ap.parse_args(argv)
    if args.parent:
        die_with(args.parent)
    first_to_go()
    try:
        os.nice(10)  # behind the stack's own work on a shared machine
    except OSError:  # pragma: no cover - not permitted: run at the same priority
        pass
    print(json.dumps(_build(args.path, args.threads, args.keep_graphs, not args.no_warm)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
