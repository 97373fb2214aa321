"""The nightly DecayAndReinforce job over the real store: values, only its own field, resume after a crash,
one run at a time, the schedule's due rule, and retention (off by default; archive, then remove with edges)."""

from __future__ import annotations

import json
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.domain.scoring import FLOOR_REACHED_DAYS, decay_importance
from episodic.kernel.ports import MemoryStore, Relation, StateStore
from episodic.lifecycle.forget import TOMBSTONE, Forgetter, tombstone_key
from episodic.maintenance.decay import DECAY_KEY, JOB_KIND, DecayJob, JobBusy, RetentionPolicy
from episodic.maintenance.schedule import Schedule
from schemas.events import ArchivedRecord
from tests.contract.test_forget_contract import rec as journal_record
from tests.integration.maint_helpers import T0, Clock, Failing, iso, memory

pytestmark = pytest.mark.integration

N = 60


def seed(store: MemoryStore, n: int = N) -> None:
    """n memories indexed i days before T0 + 200 days, with i % 4 references."""
    store.upsert([memory(f"m{i}", indexed_at=T0 - timedelta(days=i), refs=i % 4, base=0.9) for i in range(n)])


def importance(store: MemoryStore, entry_id: str) -> float:
    return float(store.retrieve([point_id("ws-a", entry_id)])[point_id("ws-a", entry_id)]["importance_score"])


