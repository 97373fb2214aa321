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
the disk never holds a later step without an earlier one that recovering depends on.

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

import contextlib
import functools
import json
import os
import shutil
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

COPY_SUFFIX = ".indexing"
REPLACED_SUFFIX = ".replaced"
SWAP_SUFFIX = ".swapping"  # a marker file: see `recover`
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
ROOM_FACTOR = 2.5  # a cycle's disk, times the shard's: the copy and the optimizer's new segments (`check_room`)
ROOM_SPARE = 256 << 20  # and room for the live shard's writes while it runs
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


def copy_path(path: Path) -> Path:
    return path.with_name(path.name + COPY_SUFFIX)


def replaced_path(path: Path) -> Path:
    return path.with_name(path.name + REPLACED_SUFFIX)


def swap_marker(path: Path) -> Path:
    """Present while a swap replays the last journaled operations into the shard it renamed into place."""
    return path.with_name(path.name + SWAP_SUFFIX)


def warm(path: Path, chunk: int = 1 << 20) -> int:
    """Read every file of the shard at `path` into the page cache; returns the bytes read.

    Qdrant Edge drops a shard's files from the page cache when it closes it (`POSIX_FADV_DONTNEED` on each,
    seen with strace), so loading a shard that was just closed, as the worker's copy is at the swap, pulls
    what the load keeps in memory (the dense vectors, the payload indexes) back from disk one page fault at a
    time, with the interpreter lock held: 3.0-3.3 s at 100k memories against 0.6-0.8 s once the files are
    read back first. Plain sequential reads (the lock is released during each) take 0.5-1 s there, and read
    the files' preallocated chunks too. Which files a load needs is Edge's business (skipping the payload
    indexes' null bitmaps made it slow again), so every file is read. It only saves load time, so it never
    raises: what cannot be read (a file or directory that vanished) is skipped."""
    total, buf = 0, bytearray(chunk)
    try:
        files = sorted(path.rglob("*"))
    except OSError:
        return 0
    for f in files:
        try:
            if not f.is_file():
                continue
            with open(f, "rb", buffering=0) as fh:
                while n := fh.readinto(buf):
                    total += n
        except OSError:
            continue
    return total


def sync_dir(path: Path) -> None:
    """Make the names created, renamed and removed in the directory `path` durable (fsync it): without it a
    power cut may keep a later rename and lose an earlier one. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(path: Path) -> None:
    """fsync every file and directory of the shard at `path`, then its parent: the copy a cycle renames into
    place must be on disk before the rename is (a copy leaves it to the kernel's writeback, and
    a power cut after the rename could keep empty files). 0.35 s for a just-copied 100k shard (795 MiB),
    0.03 s once written back. Raises OSError."""
    for f in [*sorted(path.rglob("*"), reverse=True), path]:  # files before the directories naming them
        fd = os.open(f, os.O_RDONLY | (os.O_DIRECTORY if f.is_dir() else 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    sync_dir(path.parent)


def copy_shard(src: Path, dst: Path) -> None:
    """Copy the shard's directory `src` to `dst` (which must not exist) as it is on disk, holes included.
    Edge sizes its files ahead of their data, sparsely (100k memories: 432 MiB allocated of 796 MiB), and
    `shutil.copytree` writes the holes out as zeros (797 MiB written, 0.37-1.79 s here, while writers wait),
    where GNU cp copies the data extents only (431 MiB, 0.24-0.32 s) or shares them where the filesystem can
    (reflink: XFS, btrfs). Elsewhere (no GNU cp), `shutil.copytree`. Raises OSError."""
    cp = _gnu_cp()
    if cp is None:
        shutil.copytree(src, dst)
        return
    done = subprocess.run(
        [cp, "-a", "-T", "--reflink=auto", "--sparse=auto", "--", str(src), str(dst)], capture_output=True
    )
    if done.returncode != 0:
        raise OSError(f"cp {src} {dst}: {done.stderr.decode(errors='replace').strip()[-300:]}")


@functools.cache
def _gnu_cp() -> str | None:
    cp = shutil.which("cp")
    if cp is None:
        return None
    try:
        version = subprocess.run([cp, "--version"], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return cp if b"GNU coreutils" in version else None


def shard_bytes(path: Path) -> int:
    """What the shard's files take on disk (their allocated blocks: Edge preallocates its chunks)."""
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(OSError):
            total += f.lstat().st_blocks * 512
    return total


def check_room(path: Path) -> None:
    """Raise StoreError unless the disk holding the shard at `path` has room for a cycle: the copy, the
    optimizer's new segments written beside the copy's old ones until they replace them (up to the copy's
    size again), and `ROOM_SPARE` for the live shard's writes meanwhile. Measured on a never-indexed shard of
    100k memories (368 MiB allocated): its copy peaked at 689 MiB during the build (1.87x), 928 MiB (2.52x)
    when copied with `shutil.copytree`. A cycle that filled the disk would make the live shard's own writes
    fail; this one is retried later (`BackgroundIndexer`'s back-off)."""
    need = int(ROOM_FACTOR * shard_bytes(path)) + ROOM_SPARE
    free = shutil.disk_usage(path.parent).free
    if free < need:
        raise StoreError(
            f"qdrant-edge index cycle at {path}: {free / 2**20:.0f} MiB free on its disk, a cycle needs "
            f"{need / 2**20:.0f} MiB (a copy of the shard and its rebuilt segments); queries scan until there is room"
        )


def recover(path: Path) -> None:
    """Put the shard at `path` back after a cycle that a crash cut short (see the module doc). Each step is
    made durable before the next (`sync_dir`), so a power cut during a recovery leaves a state it recovers
    from as well."""
    replaced, copy, marker = replaced_path(path), copy_path(path), swap_marker(path)
    if marker.exists():  # the copy in place may lack the last operations: the live shard holds them all
        if replaced.exists():
            if path.exists():
                shutil.rmtree(path)  # raises rather than leave part of it (the marker stays: the next start retries)
                sync_dir(path.parent)  # the copy is gone before the live shard takes its name
            replaced.rename(path)
            sync_dir(path.parent)
        marker.unlink()  # only once the live shard is back in place
        sync_dir(path.parent)
    if not path.exists() and replaced.exists():
        replaced.rename(path)  # the live shard, flushed and closed before the first rename
        sync_dir(path.parent)
    if path.exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(replaced, ignore_errors=True)


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
