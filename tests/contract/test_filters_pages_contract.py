"""Recall filters inside the store query, and pages of memories newest first, on every engine.

A filtered recall must return k hits when k memories pass the filter, even when the k best unfiltered
memories are all filtered out: the conditions are in every leg's filter, never applied to a top-k.
"""

from __future__ import annotations

import random

import pytest

from episodic.kernel.ports import MemoryStore, PagePosition, RecallFilter, ScopeFilter, Selection
from episodic.store.facade import QdrantStore
from episodic.store.sparse import Bm25Encoder
from tests.contract.conftest import MakePoint, e, mix

QUERY = "checkout ran out of memory"


def own(**filters: object) -> ScopeFilter:
    return ScopeFilter(workspace_id="ws-a", scope="own", agent_id="agent-1", filters=RecallFilter(**filters))  # type: ignore[arg-type]


def _ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.payload["entry_id"] for h in hits]


@pytest.fixture
def crowded(store: MemoryStore, mk: MakePoint) -> MemoryStore:
    """12 memories: the 6 closest to the query (axis 0, the query's words) are run r-now, info, crew-1,
    January; 6 farther ones are spread over other runs, severities, types, crews and months."""
    points = []
    for i in range(6):
        points.append(
            mk(
                f"near{i}",
                f"{QUERY} again {i}",
                mix((0, 1.0), (1, 0.05 * i)),
                run_id="r-now",
                ts=f"2026-01-0{i + 1}T10:00:00Z",
            )
        )
    far = [
        ("far0", "r-old", "warn", "peer.escalation", "crew-1", "2026-02-01T00:00:00Z"),
        ("far1", "r-old", "error", "approval.denied", "crew-2", "2026-02-15T12:30:00.5Z"),
        ("far2", None, "info", "summary.generated", "crew-1", "2026-03-01T00:00:00+02:00"),
        ("far3", "r-old", "debug", "summary.generated", "crew-1", "2026-03-10T00:00:00Z"),
        ("far4", "r-2", "warn", "summary.generated", None, "2026-04-01T00:00:00Z"),
        ("far5", "r-2", "error", "peer.escalation", "crew-2", "2026-05-01T00:00:00Z"),
    ]
    for n, (eid, run, sev, et, crew, ts) in enumerate(far):
        points.append(
            mk(
                eid,
                f"memory about something else entirely {n}",
                mix((0, 0.3), (2 + n, 1.0)),
                run_id=run,
                severity=sev,
                entry_type=et,
                crew=crew,
                ts=ts,
            )
        )
    store.upsert(points)
    return store


def test_a_filtered_recall_returns_k_hits_when_the_unfiltered_top_k_are_all_excluded(
    crowded: MemoryStore, bm25: Bm25Encoder
) -> None:
    q, sparse = e(0), bm25.query(QUERY)
    unfiltered = _ids(crowded.query_dense(q, own(), 3))
    assert all(i.startswith("near") for i in unfiltered)
    from episodic.kernel.ports import Fusion

    for run in (
        lambda s: crowded.query_dense(q, s, 3),
        lambda s: crowded.query_sparse(sparse, s, 3),
        lambda s: crowded.query_hybrid(q, sparse, s, 3, Fusion(prefetch_limit=3)),
    ):
        hits = _ids(run(own(exclude_run_id="r-now")))
        assert len(hits) == 3 and not any(h.startswith("near") for h in hits), hits
    # memories without a run are not excluded by exclude_run_id
    assert "far2" in _ids(crowded.query_dense(q, own(exclude_run_id="r-old"), 12))


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"run_id": "r-old"}, {"far0", "far1", "far3"}),
        ({"exclude_run_id": "r-now"}, {"far0", "far1", "far2", "far3", "far4", "far5"}),
        ({"entry_types": ("peer.escalation", "approval.denied")}, {"far0", "far1", "far5"}),
        ({"severities": ("warn", "error")}, {"far0", "far1", "far4", "far5"}),
        ({"crew_id": "crew-2"}, {"far1", "far5"}),
        # since inclusive, until exclusive, instants compared across offsets and fractions of a second
        ({"since": "2026-02-15T12:30:00.5Z"}, {"far1", "far2", "far3", "far4", "far5"}),
        ({"since": "2026-02-15T12:30:00.6Z"}, {"far2", "far3", "far4", "far5"}),
        ({"until": "2026-01-03T10:00:00Z"}, {"near0", "near1"}),
        ({"since": "2026-02-28T22:00:00Z", "until": "2026-04-01T00:00:00Z"}, {"far2", "far3"}),
        ({"since": "2026-03-01T00:00:00+02:00", "until": "2026-03-01T00:00:00.000001+02:00"}, {"far2"}),
        ({"run_id": "r-2", "severities": ("error",), "until": "2026-06-01T00:00:00Z"}, {"far5"}),
        ({"run_id": "nope"}, set()),
    ],
)
def test_each_filter_on_every_query_leg(
    crowded: MemoryStore, bm25: Bm25Encoder, filters: dict[str, object], expected: set[str]
) -> None:
    from episodic.kernel.ports import Fusion

    scope = own(**filters)
    assert set(_ids(crowded.query_dense(e(0), scope, 12))) == expected
    assert set(_ids(crowded.query_hybrid(e(0), bm25.query("memory"), scope, 12, Fusion()))) == expected
    lexical = set(_ids(crowded.query_sparse(bm25.query("memory"), scope, 12)))
    assert lexical <= expected and (lexical or not expected)  # every text holds "memory"


