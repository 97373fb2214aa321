"""EdgeStore: the memory store on Qdrant Edge, an in-process Qdrant shard on disk (SPEC §6, embedded).

`EdgeEngine` is the thin backend under `episodic.store.facade.QdrantStore`: one shard directory holds the collection
(a named multivector `dense`, cosine, max-sim over the chunk rows, and the named sparse vectors `bm25` and
`bm25_context` with the IDF modifier; a shard created before `bm25_context` existed is loaded in its own
layout, read from its `edge_config.json`, and runs without it); it lowers the store's neutral filters and
queries into qdrant-edge's types and wraps the engine's errors. Scores come from the engine: the legs are
prefetches, fusion is Qdrant's RRF/DBSF, and the importance multiplier is a Formula over `$score`.

Qdrant Edge is single-process (the shard's WAL is locked by the process that opened it). Within the
process, data calls (query, scroll, retrieve, count, update) run concurrently, with no lock of ours:
the shard takes `&self` everywhere and guards its segments with a read-write lock and its WAL with a
mutex (qdrant lib/edge/src/edge_shard: `LockedSegmentHolder`, `Mutex<SerdeWal>`), and a stress probe
here (2 writer threads upserting and setting payloads, 3 querying and counting, 1 running optimize,
without any lock) finished with no error and the exact point count. So the recall service's thread pool
queries while the consumer writes. Only the shard's lifecycle (load, create, close) is exclusive: a
read-write lock lets data calls share the open shard and makes close wait for them.

Indexed in the background: `optimize()` (segment merge, HNSW) holds the GIL for its whole run, which would
freeze the event loop that carries the recall service, the gate and the consumer; so the dense index is
built in a worker process over a copy of the shard and swapped in (`episodic.store.edge_index`), every
`index_after` memories written (`EPISODIC_EDGE_INDEX_AFTER`) once some workspace is large enough for its
graph to be searched. Writes go through `_write` and `_apply`: the
first lets the copy and the swap hold writes back (queries go on), the second journals each update
operation while a copy is being indexed, for the catch-up.

Size: over 400 lines: one engine's whole translation (its calls, vocabulary, error mapping, the index
cycle's swap and the named dense vectors of the embedding generations) stays in one module, like
store_qdrant.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from episodic.kernel.errors import StoreError, StoreUnavailable
from episodic.kernel.ports import CONTEXT, DENSE, SPARSE, MemoryPoint, SparseVec
from episodic.store import edge_index, shard_files
from episodic.store.edge_index import BackgroundIndexer, IndexCycle, Worker
from episodic.store.facade import DEFAULT_PREFETCH, Engine, QdrantStore, Record, ScoredRecord
from episodic.store.query import Filter, HasId, Lowering, Query
from episodic.store.rules import ACORN_MAX_SELECTIVITY, HNSW_EF_SEARCH, IndexKind, has_graph
from episodic.store.rwlock import ReadWriteLock

try:
    import qdrant_edge as qe
except ImportError as e:  # pragma: no cover - a core dependency; guard for a clear hint
    raise ImportError("EdgeStore needs qdrant-edge-py: pip install 'qdrant-edge-py>=0.9'") from e

_FATAL = (KeyboardInterrupt, SystemExit, GeneratorExit)
log = logging.getLogger(__name__)


def _config(
    dim: int,
    vector: str = DENSE,
    others: Mapping[str, int] | None = None,
    context: bool = True,
    hnsw: qe.HnswIndexConfig | None = None,
) -> qe.EdgeConfig:
    """The layout: the dense multivector `vector` of `dim` (and any `others`, the other embedding
    generations the shard holds), cosine, max-sim; the IDF sparse vectors `bm25` and, with `context`,
    `bm25_context`."""
    dense = {**(others or {}), vector: dim}
    sparse = [SPARSE, CONTEXT] if context else [SPARSE]
    return qe.EdgeConfig(
        vectors={
            name: qe.EdgeVectorParams(
                size=size,
                distance=qe.Distance.Cosine,
                multivector_config=qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim),
            )
            for name, size in dense.items()
        },
        sparse_vectors={name: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf) for name in sparse},
        hnsw_config=hnsw,
    )


def layout_config(path: Path, hnsw: qe.HnswIndexConfig) -> qe.EdgeConfig:
    """The config of the shard at `path` as its config file records it, with `hnsw` (the index worker's)."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        dense = {str(k): int(v["size"]) for k, v in (config.get("vectors") or {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise StoreError(f"qdrant-edge: cannot read the layout at {path}: {e}") from e
    if not dense:
        raise StoreError(f"qdrant-edge: no dense vector in the layout at {path}")
    first = DENSE if DENSE in dense else sorted(dense)[0]
    others = {k: v for k, v in dense.items() if k != first}
    return _config(dense[first], first, others, CONTEXT in (stored_sparse_names(path) or set()), hnsw)


_MAXSIM = qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
# Dense legs: `hnsw_ef` 128; with ACORN where the filter narrows on a field without graphs of its own
# (`store_query.off_graph`): one that keeps less than `ACORN_MAX_SELECTIVITY` of the points searched is followed
# through the neighbours' neighbours, and finds what it would find with those graphs (issue 27, docs/scale.md).
_DENSE_PARAMS = qe.SearchParams(hnsw_ef=HNSW_EF_SEARCH)
_ACORN_PARAMS = qe.SearchParams(
    hnsw_ef=HNSW_EF_SEARCH, acorn=qe.AcornSearchParams(enable=True, max_selectivity=ACORN_MAX_SELECTIVITY)
)


# writers that rewrite much of the store in one run (every memory's importance; every summary's vectors): an
# index cycle waits until they have been quiet a while (EdgeStore._writing)
BULK_WRITERS = frozenset({"decay", "re-embed"})
CONFIG_FILE = "edge_config.json"  # what qdrant-edge writes beside the shard's segments


def stored_sparse_names(path: Path) -> set[str] | None:
    """The sparse vector names of the shard at `path` as its config file records them (None: no readable
    config; the engine's own check then decides)."""
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
        return set((config.get("sparse_vectors") or {}).keys())
    except (OSError, ValueError, AttributeError):
        return None


def _index_schema(name: str, kind: IndexKind) -> Any:
    """The payload index of field `name`: a graph per value only for the fields that scope a recall
    (`rules.GRAPH_FIELDS`); see `graphs_for_scope_only` for shards written before."""
    graph = has_graph(name)
    if kind == "tenant":
        return qe.KeywordIndexParams(is_tenant=True, enable_hnsw=graph)
    return _PARAMS[kind](enable_hnsw=graph)


_PARAMS: dict[str, Any] = {
    "keyword": qe.KeywordIndexParams,
    "float": qe.FloatIndexParams,
    "datetime": qe.DatetimeIndexParams,
    "bool": qe.BoolIndexParams,
}
_KIND_OF_TYPE: dict[Any, str] = {
    qe.PayloadSchemaType.Keyword: "keyword",
    qe.PayloadSchemaType.Float: "float",
    qe.PayloadSchemaType.Datetime: "datetime",
    qe.PayloadSchemaType.Bool: "bool",
}


def graphs_for_scope_only(shard: Any) -> list[str]:
    """Turn off the per-value graphs of every payload index of `shard` outside `rules.GRAPH_FIELDS` (a
    shard written before they were off). The index worker runs it on its copy before building; returns the
    fields it changed."""
    return set_value_graphs(shard, has_graph)


def set_value_graphs(shard: Any, graph: Callable[[str], bool]) -> list[str]:
    """Create every payload index of `shard` whose per-value graphs are not `graph(field)` again with
    `enable_hnsw=graph(field)` (the tenant index is left as it is); returns the fields it changed."""
    changed: list[str] = []
    for name, info in shard.info().payload_schema.items():
        kind = _KIND_OF_TYPE.get(info.data_type)
        params: Any = info.params
        if kind is None or (params is not None and kind == "keyword" and params.is_tenant):
            continue  # a tenant index is the workspace's, always with its graphs
        want = graph(name)
        has = params is None or params.enable_hnsw is not False  # Qdrant builds them unless told not to
        if has == want:
            continue
        shard.update(qe.UpdateOperation.create_field_index(name, _PARAMS[kind](enable_hnsw=want)))
        changed.append(name)
    return changed


def _point_id(pid: str) -> uuid.UUID | str:
    try:
        return uuid.UUID(pid)
    except (ValueError, TypeError, AttributeError) as e:
        raise StoreError(f"point id {pid!r} is not a UUID") from e


@functools.lru_cache(maxsize=4)
def _times_importance(key: str, default: float) -> qe.Formula:
    """The same for every query: built once (the request takes a copy)."""
    return qe.Formula(
        qe.Expression.Mult([qe.Expression.Variable("$score"), qe.Expression.Variable(key)]),
        defaults={key: default},
    )


_RAW_SCORE = qe.Formula(qe.Expression.Variable("$score"))  # the prefetch's score as it is


@functools.lru_cache(maxsize=8)
def _piece_prior(key: str, penalty: float) -> qe.Formula:
    """`$score - penalty * ln(key)`, key 1 (no penalty) when the payload lacks it."""
    e = qe.Expression
    return qe.Formula(
        e.Sum([e.Variable("$score"), e.Mult([e.Constant(-penalty), e.Ln(e.Variable(key))])]),
        defaults={key: 1},
    )


def _with_payload(fields: Sequence[str] | None) -> list[str] | bool:
    return list(fields) if fields is not None else True


class EdgeEngine(Engine):
    """A Qdrant Edge shard at `path` (created on first `ensure`, else loaded from disk on first use)."""

    name = "qdrant-edge"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = ReadWriteLock()
        self._load_lock = threading.Lock()
        self._shard: qe.EdgeShard | None = None
        self._dim: int | None = None
        self._vector = DENSE  # the vector `ensure` checked (the reopen check)
        self._closed = False
        self._writes = ReadWriteLock()  # writers share it; an index cycle's copy and swap hold it alone
        self._serial = threading.Lock()  # one write at a time: conditional writes are atomic (see `_write`)
        # update operations since the copy, while one is indexed, each with `_journal_cost` before it: the
        # points replaying the journal touches so far (`_apply`)
        self._journal: list[tuple[Any, int]] | None = None
        self._journal_cost = 0
        self._journal_lock = threading.Lock()
        self.moved = edge_index.MovedPoints()  # points written since the last cycle (EdgeStore sets its cap)
        self._worker: Worker | None = None
        self._cycling = threading.Lock()  # one index cycle at a time (they share the copy's directory)
        self._unrecovered = ""  # why no shard may be opened until a restart recovers it (`_swap`)
        shard_files.recover(path)

    # -- lifecycle -----------------------------------------------------------------------------------

    def _has_data(self) -> bool:
        return self.path.is_dir() and any(self.path.iterdir())

    @contextmanager
    def _write(self, op: str) -> Iterator[None]:
        """`_guard` for a write: also shares the write lock, which an index cycle holds alone while it copies
        the shard and while it swaps the indexed copy in. Writes run one at a time in the process (`_serial`):
        the shard evaluates a conditional write's filter, then applies it, and another write in between
        (measured: a lost increment in a few hundred raced ones) would break the write discipline's "only
        while still at the revision read" (episodic.store). Edge is single-process, so this makes each
        write, its condition included, atomic."""
        with self._writes.shared(), self._guard(op), self._serial:
            yield

    def _apply(
        self, shard: qe.EdgeShard, op: Any, *, moves: Iterable[str] | Filter, cost: int | Filter | None = None
    ) -> None:
        """One update operation on the live shard; journaled while a copy is being indexed (in the order
        applied: two writers' operations on one point must replay in the same order). `moves`: the points it
        writes, which leave the indexed segment (`MovedPoints`): their ids, counted once it is applied, or
        the filter it writes by, counted before (the write may change what the filter matches). `cost`: the
        points a replay of it touches, for `_journal_short` (default: those it moves; a filter: as many as it
        matches; `REBUILD`: a change of the layout or of a payload index, which a replay rebuilds over the
        whole store)."""
        ids: list[str] | None = None
        if isinstance(moves, Filter):
            moved = self._moved_by(shard, moves)
        else:
            ids = list(moves)
            moved = len(ids)
        journaling = self._journal is not None  # it starts only while writers wait (`_writes`)
        replay = moved if cost is None else cost
        if isinstance(replay, Filter):
            replay = self._matching(shard, replay) if journaling else 0
        # counted with it: `_journal_short` reads both under the lock
        with self._journal_lock if journaling else contextlib.nullcontext():
            shard.update(op)
            if ids is not None:
                self.moved.add(ids)
            if self._journal is not None:
                self._journal.append((op, self._journal_cost))
                self._journal_cost += replay

    def _moved_by(self, shard: qe.EdgeShard, flt: Filter) -> int:
        """Count the points a write by `flt` moves: its ids when it names them (every conditional write does:
        `at_revision`), else as many as the filter matches (counted only when something keeps the count: a
        capped `MovedPoints`, a journal). Returns the count (0: not counted)."""
        ids = next((c.ids for c in flt.must if isinstance(c, HasId)), None)
        if ids is not None:
            self.moved.add(ids)
            return len(ids)
        if not self.moved.cap and self._journal is None:
            return 0
        n = self._matching(shard, flt)
        if self.moved.cap:
            self.moved.add_unknown(n)
        return n

    def _matching(self, shard: qe.EdgeShard, flt: Filter) -> int:
        return int(shard.count(qe.CountRequest(filter=Lowering(self)(flt), exact=False)))

    @contextmanager
    def _guard(self, op: str, *, exclusive: bool = False) -> Iterator[None]:
        """Share (or, for the lifecycle, hold alone) the open shard and wrap engine errors (including Rust
        panics) in our exceptions."""
        with self._lock.exclusive() if exclusive else self._lock.shared():
            try:
                yield
            except (StoreError, StoreUnavailable):
                raise
            except _FATAL:
                raise
            except BaseException as e:  # pyo3 PanicException derives from BaseException
                msg = str(e)
                if "not initialized" in msg or "WAL" in msg or isinstance(e, OSError):
                    raise StoreUnavailable(f"qdrant-edge {op} at {self.path}: {msg}") from e
                raise StoreError(f"qdrant-edge {op}: {msg}") from e

    def _open(self) -> qe.EdgeShard:
        """The open shard; an existing one on disk is loaded on first use."""
        if self._closed:
            raise StoreUnavailable(f"EdgeStore at {self.path} is closed")
        if self._unrecovered:
            raise StoreUnavailable(f"EdgeStore at {self.path}: {self._unrecovered}")
        if self._shard is None:
            with self._load_lock:  # two threads must not both load it
                if self._shard is None:
                    if not self._has_data():
                        raise StoreUnavailable(f"no Qdrant Edge shard at {self.path}: call ensure_collection(dim)")
                    self.has_context = CONTEXT in (stored_sparse_names(self.path) or set())
                    self._shard = qe.EdgeShard.load(str(self.path))
        return self._shard

    def ensure(self, dim: int, indexes: Mapping[str, IndexKind], vector: str = DENSE) -> None:
        # a write too (payload indexes): it waits for an index cycle's copy and swap like the others, or an
        # index created after the swap took the journal's last operations would be missing from the new shard
        with self._writes.shared(), self._guard("ensure_collection", exclusive=True):
            if self._closed:
                raise StoreUnavailable(f"EdgeStore at {self.path} is closed")
            if self._shard is not None and (self._dim != dim or self._vector != vector):
                # Opened lazily (or for another dim): reopen with the config so the engine checks it.
                self._shard.close()
                self._shard = None
            if self._shard is None:
                if self._has_data():
                    # The other generations on disk are part of the layout: the engine refuses a config
                    # without them (it compares every vector storage). `dense` (dim, max-sim) and `bm25`
                    # are the engine's to verify against the config; `bm25_context` may be missing (a shard
                    # from before it existed), so the config says what the shard's own file records.
                    others = {k: v for k, v in self._disk_vectors().items() if k != vector}
                    names = stored_sparse_names(self.path)
                    self.has_context = names is None or CONTEXT in names
                    config = _config(dim, vector, others, self.has_context)
                    self._shard = qe.EdgeShard.load(str(self.path), config)
                else:
                    self.path.mkdir(parents=True, exist_ok=True)
                    self._shard = qe.EdgeShard.create(str(self.path), _config(dim, vector))
                    self.has_context = True
            self._dim, self._vector = dim, vector
            present = set(self._shard.info().payload_schema)
            for name, kind in indexes.items():
                if name not in present:
                    self._apply(
                        self._shard,
                        qe.UpdateOperation.create_field_index(name, _index_schema(name, kind)),
                        moves=(),
                        cost=edge_index.REBUILD,
                    )

    def flush(self) -> None:
        with self._guard("flush"):
            if self._shard is not None:
                self._shard.flush()

    def close(self) -> None:
        worker = self._worker
        if worker is not None:
            worker.stop()  # an index build in flight is abandoned; the live shard has everything
        with self._guard("close", exclusive=True):
            shard, self._shard, self._closed = self._shard, None, True
            if shard is not None:
                try:
                    shard.flush()
                finally:
                    shard.close()

    def _disk_vectors(self) -> dict[str, int]:
        """The dense vectors (name -> dim) of the shard's layout, from the config it keeps beside its data
        (`edge_config.json`, rewritten by the shard when a vector is created or deleted): Edge reports
        no layout through its API."""
        try:
            config = json.loads((self.path / CONFIG_FILE).read_text())
            return {str(k): int(v["size"]) for k, v in (config.get("vectors") or {}).items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise StoreError(f"qdrant-edge: cannot read the layout at {self.path}: {e}") from e

    def dense_vectors(self) -> dict[str, int]:
        with self._guard("layout"):
            return self._disk_vectors() if self._has_data() else {}

    def add_dense(self, name: str, dim: int) -> None:
        with self._write("add_dense"):
            shard = self._open()
            have = self._disk_vectors().get(name)
            if have is None:
                self._apply(
                    shard,
                    qe.UpdateOperation.create_dense_vector(name, dim, qe.Distance.Cosine, _MAXSIM),
                    moves=(),
                    cost=edge_index.REBUILD,
                )
            elif have != dim:
                raise StoreError(f"qdrant-edge: vector {name!r} exists with dim {have}, asked for {dim}")

    def drop_dense(self, name: str) -> None:
        with self._write("drop_dense"):
            shard = self._open()
            if name in self._disk_vectors():
                self._apply(shard, qe.UpdateOperation.delete_vector_name(name), moves=(), cost=edge_index.REBUILD)

    def set_vectors(self, name: str, rows: Mapping[str, list[list[float]]], fields: dict[str, Any]) -> int:
        """The named vector of each point and `fields` merged into its payload; a point deleted meanwhile
        is skipped (the shard says "No point with id")."""
        written = 0
        with self._write("set_vectors"):
            shard = self._open()
            for pid, vec in rows.items():
                uid = _point_id(pid)
                try:
                    self._apply(shard, qe.UpdateOperation.update_vectors([qe.PointVectors(uid, {name: vec})]), moves=())
                    self._apply(shard, qe.UpdateOperation.set_payload([uid], fields), moves=(pid,))
                    written += 1
                except Exception as e:  # not BaseException: a Rust panic still goes to _guard
                    if "No point with id" not in str(e):
                        raise
        return written

    def _with_vector(self, with_dense: bool, using: str | None = None) -> list[str] | bool:
        return [using or self.dense] if with_dense else False

    def optimize(self) -> bool:
        with self._guard("optimize"):  # safe beside data calls, but it holds the GIL throughout (see above)
            return bool(self._open().optimize())

    def payload_indexes(self) -> set[str]:
        with self._guard("info"):
            return set(self._open().info().payload_schema)

    def unindexed(self) -> int:
        """Points the shard holds beyond its indexed vectors (an estimate of what scans cost: multi-piece
        memories count one vector per named vector, not per piece)."""
        with self._guard("info"):
            info = self._open().info()
        return max(0, int(info.points_count) - int(info.indexed_vectors_count))

    def index_in_worker(self, threads: int = 1) -> IndexCycle:
        """One index cycle (episodic.store.edge_index): copy, build in a worker process, catch up, swap.
        Queries go on throughout but for the swap's reload (and the replay of a short journal); writes wait
        for the copy and the swap. Each load of a shard holds the interpreter lock (the process waits): one
        at the swap, and one more to catch up on a long journal (more than `CATCH_UP_LEFT` operations, or
        points written by them, since the copy). Raises StoreError if the build fails (the live shard is then
        as it was). One cycle at a time: a second call waits for the running one (it would delete its copy)."""
        with self._cycling:
            return self._index_cycle(threads)

    def _index_cycle(self, threads: int) -> IndexCycle:
        cycle = IndexCycle()
        work, replaced = shard_files.copy_path(self.path), shard_files.replaced_path(self.path)
        shutil.rmtree(work, ignore_errors=True)
        shard_files.check_room(self.path)
        t0 = time.perf_counter()
        with self._writes.exclusive():
            with self._guard("index: flush"):
                shard = self._open()
                shard.flush()
                copied = int(shard.info().points_count)  # what the copy must hold (checked after the build)
            try:
                shard_files.copy_shard(self.path, work)
            except BaseException as e:  # a full disk, say: leave no partial copy taking the live shard's room
                shutil.rmtree(work, ignore_errors=True)
                if isinstance(e, _FATAL):
                    raise
                raise StoreError(f"qdrant-edge index cycle at {self.path}: copying the shard failed: {e}") from e
            with self._journal_lock:
                self._journal, self._journal_cost = [], 0
            before = self.moved.begin()
        cycle.copy_s = time.perf_counter() - t0
        new: qe.EdgeShard | None = None
        try:
            self._worker = Worker(work, threads)
            report = self._worker.run()
            cycle.build_s = float(report.get("seconds", 0.0))
            cycle.warm_s = float(report.get("warm_s", 0.0))
            cycle.warm_mib = float(report.get("warm_mib", 0.0))
            cycle.points, cycle.segments = int(report["points"]), int(report["segments"])
            if cycle.points != copied:  # a copy that lost data (a filesystem's copy fault): never swapped in
                raise StoreError(f"the indexed copy holds {cycle.points} points where the shard held {copied}")
            cycle.indexed_vectors = int(report["indexed_vectors"])
            cycle.worker_rss_mib = float(report.get("max_rss_mib", 0.0))
            t1 = time.perf_counter()
            done = 0
            if not self._journal_short(0):
                # A long journal is replayed into the copy while the live shard serves and writers go on;
                # loading the copy holds the interpreter lock (the whole process waits), so a short one is
                # replayed at the swap instead, into the one load the swap needs anyway.
                new = qe.EdgeShard.load(str(work))
                done = self._replay(new, done)
            cycle.catch_up_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            with self._writes.exclusive():
                if self._closed:
                    raise StoreUnavailable(f"EdgeStore at {self.path} closed while indexing")
                if new is not None:  # the rest, while queries go on; closing drops the copy's files from the
                    done = self._replay(new, done, everything=True)  # page cache: read them back for the swap
                    new.flush()
                    new.close()
                    new = None
                    shard_files.sync_tree(work)  # what the catch-up wrote, on disk before the rename
                    t = time.perf_counter()
                    shard_files.warm(work)
                    cycle.warm_s += time.perf_counter() - t
                rest = self._pending(done)
                cycle.replayed = done + len(rest)
                t3 = time.perf_counter()
                with self._guard("index: swap", exclusive=True):
                    self._swap(work, replaced, rest)
                cycle.pause_s = time.perf_counter() - t3
                with self._journal_lock:
                    self._journal = None
            cycle.swap_s = time.perf_counter() - t2
        except BaseException as e:
            with self._journal_lock:
                self._journal = None
            with self._serial:  # writers go on meanwhile
                self.moved.restore(before)
            if new is not None:
                with contextlib.suppress(Exception):
                    new.close()
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(e, (StoreError, StoreUnavailable, *_FATAL)):
                raise
            raise StoreError(f"qdrant-edge index cycle at {self.path}: {e}") from e
        finally:
            self._worker = None
        shutil.rmtree(replaced, ignore_errors=True)
        return cycle

    def _journal_short(self, done: int) -> bool:
        """At most `CATCH_UP_LEFT` operations journaled after the first `done`, writing at most as many points:
        few enough to replay at the swap, while queries wait."""
        with self._journal_lock:
            journal = self._journal or []
            left = len(journal) - done
            points = self._journal_cost - journal[done][1] if left > 0 else 0
        return left <= edge_index.CATCH_UP_LEFT and points <= edge_index.CATCH_UP_LEFT

    def _pending(self, done: int) -> list[Any]:
        """The journaled operations after the first `done`."""
        with self._journal_lock:
            return [op for op, _ in (self._journal or [])[done:]]

    def _replay(self, new: qe.EdgeShard, done: int, *, everything: bool = False) -> int:
        """Replay the journal from operation `done` into the loaded copy `new` until what is left is short
        (`_journal_short`; `everything`: until nothing is, the caller holding the writers). Returns how many
        are replayed in all."""
        while True:
            pending = self._pending(done)
            if not pending or (not everything and self._journal_short(done)):
                return done
            for op in pending:
                new.update(op)
            done += len(pending)

    def _swap(self, work: Path, replaced: Path, rest: list[Any]) -> None:
        """Close the live shard, put the indexed copy in its place and load it (the caller holds the shard
        alone). `rest`: journaled operations the copy lacks, replayed into it once loaded; a marker file
        says so meanwhile, and `shard_files.recover` puts the live shard back after a crash before the marker
        is gone. On any failure the live shard is put back and loaded, as it was."""
        marker = shard_files.swap_marker(self.path)
        live, self._shard = self._shard, None
        if live is not None:
            live.flush()
            live.close()
        os.rename(self.path, replaced)
        shard: qe.EdgeShard | None = None
        try:
            if rest:  # from here `<name>.replaced` is this cycle's live shard, with every operation
                marker.touch()
                shard_files.sync_dir(self.path.parent)  # on disk before the copy takes the live shard's name
            os.rename(work, self.path)
            shard = qe.EdgeShard.load(str(self.path))
            for op in rest:
                shard.update(op)
            if rest:
                shard.flush()
                marker.unlink()
            # the swap on disk before the caller deletes the replaced shard (without it a power cut could
            # keep the marker and the deletion: `recover` would then put a half-deleted shard back)
            shard_files.sync_dir(self.path.parent)
            self._shard = shard
        except BaseException:
            if shard is not None:
                with contextlib.suppress(BaseException):
                    shard.close()
            try:
                if self.path.exists():
                    os.rename(self.path, work)  # back to the live shard, as it was
                os.rename(replaced, self.path)
            except BaseException as e:  # the names are as the failure left them, the marker too: no shard is
                # opened until a restart's `recover` puts the live one back (writes here would be lost then)
                self._unrecovered = f"an index swap failed and could not put the live shard back ({e}): restart"
                raise
            marker.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # best effort: the original error is what the caller must see
                shard_files.sync_dir(self.path.parent)
            shard_files.warm(self.path)  # closing it dropped its files from the page cache (never raises)
            self._shard = qe.EdgeShard.load(str(self.path))
            raise

    # -- writes --------------------------------------------------------------------------------------

    def upsert(self, points: Sequence[MemoryPoint], condition: Filter | None = None) -> None:
        with self._write("upsert"):  # building the points converts the payload: its errors are rejections too
            edge_points = []
            for p in points:
                vectors: dict[str, Any] = {SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))}
                if p.dense is not None:
                    vectors[p.vector] = p.dense
                if p.context is not None and self.has_context:
                    vectors[CONTEXT] = qe.SparseVector(list(p.context.indices), list(p.context.values))
                edge_points.append(qe.Point(_point_id(p.point_id), vectors, p.payload))
            cond = Lowering(self)(condition) if condition is not None else None
            self._apply(
                self._open(),
                qe.UpdateOperation.upsert_points(edge_points, condition=cond),
                moves=[p.point_id for p in points],
            )

    def set_payload(self, point_id: str, fields: dict[str, Any]) -> None:
        pid = _point_id(point_id)
        with self._write("set_payload"):
            self._apply(self._open(), qe.UpdateOperation.set_payload([pid], fields), moves=(point_id,))

    def set_dense(self, point_id: str, rows: list[list[float]], fields: dict[str, Any], vector: str = DENSE) -> None:
        pid = _point_id(point_id)
        with self._write("set_dense"):
            shard = self._open()
            self._apply(shard, qe.UpdateOperation.update_vectors([qe.PointVectors(pid, {vector: rows})]), moves=())
            self._apply(shard, qe.UpdateOperation.set_payload([pid], fields), moves=(point_id,))

    def set_context(self, point_id: str, context: SparseVec, fields: dict[str, Any]) -> None:
        pid = _point_id(point_id)
        vector = qe.SparseVector(list(context.indices), list(context.values))
        with self._write("set_context"):
            shard = self._open()
            self._apply(shard, qe.UpdateOperation.update_vectors([qe.PointVectors(pid, {CONTEXT: vector})]), moves=())
            self._apply(shard, qe.UpdateOperation.set_payload([pid], fields), moves=(point_id,))

    def delete(self, point_ids: list[str]) -> None:
        ids: list[Any] = [_point_id(p) for p in point_ids]
        with self._write("delete"):
            # gone, not moved
            self._apply(self._open(), qe.UpdateOperation.delete_points(ids), moves=(), cost=len(ids))

    def set_payloads(self, updates: Mapping[str, dict[str, Any]]) -> int:
        """One set_payload operation per point (Edge has no batch of different payloads), in one hold of
        the open shard: ~25 µs a point. A point deleted meanwhile is skipped (the shard says "No point with id")."""
        ops = [(pid, qe.UpdateOperation.set_payload([_point_id(pid)], fields)) for pid, fields in updates.items()]
        written = 0
        with self._write("set_payloads"):
            shard = self._open()
            for pid, op in ops:
                try:
                    self._apply(shard, op, moves=(pid,))
                    written += 1
                except Exception as e:  # not BaseException: a Rust panic still goes to _guard
                    if "No point with id" not in str(e):
                        raise
        return written

    holds_writes = True  # `_write`: one write at a time in the process, and Edge is single-process

    def write_held(
        self,
        point_ids: list[str],
        fields: Sequence[str] | None,
        decide: Callable[[str, dict[str, Any] | None], dict[str, Any] | None],
    ) -> list[str]:
        """See Engine.write_held: one retrieve and one set_payload per point written, in one `_write`."""
        ids: list[Any] = [_point_id(p) for p in point_ids]
        written: list[str] = []
        failed: Exception | None = None
        with self._write("write_held"):
            shard = self._open()
            read = {
                str(r.id): dict(r.payload or {})
                for r in shard.retrieve(ids, _with_payload(fields), self._with_vector(False, None))
            }
            for pid, qid in zip(point_ids, ids, strict=True):
                try:
                    out = decide(pid, read.get(pid))
                except Exception as e:  # the caller's: raised as it is, not as a StoreError (`_guard`)
                    failed = e
                    break
                if out:
                    self._apply(shard, qe.UpdateOperation.set_payload([qid], out), moves=(pid,))
                    written.append(pid)
        if failed is not None:
            raise failed
        return written

    def set_payload_where(self, flt: Filter, fields: dict[str, Any]) -> None:
        with self._write("set_payload_where"):
            self._apply(self._open(), qe.UpdateOperation.set_payload_by_filter(Lowering(self)(flt), fields), moves=flt)

    def set_payloads_where(self, items: Sequence[tuple[Filter, dict[str, Any]]]) -> None:
        """One hold of the write path for all (each write still conditional and atomic on its own)."""
        lower = Lowering(self)
        ops = [qe.UpdateOperation.set_payload_by_filter(lower(flt), fields) for flt, fields in items]
        with self._write("set_payloads_where"):
            shard = self._open()
            for op, (flt, _) in zip(ops, items, strict=True):
                self._apply(shard, op, moves=flt)

    def set_payloads_where_read(
        self, items: Sequence[tuple[Filter, dict[str, Any]]], point_ids: list[str], fields: Sequence[str]
    ) -> Sequence[Record]:
        """The writes and the read-back in one hold of the write path (see Engine.set_payloads_where_read)."""
        lower = Lowering(self)
        ops = [qe.UpdateOperation.set_payload_by_filter(lower(flt), f) for flt, f in items]
        ids: list[Any] = [_point_id(p) for p in point_ids]
        with self._write("set_payloads_where_read"):
            shard = self._open()
            for op, (flt, _) in zip(ops, items, strict=True):
                self._apply(shard, op, moves=flt)
            return shard.retrieve(ids, _with_payload(fields), self._with_vector(False, None)) if ids else []

    def set_vector_where(self, name: str, point_id: str, rows: list[list[float]], flt: Filter) -> None:
        pid = _point_id(point_id)
        with self._write("set_vector_where"):
            op = qe.UpdateOperation.update_vectors([qe.PointVectors(pid, {name: rows})], condition=Lowering(self)(flt))
            self._apply(self._open(), op, moves=(point_id,))

    def set_context_where(self, point_id: str, context: SparseVec, flt: Filter) -> None:
        pid = _point_id(point_id)
        vector = qe.SparseVector(list(context.indices), list(context.values))
        with self._write("set_context_where"):
            op = qe.UpdateOperation.update_vectors(
                [qe.PointVectors(pid, {CONTEXT: vector})], condition=Lowering(self)(flt)
            )
            self._apply(self._open(), op, moves=(point_id,))

    def delete_where(self, flt: Filter) -> None:
        with self._write("delete_where"):
            self._apply(
                self._open(), qe.UpdateOperation.delete_points_by_filter(Lowering(self)(flt)), moves=(), cost=flt
            )

    def sibling(self, suffix: str) -> EdgeEngine:
        """Another shard directory beside this one (`<name>_<suffix>`): Edge has one collection per shard."""
        return EdgeEngine(self.path.with_name(f"{self.path.name}_{suffix}"))

    # -- reads ---------------------------------------------------------------------------------------

    def retrieve(
        self,
        point_ids: list[str],
        with_dense: bool = False,
        fields: Sequence[str] | None = None,
        using: str | None = None,
    ) -> Sequence[Record]:
        ids: list[Any] = [_point_id(p) for p in point_ids]
        with self._guard("retrieve"):
            return self._open().retrieve(ids, _with_payload(fields), self._with_vector(with_dense, using))

    def scroll(
        self,
        flt: Filter | None,
        limit: int,
        offset: Any,
        with_dense: bool,
        fields: Sequence[str] | None = None,
        order_by: str | None = None,
        descending: bool = False,
        using: str | None = None,
    ) -> tuple[Sequence[Record], Any]:
        order = None
        if order_by is not None:
            order = qe.OrderBy(order_by, qe.Direction.Desc if descending else qe.Direction.Asc)
        request = qe.ScrollRequest(
            offset=None if order_by is not None else _point_id(offset) if isinstance(offset, str) else offset,
            limit=limit,
            filter=Lowering(self)(flt) if flt is not None else None,
            with_payload=_with_payload(fields),
            with_vector=self._with_vector(with_dense, using),
            order_by=order,
        )
        with self._guard("scroll"):
            records, next_offset = self._open().scroll(request)
        return records, next_offset if order_by is None else None

    def count(self, flt: Filter | None) -> int:
        request = qe.CountRequest(exact=True, filter=Lowering(self)(flt) if flt is not None else None)
        with self._guard("count"):
            return int(self._open().count(request))

    def facet(self, key: str, flt: Filter | None, limit: int) -> dict[str, int]:
        request = qe.FacetRequest(key, limit=limit, exact=True, filter=Lowering(self)(flt) if flt is not None else None)
        with self._guard("facet"):
            return {str(h.value): int(h.count) for h in self._open().facet(request).hits}

    def _request(self, query: Query) -> qe.QueryRequest:
        lower = Lowering(self)
        return qe.QueryRequest(
            limit=query.limit,
            prefetches=[lower(query.prefetch)],
            query=lower(query.score),
            filter=lower(query.filter),
            with_payload=_with_payload(query.fields),
            with_vector=self._with_vector(query.with_dense, query.using),
        )

    def query(self, query: Query) -> Sequence[ScoredRecord]:
        request = self._request(query)
        with self._guard("query"):
            return self._open().query(request)

    def query_batch(self, queries: Sequence[Query]) -> list[Sequence[ScoredRecord]]:
        """One planned batch (the shard shares one pass over its segments between the queries)."""
        if not queries:
            return []
        batch = qe.QueryBatchRequest([self._request(q) for q in queries])
        with self._guard("query_batch"):
            return list(self._open().query_batch(batch))

    # -- the vocabulary: neutral filters and queries in qdrant-edge's types ----------------------------

    def match(self, key: str, value: str) -> qe.FieldCondition:
        return qe.FieldCondition(key, match=qe.MatchValue(value))

    def match_any(self, key: str, values: list[str]) -> qe.FieldCondition:
        return qe.FieldCondition(key, match=qe.MatchAny(values))

    def at_least(self, key: str, gte: float) -> qe.FieldCondition:
        return qe.FieldCondition(key, range=qe.RangeFloat(gte=gte))

    def datetime_range(
        self, key: str, gte: str | None, gt: str | None, lte: str | None, lt: str | None
    ) -> qe.FieldCondition:
        return qe.FieldCondition(key, range=qe.RangeDateTime(gte=gte, gt=gt, lte=lte, lt=lt))

    def has_dense(self, using: str = DENSE) -> qe.HasVectorCondition:
        return qe.HasVectorCondition(using)  # qdrant-edge cannot match booleans (see store_query.HasDense)

    def is_empty(self, key: str) -> qe.IsEmptyCondition:
        return qe.IsEmptyCondition(key)

    def has_id(self, ids: list[str]) -> qe.HasIdCondition:
        return qe.HasIdCondition({_point_id(i) for i in ids})

    def filter(self, must: list[Any] | None, should: list[Any] | None, must_not: list[Any] | None) -> qe.Filter:
        return qe.Filter(must=must, should=should, must_not=must_not)

    def sparse_vector(self, indices: list[int], values: list[float]) -> qe.SparseVector:
        return qe.SparseVector(indices, values)

    def dense_leg(
        self, vector: list[float], flt: Any, limit: int, using: str = DENSE, *, acorn: bool = False
    ) -> qe.Prefetch:
        params = _ACORN_PARAMS if acorn else _DENSE_PARAMS
        return qe.Prefetch(limit=limit, query=qe.Query.Nearest([vector], using=using), filter=flt, params=params)

    def sparse_leg(self, vector: Any, flt: Any, limit: int, idf: Any, inner: Any | None, using: str) -> qe.Prefetch:
        return qe.Prefetch(
            limit=limit,
            query=qe.Query.Nearest(vector, using=using),
            filter=flt,
            params=qe.SearchParams(idf=qe.IdfParams(corpus=idf)),
            prefetches=[inner] if inner is not None else None,
        )

    def fused(self, legs: list[Any], method: str, k: int, weights: list[float], flt: Any, limit: int) -> qe.Prefetch:
        fuse: Any = qe.Fusion.Dbsf() if method == "dbsf" else qe.Fusion.Rrf(k=k, weights=weights)
        return qe.Prefetch(limit=limit, prefetches=legs, query=fuse, filter=flt)

    def piece_prior(self, inner: Any, key: str, penalty: float, flt: Any, limit: int) -> qe.Prefetch:
        return qe.Prefetch(limit=limit, prefetches=[inner], query=_piece_prior(key, penalty), filter=flt)

    def times_importance(self, key: str, default: float) -> qe.Formula:
        return _times_importance(key, default)

    def raw_score(self) -> qe.Formula:
        return _RAW_SCORE


