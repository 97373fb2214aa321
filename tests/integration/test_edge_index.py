"""The embedded store's dense index built in a worker process and swapped in (episodic.store.edge_index),
over the real Qdrant Edge shard: nothing written meanwhile is lost, queries go on, a crash or a failed build
leaves a loadable shard."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import MemoryPoint, ScopeFilter, SparseVec
from episodic.store import edge_index, shard_files
from episodic.store.edge import EdgeStore
from episodic.store.facade import Change
from episodic.store.query import in_workspace
from tests.polling import until

pytestmark = pytest.mark.integration

DIM = 8


def vec(rng: random.Random) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(DIM)]
    n = sum(x * x for x in v) ** 0.5
    return [x / n for x in v]


def point(i: int, rng: random.Random, ws: str | None = None) -> MemoryPoint:
    ws = ws or f"ws-{i % 2}"
    payload = {"entry_id": f"e{i}", "workspace_id": ws, "agent_id": "a1", "summary": f"memory {i}", "aliases": []}
    return MemoryPoint(point_id(ws, f"e{i}"), SparseVec([i % 50 + 1], [1.0]), payload, [vec(rng)])


def pid(i: int) -> str:
    return point_id(f"ws-{i % 2}", f"e{i}")


def left_as_it_was(store: EdgeStore, n: int) -> None:
    """After a failed cycle on a store of `n` memories: no copy beside the shard, nothing journaled, and the
    live shard holds them all and takes a write."""
    assert not shard_files.copy_path(store.path).exists() and store._edge._journal is None
    assert store.count() == n
    store.upsert([point(n, random.Random(3))])
    assert store.count() == n + 1


def filled(path: Path, n: int, **kw: int) -> EdgeStore:
    store = EdgeStore(path, **kw)
    store.ensure_collection(DIM)
    rng = random.Random(1)
    for start in range(0, n, 500):
        store.upsert([point(i, rng) for i in range(start, min(n, start + 500))])
    return store


def test_writes_during_a_build_are_all_in_the_swapped_shard_and_queries_go_on(fast_dir: Path) -> None:
    store = filled(fast_dir / "edge", 2000)
    rng = random.Random(2)
    result: dict[str, object] = {}
    indexing = threading.Thread(target=lambda: result.setdefault("cycle", store._edge.index_in_worker()))
    indexing.start()
    i, queries = 2000, 0
    deleted: set[str] = set()
    updated: set[str] = set()
    held: set[str] = set()
    deadline = time.monotonic() + 120
    while indexing.is_alive() and time.monotonic() < deadline:  # write, update, delete and query meanwhile
        k = i - 2000
        if k < 1000:
            store.upsert([point(i, rng)])
            store.set_payload(pid(k), {"importance_score": 0.123})
            updated.add(pid(k))
            if k % 3 == 0:  # a held write (the decay's kind) is journaled too
                store.update_memories(
                    [pid(k)], lambda _p, _n: Change({"reference_count": 7}), writer="decay", held=True
                )
                held.add(pid(k))
            if k % 7 == 0:
                store.delete([pid(1999 - k)])
                deleted.add(pid(1999 - k))
            i += 1
        hits = store.query_dense(vec(rng), ScopeFilter("ws-0", scope="own", agent_id="a1"), 5)
        assert len(hits) == 5
        queries += 1
    indexing.join(5)
    cycle = result["cycle"]
    assert isinstance(cycle, edge_index.IndexCycle)
    assert cycle.replayed > 0 and queries > 0  # the build really overlapped with writes and queries
    assert cycle.points >= 2000 and cycle.worker_rss_mib > 10  # the worker's own report: it loaded the copy
    assert store.count() == i - len(deleted)
    assert not store.retrieve(sorted(deleted))
    got = store.retrieve(sorted(updated), fields=("importance_score",))
    assert len(got) == len(updated) and all(p["importance_score"] == 0.123 for p in got.values())
    got = store.retrieve(sorted(held), fields=("reference_count",))
    assert held and all(p["reference_count"] == 7 for p in got.values()) and len(got) == len(held)
    assert not shard_files.copy_path(store.path).exists() and not shard_files.replaced_path(store.path).exists()
    store.close()
    again = EdgeStore(fast_dir / "edge")  # reloads from disk: the swapped shard is the store
    assert again.count() == i - len(deleted)
    again.close()


def test_a_failed_build_leaves_the_live_shard_and_stops_journaling(
    fast_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = filled(fast_dir / "edge", 300)

    def broken(self: edge_index.Worker, timeout: float = 1.0) -> dict[str, object]:
        raise StoreError("worker died")

    monkeypatch.setattr(edge_index.Worker, "run", broken)
    with pytest.raises(StoreError, match="worker died"):
        store._edge.index_in_worker()
    left_as_it_was(store, 300)
    store.close()


def test_a_crash_between_the_renames_is_recovered_at_the_next_start(fast_dir: Path) -> None:
    store = filled(fast_dir / "edge", 300)
    store.close()
    path = fast_dir / "edge"
    path.rename(shard_files.replaced_path(path))  # the live shard moved aside, the copy not yet in place
    shard_files.copy_path(path).mkdir()
    again = EdgeStore(path)
    assert again.count() == 300
    assert not shard_files.copy_path(path).exists() and not shard_files.replaced_path(path).exists()
    again.close()


class CountingLoads:
    """Stands in for `qe.EdgeShard` in episodic.store.edge: counts the loads (each holds the interpreter lock);
    `fail_replay`: the next shard it loads fails its first update (a replay at the swap)."""

    def __init__(self, real: Any) -> None:
        self.real, self.fail_replay = real, False
        self.loads: list[str] = []
        self.create = real.create
        self.written = threading.Event()  # the worker's build waits for the writes meant to be journaled

    def load(self, path: str, *args: object) -> object:
        self.loads.append(path)
        shard = self.real.load(path, *args)
        if not self.fail_replay:
            return shard
        self.fail_replay = False
        return FailingUpdate(shard)


class FailingUpdate:
    def __init__(self, shard: object) -> None:
        self.shard = shard

    def update(self, op: object) -> None:
        raise StoreError("replay failed")

    def __getattr__(self, name: str) -> object:
        return getattr(self.shard, name)


def recording_warm(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """`shard_files.warm` as it is, recording the paths this process reads back."""
    warmed: list[Path] = []
    warm = shard_files.warm

    def recording(path: Path, chunk: int = 1 << 20) -> int:
        warmed.append(path)
        return warm(path, chunk)

    monkeypatch.setattr(shard_files, "warm", recording)
    return warmed


@pytest.fixture
def counted(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[EdgeStore, CountingLoads]:
    """A store of 600 memories, open, whose shard loads are counted from now on."""
    from episodic.store import edge as edge_module

    store = filled(fast_dir / "edge", 600)
    store.count()  # the live shard is open before the loads are counted
    counting = CountingLoads(edge_module.qe.EdgeShard)
    monkeypatch.setattr(edge_module.qe, "EdgeShard", counting)
    build = edge_index.Worker.run

    def after_the_writes(self: edge_index.Worker, timeout: float = edge_index.WORKER_TIMEOUT_S) -> dict[str, Any]:
        assert counting.written.wait(60)
        return build(self, timeout)

    monkeypatch.setattr(edge_index.Worker, "run", after_the_writes)
    return store, counting


def cycle_while(
    store: EdgeStore, write: Callable[[], None], written: threading.Event | None = None
) -> edge_index.IndexCycle:
    """An index cycle with `write()` done while the worker builds (`written` is set once it is)."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["cycle"] = store._edge.index_in_worker()
        except BaseException as e:
            result["error"] = e

    indexing = threading.Thread(target=run)
    indexing.start()
    deadline = time.monotonic() + 60
    while store._edge._journal is None and indexing.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)  # the copy is taken: what is written now is journaled
    write()
    if written is not None:
        written.set()
    indexing.join(120)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    cycle = result["cycle"]
    assert isinstance(cycle, edge_index.IndexCycle)
    return cycle