def test_a_run_writes_the_formula_for_every_memory_and_nothing_else(
    edge_stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = edge_stores
    seed(store)
    clock = Clock(T0 + timedelta(days=30))
    report = DecayJob(store=store, state=state, clock=clock, page_size=16).run()
    assert (report.scanned, report.updated, report.pages, report.resumed) == (N, N, 4, False)
    for i in (0, 7, 59):
        assert importance(store, f"m{i}") == pytest.approx(decay_importance(0.9, days=30 + i, refs=i % 4))
    p = store.retrieve([point_id("ws-a", "m7")])[point_id("ws-a", "m7")]
    assert p["reference_count"] == 3 and p["summary"] == "memory m7" and p["payload"]["n"] == 1
    # the same reference time again: nothing changes, nothing is written
    again = DecayJob(store=store, state=state, clock=clock, page_size=16).run()
    assert (again.updated, again.unchanged) == (0, N)
    assert state.get(JOB_KIND, DECAY_KEY)["status"] == "done"  # type: ignore[index]


def test_a_reference_counted_during_the_run_is_not_lost(edge_stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = edge_stores
    seed(store, 20)
    pid = point_id("ws-a", "m3")

    def concurrent_increment(pids: Any, *args: Any, **kw: Any) -> None:
        if pid in pids:  # the importance agent counts a reference between the scan and the write
            store.set_payloads({pid: {"reference_count": 99}})

    racing = Failing(store, "update_memories", n=0, before=concurrent_increment)
    DecayJob(store=racing, state=state, clock=Clock(T0), page_size=8).run()  # type: ignore[arg-type]
    assert store.retrieve([pid])[pid]["reference_count"] == 99
    # the importance is that of the memory as it is at the write (the write discipline): 99 references
    assert importance(store, "m3") == pytest.approx(decay_importance(0.9, days=3, refs=99))


def test_a_run_that_crashed_half_way_resumes_at_its_page_with_its_reference_time(
    edge_stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = edge_stores
    seed(store)
    clock = Clock(T0 + timedelta(days=10))
    crashing = Failing(store, "update_memories", n=3)
    with pytest.raises(RuntimeError, match="crash"):
        DecayJob(store=crashing, state=state, clock=clock, page_size=16).run()  # type: ignore[arg-type]
    cursor = state.get(JOB_KIND, DECAY_KEY)
    assert cursor is not None and cursor["status"] == "running" and cursor["pages"] == 2 and cursor["offset"]
    clock.advance(hours=2)  # the restarted process runs it two hours later: same reference time
    report = DecayJob(store=store, state=state, clock=clock, page_size=16).run()
    assert report.resumed and report.scanned == N and report.pages == 4
    assert report.reference_time == cursor["reference_time"]
    for i in range(N):
        assert importance(store, f"m{i}") == pytest.approx(decay_importance(0.9, days=10 + i, refs=i % 4))


def test_one_run_at_a_time_and_the_schedule_decides_when_one_is_due(
    edge_stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = edge_stores
    seed(store, 5)
    clock = Clock(T0)
    nightly = Schedule("30 3 * * *")
    mine = DecayJob(store=store, state=state, clock=clock, holder="a")
    theirs = DecayJob(store=store, state=state, clock=clock, holder="b")
    assert mine.due(nightly.last_due(clock()))  # never run
    state.put(JOB_KIND, DECAY_KEY, {"status": "running", "holder": "b", "lease_until": 4e9, "reference_time": "x"})
    with pytest.raises(JobBusy) as busy:
        mine.run()
    assert busy.value.progress["holder"] == "b"
    assert not mine.due(nightly.last_due(clock())) and theirs.due(nightly.last_due(clock()))
    state.put(JOB_KIND, DECAY_KEY, {"status": "running", "holder": "b", "lease_until": 1.0})  # b died
    assert mine.due(nightly.last_due(clock()))
    mine.run()
    assert not mine.due(nightly.last_due(clock()))  # done for today
    clock.now = nightly.next_after(clock()) + timedelta(minutes=1)
    assert mine.due(nightly.last_due(clock()))  # the next night


def seed_run(store: MemoryStore, ids: str, stale_ids: str) -> None:
    """One run of memories `ids` in that order (`next` / `previous` edges); `stale_ids` reached the importance
    floor long ago (retention takes them), the others are new."""
    stale = T0 - timedelta(days=FLOOR_REACHED_DAYS + 31)
    store.upsert([memory(e, indexed_at=stale, base=0.5) if e in stale_ids else memory(e, indexed_at=T0) for e in ids])
    run = list(pairwise(ids))
    store.add_relations(
        [Relation(x, y, "next", 1.0, "t", "ws-a") for x, y in run]  # type: ignore[arg-type]
        + [Relation(y, x, "previous", 1.0, "t", "ws-a") for x, y in run]  # type: ignore[arg-type]
    )


def retention_job(store: MemoryStore, state: StateStore) -> DecayJob:
    archived: list[ArchivedRecord] = []
    return DecayJob(
        store=store, state=state, clock=Clock(T0), retention=RetentionPolicy(floor_days=30), archive=archived.extend
    )


def run_edges(store: MemoryStore, ids: list[str]) -> set[tuple[str, str, str]]:
    return {(r.src, r.relation, r.dst) for r in store.relations_of("ws-a", ids)}


def test_retention_joins_a_runs_neighbours_across_what_it_archived(
    edge_stores: tuple[MemoryStore, StateStore],
) -> None:
    """a -> b -> c -> d in one run; b and c reached the floor long ago: archived, a and d become neighbours
    (the run's `next` / `previous` edges, as a forget leaves them), so adjacency and the walk go on."""
    store, state = edge_stores
    seed_run(store, "abcd", stale_ids="bc")
    assert retention_job(store, state).run().archived == 2
    assert run_edges(store, ["a", "d"]) == {("a", "next", "d"), ("d", "previous", "a")}


def test_a_retention_that_dies_between_cutting_and_joining_joins_the_run_on_the_retry(
    edge_stores: tuple[MemoryStore, StateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edges to b and c are cut, then the process dies before a and d are joined: the retry reads b and c
    again, and they still say where they sat in the run (the cut leaves the memories it removes as they are)."""
    import episodic.indexing.context

    store, state = edge_stores
    seed_run(store, "abcd", stale_ids="bc")
    real = episodic.indexing.context.relink

    def die(*args: object, **kwargs: object) -> int:
        raise RuntimeError("killed between the cut and the join")

    job = retention_job(store, state)
    monkeypatch.setattr(episodic.indexing.context, "relink", die)
    with pytest.raises(RuntimeError, match="killed"):
        job.run()
    cut = store.relations_of("ws-a", ["a", "d"])
    assert {(r.src, r.dst) for r in cut if r.src in "ad"} == set()  # a and d: cut, not yet joined
    assert {(r.src, r.dst) for r in cut} == {("b", "a"), ("c", "d")}  # b and c still say where they sat
    monkeypatch.setattr(episodic.indexing.context, "relink", real)
    state.delete(JOB_KIND, [DECAY_KEY])  # the dead holder's lease
    assert job.run().archived == 2
    assert run_edges(store, ["a", "d"]) == {("a", "next", "d"), ("d", "previous", "a")}


def test_a_memory_archived_by_a_run_that_died_before_its_delete_is_finished_even_if_referenced_since(
    edge_stores: tuple[MemoryStore, StateStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run archived and tombstoned b, then died before cutting and deleting it; b was referenced before
    the next run, so it is no longer eligible. It is finished all the same: a tombstoned memory must not stay
    searchable, and the run is joined across it."""
    import episodic.maintenance.decay

    store, state = edge_stores
    seed_run(store, "abc", stale_ids="b")
    job = retention_job(store, state)
    real = episodic.maintenance.decay.cut_out

    def die(*args: object, **kwargs: object) -> int:
        raise RuntimeError("killed after the tombstone")

    monkeypatch.setattr(episodic.maintenance.decay, "cut_out", die)
    with pytest.raises(RuntimeError, match="killed"):
        job.run()
    assert state.get(TOMBSTONE, tombstone_key("ws-a", "b"))["forget_id"] == "retention"
    monkeypatch.setattr(episodic.maintenance.decay, "cut_out", real)
    b = point_id("ws-a", "b")
    store.set_payload(b, {"reference_count": 1, "last_referenced_at": iso(T0)})  # referenced meanwhile
    state.delete(JOB_KIND, [DECAY_KEY])  # the dead holder's lease
    assert job.run().archived == 1
    assert store.retrieve([b]) == {}
    assert run_edges(store, ["a", "c"]) == {("a", "next", "c"), ("c", "previous", "a")}


def test_retention_is_off_unless_asked_for(edge_stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = edge_stores
    old = T0 - timedelta(days=FLOOR_REACHED_DAYS + 400)
    store.upsert([memory("ancient", indexed_at=old, base=0.5)])
    report = DecayJob(store=store, state=state, clock=Clock(T0)).run()
    assert report.archived == 0 and not report.retention
    assert importance(store, "ancient") == 0.05


def test_retention_archives_then_removes_the_memory_and_every_edge_to_it(
    edge_stores: tuple[MemoryStore, StateStore],
) -> None:
    store, state = edge_stores
    floor = timedelta(days=FLOOR_REACHED_DAYS)
    store.upsert(
        [
            memory("stale", indexed_at=T0 - floor - timedelta(days=31), base=0.5, payload={"log": "y" * 900}),
            memory("young-stale", indexed_at=T0 - floor - timedelta(days=29), base=0.5),
            memory("referenced", indexed_at=T0 - floor - timedelta(days=90), refs=1),
            memory("pinned", indexed_at=T0 - floor - timedelta(days=90), priority="pin"),
            memory("neighbour", indexed_at=T0, axis=1),
            memory("stale", ws="ws-b", indexed_at=T0),
        ]
    )
    store.add_relations(
        [
            Relation("neighbour", "stale", "similar", 0.9, "t", "ws-a"),
            Relation("neighbour", "pinned", "similar", 0.85, "t", "ws-a"),
            Relation("stale", "pinned", "similar", 0.85, "t", "ws-a"),
        ]
    )
    from episodic.maintenance.health_inputs import ACCEPTED_KIND, accepted_ids

    ledger = {f"ws-a/{e}": {"workspace_id": "ws-a", "entry_id": e, "agent_id": "agent-1"} for e in ("stale", "pinned")}
    state.put_many(ACCEPTED_KIND, ledger)  # the health agent's ledger of accepted entries
    archived: list[ArchivedRecord] = []
    job = DecayJob(
        store=store, state=state, clock=Clock(T0), retention=RetentionPolicy(floor_days=30), archive=archived.extend
    )
    report = job.run()
    assert (report.archived, report.edges_removed, report.scanned) == (1, 1, 6)
    assert set(accepted_ids(state, "ws-a")) == {"pinned"}  # health's coverage stops counting what was archived
    [rec] = archived
    assert (rec.entry_id, rec.workspace_id, rec.summary) == ("stale", "ws-a", "memory stale")
    assert len(rec.payload) == 400 and rec.payload_truncated and rec.payload.startswith('{"log":"yyy')
    assert rec.relations[0]["dst"] == "pinned" and json.loads(ArchivedRecord.from_json(rec.to_json()).to_json())
    assert store.retrieve([point_id("ws-a", "stale")]) == {}
    assert point_id("ws-b", "stale") in store.retrieve([point_id("ws-b", "stale")])  # another workspace's
    left = {(r.src, r.dst) for r in store.relations_of("ws-a", ["neighbour", "pinned", "stale"])}
    assert left == {("neighbour", "pinned")}
    assert store.count("ws-a") == 4
    # tombstoned like a forget: a re-delivery or replay of the archived entry is kept out (its workspace only)
    kept, out = Forgetter(store=store, state=state).admit([journal_record("stale"), journal_record("stale", ws="ws-b")])
    assert [r.workspace_id for r in out] == ["ws-a"] and [r.workspace_id for r in kept] == ["ws-b"]
    assert state.get(TOMBSTONE, tombstone_key("ws-a", "stale"))["forget_id"] == "retention"


def test_retention_needs_somewhere_to_archive(edge_stores: tuple[MemoryStore, StateStore]) -> None:
    store, state = edge_stores
    with pytest.raises(ValueError, match="archive"):
        DecayJob(store=store, state=state, retention=RetentionPolicy())