class EdgeStore(QdrantStore):
    """MemoryStore on a Qdrant Edge shard at `path` (created on first `ensure_collection`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        prefetch_limit: int = DEFAULT_PREFETCH,
        index_after: int = 0,
        index_threads: int = 1,
        index_min_workspace: int | None = None,
    ) -> None:
        """`index_after`: build the dense index in a worker process (episodic.store.edge_index) whenever this
        many points were written since the last build (0: never; queries then scan) and the largest
        workspace holds at least `index_min_workspace` points (default: `edge_index.full_scan_points` of the
        collection's dimension, below which a graph is never searched)."""
        self._edge = EdgeEngine(Path(path))
        super().__init__(self._edge, prefetch_limit=prefetch_limit)
        self.index_after, self.index_threads = index_after, index_threads
        self.index_min_workspace = index_min_workspace
        self.indexer: BackgroundIndexer | None = None
        self._saved_moved = edge_index.load_moved(self.path)  # what a store opened without `index_after` finds
        # a burst: more than a twentieth of `index_after` points written a second: the decay writes thousands
        # (2,000-2,400 a second at 100k here, 12k in bench_decay), the soak's full load about 220 (20 new
        # memories, their vectors and edges, 100 references counted)
        self._burst = edge_index.BurstWait(max(1.0, index_after / 20))

    def ensure_collection(self, dim: int, *, vector: str = DENSE) -> None:
        super().ensure_collection(dim, vector=vector)
        if self.index_after > 0 and self.indexer is None:
            # what the shard holds unindexed counts too: points moved before this start (saved beside the
            # shard), or a shard never indexed (the engine's estimate)
            carried = max(edge_index.load_moved(self.path), self._edge.unindexed())
            self._edge.moved = edge_index.MovedPoints(self.index_after, carried)
            self._saved_moved = carried
            if self.index_min_workspace is None:
                self.index_min_workspace = edge_index.full_scan_points(dim)
            self.indexer = BackgroundIndexer(
                lambda: self._edge.index_in_worker(self.index_threads),
                self.index_due,
                on_cycle=lambda c: log.info("qdrant-edge: dense index rebuilt in a worker: %s", c.as_dict()),
                on_error=lambda e: log.warning("qdrant-edge: background index build failed (will retry): %s", e),
            )
            self.indexer.start()

    def _writing(self, writer: str) -> None:
        """A bulk writer's (`BULK_WRITERS`) write holds a due index cycle back until it has been quiet a while
        (`edge_index.BurstWait`)."""
        if writer in BULK_WRITERS:
            self._burst.bulk()

    def index_due(self) -> bool:
        """Enough written since the last cycle, not in a burst of writes (`BurstWait`), and a workspace large
        enough that its graph would be searched (the largest workspace's count is asked for only once the
        others hold: one facet every few seconds)."""
        self._save_moved()
        burst = self._burst.holds(self._edge.moved.writes)
        if self._edge.moved.count < self.index_after or burst:
            return False
        return max(self.workspaces(limit=1).values(), default=0) >= (self.index_min_workspace or 0)

    def _save_moved(self) -> None:
        """Keep the count of moved points beside the shard when it changed, so a restart (after the nightly
        decay moved every memory, say) still knows what its dense queries scan."""
        moved = self._edge.moved.count
        if moved != self._saved_moved:
            with contextlib.suppress(OSError):
                edge_index.save_moved(self.path, moved)
                self._saved_moved = moved

    def close(self) -> None:
        if self.indexer is not None:
            self.indexer.stop(timeout=0)  # its thread is a daemon; the engine's close ends its worker
            self._save_moved()
        super().close()

    @property
    def path(self) -> Path:
        return self._edge.path

    def optimize(self) -> bool:
        """Run the shard's segment optimizers (merge, index) in this process; blocking, and it holds the GIL
        throughout, so the process does nothing else meanwhile: for offline maintenance only. A running
        stack indexes in a worker process instead (`index_now`, episodic.store.edge_index)."""
        return self._edge.optimize()

    def payload_indexes(self) -> set[str]:
        """Names of the indexed payload fields."""
        return self._edge.payload_indexes()

    def index_now(self, threads: int | None = None) -> IndexCycle:
        """One background index cycle now (episodic.store.edge_index), in the calling thread: what the
        stack's `BackgroundIndexer` runs every `index_after` memories. Queries go on meanwhile. The count of
        moved points saved beside the shard is brought up to date (to 0 on a store opened without
        `index_after`, which counts nothing), or the next stack on it would start with a cycle due."""
        cycle = self._edge.index_in_worker(threads or self.index_threads)
        self._save_moved()
        return cycle