def test_filters_stay_inside_the_scope_and_the_workspace(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [
            mk("mine", "deploy", e(0), run_id="r1"),
            mk("other-agent", "deploy", e(0), agent="agent-2", run_id="r1"),
            mk("other-ws", "deploy", e(0), ws="ws-b", run_id="r1"),
        ]
    )
    assert _ids(store.query_dense(e(0), own(run_id="r1"), 5)) == ["mine"]
    assert _ids(store.find_entries(own(run_id="r2"), ["mine"])) == []  # the walk is filtered too


# -- pages ---------------------------------------------------------------------------------------------------


def _all_pages(store: MemoryStore, sel: Selection, limit: int) -> list[str]:
    out: list[str] = []
    after: PagePosition | None = None
    for _ in range(1000):
        rows, after = store.page(sel, after, limit)
        assert len(rows) <= limit
        out += [p["entry_id"] for _, p in rows]
        if after is None:
            return out
        assert len(rows) == limit  # only the last page is short
    raise AssertionError("pages never ended")


def test_pages_are_newest_first_with_stable_ties_at_any_page_size(store: MemoryStore, mk: MakePoint) -> None:
    rnd = random.Random(4)
    # 40 memories over 7 instants (ties of up to 13), one with a fraction of a second, one with an offset
    stamps = [f"2026-03-0{d}T08:00:00Z" for d in range(1, 6)] + ["2026-03-03T08:00:00.25Z", "2026-03-04T10:00:00+02:00"]
    points = [mk(f"m{i:02d}", f"memory {i}", e(i % 8), ts=rnd.choice(stamps)) for i in range(40)]
    store.upsert(points)
    assert isinstance(store, QdrantStore)
    everything = [p["entry_id"] for _, p in store.page(Selection("ws-a"), None, 100)[0]]
    assert sorted(everything) == sorted(p.payload["entry_id"] for p in points)
    by_id = {p.payload["entry_id"]: p for p in points}
    from episodic.domain.scoring import parse_time as parse_ts

    instants = [parse_ts(by_id[i].payload["ts"]) for i in everything]
    assert instants == sorted(instants, reverse=True)  # newest first
    ties = [(parse_ts(by_id[i].payload["ts"]), by_id[i].point_id) for i in everything]
    assert ties == sorted(ties, key=lambda t: (-t[0].timestamp(), t[1]))  # ties by point id
    for limit in (1, 3, 7, 13, 40, 41):
        assert _all_pages(store, Selection("ws-a"), limit) == everything, limit


def test_pages_filter_and_hold_their_place_when_memories_come_and_go(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [mk(f"a{i}", f"a {i}", e(0), run_id="r1", ts=f"2026-01-{10 + i:02d}T00:00:00Z") for i in range(6)]
        + [
            mk(
                f"b{i}",
                f"b {i}",
                e(1),
                agent="agent-2",
                run_id="r2",
                entry_type="peer.escalation",
                ts=f"2026-01-{10 + i:02d}T00:00:00Z",
                crew="crew-2" if i % 2 else "crew-1",
            )
            for i in range(4)
        ]
        + [mk("elsewhere", "x", e(2), ws="ws-b", ts="2026-01-30T00:00:00Z")]
    )
    assert _all_pages(store, Selection("ws-a", crew_id="crew-2"), 4) == ["b3", "b1"]
    assert _all_pages(store, Selection("ws-a", crew_id="crew-1", agent_id="agent-2"), 4) == ["b2", "b0"]
    assert _all_pages(store, Selection("ws-a", agent_id="agent-1"), 4) == [f"a{i}" for i in range(5, -1, -1)]
    assert _all_pages(store, Selection("ws-a", run_id="r2"), 4) == ["b3", "b2", "b1", "b0"]
    assert _all_pages(store, Selection("ws-a", entry_types=("peer.escalation", "nope")), 3) == ["b3", "b2", "b1", "b0"]
    assert len(_all_pages(store, Selection("ws-a"), 3)) == 10
    assert _all_pages(store, Selection("ws-c"), 3) == []
    sel = Selection("ws-a", agent_id="agent-1")
    first, after = store.page(sel, None, 2)
    assert [p["entry_id"] for _, p in first] == ["a5", "a4"] and after is not None
    # a newer memory arrives and the page's last one is forgotten: the next page neither repeats nor skips
    store.upsert([mk("a-new", "new", e(0), ts="2026-02-01T00:00:00Z")])
    store.delete([pid for pid, p in first if p["entry_id"] == "a4"])
    second, _ = store.page(sel, after, 2)
    assert [p["entry_id"] for _, p in second] == ["a3", "a2"]


def test_select_finds_every_memory_of_a_selection(store: MemoryStore, mk: MakePoint) -> None:
    store.upsert(
        [mk(f"x{i}", f"x {i}", e(i % 8), run_id=f"r{i % 3}", agent=f"agent-{i % 2}") for i in range(300)]
        + [mk("x0", "same id, other workspace", e(0), ws="ws-b", run_id="r0")]
    )
    assert len(list(store.select(Selection("ws-a")))) == 300  # more than one scroll page
    got = {p["entry_id"] for _, p in store.select(Selection("ws-a", run_id="r0", agent_id="agent-0"))}
    assert got == {f"x{i}" for i in range(300) if i % 3 == 0 and i % 2 == 0}
    assert all(p["workspace_id"] == "ws-b" for _, p in store.select(Selection("ws-b")))
