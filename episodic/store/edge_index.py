"""The embedded store's dense index (HNSW), built in a worker process over a copy of the shard and swapped in.

Qdrant Edge never indexes by itself, and its `optimize()` (segment merge, HNSW build) holds the GIL for its
whole run (20k one-piece memories: 48 s on one indexing thread here, with a Python thread of the same process
making no progress meanwhile), so in the process that carries the recall service, the gate and the
consumer it would stop everything. Unindexed, every dense leg and linker query scans its workspace, so a
query costs more with every memory written (issue 27).

A cycle (`EdgeEngine.index_in_worker`, run by `BackgroundIndexer` once `EPISODIC_EDGE_INDEX_AFTER` memories
were written since the last one):

1. **Copy.** Writes wait (queries do not) while the shard is flushed and its directory copied beside it
   (`<name>.indexing`); from then on every update operation applied to the live shard is also journaled.
2. **Build.** A worker process (`python -m episodic.store.edge_worker <copy>`, niced, `threads` indexing
   threads: one by default, leaving the other core to the stack) loads the copy with the index settings
   below, runs `optimize()`, closes it and reads its files back into the page cache (`warm`: Edge drops a
   shard's files from the cache when it closes it, and a load that faults them in from disk takes 4-5 times
   longer). The stack's process only waits on the child (no GIL held).
3. **Catch up.** With more than `CATCH_UP_LEFT` operations journaled (or points written by them), this
   process loads the indexed copy and replays the journal into it while the live shard keeps serving (Edge's
   update operations are values: the same one applies to both shards). Loading a shard holds the interpreter
   lock throughout, so the whole process waits for each load (0.6-0.8 s at 100k memories with its files in
   the page cache, 3-3.5 s without): with a shorter journal this step is skipped.
4. **Swap.** Writes wait again; a copy loaded to catch up gets the last journaled operations (queries go
   on), is flushed and closed, and its files are read back into the page cache (`warm`); then, with queries
   waiting too (the shard's lifecycle lock), the live shard is closed, the directories renamed (live ->
   `<name>.replaced`, copy -> `<name>`) and the indexed shard loaded (the lock held again). A journal that
   skipped step 3 is replayed here, into the shard just loaded (queries wait for it too), while a marker
   file (`<name>.swapping`) says so. The replaced directory is deleted afterwards.

A crash at any step leaves a loadable shard: before the renames the live directory is intact (a leftover
copy is deleted at the next start); between the two renames `<name>` is missing and `<name>.replaced` holds
the live shard, flushed and closed, which `recover` moves back; after them `<name>` holds everything. The
marker is written after the first rename and removed once the replay is flushed: while it exists, `<name>`
may lack the last operations and `<name>.replaced` is this cycle's live shard with all of them, which
`recover` puts back in its place. Against a power cut too: the copy's files are fsynced before it is renamed
into place (`sync_tree`, by the worker and after a catch-up), and the directory once the marker is written
and once the swap is done, renames and marker removed, before the replaced shard is deleted (`sync_dir`):
the disk never holds a later step without an earlier one that recovering depends on. These files and what is
done to them (copy, room check, fsyncs, page cache, recovery) are episodic.store.shard_files.

When: once `EPISODIC_EDGE_INDEX_AFTER` memories were written since the last cycle (new ones, and existing
ones whose payload or vectors changed: a write moves a point out of the indexed segment, `MovedPoints`),
not in a burst of writes (`BurstWait`: the nightly decay's), **and** some workspace holds more than
`full_scan_points(dim)` memories (6,666 at 384 dimensions). Below that every workspace is scanned through
its payload index with or without a graph (Qdrant's `full_scan_threshold`), so a cycle would only cost: a
copy of the shard and minutes of a core (measured: a 30-minute soak at half the load, eight workspaces of
at most 2,300 memories, ran one cycle at 10k memories that raised freshness p99 5x while it ran and gave
its queries nothing).

Index settings: per-workspace graphs only (`payload_m=16`, `m=0`, over the `workspace_id` tenant index),
as the server adapter's collection: every dense query is filtered by one workspace and searches that
workspace's graph; a workspace smaller than `full_scan_threshold` is scanned through its payload index.
Payload values get graphs of their own only for the fields that scope a recall (`rules.GRAPH_FIELDS`):
Qdrant builds one per value of every indexed field by default, a graph of the whole store for each field
like severity or ts, which tripled the build; a filter on such a field is searched with ACORN instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from episodic.kernel.errors import StoreError

HNSW_M = 0  # no global graph: every dense query is filtered by its workspace
HNSW_PAYLOAD_M = 16  # one graph per workspace (tenant index)
HNSW_EF_CONSTRUCT = 100
FULL_SCAN_KB = 10_000  # a workspace with fewer vectors than this many KB is scanned via its payload index
# A journal of at most this many operations, writing at most this many points, is replayed at the swap while
# queries wait (into a loaded 100k shard: 13 us a payload write, 48 us a one-piece upsert, so typically tens of
# ms; a delete counts the points it removes, an index or layout change `REBUILD`), which spares the process the
# catch-up's load of the copy (0.6-0.8 s).
CATCH_UP_LEFT = 1024
REBUILD = 1 << 40  # what a layout or payload index change costs a replay: more than any short journal
WORKER_TIMEOUT_S = 6 * 3600.0
RETRY_S = 30.0  # after a failed cycle; doubled for each further failure


def full_scan_points(dim: int) -> int:
    """How many `dim`-dimensional vectors of one workspace fit under `FULL_SCAN_KB`: a workspace at most this
    large is scanned whether or not it is indexed, so a cycle pays off only once some workspace is larger."""
    return FULL_SCAN_KB * 1024 // (4 * max(1, dim))


def index_hnsw(threads: int) -> qe.HnswIndexConfig:
    """The HNSW settings a worker builds with."""
    return qe.HnswIndexConfig(
        m=HNSW_M,
        ef_construct=HNSW_EF_CONSTRUCT,
        full_scan_threshold=FULL_SCAN_KB,
        max_indexing_threads=threads,
        payload_m=HNSW_PAYLOAD_M,
    )


@dataclass
class IndexCycle:
    points: int = 0  # in the copy
    copy_s: float = 0.0  # writes waited this long for the copy
    build_s: float = 0.0  # the worker process
    catch_up_s: float = 0.0
    swap_s: float = 0.0  # writes waited this long for the swap; queries for `pause_s` of it
    pause_s: float = 0.0
    replayed: int = 0  # journaled operations replayed into the indexed copy
    warm_s: float = 0.0  # reading the copy's files back into the page cache (the worker's, then this process's)
    warm_mib: float = 0.0  # what the worker read back
    segments: int = 0
    indexed_vectors: int = 0
    worker_rss_mib: float = 0.0  # the worker's peak resident memory (it holds the whole copy)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Worker:
    """The build step: a child process over the copy; `stop()` ends it (the stack is shutting down)."""

    def __init__(self, path: Path, threads: int, *, keep_graphs: bool = False, warm: bool = True) -> None:
        self.path, self.threads, self.keep_graphs, self.warm = path, threads, keep_graphs, warm
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def run(self, timeout: float = WORKER_TIMEOUT_S) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "episodic.store.edge_worker", str(self.path), "--threads", str(self.threads)]
        cmd += ["--parent", str(os.getpid())]  # it dies with this process (`edge_worker.die_with`)
        cmd += ["--keep-graphs"] if self.keep_graphs else []
        cmd += [] if self.warm else ["--no-warm"]
        if self._stopped:
            raise StoreError("qdrant-edge index build: stopped")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self._proc.kill()
            self._proc.communicate()
            raise StoreError(f"qdrant-edge index build over {self.path}: over {timeout:.0f}s") from e
        if self._proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-3:]
            raise StoreError(f"qdrant-edge index build over {self.path} failed ({self._proc.returncode}): {tail}")
        try:
            return dict(json.loads(out.decode().strip().splitlines()[-1]))
        except (ValueError, IndexError) as e:
            raise StoreError(f"qdrant-edge index build over {self.path}: no report ({out[-200:]!r})") from e

    def stop(self) -> None:
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()


class MovedPoints:
    """The distinct points written since the last index cycle began: what dense queries scan.

    Qdrant writes copy-on-write: any write to a point of an indexed (immutable) segment, a payload field as
    much as a vector, moves the point into the appendable segment, which has no graph (measured on Edge
    0.9: 3,000 payload writes of an unindexed field grew the appendable segment by the points' vectors).
    So the nightly decay, which writes every memory's importance, leaves the whole store to be scanned, and
    reinforcement and the linker's edges move the memories they touch. Every write counts its points here,
    whatever it changes; a point counts once (a memory recalled a hundred times has moved once).

    At most `cap` ids are kept (a bound on memory: at the cap a cycle is due anyway; 0 keeps none and
    counts nothing, for a shard that is never indexed). `carried`: points moved before the process opened
    the shard (saved beside it by `save_moved`, at most `cap`). A cycle `begin`s with a fresh count, which holds
    what is written while it builds (they are replayed into the new segments, which the replay writes
    unindexed); a failed cycle `restore`s the count it began with. Writes are serialised by the engine."""

    def __init__(self, cap: int = 0, carried: int = 0) -> None:
        self.cap = max(0, cap)
        self._ids: set[str] = set()
        self._carried = min(max(0, carried), self.cap)
        self.writes = 0  # points written in all, past the cap too: the write rate (`BurstWait`)

    @property
    def count(self) -> int:
        return min(self.cap, len(self._ids) + self._carried)

    def add(self, ids: Iterable[str]) -> None:
        self.writes += self._keep(ids)

    def _keep(self, ids: Iterable[str]) -> int:
        """Keep `ids` up to the cap; returns how many were offered."""
        n, full = 0, self.count >= self.cap
        for pid in ids:
            n += 1
            if not full:
                self._ids.add(pid)
                full = len(self._ids) + self._carried >= self.cap
        return n

    def add_unknown(self, n: int) -> None:
        """`n` points moved whose ids are not known (a write by a filter without ids)."""
        self.writes += max(0, n)
        self._carried = min(self.cap, self._carried + max(0, n))

    def begin(self) -> tuple[set[str], int]:
        """Start counting again (a cycle copies the shard now); returns what was counted, for `restore`."""
        before = (self._ids, self._carried)
        self._ids, self._carried = set(), 0
        return before

    def restore(self, before: tuple[set[str], int]) -> None:
        """A cycle failed: its points are still unindexed, with what was written since it began."""
        ids, carried = before
        self._carried = min(self.cap, self._carried + carried)
        self._keep(ids)  # written before, not now: the write rate is not theirs


class BurstWait:
    """Holds a due cycle back while writes come in a burst (the nightly decay writes every memory at
    thousands a second; an import, a re-embed): a cycle started in one copies the shard early in it, journals
    the rest, replays it into the new shard's unindexed segment, and the next cycle builds again (seen:
    100k memories, the decay's 83,104 writes replayed after a 117 s build). A burst is more than `rate`
    points written a second between two checks, or a bulk writer's write (`bulk`: the decay, a re-embed)
    less than `quiet_s` ago, whatever its rate (seen: the decay slowed to 350 a second while the daily health
    run shared the process, a cycle began under it and replayed 28,832 of its writes); it is waited out for
    at most `max_wait_s`, then the cycle runs anyway (writes that never stop must not keep the store
    unindexed)."""

    def __init__(
        self,
        rate: float,
        max_wait_s: float = 600.0,
        clock: Callable[[], float] | None = None,
        quiet_s: float = 15.0,
    ) -> None:
        self.rate, self.max_wait_s, self.quiet_s = rate, max_wait_s, quiet_s
        self._clock = clock or time.monotonic
        self._last: tuple[int, float] | None = None
        self._since: float | None = None
        self._bulk_at: float | None = None

    def bulk(self) -> None:
        """A bulk writer wrote now (called from writer threads: one float assignment)."""
        self._bulk_at = self._clock()

    def holds(self, writes: int) -> bool:
        """Whether to wait, given the writes counted so far (`MovedPoints.writes`); call at every check."""
        now = self._clock()
        last, self._last = self._last, (writes, now)
        bulk = self._bulk_at is not None and now - self._bulk_at < self.quiet_s
        fast = last is not None and now > last[1] and (writes - last[0]) / (now - last[1]) > self.rate
        if not (bulk or fast):
            self._since = None
            return False
        if self._since is None:
            self._since = now
        return now - self._since < self.max_wait_s


def moved_path(path: Path) -> Path:
    """Where the count of moved points is kept between runs (`<name>.moved`, beside the shard)."""
    return path.with_name(path.name + ".moved")


def load_moved(path: Path) -> int:
    """The moved points saved for the shard at `path` (0 when none were saved or the file is unreadable)."""
    try:
        return max(0, int(json.loads(moved_path(path).read_text())["moved"]))
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def save_moved(path: Path, moved: int) -> None:
    """Keep `moved` beside the shard (written whole to a temporary file, then renamed: never half a file)."""
    target = moved_path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"moved": int(moved)}))
    tmp.replace(target)


class BackgroundIndexer:
    """Runs `cycle()` in a daemon thread whenever `due()` says enough was written (checked every `every_s`);
    a failed cycle is logged by `on_error` and retried after a back-off."""

    def __init__(
        self,
        cycle: Callable[[], IndexCycle],
        due: Callable[[], bool],
        *,
        every_s: float = 5.0,
        on_cycle: Callable[[IndexCycle], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._cycle, self._due, self.every_s = cycle, due, every_s
        self._on_cycle, self._on_error = on_cycle, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edge-index", daemon=True)
        self.cycles: list[IndexCycle] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while not self._stop.wait(self.every_s):
            try:
                if not self._due():
                    continue
                cycle = self._cycle()
            except BaseException as e:  # a failed build leaves the live shard as it was
                if self._stop.is_set():
                    return
                if self._on_error is not None:
                    self._on_error(e)
                failures += 1  # each try copies the whole shard: back off (30 s, 60 s, ... at most 16 min)
                self._stop.wait(RETRY_S * 2 ** min(failures - 1, 5))
                continue
            failures = 0
            self.cycles.append(cycle)
            if self._on_cycle is not None:
                self._on_cycle(cycle)