def cycle_with_writes(
    store: EdgeStore, n: int, first: int, written: threading.Event | None = None
) -> edge_index.IndexCycle:
    """An index cycle with `n` upserts (ids from `first`) written while the worker builds."""

    def write() -> None:
        rng = random.Random(first)
        for i in range(first, first + n):
            store.upsert([point(i, rng)])

    return cycle_while(store, write, written)


def test_a_short_journal_is_replayed_at_the_swap_into_its_one_load(
    fast_dir: Path, counted: tuple[EdgeStore, CountingLoads]
) -> None:
    """Loading a shard holds the interpreter lock: with a journal of at most CATCH_UP_LEFT operations the
    cycle loads the indexed copy once (at the swap) and replays the journal into it, and nothing is lost."""
    store, counting = counted
    cycle = cycle_with_writes(store, 20, 600, counting.written)
    assert 0 < cycle.replayed <= edge_index.CATCH_UP_LEFT
    assert counting.loads == [str(store.path)]  # the swap's load only: no catch-up load of the copy
    assert cycle.warm_mib > 1  # the worker read the copy back into the page cache after closing it
    assert store.count() == 620 and len(store.retrieve([pid(i) for i in range(600, 620)])) == 20
    assert len(store.query_dense(vec(random.Random(5)), ScopeFilter("ws-0", scope="own", agent_id="a1"), 5)) == 5
    assert not shard_files.swap_marker(store.path).exists() and not shard_files.replaced_path(store.path).exists()
    store.close()
    again = EdgeStore(fast_dir / "edge")  # the swapped shard on disk holds the replayed writes
    assert again.count() == 620
    again.close()


