"""The write discipline (episodic.store) on every adapter: each pair of writers of one memory, raced.

A race is made exact instead of left to chance: the intruding writer runs its whole write right after the
first writer read the memory and before it writes (`between_read_and_write`). Without the discipline (a
plain write of what was read) every test here loses the intruder's change; with it, the first writer finds
the memory changed, reads it again and keeps the change. The threaded test races for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from msgspec.structs import replace as revise

from episodic.domain.identity import point_id
from episodic.indexing.context import scrub
from episodic.indexing.indexer import Indexer
from episodic.kernel.errors import StoreError
from episodic.kernel.ports import REV, Change, MemoryStore, Relation, merge_relations, relations_payload
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord
from tests.contract.conftest import MakePoint, as_qdrant, e

WS = "ws-a"


def between_read_and_write(store: MemoryStore, intruder: Callable[[], None], *, after: int = 1) -> None:
    """Run `intruder` once, right after the store's `after`-th `retrieve` returns (the writer's read)."""
    inner = store.retrieve
    calls = [0]

    def retrieve(*args: Any, **kw: Any) -> Any:
        out = inner(*args, **kw)
        calls[0] += 1
        if calls[0] == after:
            intruder()
        return out

    store.retrieve = retrieve  # type: ignore[method-assign]


def rel(src: str, dst: str, kind: str = "similar") -> Relation:
    return Relation(src=src, dst=dst, relation=kind, weight=0.9, created_at="2026-11-21T00:00:00Z", workspace_id=WS)  # type: ignore[arg-type]


def payload(store: MemoryStore, eid: str) -> dict[str, Any]:
    pid = point_id(WS, eid)
    return store.retrieve([pid])[pid]


def payload_of(store: MemoryStore, pid: str) -> dict[str, Any]:
    return store.retrieve([pid])[pid]


def dsts(store: MemoryStore, eid: str) -> set[str]:
    return {str(x["dst"]) for x in payload(store, eid).get("relations") or []}


def record(eid: str, summary: str, **extra: Any) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": eid,
            "workspace_id": WS,
            "agent_id": "agent-1",
            "crew_id": "crew-1",
            "ts": "2026-11-20T10:00:00Z",
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary,
            "payload": {},
            "base_importance": 0.7,
            "accepted_at": datetime(2026, 11, 20, 10, 0, 1, tzinfo=UTC),
            **extra,
        }
    )


def count_reference(store: MemoryStore, eid: str, n: int = 5) -> Callable[[], None]:
    """The importance agent's write: its own fields, unconditionally (it owns them)."""
    return lambda: store.set_payloads(
        {point_id(WS, eid): {"reference_count": n, "last_referenced_at": "2026-11-22T00:00:00Z"}}
    )


# -- the indexer's whole-point write of a new version -------------------------------------------------------


def test_a_new_version_keeps_a_reference_counted_meanwhile(store: MemoryStore, bm25: Bm25Encoder) -> None:
    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    indexer.index_batch([record("e1", "the cache was cold")])
    between_read_and_write(store, count_reference(store, "e1"))
    res = indexer.index_batch([record("e1", "the cache was cold, then warmed up")])
    p = payload(store, "e1")
    assert p["summary"] == "the cache was cold, then warmed up"
    assert (p["reference_count"], p["last_referenced_at"]) == (5, "2026-11-22T00:00:00Z")
    assert [ev.entry_id for ev in res.events] == ["e1"] and res.written == 1
    assert as_qdrant(store).write_conflicts["indexer"] == 1


def test_a_new_version_keeps_an_edge_the_linker_added_meanwhile(store: MemoryStore, bm25: Bm25Encoder) -> None:
    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    indexer.index_batch([record("e1", "disk full on node 3"), record("e2", "node 3 ran out of inodes")])
    between_read_and_write(store, lambda: store.add_relations([rel("e1", "e2")]))
    indexer.index_batch([record("e1", "disk full on node 3 again")])
    assert payload(store, "e1")["summary"] == "disk full on node 3 again"
    assert dsts(store, "e1") == {"e2"}


