"""Forgetting (episodic.lifecycle.forget) on every engine: the real store and its state store beside it, memories
written by the real indexer (sparse-only: the model is not what is tested here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from episodic.domain.identity import point_id
from episodic.indexing.indexer import Indexer
from episodic.kernel.errors import StoreUnavailable
from episodic.kernel.ports import MemoryStore, Relation, StateStore
from episodic.lifecycle.forget import APPLIED, EARLY, RULES, STATUS, Forgetter, Position, announce
from episodic.store.sparse import Bm25Encoder
from schemas.events import EmbeddableRecord, ForgetRecord, ForgetSelector

T = datetime(2026, 11, 20, 12, 0, 0, tzinfo=UTC)  # when the forgets are requested


def rec(
    i: str,
    summary: str | None = None,
    *,
    ws: str = "ws-a",
    agent: str = "agent-1",
    run: str | None = "r1",
    ts: datetime = T - timedelta(hours=1),
    accepted: datetime | None = None,
) -> EmbeddableRecord:
    return EmbeddableRecord.from_dict(
        {
            "id": i,
            "workspace_id": ws,
            "agent_id": agent,
            "run_id": run,
            "ts": ts.isoformat(),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": summary or f"memory {i} about the checkout service",
            "payload": {},
            "base_importance": 0.7,
            "accepted_at": accepted or ts + timedelta(seconds=1),
        }
    )


def forget(fid: str, ws: str = "ws-a", **selector: Any) -> ForgetRecord:
    return ForgetRecord(forget_id=fid, workspace_id=ws, selector=ForgetSelector(**selector), requested_at=T)


@pytest.fixture
def ix(store: MemoryStore, bm25: Bm25Encoder) -> Indexer:
    return Indexer(store=store, embedder=None, bm25=bm25)


@pytest.fixture
def forgetter(store: MemoryStore, state: StateStore) -> Forgetter:
    return Forgetter(store=store, state=state, clock=lambda: T + timedelta(seconds=5))


def present(store: MemoryStore, ws: str, *ids: str) -> set[str]:
    got = store.retrieve([point_id(ws, i) for i in ids])
    return {p["entry_id"] for p in got.values()}


def rel(src: str, dst: str, ws: str = "ws-a") -> Relation:
    return Relation(
        src=src, dst=dst, relation="similar", weight=0.9, created_at="2026-11-20T00:00:00Z", workspace_id=ws
    )


def test_forgetting_an_alias_forgets_its_memory_with_its_edges_both_ways(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    # no run: these memories have no run neighbours (adjacency edges: test_context_contract.py)
    ix.index_batch(
        [rec("e1", "the checkout ran out of memory", run=None), rec("e2", "The checkout ran out of  memory", run=None)]
    )
    ix.index_batch([rec("e3", run=None), rec("e4", run=None), rec("e1", "the checkout ran out of memory", ws="ws-b")])
    assert store.retrieve([point_id("ws-a", "e1")])[point_id("ws-a", "e1")]["aliases"] == ["e2"]
    assert store.add_relations([rel("e3", "e1"), rel("e1", "e4"), rel("e4", "e3"), rel("e1", "e4", ws="ws-b")]) == 4

    outcome = forgetter.apply(forget("f1", entry_ids=["e2", "never-written"]), Position(0, 7))
    assert (outcome.memories, outcome.edges, outcome.repeated) == (1, 2, False)  # e1->e4 (its own), e3->e1
    assert outcome.entry_ids == ["e1", "e2", "never-written"]
    assert present(store, "ws-a", "e1", "e3", "e4") == {"e3", "e4"}
    assert present(store, "ws-b", "e1") == {"e1"}  # another workspace's e1 is another memory
    e3 = store.retrieve([point_id("ws-a", "e3")])[point_id("ws-a", "e3")]
    assert e3["relations"] == [] and e3["links"] == []
    assert {(r.src, r.dst) for r in store.relations_of("ws-a", ["e3", "e4"])} == {("e4", "e3")}
    status = state.get(STATUS, "f1")
    assert status is not None and status["status"] == APPLIED
    assert status["removed"] == {"memories": 1, "entry_ids": 3, "edges": 2}
    assert (status["partition"], status["offset"]) == (0, 7)
    [event] = outcome.events()
    assert event.entry_ids == ["e1", "e2", "never-written"] and event.last and event.memories == 1

    # re-delivered, replayed or written later: none of the three ids comes back; other ids do
    again = [rec("e1", "the checkout ran out of memory"), rec("e2"), rec("never-written"), rec("e5")]
    kept, out = forgetter.admit(again, [Position(0, 3)] * 4)
    assert [r.id for r in kept] == ["e5"] and len(out) == 3
    assert [r.id for r in forgetter.admit([rec("e1", ws="ws-b")])[0]] == ["e1"]

    # the same forget delivered again changes nothing and says what it did the first time
    repeat = forgetter.apply(forget("f1", entry_ids=["e2", "never-written"]), Position(0, 7))
    assert repeat.repeated and (repeat.memories, repeat.edges) == (1, 2)
    assert repeat.entry_ids == ["e1", "e2", "never-written"]
    assert state.get(STATUS, "f1") == status


def test_an_agents_forget_keeps_out_what_was_on_its_way_and_lets_new_entries_in(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    ix.index_batch([rec(f"a{i}") for i in range(3)] + [rec(f"b{i}", agent="agent-2") for i in range(2)])
    outcome = forgetter.apply(forget("f-agent", agent_id="agent-1"), Position(1, 100))
    assert outcome.memories == 3 and outcome.entry_ids == ["a0", "a1", "a2"]
    assert present(store, "ws-a", "a0", "a1", "a2", "b0", "b1") == {"b0", "b1"}
    later = T + timedelta(minutes=1)
    # "Before the forget" is the acceptance stamp alone (issue 25): neither the agent's `ts` nor the offset.
    cases = {
        # an agent with a slow clock (or flushing a buffer) writes after the forget: a new memory
        "old-ts-accepted-after": (rec("x1", ts=T - timedelta(days=3), accepted=later), Position(1, 150), True),
        "ts-at-the-cut": (rec("x2", ts=T, accepted=later), Position(1, 150), True),
        "accepted-before": (rec("x3", ts=later, accepted=T - timedelta(seconds=1)), Position(1, 150), False),
        "accepted-at-the-cut": (rec("x3b", ts=later, accepted=T), Position(1, 150), False),
        # the embedded broker restarted (offsets from 0 again): a new entry below the forget's old offset
        "new-after-a-broker-restart": (rec("x4", ts=later, accepted=later), Position(1, 3), True),
        "other-partition": (rec("x5", ts=later, accepted=later), Position(0, 99), True),
        "new": (rec("x6", ts=later, accepted=later), Position(1, 101), True),
        "other-agent": (rec("x7", agent="agent-2", ts=T - timedelta(days=3)), Position(1, 50), True),
        "other-workspace": (rec("x8", ws="ws-b", ts=T - timedelta(days=3)), Position(1, 50), True),
        "a-forgotten-id-even-if-new": (rec("a1", ts=later, accepted=later), Position(1, 200), False),
    }
    records = [r for r, _, _ in cases.values()]
    kept, out = forgetter.admit(records, [p for _, p, _ in cases.values()])
    assert {r.id for r in kept} == {r.id for r, _, keep in cases.values() if keep}
    assert len(out) == sum(1 for *_, keep in cases.values() if not keep)
    # without positions (no partition known), the time rules still hold
    assert [r.id for r in forgetter.admit([rec("x9", ts=T - timedelta(hours=2))])[0]] == []


def test_a_run_and_a_whole_workspace(store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter) -> None:
    ix.index_batch([rec(f"r{i}", run=f"run-{i % 3}") for i in range(300)])  # more than a page of 256
    ix.index_batch([rec(f"w{i}", ws="ws-b") for i in range(5)])
    by_run = forgetter.apply(forget("f-run", run_id="run-1"), Position(0, 10))
    assert by_run.memories == 100 and store.count("ws-a") == 200
    assert forgetter.admit([rec("r-late", run="run-1"), rec("r-other", run="run-2")])[0][0].id == "r-other"
    everything = forgetter.apply(forget("f-all", all=True), Position(0, 20))
    assert everything.memories == 200 and store.count("ws-a") == 0 and store.count("ws-b") == 5
    assert len(everything.entry_ids) == 200
    # the whole-workspace rule supersedes the run's (older, on the same partition)
    rules = state.get(RULES, "ws-a")
    assert rules is not None and [r["forget_id"] for r in rules["rules"]] == ["f-all"]
    assert forgetter.admit([rec("anything", run=None)])[0] == []
    later = T + timedelta(hours=1)
    assert [r.id for r in forgetter.admit([rec("new", ts=later, accepted=later)], [Position(0, 21)])[0]] == ["new"]


def test_an_announced_forget_keeps_its_selection_out_before_it_is_applied(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    ix.index_batch([rec("a0"), rec("b0", agent="agent-2")])
    f = forget("f-early", agent_id="agent-1")
    announce(state, f)
    queued = [
        rec("a1"),
        rec("a2", ts=T + timedelta(minutes=5), accepted=T + timedelta(minutes=5)),
        rec("b1", agent="agent-2"),
    ]
    assert [r.id for r in forgetter.admit(queued)[0]] == ["a2", "b1"]  # a2 is newer than the forget
    assert present(store, "ws-a", "a0") == {"a0"}  # nothing is removed before the forget is applied
    assert forgetter.apply(f, Position(0, 9)).memories == 1
    assert state.get(EARLY, "f-early") is None and [r["offset"] for r in state.get(RULES, "ws-a")["rules"]] == [9]
    assert [r.id for r in forgetter.admit(queued)[0]] == ["a2", "b1"]
    # announcing after it was applied leaves no early rule behind; ids are not announced (tombstoned when applied)
    announce(state, f)
    announce(state, forget("f-ids", entry_ids=["b0"]))
    assert list(state.scan(EARLY)) == []


def test_a_forget_interrupted_half_way_is_applied_in_full_and_counted_exactly(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter, monkeypatch: pytest.MonkeyPatch
) -> None:
    ix.index_batch([rec(f"m{i}") for i in range(600)])
    real_delete, calls = store.delete, []

    def flaky(point_ids: list[str]) -> None:
        calls.append(len(point_ids))
        if len(calls) == 2:
            raise StoreUnavailable("the store went away")
        real_delete(point_ids)

    monkeypatch.setattr(store, "delete", flaky)
    with pytest.raises(StoreUnavailable):
        forgetter.apply(forget("f-crash", all=True), Position(0, 1))
    assert store.count("ws-a") == 600 - 256  # the first page went
    assert state.get(STATUS, "f-crash") is None  # not applied: it will be re-delivered
    outcome = forgetter.apply(forget("f-crash", all=True), Position(0, 1))
    assert store.count("ws-a") == 0
    assert outcome.memories == 600 and len(outcome.entry_ids) == 600  # from the tombstones: the first run's too
    assert len(outcome.events()) == 1 and not forgetter.admit([rec("m5")])[0]


def test_a_forgotten_id_forgotten_again_keeps_its_first_forget(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    ix.index_batch([rec("e1"), rec("e2")])
    forgetter.apply(forget("first", entry_ids=["e1"]))
    second = forgetter.apply(forget("second", entry_ids=["e1", "e2"]))
    assert (second.memories, second.entry_ids) == (1, ["e2"])
    assert present(store, "ws-a", "e1", "e2") == set()


def test_a_forget_narrowed_to_an_agent_touches_only_that_agents_memories(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    """A bound token's forget (`agent_id` with `entry_ids` or `run_id`): the other agents' memories among the
    ids or of the run stay, and the ids of no memory yet (or of another agent's memory) are kept out for that
    agent only."""
    ix.index_batch([rec("mine"), rec("theirs", agent="agent-2"), rec("r-mine", run="run-x")])
    ix.index_batch([rec("r-theirs", agent="agent-2", run="run-x")])
    by_ids = forgetter.apply(forget("f-ids", entry_ids=["mine", "theirs", "coming"], agent_id="agent-1"))
    # another agent's id counts as an id of no memory (tombstoned for agent-1 only): the answer is the same
    assert by_ids.memories == 1 and by_ids.entry_ids == ["coming", "mine", "theirs"]
    assert present(store, "ws-a", "mine", "theirs") == {"theirs"}
    later = T + timedelta(minutes=1)
    arriving = [rec("coming", ts=later, accepted=later), rec("coming", agent="agent-2", ts=later, accepted=later)]
    kept, out = forgetter.admit(arriving)
    assert [r.agent_id for r in kept] == ["agent-2"] and [r.agent_id for r in out] == ["agent-1"]
    # a later forget of the same id for every agent widens the tombstone
    forgetter.apply(forget("f-all-agents", entry_ids=["coming"]))
    assert forgetter.admit(arriving)[0] == []

    by_run = forgetter.apply(forget("f-run", run_id="run-x", agent_id="agent-1"), Position(0, 5))
    assert by_run.memories == 1 and by_run.entry_ids == ["r-mine"] and by_run.forget.selector.kind == "run_id"
    assert present(store, "ws-a", "r-mine", "r-theirs") == {"r-theirs"}
    on_its_way = [rec("late-mine", run="run-x"), rec("late-theirs", agent="agent-2", run="run-x")]
    assert [r.id for r in forgetter.admit(on_its_way)[0]] == ["late-theirs"]


def test_the_health_ledger_does_not_count_what_a_forget_took_or_keeps_out(
    store: MemoryStore, state: StateStore, ix: Indexer, forgetter: Forgetter
) -> None:
    from episodic.maintenance.health_inputs import Ledger, accepted_ids

    later = T + timedelta(hours=1)
    indexed = [
        rec("e1", "the checkout ran out of memory"),
        rec("e2", "the deploy of the api failed"),
        rec("other", "another agent's note", agent="agent-2", run="r2"),
    ]
    ix.index_batch(indexed)
    ledger = Ledger(state)
    ledger.record(indexed)
    forgetter.apply(forget("f-id", entry_ids=["e1"]))
    forgetter.apply(forget("f-run", run_id="r2", agent_id="agent-1"))
    # on their way when the run was forgotten (the consumer keeps it out), and written after it (a new memory)
    late, new = rec("r2-old", run="r2"), rec("r2-new", run="r2", ts=later, accepted=later)
    kept, out = forgetter.admit([late, new])
    assert [r.id for r in kept] == ["r2-new"] and [r.id for r in out] == ["r2-old"]
    ledger.record([late, new])
    # e1 was removed (tombstoned), r2-old is kept out; another agent's entry of the run was not selected
    assert set(accepted_ids(state, "ws-a")) == {"e2", "other", "r2-new"}


def test_a_rule_is_retired_when_nothing_it_covers_can_still_arrive(
    store: MemoryStore, state: StateStore, ix: Indexer
) -> None:
    from episodic.lifecycle.forget import RULE_HORIZON

    early = Forgetter(store=store, state=state, clock=lambda: T)
    early.apply(forget("f-old", agent_id="agent-1"), Position(0, 1))
    assert [r["forget_id"] for r in state.get(RULES, "ws-a")["rules"]] == ["f-old"]  # type: ignore[index]
    much_later = T + RULE_HORIZON + timedelta(days=1)
    late = Forgetter(store=store, state=state, clock=lambda: much_later)
    f2 = ForgetRecord(
        forget_id="f-new", workspace_id="ws-a", selector=ForgetSelector(agent_id="agent-2"), requested_at=much_later
    )
    late.apply(f2, Position(0, 2))
    assert [r["forget_id"] for r in state.get(RULES, "ws-a")["rules"]] == ["f-new"]  # type: ignore[index]


def test_a_forget_covers_every_id_its_memory_absorbed_not_only_the_kept_aliases(
    store: MemoryStore, state: StateStore, bm25: Bm25Encoder, forgetter: Forgetter
) -> None:
    """The 30 heartbeats: a memory keeps its newest 20 alias ids; a re-delivery of an older duplicate id,
    pushed out of the list, used to index the forgotten text again as a new memory."""
    ix = Indexer(store=store, embedder=None, bm25=bm25, alias_limit=20)
    beats = [rec(f"hb-{i}", "heartbeat: all green", ts=T - timedelta(minutes=60 - i)) for i in range(30)]
    ix.index_batch(beats)
    owner = store.retrieve([point_id("ws-a", "hb-0")])[point_id("ws-a", "hb-0")]
    assert owner["occurrences"] == 30 and "hb-1" not in owner["aliases"]  # pushed out
    forgetter.apply(forget("f-hb", entry_ids=["hb-0"]))
    assert present(store, "ws-a", "hb-0") == set()
    again = [beats[1], beats[5], beats[29]]  # re-delivered: their original acceptance stamps
    kept, out = forgetter.admit(again)
    assert kept == [] and len(out) == 3
    # the same text accepted after the forget is a new memory
    fresh = rec("hb-new", "heartbeat: all green", ts=T + timedelta(minutes=1), accepted=T + timedelta(minutes=1))
    assert [r.id for r in forgetter.admit([fresh])[0]] == ["hb-new"]


def test_a_dead_lettered_forget_is_failed_and_its_early_rule_goes(
    store: MemoryStore, state: StateStore, forgetter: Forgetter
) -> None:
    """Issue 25: a forget the consumer could not decode was dead-lettered (`bad_control`) and stayed pending
    for ever, its early rule keeping the selection's entries out."""
    from episodic.lifecycle.forget import PENDING, status_document

    f = forget("f-bad", agent_id="agent-1")
    state.put(STATUS, "f-bad", status_document(f, PENDING))
    announce(state, f)
    assert state.get(EARLY, "f-bad") is not None
    raw = b'{"forget_id": "f-bad", "workspace_id": "ws-a", "selector": {"agent_id": 7}}'
    assert forgetter.fail_unreadable(raw, "selector.agent_id: expected str") == "f-bad"
    doc = state.get(STATUS, "f-bad")
    assert doc is not None and doc["status"] == "failed" and "bad_control" in doc["failure"]
    assert state.get(EARLY, "f-bad") is None
    # bytes that name no known forget (or another workspace's) settle nothing
    assert forgetter.fail_unreadable(b"not json", "x") is None
    assert forgetter.fail_unreadable(b'{"forget_id": "f-bad", "workspace_id": "ws-b"}', "x") is None
    # a failed forget's early rule goes too (the store refused it)
    g = forget("f-refused", run_id="r1")
    announce(state, g)
    forgetter.fail(g, None, "the store refused it")
    assert state.get(EARLY, "f-refused") is None and state.get(STATUS, "f-refused")["status"] == "failed"  # type: ignore[index]