def test_a_long_journal_is_caught_up_before_the_swap(counted: tuple[EdgeStore, CountingLoads]) -> None:
    store, counting = counted
    n = edge_index.CATCH_UP_LEFT + 100
    cycle = cycle_with_writes(store, n, 600, counting.written)
    assert cycle.replayed == n
    copy = str(shard_files.copy_path(store.path))
    assert counting.loads == [copy, str(store.path)]  # the copy caught up while the live shard served
    assert store.count() == 600 + n
    store.close()


def test_few_operations_writing_many_points_are_a_long_journal(counted: tuple[EdgeStore, CountingLoads]) -> None:
    """Replaying at the swap keeps queries waiting: a journal of two operations that write more points than
    CATCH_UP_LEFT is caught up first, like a long one."""
    store, counting = counted
    rng = random.Random(9)
    half = edge_index.CATCH_UP_LEFT // 2 + 100

    def write() -> None:
        store.upsert([point(i, rng) for i in range(600, 600 + half)])
        store.upsert([point(i, rng) for i in range(600 + half, 600 + 2 * half)])

    cycle = cycle_while(store, write, counting.written)
    assert cycle.replayed == 2
    assert counting.loads == [str(shard_files.copy_path(store.path)), str(store.path)]
    assert store.count() == 600 + 2 * half
    store.close()