def test_a_new_memory_does_not_replace_one_written_meanwhile_under_its_id(
    store: MemoryStore, bm25: Bm25Encoder
) -> None:
    """Two deliveries of one id raced (another consumer, an import): the later write sees the first."""
    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    other = Indexer(store=store, embedder=None, bm25=bm25)

    def first_writer() -> None:
        other.index_batch([record("e1", "first text")])
        store.set_payloads({point_id(WS, "e1"): {"reference_count": 2}})

    between_read_and_write(store, first_writer)
    indexer.index_batch([record("e1", "second text")])
    p = payload(store, "e1")
    assert p["summary"] == "second text" and p["reference_count"] == 2  # a new version, counters kept


# -- duplicates absorbed by two writers at once -----------------------------------------------------------


def test_two_absorptions_of_duplicates_keep_both_ids(store: MemoryStore, bm25: Bm25Encoder) -> None:
    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    other = Indexer(store=store, embedder=None, bm25=bm25)
    indexer.index_batch([record("hb-0", "heartbeat ok")])
    # the first batch reads the owner (its dedup key), then the other absorbs hb-2 before it writes hb-1
    between_read_and_write(store, lambda: other.index_batch([record("hb-2", "heartbeat ok")]), after=2)
    indexer.index_batch([record("hb-1", "heartbeat ok")])
    p = payload(store, "hb-0")
    assert sorted(p["aliases"]) == ["hb-1", "hb-2"] and p["occurrences"] == 3


# -- edges: the linker, the run edges, forget's edge removal -------------------------------------------------


def test_adding_an_edge_does_not_bring_back_one_removed_meanwhile(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"e{i}", f"text {i}", e(i)) for i in range(3)])
    store.add_relations([rel("e0", "e1")])
    between_read_and_write(store, lambda: store.remove_edges_to(WS, ["e1"]))  # e1 is forgotten
    assert store.add_relations([rel("e0", "e2")]) == 1
    assert dsts(store, "e0") == {"e2"}


def test_removing_an_edge_keeps_one_added_meanwhile(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"e{i}", f"text {i}", e(i)) for i in range(3)])
    store.add_relations([rel("e0", "e1")])
    other = mk("e0", "text 0", e(0)).point_id
    between_read_and_write(store, lambda: store.add_relations([rel("e0", "e2", "supports")]))
    assert store.remove_edges_to(WS, ["e1"]) == 1
    assert dsts(store, "e0") == {"e2"} and other in store.retrieve([other])


def test_context_scrub_keeps_an_edge_and_a_count_written_meanwhile(
    store: MemoryStore, mk: MakePoint, bm25: Bm25Encoder
) -> None:
    if not store.has_context:
        pytest.skip("the collection has no context vector")
    ctx = [{"entry_id": "gone", "text": "the secret"}, {"entry_id": "e1", "text": "kept line"}]
    with_context = replace(
        mk("e0", "text 0", e(0), context=ctx, context_ids=["gone", "e1"]), context=bm25.document("x")
    )
    store.upsert([with_context, mk("e1", "one", e(1))])

    def linker_and_counter() -> None:
        store.add_relations([rel("e0", "e1")])
        count_reference(store, "e0")()

    between_read_and_write(store, linker_and_counter, after=1)
    scrub(store, bm25, WS, {"gone"}, {})
    p = payload(store, "e0")
    assert p["context_ids"] == ["e1"] and [c["entry_id"] for c in p["context"]] == ["e1"]
    assert dsts(store, "e0") == {"e1"} and p["reference_count"] == 5


# -- vectors written for a summary (densify, re-embed) against a new version ---------------------------------


