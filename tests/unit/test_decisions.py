"""The indexer's per-record decision (episodic.indexing.decisions): a table of every outcome, and properties
over random batches against a model of the store that applies the decisions as the indexer writes them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodic.domain.identity import dedup_key, point_id
from episodic.indexing.decisions import Decision, Known, Outcome, absorbed, decide, tally, version_key
from schemas.events import EmbeddableRecord

WS = "ws"
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def rec(eid: str, text: str = "the pager code is 4471", *, agent: str = "alice", minute: int = 0,
        accepted: int = 0) -> EmbeddableRecord:  # fmt: skip
    return EmbeddableRecord.from_dict(
        {
            "id": eid,
            "workspace_id": WS,
            "agent_id": agent,
            "ts": (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z"),
            "entry_type": "summary.generated",
            "severity": "info",
            "summary": text,
            "base_importance": 0.7,
            "accepted_at": T0 + timedelta(minutes=minute, seconds=1 + accepted),
        }
    )


def stored(r: EmbeddableRecord) -> dict[str, Any]:
    """The payload fields the decisions read, as the indexer stores them."""
    return {
        "entry_id": r.id,
        "agent_id": r.agent_id,
        "summary": r.summary,
        "entry_type": r.entry_type,
        "ts": r.ts,
        "accepted_at": r.accepted_at.isoformat().replace("+00:00", "Z"),
    }


def pid(eid: str) -> str:
    return point_id(WS, eid)


A, B = rec("a"), rec("b")
OTHER = rec("a", "the pager code is 4471", agent="mallory")
# (case, records, what the store held about each, the outcomes expected)
TABLE: list[tuple[str, list[EmbeddableRecord], list[Known], list[Outcome]]] = [
    ("new", [A], [Known()], [Outcome.NEW]),
    ("tombstoned", [A], [Known(forgotten=True)], [Outcome.TOMBSTONED]),
    ("tombstoned before taken", [OTHER], [Known(stored=stored(A), forgotten=True)], [Outcome.TOMBSTONED]),
    ("same (re-delivery)", [A], [Known(stored=stored(A))], [Outcome.SAME]),
    ("same text, newer ts", [rec("a", minute=5)], [Known(stored=stored(A))], [Outcome.NEWER]),
    ("same text, older ts", [rec("a", minute=-5)], [Known(stored=stored(A))], [Outcome.SAME]),
    (
        "in batch: another entry type, older",
        [A, msgspec.structs.replace(rec("a", minute=-5), entry_type="peer.escalation")],
        [Known()] * 2,
        [Outcome.NEW, Outcome.STALE],
    ),
    (
        "same text, another entry type, older",
        [msgspec.structs.replace(rec("a", minute=-5), entry_type="peer.escalation")],
        [Known(stored=stored(A))],
        [Outcome.STALE],
    ),
    ("newer by ts", [rec("a", "x", minute=5)], [Known(stored=stored(A))], [Outcome.NEWER]),
    (
        "older by ts, accepted later",
        [rec("a", "x", minute=-5, accepted=600)],
        [Known(stored=stored(A))],
        [Outcome.STALE],
    ),
    ("same ts, accepted later", [rec("a", "x", accepted=30)], [Known(stored=stored(A))], [Outcome.NEWER]),
    ("same ts, accepted earlier", [rec("a", "x", accepted=-1)], [Known(stored=stored(A))], [Outcome.STALE]),
    ("taken: another agent's memory", [OTHER], [Known(stored=stored(A))], [Outcome.TAKEN]),
    (
        "taken: another agent's alias",
        [rec("z", agent="mallory")],
        [Known(holder=(pid("a"), stored(A)))],
        [Outcome.TAKEN],
    ),
    ("alias (an id the memory absorbed)", [rec("z")], [Known(holder=(pid("a"), stored(A)))], [Outcome.ALIAS]),
    ("duplicate of a stored memory", [B], [Known(twin=(pid("a"), stored(A)))], [Outcome.DUPLICATE]),
    ("in batch: duplicate", [A, B], [Known(), Known()], [Outcome.NEW, Outcome.DUPLICATE]),
    ("in batch: same id twice", [A, A], [Known(), Known()], [Outcome.NEW, Outcome.SAME]),
    ("in batch: newer after", [A, rec("a", "x", minute=1)], [Known(), Known()], [Outcome.NEW, Outcome.NEWER]),
    ("in batch: older after", [rec("a", "x", minute=1), A], [Known(), Known()], [Outcome.NEW, Outcome.STALE]),
    ("in batch: taken", [A, OTHER], [Known(), Known()], [Outcome.NEW, Outcome.TAKEN]),
    ("in batch: a duplicate's id again", [A, B, B], [Known()] * 3, [Outcome.NEW, Outcome.DUPLICATE, Outcome.ALIAS]),
    (
        "in batch: a duplicate's id by another agent",
        [A, B, rec("b", agent="mallory")],
        [Known()] * 3,
        [Outcome.NEW, Outcome.DUPLICATE, Outcome.TAKEN],
    ),
    (
        "in batch: a tombstoned record holds nothing",
        [A, OTHER],
        [Known(forgotten=True), Known()],
        [Outcome.TOMBSTONED, Outcome.NEW],
    ),
    (
        "in batch: a newer text leaves its old one",
        [A, rec("a", "x", minute=1), B],
        [Known()] * 3,
        [Outcome.NEW, Outcome.NEWER, Outcome.NEW],
    ),
    (
        "a stored twin the batch gave another text",
        [rec("a", "x", minute=1), B],
        [Known(stored=stored(A)), Known(twin=(pid("a"), stored(A)))],
        [Outcome.NEWER, Outcome.NEW],
    ),
]


@pytest.mark.parametrize(("case", "records", "known", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_each_outcome(case: str, records: list[EmbeddableRecord], known: list[Known], expected: list[Outcome]) -> None:
    assert [d.outcome for d in decide(records, known)] == expected


def test_what_a_decision_names() -> None:
    """Duplicates and aliases act on the owner's point and name its entry id; a refusal carries its error,
    naming no other agent; a decision against the batch names the record it follows."""
    dup, again, taken = decide([A, B, B, OTHER], [Known()] * 4)[1:]
    assert (dup.point_id, dup.owner) == (pid("a"), "a") and (again.point_id, again.owner) == (pid("a"), "a")
    assert taken.error is not None and "mallory" in taken.error and "alice" not in taken.error
    assert decide([A, A], [Known()] * 2)[1].after == 0
    assert decide([rec("z")], [Known(holder=(pid("a"), stored(A)))])[0] == Decision(Outcome.ALIAS, pid("a"), "a")
    with pytest.raises(ValueError, match="facts"):
        decide([A], [])


def test_three_hundred_duplicates_are_three_hundred_occurrences() -> None:
    """Issue 45 part 3: a batch of 300 identical heartbeats; whatever the alias list keeps, the memory
    absorbs 299 ids (and its own is the 300th)."""
    beats = [rec(f"hb-{i}", "heartbeat ok") for i in range(300)]
    decisions = decide(beats, [Known()] * 300)
    assert tally(decisions)[Outcome.NEW] == 1 and tally(decisions)[Outcome.DUPLICATE] == 299
    assert {p: len(ids) for p, ids in absorbed(beats, decisions).items()} == {pid("hb-0"): 299}


def test_version_key_of_a_memory_without_stamps_is_oldest() -> None:
    assert version_key({}) < version_key(A) and version_key({"ts": "not a time"}) < version_key(A)
    assert version_key(stored(A)) == version_key(A)


# -- properties: a model of the store, and the decisions applied as the indexer writes them ------------------


@dataclass
class Memory:
    entry_id: str
    agent_id: str
    summary: str
    entry_type: str
    ts: str
    accepted_at: str
    ids: list[str] = field(default_factory=list)  # absorbed ids, in order
    occurrences: int = 1

    def payload(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "agent_id": self.agent_id, "summary": self.summary,
                "entry_type": self.entry_type, "ts": self.ts, "accepted_at": self.accepted_at}  # fmt: skip


@dataclass
class Model:
    memories: dict[str, Memory] = field(default_factory=dict)  # point id -> memory
    held: dict[str, str] = field(default_factory=dict)  # absorbed id -> point id
    forgotten: set[str] = field(default_factory=set)  # ids a forget covers

    def key_of(self, m: Memory) -> str:
        return dedup_key(WS, m.agent_id, m.entry_type, m.summary)

    def known(self, records: list[EmbeddableRecord]) -> list[Known]:
        keys = {self.key_of(m): p for p, m in self.memories.items()}
        out = []
        for r in records:
            mine = self.memories.get(pid(r.id))
            holder = self.held.get(r.id)
            twin = keys.get(dedup_key(WS, r.agent_id, r.entry_type, r.summary))
            out.append(
                Known(
                    stored=mine.payload() if mine else None,
                    holder=(holder, self.memories[holder].payload()) if holder else None,
                    twin=(twin, self.memories[twin].payload()) if twin else None,
                    forgotten=r.id in self.forgotten,
                )
            )
        return out

    def apply(self, records: list[EmbeddableRecord]) -> list[Decision]:
        """Decide the batch, then write it as the indexer does."""
        decisions = decide(records, self.known(records))
        for r, d in zip(records, decisions, strict=True):
            stamp = r.accepted_at.isoformat().replace("+00:00", "Z")
            if d.outcome is Outcome.NEW:
                self.memories[d.point_id] = Memory(r.id, r.agent_id, r.summary, r.entry_type, r.ts, stamp)
            elif d.outcome is Outcome.NEWER:
                m = self.memories[d.point_id]
                m.summary, m.entry_type, m.ts, m.accepted_at = r.summary, r.entry_type, r.ts, stamp
            elif d.outcome is Outcome.DUPLICATE:
                m = self.memories[d.point_id]
                m.ids.append(r.id)
                m.occurrences += 1
                self.held[r.id] = d.point_id
        return decisions


IDS = st.sampled_from([f"e{i}" for i in range(6)])
TEXTS = st.sampled_from(["heartbeat ok", "the pager code is 4471", "deploy blocked", "deploy unblocked"])
AGENTS = st.sampled_from(["alice", "mallory"])
RECORDS = st.builds(rec, IDS, TEXTS, agent=AGENTS, minute=st.integers(0, 3), accepted=st.integers(0, 90))
STREAMS = st.lists(RECORDS, max_size=24)
CUTS = st.lists(st.integers(0, 24), max_size=4)


def batches(stream: list[EmbeddableRecord], cuts: list[int]) -> list[list[EmbeddableRecord]]:
    edges = [0, *sorted({min(c, len(stream)) for c in cuts}), len(stream)]
    return [stream[a:b] for a, b in pairwise(edges) if b > a]


@settings(max_examples=150, deadline=None)
@given(STREAMS, CUTS, st.sets(IDS, max_size=2))
def test_a_stream_ends_the_same_however_it_is_batched(
    stream: list[EmbeddableRecord], cuts: list[int], forgotten: set[str]
) -> None:
    """Deciding records batch by batch, in any cut, gives the outcomes and the store that deciding them one at
    a time gives: no in-batch branch decides otherwise than the store would."""
    whole, single = Model(forgotten=set(forgotten)), Model(forgotten=set(forgotten))
    got = [d.outcome for batch in batches(stream, cuts) for d in whole.apply(batch)]
    want = [d.outcome for r in stream for d in single.apply([r])]
    assert got == want
    assert settled(whole) == settled(single)


def settled(model: Model) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[int, list[str]]], dict[str, str]]:
    """The store up to one choice it leaves open: when a newer version gives a memory the text of another, both
    are that text's memories and either may absorb a later duplicate (the store's `find_by_dedup_keys` answers
    one of them). So: every memory's own fields; per text, its occurrences and absorbed ids together; per
    absorbed id, the text of the memory that holds it."""
    own = {p: (m.entry_id, m.agent_id, m.summary, m.entry_type, m.ts, m.accepted_at) for p, m in model.memories.items()}
    by_text: dict[str, tuple[int, list[str]]] = {}
    for m in model.memories.values():
        occ, ids = by_text.get(model.key_of(m), (0, []))
        by_text[model.key_of(m)] = (occ + m.occurrences, sorted([*ids, *m.ids]))
    held = {e: model.key_of(model.memories[p]) for e, p in model.held.items()}
    return own, by_text, held


@settings(max_examples=150, deadline=None)
@given(STREAMS, CUTS, st.sets(IDS, max_size=2))
def test_every_record_is_decided_once_and_counted_once(
    stream: list[EmbeddableRecord], cuts: list[int], forgotten: set[str]
) -> None:
    model = Model(forgotten=set(forgotten))
    seen: Counter[Outcome] = Counter()
    first_agent: dict[str, str] = {}  # id -> the agent whose record first made or joined a memory with it
    for batch in batches(stream, cuts):
        decisions = model.apply(batch)
        assert len(decisions) == len(batch)
        counts = tally(decisions)
        assert sum(counts.values()) == len(batch) and set(counts) == set(Outcome)
        assert sum(len(v) for v in absorbed(batch, decisions).values()) == counts[Outcome.DUPLICATE]
        seen.update(counts)
        for r, d in zip(batch, decisions, strict=True):
            assert (d.outcome is Outcome.TOMBSTONED) == (r.id in forgotten)
            if d.outcome in (Outcome.NEW, Outcome.DUPLICATE):
                first_agent.setdefault(r.id, r.agent_id)
            if d.outcome is Outcome.TAKEN:  # held, and by another agent
                assert r.id in first_agent and first_agent[r.id] != r.agent_id
            elif d.outcome is not Outcome.TOMBSTONED:
                assert first_agent.get(r.id, r.agent_id) == r.agent_id
    # the store: every memory counts every id it stands for, no id stands in two memories, all one agent's
    assert seen[Outcome.NEW] == len(model.memories)
    ids = [i for m in model.memories.values() for i in (m.entry_id, *m.ids)]
    assert len(ids) == len(set(ids))
    for m in model.memories.values():
        assert m.occurrences == 1 + len(m.ids)
        assert all(first_agent[i] == m.agent_id for i in (m.entry_id, *m.ids))
    assert sum(m.occurrences for m in model.memories.values()) == seen[Outcome.NEW] + seen[Outcome.DUPLICATE]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.builds(rec, st.just("x"), TEXTS, minute=st.integers(0, 3), accepted=st.integers(0, 90)),
                min_size=1, max_size=12), CUTS)  # fmt: skip
def test_the_newest_version_wins_in_any_order(versions: list[EmbeddableRecord], cuts: list[int]) -> None:
    """One agent's versions of one id, sent in any order and batching: the memory holds the newest by
    (ts, acceptance stamp), whichever came last."""
    model = Model()
    for batch in batches(versions, cuts):
        model.apply(batch)
    newest = max(version_key(v) for v in versions)
    m = model.memories[pid("x")]
    assert version_key(m.payload()) == newest  # (of two texts with one stamp, the later in the stream wins)
    assert m.summary in {v.summary for v in versions if version_key(v) == newest}