def test_what_a_long_journal_adds_while_it_is_caught_up_is_replayed_before_the_swap(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes made after the catch-up (here: 50 between it and the swap) go into the loaded copy while writers
    wait and queries go on; the copy's files are read back into the page cache after it is closed, and the
    swap replays nothing while queries wait."""
    store, counting = counted
    engine = store._edge
    replay, swap = engine._replay, engine._swap
    swaps: list[int] = []

    def then_more(new: Any, done: int, *, everything: bool = False) -> int:
        done = replay(new, done, everything=everything)
        if not everything:
            rng = random.Random(11)
            for i in range(5000, 5050):
                store.upsert([point(i, rng)])
        return done

    def swapping(work: Path, replaced: Path, rest: list[Any]) -> None:
        swaps.append(len(rest))
        swap(work, replaced, rest)

    monkeypatch.setattr(engine, "_replay", then_more)
    monkeypatch.setattr(engine, "_swap", swapping)
    warmed = recording_warm(monkeypatch)
    n = edge_index.CATCH_UP_LEFT + 100
    cycle = cycle_with_writes(store, n, 600, counting.written)
    copy = shard_files.copy_path(store.path)
    assert cycle.replayed == n + 50 and swaps == [0] and warmed == [copy] and cycle.warm_mib > 1
    assert counting.loads == [str(copy), str(store.path)]
    assert store.count() == 600 + n + 50
    store.close()
    again = EdgeStore(store.path)
    assert again.count() == 600 + n + 50 and len(again.retrieve([pid(i) for i in range(5000, 5050)])) == 50
    again.close()


def test_an_index_created_while_the_cycle_swaps_is_in_the_swapped_shard(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ensure` (a payload index for a new embedding generation, `add_dense_vector`) waits for the swap like any
    write: run between the journal's last operations being taken and the swap, it went into the live shard
    and the journal too late, and the swapped shard lacked the index."""
    store, counting = counted
    engine = store._edge
    guard = engine._guard
    late: list[threading.Thread] = []

    @contextlib.contextmanager
    def ensure_first(op: str, *, exclusive: bool = False) -> Iterator[None]:
        if op == "index: swap" and not late:  # the rest is taken, the swap not yet begun
            t = threading.Thread(target=lambda: engine.ensure(DIM, {"late_field": "keyword"}))
            late.append(t)
            t.start()
            t.join(0.5)  # done at once unless it waits for the cycle
        with guard(op, exclusive=exclusive):
            yield

    monkeypatch.setattr(engine, "_guard", ensure_first)
    cycle_with_writes(store, 20, 600, counting.written)
    late[0].join(30)
    assert not late[0].is_alive()
    assert "late_field" in engine.payload_indexes()
    store.close()
    again = EdgeStore(store.path)
    assert "late_field" in again.payload_indexes()
    again.close()


@pytest.mark.parametrize("what", ["a payload index", "a delete of many points", "a delete by filter"])
def test_one_operation_that_a_replay_would_spend_long_on_is_caught_up_before_the_swap(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """A replay at the swap keeps queries waiting: a payload index (built over the whole store) or a delete of
    more points than CATCH_UP_LEFT (here 100) is replayed into the copy first, while queries go on."""
    store, counting = counted
    monkeypatch.setattr(edge_index, "CATCH_UP_LEFT", 100)
    gone = 0

    def write() -> None:
        nonlocal gone
        if what == "a payload index":
            store._edge.ensure(DIM, {"late_field": "keyword"})
        elif what == "a delete of many points":
            store._edge.delete([pid(i) for i in range(0, 600, 2)])  # ws-0's 300
            gone = 300
        else:
            store._edge.delete_where(in_workspace("ws-1"))
            gone = 300

    cycle = cycle_while(store, write, counting.written)
    assert cycle.replayed == 1
    assert counting.loads == [str(shard_files.copy_path(store.path)), str(store.path)]
    assert store.count() == 600 - gone
    store.close()
    again = EdgeStore(store.path)
    assert again.count() == 600 - gone
    assert what != "a payload index" or "late_field" in again.payload_indexes()
    again.close()


def test_warm_reads_every_file_of_the_shard_and_never_raises(fast_dir: Path) -> None:
    store = filled(fast_dir / "edge", 300)
    store.close()
    files = [f for f in (fast_dir / "edge").rglob("*") if f.is_file()]
    assert shard_files.warm(fast_dir / "edge", chunk=4096) == sum(f.stat().st_size for f in files) > 0
    assert shard_files.warm(fast_dir / "gone") == 0


def test_a_failed_replay_at_the_swap_puts_the_live_shard_back(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, counting = counted
    counting.fail_replay = True
    warmed = recording_warm(monkeypatch)
    with pytest.raises(StoreError, match="replay failed"):
        cycle_with_writes(store, 20, 600, counting.written)
    assert counting.loads == [str(store.path), str(store.path)]  # the swap's load (failing), then the live one
    assert warmed == [store.path]  # the live shard read back into the page cache before it is loaded again
    # the live shard, loaded again, with everything written during the build; nothing left beside it
    assert store.count() == 620 and len(store.retrieve([pid(i) for i in range(600, 620)])) == 20
    assert store._edge._journal is None
    for leftover in (shard_files.swap_marker, shard_files.replaced_path, shard_files.copy_path):
        assert not leftover(store.path).exists()
    store.upsert([point(620, random.Random(7))])
    assert store.count() == 621
    store.close()


def test_a_failed_swap_that_cannot_put_the_live_shard_back_opens_nothing_until_a_restart(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay at the swap fails, then so does the rename meant to undo it: the copy, lacking the journal's
    last operations, holds the live shard's name beside the marker. Opening it would take writes that the
    next start's recovery deletes; the store refuses instead, and a restart recovers every write."""
    from episodic.kernel.errors import StoreUnavailable
    from episodic.store import edge as edge_module

    store, counting = counted
    counting.fail_replay = True
    rename = os.rename

    def failing_undo(src: object, dst: object) -> None:
        if Path(str(dst)) == shard_files.copy_path(store.path):  # the copy's way back out
            raise OSError(5, "Input/output error")
        rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(edge_module.os, "rename", failing_undo)
    with pytest.raises(StoreUnavailable, match="Input/output error"):
        cycle_with_writes(store, 20, 600, counting.written)
    monkeypatch.setattr(edge_module.os, "rename", rename)
    with pytest.raises(StoreUnavailable, match="restart"):
        store.upsert([point(700, random.Random(7))])
    with pytest.raises(StoreUnavailable, match="restart"):
        store.count()
    assert not store.ping()  # /healthz answers 503: a readiness probe restarts the process
    assert shard_files.swap_marker(store.path).exists()
    store.close()
    monkeypatch.setattr(edge_module.qe, "EdgeShard", counting.real)
    again = EdgeStore(store.path)  # the restart: the live shard, with every write made during the build
    assert again.count() == 620 and len(again.retrieve([pid(i) for i in range(600, 620)])) == 20
    again.close()


def test_a_crash_while_a_short_journal_is_replayed_is_recovered_at_the_next_start(fast_dir: Path) -> None:
    """The marker says the shard in place may lack the last operations: the live shard, renamed aside with
    all of them, is put back."""
    live = filled(fast_dir / "edge", 300)
    live.close()
    filled(fast_dir / "partial", 100).close()  # built apart: opening a store at `path` would recover it
    path = fast_dir / "edge"
    path.rename(shard_files.replaced_path(path))
    shard_files.swap_marker(path).touch()
    (fast_dir / "partial").rename(path)  # the indexed copy in place, without the last operations
    again = EdgeStore(path)
    assert again.count() == 300
    for leftover in (shard_files.swap_marker, shard_files.replaced_path, shard_files.copy_path):
        assert not leftover(path).exists()
    again.close()


def test_a_crash_between_the_marker_and_the_second_rename_leaves_the_live_shard(fast_dir: Path) -> None:
    """The marker is written after the first rename: the live shard is aside, the copy not yet in place."""
    live = filled(fast_dir / "edge", 300)
    live.close()
    path = fast_dir / "edge"
    path.rename(shard_files.replaced_path(path))
    shard_files.swap_marker(path).touch()
    filled(shard_files.copy_path(path), 100).close()
    again = EdgeStore(path)
    assert again.count() == 300 and not shard_files.swap_marker(path).exists()
    for leftover in (shard_files.replaced_path, shard_files.copy_path):
        assert not leftover(path).exists()
    again.close()


def recording_syncs(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[tuple[str, ...]]:
    """`shard_files.sync_dir` as it is, recording which of the shard's names exist at each call."""
    seen: list[tuple[str, ...]] = []
    sync_dir = shard_files.sync_dir
    names = {
        "live": path,
        "copy": shard_files.copy_path(path),
        "replaced": shard_files.replaced_path(path),
        "marker": shard_files.swap_marker(path),
    }

    def recording(directory: Path) -> None:
        assert directory == path.parent
        seen.append(tuple(name for name, p in names.items() if p.exists()))
        sync_dir(directory)

    monkeypatch.setattr(shard_files, "sync_dir", recording)
    return seen


def test_the_swap_is_made_durable_step_by_step(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a power cut: the marker is on disk before the copy takes the live shard's name, and the
    finished swap (copy in place, marker gone) before the replaced shard is deleted; without the first a
    cut could keep the rename and lose the marker (`recover` would then keep a copy lacking the journal's
    last operations), without the second keep the marker and the deletion."""
    store, counting = counted
    syncs = recording_syncs(monkeypatch, store.path)
    cycle = cycle_with_writes(store, 20, 600, counting.written)
    assert 0 < cycle.replayed <= edge_index.CATCH_UP_LEFT  # a short journal: replayed under the marker
    assert syncs == [("copy", "replaced", "marker"), ("live", "replaced")]
    assert not shard_files.replaced_path(store.path).exists() and store.count() == 620
    store.close()


def test_a_caught_up_copy_is_on_disk_before_the_swap(
    counted: tuple[EdgeStore, CountingLoads], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, counting = counted
    synced: list[tuple[Path, bool]] = []
    sync_tree = shard_files.sync_tree

    def recording(path: Path) -> None:
        synced.append((path, store.path.exists() and path.exists()))  # before the renames
        sync_tree(path)

    monkeypatch.setattr(shard_files, "sync_tree", recording)
    n = edge_index.CATCH_UP_LEFT + 100
    assert cycle_with_writes(store, n, 600, counting.written).replayed == n
    assert synced == [(shard_files.copy_path(store.path), True)]
    assert store.count() == 600 + n
    store.close()


def test_the_worker_syncs_its_copy_before_it_reports(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from episodic.store import edge_worker

    filled(fast_dir / "edge", 300).close()
    synced: list[Path] = []
    sync_tree = edge_worker.sync_tree

    def recording(path: Path) -> None:
        files = [f for f in path.rglob("*") if f.is_file()]
        synced.append(path)
        assert files  # the closed, optimised shard
        sync_tree(path)

    monkeypatch.setattr(edge_worker, "sync_tree", recording)
    report = edge_worker._build(str(fast_dir / "edge"), 1, warm_after=False)
    assert synced == [fast_dir / "edge"] and report["points"] == 300


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
def test_sync_tree_reaches_every_file_and_directory(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filled(fast_dir / "edge", 50).close()
    synced: list[str] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    shard_files.sync_tree(fast_dir / "edge")
    expected = {str(p.resolve()) for p in [fast_dir / "edge", *(fast_dir / "edge").rglob("*")]}
    assert set(synced[:-1]) == expected and len(synced) == len(expected) + 1
    assert synced[-1] == str(fast_dir.resolve())  # the parent, which names the shard
    with pytest.raises(OSError):
        shard_files.sync_tree(fast_dir / "gone")  # not a best effort: a swap must not go on without it


def test_recovery_is_made_durable_before_the_marker_goes(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A power cut during a recovery: the copy's removal is on disk before the live shard takes its name,
    and that rename before the marker is removed (a cut between them leaves the marker beside the live shard,
    which the next start only removes: tested below)."""
    filled(fast_dir / "edge", 300).close()
    filled(fast_dir / "partial", 100).close()
    path = fast_dir / "edge"
    path.rename(shard_files.replaced_path(path))
    shard_files.swap_marker(path).touch()
    (fast_dir / "partial").rename(path)  # the indexed copy in place, without the last operations
    syncs = recording_syncs(monkeypatch, path)
    shard_files.recover(path)
    assert syncs == [("replaced", "marker"), ("live", "marker"), ("live",)]
    again = EdgeStore(path)
    assert again.count() == 300
    again.close()


def test_a_marker_left_beside_the_live_shard_is_removed(fast_dir: Path) -> None:
    filled(fast_dir / "edge", 300).close()
    path = fast_dir / "edge"
    shard_files.swap_marker(path).touch()  # a recovery cut after its rename, before the marker's removal
    again = EdgeStore(path)
    assert again.count() == 300 and not shard_files.swap_marker(path).exists()
    again.close()


def test_a_script_that_indexes_a_store_resets_the_saved_count_of_moved_points(fast_dir: Path) -> None:
    """`index_now` on a store opened without `index_after` (a script, a benchmark's seeding) counts nothing;
    a count saved by an earlier stack would have the next stack start with a cycle due at once."""
    path = fast_dir / "edge"
    filled(path, 300).close()
    edge_index.save_moved(path, 250)  # saved by the stack that last ran on it
    store = EdgeStore(path)
    store.index_now()
    store.close()
    assert edge_index.load_moved(path) == 0
    stack = EdgeStore(path, index_after=200, index_min_workspace=1)
    stack.ensure_collection(DIM)
    assert stack._edge.moved.count == 0 and not stack.index_due()
    stack.close()


def worker_pids(copy: Path) -> list[int]:
    """Live (not zombie) index workers building `copy`, from /proc."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"episodic.store.edge_worker" in cmd and str(copy).encode() in cmd and state != "Z":
            pids.append(int(proc.name))
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_worker_dies_with_the_stack_that_started_it_and_goes_first_when_memory_runs_out(
    fast_dir: Path,
) -> None:
    """A stack killed mid-build (kill -9, the OOM killer) takes its worker with it: an orphan would build for
    minutes (here about 25 s: 8,000 memories of 384 dimensions in one workspace, so it gets a graph) and
    write into a copy directory that the next start deletes and its next cycle makes anew."""
    import numpy as np

    path = fast_dir / "edge"
    store = EdgeStore(path)
    store.ensure_collection(384)
    rows = np.random.default_rng(3).normal(size=(8000, 384)).astype("float32")
    for start in range(0, 8000, 1000):
        store.upsert(
            [
                MemoryPoint(
                    point_id("ws-0", f"e{i}"),
                    SparseVec([i % 50 + 1], [1.0]),
                    {"entry_id": f"e{i}", "workspace_id": "ws-0", "agent_id": "a1"},
                    [rows[i].tolist()],
                )
                for i in range(start, start + 1000)
            ]
        )
    store.close()
    script = f"from episodic.store.edge import EdgeStore; EdgeStore({str(path)!r}).index_now(1)"
    stack = subprocess.Popen([sys.executable, "-c", script])
    copy = shard_files.copy_path(path)
    try:
        assert until(lambda: worker_pids(copy) or stack.poll() is not None, 60) and worker_pids(copy)
        [worker] = worker_pids(copy)
        # and when memory runs out, the OOM killer takes the worker first, not the stack (set once it runs)
        adj = Path("/proc") / str(worker) / "oom_score_adj"
        assert until(lambda: adj.read_text().strip() == "1000", 30)
        time.sleep(0.5)  # into its build
        stack.kill()
        stack.wait(10)
        assert until(lambda: not worker_pids(copy), 10)
    finally:
        stack.kill()
        for pid in worker_pids(copy):
            os.kill(pid, signal.SIGKILL)
    again = EdgeStore(path)  # the next start: the copy is removed, the live shard as it was
    assert again.count() == 8000 and not copy.exists()
    again.close()


def test_no_cycle_starts_without_room_on_the_disk_for_it(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle that filled the disk would make the live shard's own writes fail: it needs room for the copy,
    the optimizer's new segments and the live shard's writes, or it does not start (and is retried)."""
    import shutil as shutil_module

    store = filled(fast_dir / "edge", 300)
    size = shard_files.shard_bytes(store.path)
    assert size > 0
    real = shutil_module.disk_usage
    factor = shard_files.ROOM_FACTOR if shard_files._gnu_cp() else shard_files.ROOM_FACTOR_COPYTREE
    need = int(factor * size) + shard_files.ROOM_SPARE

    def free(left: int) -> Callable[[Any], Any]:
        return lambda p: real(p)._replace(free=left)

    monkeypatch.setattr(shard_files.shutil, "disk_usage", free(need - 1))
    with pytest.raises(StoreError, match="MiB free on its disk"):
        store.index_now()
    left_as_it_was(store, 300)
    monkeypatch.setattr(shard_files.shutil, "disk_usage", free(need))
    assert store.index_now().points == 301
    store.close()


def test_a_copy_that_fails_leaves_nothing_behind(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = filled(fast_dir / "edge", 300, index_after=10_000)
    before = store._edge.moved.count
    copy_shard = shard_files.copy_shard

    def full_disk(src: Path, dst: Path) -> None:
        copy_shard(src, dst)  # most of it written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shard_files, "copy_shard", full_disk)
    with pytest.raises(StoreError, match="No space left"):
        store.index_now()
    assert store._edge.moved.count == before  # still due
    left_as_it_was(store, 300)
    store.close()


def test_the_copy_is_the_shard_as_it_is_on_disk_holes_included(fast_dir: Path) -> None:
    import filecmp

    store = filled(fast_dir / "edge", 300)
    store.close()
    src, dst = fast_dir / "edge", fast_dir / "copy"
    shard_files.copy_shard(src, dst)
    files = sorted(f.relative_to(src) for f in src.rglob("*") if f.is_file())
    assert files == sorted(f.relative_to(dst) for f in dst.rglob("*") if f.is_file())
    assert all(filecmp.cmp(src / f, dst / f, shallow=False) for f in files)
    apparent = sum((src / f).stat().st_size for f in files)
    if shard_files._gnu_cp() is not None:  # holes stay holes: no more allocated than the source
        assert shard_files.shard_bytes(dst) <= shard_files.shard_bytes(src) < apparent
    copy = EdgeStore(dst)
    assert copy.count() == 300
    copy.close()
    with pytest.raises(OSError):
        shard_files.copy_shard(fast_dir / "gone", fast_dir / "copy-of-nothing")
    with pytest.raises(FileExistsError):  # never merged into a leftover: a stale segment would come back
        shard_files.copy_shard(src, dst)


def test_a_copy_that_lost_points_is_never_swapped_in(fast_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is checked against the shard it was taken from (a filesystem's copy fault, say)."""
    store = filled(fast_dir / "edge", 300)
    copy_shard = shard_files.copy_shard

    def lossy(src: Path, dst: Path) -> None:
        copy_shard(src, dst)
        damaged = EdgeStore(dst)
        damaged.delete([pid(7)])
        damaged.close()

    monkeypatch.setattr(shard_files, "copy_shard", lossy)
    with pytest.raises(StoreError, match="holds 299 points where the shard held 300"):
        store.index_now()
    left_as_it_was(store, 300)
    store.close()


def test_cycles_started_together_run_one_after_the_other(fast_dir: Path) -> None:
    """A script's `index_now` beside the stack's background cycle: the second would delete the first's copy
    while its worker builds it; it waits instead, and both swap in a whole shard."""
    store = filled(fast_dir / "edge", 600)
    results: list[object] = []

    def cycle() -> None:
        try:
            results.append(store.index_now())
        except BaseException as e:
            results.append(e)

    both = [threading.Thread(target=cycle) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join(120)
    assert [type(r) for r in results] == [edge_index.IndexCycle, edge_index.IndexCycle], results
    assert all(r.points == 600 for r in results)  # type: ignore[attr-defined]
    assert store.count() == 600 and not shard_files.copy_path(store.path).exists()
    store.close()


def test_the_background_indexer_builds_once_enough_was_written(fast_dir: Path) -> None:
    store = filled(fast_dir / "edge", 600, index_after=500, index_min_workspace=300)
    assert store.indexer is not None
    store.indexer.every_s = 0.2
    deadline = time.monotonic() + 120
    while not store.indexer.cycles and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.indexer.cycles, "no index cycle within 120 s"
    assert store.indexer.cycles[0].points == 600
    assert store._edge.moved.count < 500  # counted again from the copy
    assert store.count() == 600
    store.close()


def test_no_cycle_runs_while_every_workspace_is_small_enough_to_be_scanned(fast_dir: Path) -> None:
    """Enough written, but each workspace (300 points) is below the size at which its graph would be searched:
    no cycle (a copy and a build that would give the queries nothing). One workspace past it: a cycle."""
    store = filled(fast_dir / "edge", 600, index_after=500, index_min_workspace=400)
    assert store.indexer is not None
    assert edge_index.full_scan_points(384) == 6666  # the default at 384 dimensions
    store.indexer.every_s = 0.1
    assert store._edge.moved.count >= 500 and not store.index_due()
    time.sleep(1.0)
    assert not store.indexer.cycles
    rng = random.Random(3)
    store.upsert([point(i, rng, ws="ws-0") for i in range(600, 700)])  # ws-0: 400 points: due (after the burst)
    deadline = time.monotonic() + 120
    while not store.indexer.cycles and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.indexer.cycles and store.indexer.cycles[0].points == 700
    store.close()


def test_payload_writes_move_points_out_of_the_index_and_bring_the_next_cycle(fast_dir: Path) -> None:
    """Qdrant writes copy-on-write: a payload write (here the nightly decay's, under the write discipline)
    moves an indexed point into the appendable segment, which every dense query scans. Such writes count
    towards the next cycle like new memories (each point once), and the count outlives a restart. Before,
    only upserts counted: after a decay the whole store was scanned until 500 (here) new memories came."""
    path = fast_dir / "edge"
    store = filled(path, 600, index_after=500, index_min_workspace=300)
    assert store.indexer is not None
    store.indexer.stop()  # cycles run here, by hand
    now = [0.0]
    store._burst = edge_index.BurstWait(rate=5.0, clock=lambda: now[0])  # 5 a second: a burst, in this test
    store.index_now()
    assert store._edge.moved.count == 0 and not store.index_due()

    def decay(_pid: str, payload: dict[str, object]) -> Change:
        return Change({"importance_score": 0.25})

    done = store.update_memories(
        [pid(i) for i in range(300)], decay, writer="decay", fields=("importance_score",), held=True
    )
    assert len(done.applied) == 300 and store._edge.moved.count == 300 and not store.index_due()
    for _ in range(3):  # the same memories again: they have moved once
        store.set_payloads({pid(i): {"reference_count": 1} for i in range(300)})
    assert store._edge.moved.count == 300
    store.set_payloads({pid(i): {"reference_count": 1} for i in range(300, 500)})
    now[0] = 10.0
    assert store._edge.moved.count == 500 and not store.index_due()  # 1,400 written in 10 s: a burst, waited out
    now[0] = 20.0
    assert store.index_due()  # nothing written since: the cycle is due
    now[0] = 30.0
    store.update_memories([pid(0), pid(1)], decay, writer="decay", fields=("importance_score",))
    assert not store.index_due()  # 2 in 10 s, no burst by its rate, but the decay is writing
    now[0] = 44.0
    assert not store.index_due()  # quiet for 14 s only
    now[0] = 46.0
    assert store.index_due()  # quiet for 16 s
    store.update_memories([pid(2)], decay, writer="linker", fields=("importance_score",))
    assert store.index_due()  # another writer's slow write holds nothing
    store.update_memories([pid(3)], lambda _p, _n: None, writer="decay", fields=("importance_score",), held=True)
    assert store.index_due()  # nor does a decay with nothing to write
    store.close()

    again = EdgeStore(path, index_after=500, index_min_workspace=300)
    again.ensure_collection(DIM)
    assert again.indexer is not None
    again.indexer.stop()
    assert again._edge.moved.count == 500 and again.index_due()  # carried over the restart (a first check: no rate)
    again.index_now()
    assert again._edge.moved.count == 0 and not again.index_due()
    again.close()
    third = EdgeStore(path, index_after=500, index_min_workspace=300)
    third.ensure_collection(DIM)
    assert third.indexer is not None
    third.indexer.stop()
    assert third._edge.moved.count == 0
    third.close()


def test_a_failing_cycle_is_retried_after_a_back_off_not_at_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edge_index, "RETRY_S", 0.3)
    tries: list[float] = []
    errors: list[BaseException] = []

    def cycle() -> edge_index.IndexCycle:
        tries.append(time.monotonic())
        raise StoreError("disk full")

    indexer = edge_index.BackgroundIndexer(cycle, lambda: True, every_s=0.01, on_error=errors.append)
    indexer.start()
    deadline = time.monotonic() + 30
    while len(tries) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    indexer.stop()
    assert len(tries) >= 3 and len(errors) == len(tries)
    assert tries[1] - tries[0] >= 0.3 and tries[2] - tries[1] >= 0.6  # 0.3 s, then doubled


def _graph_flags(store: EdgeStore) -> dict[str, bool | None]:
    schema = store._edge._open().info().payload_schema
    return {name: (info.params.enable_hnsw if info.params is not None else None) for name, info in schema.items()}


def test_only_the_fields_that_scope_a_recall_get_graphs_and_a_shard_written_before_is_converted(
    fast_dir: Path,
) -> None:
    """A new shard creates its payload indexes with per-value graphs off outside `GRAPH_FIELDS` (each such
    field cost a graph of the whole store in the build: issue 27). A shard written before (every index with
    its graphs, as Qdrant's default) has them turned off by the index cycle's worker, on its copy, and keeps
    every point and its answers."""
    import qdrant_edge as qe

    from episodic.store.rules import GRAPH_FIELDS, PAYLOAD_INDEXES

    store = filled(fast_dir / "edge", 400)
    flags = _graph_flags(store)
    assert {f for f in PAYLOAD_INDEXES if flags[f] is not False} == set(GRAPH_FIELDS)
    # as a shard written before: severity, ts and importance_score with their graphs (Qdrant's default)
    shard = store._edge._open()
    for name in ("severity", "entry_type"):
        shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
    shard.update(qe.UpdateOperation.create_field_index("ts", qe.PayloadSchemaType.Datetime))
    shard.update(qe.UpdateOperation.create_field_index("importance_score", qe.FloatIndexParams(enable_hnsw=True)))
    flags = _graph_flags(store)
    assert flags["importance_score"] is True and flags["severity"] is not False and flags["ts"] is not False
    q = vec(random.Random(9))
    scope = ScopeFilter(workspace_id="ws-0", scope="own", agent_id="a1")
    before = [h.point_id for h in store.query_dense(q, scope, 10)]
    cycle = store.index_now()
    assert cycle.points == 400
    flags = _graph_flags(store)
    assert {f for f in PAYLOAD_INDEXES if flags[f] is not False} == set(GRAPH_FIELDS), flags
    assert store.count() == 400
    assert [h.point_id for h in store.query_dense(q, scope, 10)] == before
    store.close()
    again = EdgeStore(fast_dir / "edge")  # the converted indexes are the shard's own from now on
    again.ensure_collection(DIM)
    assert {f for f in PAYLOAD_INDEXES if _graph_flags(again)[f] is not False} == set(GRAPH_FIELDS)
    again.close()


def test_the_server_adapter_creates_the_same_indexes() -> None:
    from episodic.store import qdrant_server
    from episodic.store.rules import GRAPH_FIELDS, PAYLOAD_INDEXES

    graphs = {f for f, kind in PAYLOAD_INDEXES.items() if qdrant_server._index_schema(f, kind).enable_hnsw}
    assert graphs == set(GRAPH_FIELDS)
    assert qdrant_server._index_schema("workspace_id", "tenant").is_tenant