def test_a_vector_for_a_replaced_summary_is_not_written(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e0", "old summary", None, has_dense=False)])
    pid = point_id(WS, "e0")
    read = store.retrieve([pid])[pid]

    def vector_of_old(_pid: str, now: dict[str, Any]) -> Change | None:
        return Change({"has_dense": True}, vectors={"dense": [e(3)]}) if now["summary"] == read["summary"] else None

    between_read_and_write(store, lambda: store.upsert([mk("e0", "new summary", None, has_dense=False)]))
    report = store.update_memories([pid], vector_of_old, writer="densify", fields=("summary",))
    assert report.applied == [] and report.conflicts == 1 and report.unchanged == 1
    hit = store.fetch([pid], with_dense=True)[pid]
    assert hit.payload["summary"] == "new summary" and not hit.dense and hit.payload["has_dense"] is False


# -- decay against the importance agent, import against everyone ---------------------------------------------


def test_decay_computes_importance_from_the_count_at_its_write(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e0", "text", e(0), reference_count=0)])
    pid = point_id(WS, "e0")

    def importance(_pid: str, now: dict[str, Any]) -> Change:
        return Change({"importance_score": 0.5 + 0.01 * int(now.get("reference_count") or 0)})

    between_read_and_write(store, count_reference(store, "e0", 10))
    report = store.update_memories([pid], importance, writer="decay")
    assert report.applied == [pid] and report.conflicts == 1
    p = payload(store, "e0")
    assert p["reference_count"] == 10 and p["importance_score"] == pytest.approx(0.6)


def test_an_import_write_reports_a_memory_changed_since_its_read(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e0", "text", e(0))])
    pid = point_id(WS, "e0")
    rev = store.retrieve([pid])[pid][REV]
    count_reference(store, "e0")()
    assert store.upsert_if([mk("e0", "imported", e(0))], {pid: rev}, writer="import") == [pid]
    assert payload(store, "e0")["summary"] == "text"  # not written: the caller reads again and decides
    assert store.upsert_if([mk("e0", "imported", e(0))], {pid: payload(store, "e0")[REV]}, writer="import") == []
    assert payload(store, "e0")["summary"] == "imported"


def test_a_conditional_delete_spares_a_memory_referenced_meanwhile(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e0", "text", e(0), reference_count=0)])
    pid = point_id(WS, "e0")
    between_read_and_write(store, count_reference(store, "e0"))
    report = store.update_memories(
        [pid], lambda _p, now: Change(delete=True) if not now.get("reference_count") else None, writer="decay"
    )
    assert report.applied == [] and report.unchanged == 1 and pid in store.retrieve([pid])


# -- held writes (update_memories(held=True)): read and written in one hold where the engine can ----------------


def test_a_held_write_applies_counts_and_stamps_a_new_revision(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"e{i}", f"text {i}", e(i), reference_count=i) for i in range(3)])
    pids = [point_id(WS, f"e{i}") for i in range(3)]
    before = store.retrieve(pids)
    gone = point_id(WS, "never-written")

    def bump(_pid: str, now: dict[str, Any]) -> Change | None:
        n = int(now.get("reference_count") or 0)
        return None if n == 0 else Change({"importance_score": 0.1 * n})

    report = store.update_memories([*pids, gone], bump, writer="decay", fields=("reference_count",), held=True)
    assert sorted(report.applied) == sorted(pids[1:]) and report.unchanged == 1 and report.missing == 1
    assert report.conflicts == 0 and report.gave_up == []
    after = store.retrieve(pids)
    assert [after[p].get("importance_score") for p in pids[1:]] == [pytest.approx(0.1), pytest.approx(0.2)]
    assert after[pids[0]][REV] == before[pids[0]][REV]  # nothing written: the revision stays
    assert all(after[p][REV] != before[p][REV] for p in pids[1:])
    assert after[pids[1]]["summary"] == "text 1" and after[pids[1]]["reference_count"] == 1  # merged, not replaced


def test_a_held_writer_s_vector_or_delete_change_goes_the_conditional_way(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk("e0", "text 0", None, has_dense=False), mk("e1", "text 1", e(1))])
    p0, p1 = point_id(WS, "e0"), point_id(WS, "e1")

    def change(pid: str, _now: dict[str, Any]) -> Change:
        return Change({"has_dense": True}, vectors={"dense": [e(3)]}) if pid == p0 else Change(delete=True)

    report = store.update_memories([p0, p1], change, writer="densify", fields=("summary",), held=True)
    assert sorted(report.applied) == sorted([p0, p1])
    assert p1 not in store.retrieve([p1]) and store.fetch([p0], with_dense=True)[p0].dense


def test_a_conditional_writer_that_read_before_a_held_write_keeps_it(store: MemoryStore, mk: MakePoint) -> None:
    """The held write stamps a new revision: a writer that read the memory before it conflicts, reads again and
    counts on top of the held writer's count (without the new revision one increment would be lost)."""
    store.upsert([mk("e0", "text", e(0), reference_count=0)])
    pid = point_id(WS, "e0")

    def add_one(_pid: str, now: dict[str, Any]) -> Change:
        return Change({"reference_count": int(now.get("reference_count") or 0) + 1})

    between_read_and_write(store, lambda: store.update_memories([pid], add_one, writer="decay", held=True))
    report = store.update_memories([pid], add_one, writer="relations")
    assert report.applied == [pid] and report.conflicts == 1
    assert payload(store, "e0")["reference_count"] == 2


def test_an_error_in_a_held_writer_s_change_is_raised_as_it_is(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert([mk(f"e{i}", f"text {i}", e(i)) for i in range(3)])
    pids = sorted(point_id(WS, f"e{i}") for i in range(3))

    def change(pid: str, _now: dict[str, Any]) -> Change:
        if pid == pids[1]:
            raise ZeroDivisionError("the writer's own bug")
        return Change({"importance_score": 0.9})

    with pytest.raises(ZeroDivisionError, match="own bug"):
        store.update_memories(pids, change, writer="decay", held=True)
    assert payload_of(store, pids[2]).get("importance_score") != 0.9  # the rest was not written
    # held (Edge), what was written before the error stays; the conditional way computes every change first
    assert (payload_of(store, pids[0]).get("importance_score") == 0.9) is store.engine.holds_writes  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="not a finite number"):  # the store's own check of the fields
        store.update_memories(pids[:1], lambda _p, _n: Change({"bad": float("nan")}), writer="decay", held=True)


def test_a_held_write_reads_inside_the_engine_s_write_hold(store: MemoryStore, mk: MakePoint) -> None:
    """White box, engines that hold their writes: the read a held write decides on is taken while the write
    path is held (`_serial`), so no other write can land between it and the write."""
    engine: Any = store.engine  # type: ignore[attr-defined]
    if not engine.holds_writes:
        pytest.skip("the engine writes conditionally")
    store.upsert([mk("e0", "text", e(0))])
    pid = point_id(WS, "e0")
    shard = engine._open()
    held: list[bool] = []

    class Watched:
        def retrieve(self, *args: Any, **kw: Any) -> Any:
            held.append(engine._serial.locked())
            return shard.retrieve(*args, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(shard, name)

    engine._shard = Watched()
    try:
        store.update_memories([pid], lambda _p, _n: Change({"importance_score": 0.7}), writer="decay", held=True)
    finally:
        engine._shard = shard
    assert held == [True] and payload(store, "e0")["importance_score"] == pytest.approx(0.7)


def test_a_held_write_between_a_conditional_write_and_its_read_back_keeps_its_token(
    store: MemoryStore, mk: MakePoint
) -> None:
    """A vector change is written, then its revision read back, outside one hold: a held write landing in
    between must leave the writer's token in `revs`, or the writer takes its applied write for a conflict and
    counts again."""
    store.upsert([mk("e0", "text", None, has_dense=False, reference_count=0)])
    pid = point_id(WS, "e0")
    engine: Any = store.engine  # type: ignore[attr-defined]
    inner = engine.set_payload_where
    fired: list[int] = []

    def then_held(flt: Any, fields: dict[str, Any]) -> None:
        inner(flt, fields)
        if not fired:
            fired.append(1)
            store.update_memories([pid], lambda _p, _n: Change({"importance_score": 0.3}), writer="decay", held=True)

    engine.set_payload_where = then_held

    def densify_and_count(_pid: str, now: dict[str, Any]) -> Change:
        n = int(now.get("reference_count") or 0) + 1
        return Change({"has_dense": True, "reference_count": n}, vectors={"dense": [e(3)]})

    report = store.update_memories([pid], densify_and_count, writer="densify", fields=("reference_count",))
    assert fired and report.applied == [pid] and report.conflicts == 0
    p = payload(store, "e0")
    assert p["reference_count"] == 1 and p["importance_score"] == pytest.approx(0.3)


# -- for real: threads -------------------------------------------------------------------------------------


def test_concurrent_read_modify_writes_lose_nothing(store: MemoryStore, mk: MakePoint) -> None:
    """Two threads each add 1 to a counter 40 times (one of them `held`), and a third adds edges: every increment
    and edge stays."""
    store.upsert([mk("e0", "text", e(0), reference_count=0), *[mk(f"d{i}", f"d {i}", e(1)) for i in range(20)]])
    pid = point_id(WS, "e0")
    errors: list[BaseException] = []

    def add_one(_pid: str, now: dict[str, Any]) -> Change:
        return Change({"reference_count": int(now.get("reference_count") or 0) + 1})

    def counter(held: bool) -> None:
        try:
            for _ in range(40):
                r = store.update_memories([pid], add_one, writer="relations", attempts=1000, held=held)
                assert r.applied == [pid]
        except BaseException as ex:  # reported in the main thread
            errors.append(ex)

    def add_edge(i: int) -> Callable[[str, dict[str, Any]], Change]:
        def change(_pid: str, now: dict[str, Any]) -> Change:
            return Change(relations_payload(merge_relations(now.get("relations"), [rel("e0", f"d{i}")])))

        return change

    def linker() -> None:
        try:
            for i in range(20):
                r = store.update_memories([pid], add_edge(i), writer="linker", fields=("relations",), attempts=1000)
                assert r.applied == [pid]
        except BaseException as ex:
            errors.append(ex)

    # one counter reads and writes conditionally, the other in the engine's hold where it can (`held`)
    threads = [threading.Thread(target=counter, args=(h,)) for h in (False, True)] + [threading.Thread(target=linker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert payload(store, "e0")["reference_count"] == 80
    assert dsts(store, "e0") == {f"d{i}" for i in range(20)}


# -- versions: an older one never overwrites a newer one (issue 25, "Rollback"; ordered by ts since issue 45) -----


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 20, 10, minute, second, tzinfo=UTC)


def test_an_older_version_sent_again_after_a_newer_one_is_not_written(store: MemoryStore, bm25: Bm25Encoder) -> None:
    """Issue 45's case: X at 10:00 says Tuesday, X at 10:05 says Thursday, then X at 10:00 comes again (a
    producer retry, an outbox replay): accepted last, yet older by its own `ts`, so Thursday stays. The
    acceptance stamp decides only between versions of one `ts`."""
    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    tuesday = record("e1", "the release train leaves on Tuesday", ts="2026-11-20T10:00:00Z", accepted_at=at(0, 1))
    thursday = record("e1", "the release train leaves on Thursday", ts="2026-11-20T10:05:00Z", accepted_at=at(5, 1))
    indexer.index_batch([tuesday])
    assert indexer.index_batch([thursday]).written == 1
    again = indexer.index_batch([revise(tuesday, accepted_at=at(9))])  # the retry, accepted anew
    assert again.stale == 1 and again.written == 0
    assert payload(store, "e1")["summary"] == "the release train leaves on Thursday"
    # in one batch too, whatever the order
    ferry = [revise(r, id="e2", summary=r.summary.replace("release train", "ferry")) for r in (thursday, tuesday)]
    both = indexer.index_batch([ferry[0], revise(ferry[1], accepted_at=at(9))])
    assert both.stale == 1 and payload(store, "e2")["summary"] == "the ferry leaves on Thursday"
    # one `ts`, two texts: the later acceptance is the newer version
    fix = record("e1", "the release train leaves on Friday", ts="2026-11-20T10:05:00Z", accepted_at=at(6))
    assert indexer.index_batch([fix]).written == 1 and payload(store, "e1")["summary"].endswith("Friday")
    late = record("e1", "the release train leaves on Monday", ts="2026-11-20T10:05:00Z", accepted_at=at(5, 30))
    assert indexer.index_batch([late]).stale == 1 and payload(store, "e1")["summary"].endswith("Friday")
    # a newer `ts` still replaces it
    done = record("e1", "the release train left", ts="2026-11-20T10:09:00Z", accepted_at=at(9, 1))
    assert indexer.index_batch([done]).written == 1 and payload(store, "e1")["summary"] == "the release train left"


def test_an_import_of_an_older_version_needs_force(store: MemoryStore, state: Any, bm25: Bm25Encoder) -> None:
    from episodic.lifecycle.portable import Importer, export_workspace, read_export

    indexer = Indexer(store=store, embedder=None, bm25=bm25)
    indexer.index_batch([record("e1", "the old text", accepted_at=datetime(2026, 11, 20, 10, 0, 1, tzinfo=UTC))])
    exported = list(export_workspace(store, WS))
    newer = record(
        "e1", "the new text", ts="2026-11-21T10:00:00Z", accepted_at=datetime(2026, 11, 21, 10, 0, 1, tzinfo=UTC)
    )
    indexer.index_batch([newer])
    report = Importer(store=store, state=state, embedder=None, bm25=bm25).run(read_export(exported))
    assert report.stale == [f"{WS}/e1"] and report.written == 0 and payload(store, "e1")["summary"] == "the new text"
    forced = Importer(store=store, state=state, embedder=None, bm25=bm25, force=True).run(read_export(exported))
    assert forced.written == 1 and payload(store, "e1")["summary"] == "the old text"
