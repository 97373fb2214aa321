"""The store's engine-neutral query description (episodic.store.query): scopes, legs, fusion, lowering. No IO."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from episodic.kernel.ports import Fusion, RecallFilter, ScopeFilter, Selection, SparseVec
from episodic.store.query import (
    AtLeast,
    DatetimeRange,
    DenseLeg,
    Filter,
    Fused,
    HasDense,
    IsEmpty,
    Lowering,
    Match,
    MatchAny,
    Query,
    RawScore,
    SparseLeg,
    TimesImportance,
    Vocabulary,
    at_time,
    before_time,
    count_filter,
    dense_leg,
    hybrid_prefetch,
    in_workspace,
    lexical_factor,
    lexically_scaled,
    nearest_filter,
    off_graph,
    rare_term_idf,
    scope_filter,
    selection_filter,
    sparse_leg,
    who_filter,
)

WS = Match("workspace_id", "ws-a")
OWN = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="ag")
SPARSE = SparseVec([3, 9], [1.0, 2.0])


VISIBLE = IsEmpty("folded_into")  # a near duplicate folded into another memory is seen through that memory
# written by it, and not folded into another of its own memories (one folded into another agent's stays its own)
MINE = Filter(must=(Match("agent_id", "ag"), Filter(should=(VISIBLE, Match("fold_scope", "crew")))))


def test_own_scope_is_the_agents_memories_in_the_workspace() -> None:
    assert scope_filter(OWN) == Filter(must=(WS, MINE))


def test_crew_shared_scope_is_own_or_the_crews_high_value() -> None:
    scope = ScopeFilter(workspace_id="ws-a", scope="crew_shared", agent_id="ag", crew_id="c", high_value=0.7)
    high = AtLeast("importance_score", 0.7)
    crew_high = Filter(must=(Match("crew_id", "c"), high))
    # the agent's own memories whatever their crew (none included), or the crew's high-value ones
    mine_or_crew = Filter(should=(MINE, Filter(must=(*crew_high.must, VISIBLE))))
    assert scope_filter(scope) == Filter(must=(WS, mine_or_crew))
    no_agent = ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="c", high_value=0.7)
    assert scope_filter(no_agent) == Filter(must=(WS, Match("crew_id", "c"), high, VISIBLE))


def test_every_scope_filter_starts_with_the_workspace() -> None:
    for scope in (OWN, ScopeFilter(workspace_id="w2", scope="crew_shared", crew_id="c")):
        assert scope_filter(scope).must[0] == Match("workspace_id", scope.workspace_id)


@pytest.mark.parametrize(
    ("ws", "has_dense", "expected"),
    [
        (None, None, None),
        ("ws-a", None, Filter(must=(WS,))),
        ("ws-a", True, Filter(must=(WS, HasDense()))),
        ("ws-a", False, Filter(must=(WS,), must_not=(HasDense(),))),
        (None, True, Filter(must=(HasDense(),))),
        (None, False, Filter(must_not=(HasDense(),))),
    ],
)
def test_count_filter(ws: str | None, has_dense: bool | None, expected: Filter | None) -> None:
    assert count_filter(ws, has_dense) == expected


def test_dense_leg_holds_plain_floats() -> None:
    leg = dense_leg(list(np.array([1, 0.5], dtype=np.float32)), Filter(), 10)
    assert leg.vector == [1.0, 0.5]
    assert all(type(x) is float for x in leg.vector)


def test_sparse_leg_takes_idf_over_the_workspace_not_the_scope() -> None:
    flt = scope_filter(OWN)
    leg = sparse_leg(SPARSE, OWN, flt, 20)
    assert leg.filter is flt
    assert leg.idf == in_workspace("ws-a") == Filter(must=(WS,))
    assert leg.inner is None


def legs_of(fused: Fused) -> list[tuple[str, int, bool]]:
    """(kind, limit, has an inner leg) per leg."""
    return [
        ("dense", leg.limit, False) if isinstance(leg, DenseLeg) else ("sparse", leg.limit, leg.inner is not None)
        for leg in fused.legs
        if isinstance(leg, DenseLeg | SparseLeg)
    ]


def test_default_fusion_is_dense_plus_bm25_weighted_rrf() -> None:
    flt = scope_filter(OWN)
    fused = hybrid_prefetch([1.0, 0.0], SPARSE, OWN, flt, 50, Fusion(k=7, dense_weight=0.5, sparse_weight=2.0))
    assert legs_of(fused) == [("dense", 50, False), ("sparse", 50, False)]
    assert (fused.method, fused.k, fused.weights, fused.limit) == ("rrf", 7, (0.5, 2.0), 100)
    assert fused.filter is flt
    assert all(leg.filter is flt for leg in fused.legs if isinstance(leg, DenseLeg | SparseLeg))


def test_both_and_head_legs() -> None:
    fusion = Fusion(both_weight=3.0, head=5, head_weight=4.0)
    fused = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 40, fusion)
    assert legs_of(fused) == [("dense", 40, False), ("sparse", 40, False), ("sparse", 40, True), ("sparse", 5, False)]
    assert fused.weights == (1.0, 1.0, 3.0, 4.0)
    assert fused.limit == 160
    dense, lexical, both, head = fused.legs
    assert isinstance(both, SparseLeg) and both.inner is dense  # one dense leg, re-scored by BM25
    assert isinstance(lexical, SparseLeg) and isinstance(head, SparseLeg)
    assert lexical.idf is both.idf is head.idf


def test_the_context_leg_and_the_both_leg_by_context_fall_back_without_the_vector() -> None:
    from episodic.kernel.ports import CONTEXT
    from episodic.kernel.ports import SPARSE as TURN

    fusion = Fusion(k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True)
    fused = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 100, fusion, context=True)
    assert [(getattr(leg, "using", "dense"), leg.limit) for leg in fused.legs] == [
        ("dense", 100), (TURN, 100), (CONTEXT, 100), (TURN, 5), (CONTEXT, 100),
    ]  # fmt: skip
    assert fused.weights == (1.0, 1.0, 0.5, 0.75, 1.0) and fused.limit == 500
    old = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 100, fusion, context=False)
    assert [getattr(leg, "using", "dense") for leg in old.legs] == ["dense", TURN, TURN, TURN]  # the four legs
    off = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 100, Fusion(context_weight=0.0), context=True)
    assert [getattr(leg, "using", "dense") for leg in off.legs] == ["dense", TURN]


def test_a_named_time_adds_each_searching_leg_again_over_that_time() -> None:
    from episodic.kernel.ports import CONTEXT

    may = (("2023-05-01T00:00:00Z", "2023-06-01T00:00:00Z"), ("2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z"))
    fusion = Fusion(k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True)
    timed = hybrid_prefetch(
        [1.0], SPARSE, OWN, flt := scope_filter(OWN), 100, replace(fusion, time_weight=0.5, when=may), context=True
    )
    plain = hybrid_prefetch([1.0], SPARSE, OWN, flt, 100, fusion, context=True)
    assert timed.legs[:5] == plain.legs and timed.weights[:5] == plain.weights
    # the dense, BM25 and context legs once more (not the re-scored leg, not the top 5), at half their weight
    extra = timed.legs[5:]
    assert [(type(leg).__name__, getattr(leg, "using", "dense"), leg.limit) for leg in extra] == [
        ("DenseLeg", "dense", 100), ("SparseLeg", "bm25", 100), ("SparseLeg", CONTEXT, 100),
    ]  # fmt: skip
    assert timed.weights[5:] == (0.5, 0.5, 0.5) and timed.limit == 800
    spans = Filter(should=tuple(DatetimeRange("ts", gte=a, lt=b) for a, b in may))
    for leg in extra:
        assert isinstance(leg, DenseLeg | SparseLeg)
        assert leg.filter == Filter(must=(*flt.must, spans), should=flt.should, must_not=flt.must_not)
    assert all(isinstance(leg, SparseLeg) and leg.idf == in_workspace("ws-a") for leg in extra[1:])  # IDF unchanged
    assert off_graph(extra[0].filter)  # the dense time leg searches with ACORN (ts has no graphs)
    # no time named, or the weight 0: no time legs
    assert hybrid_prefetch([1.0], SPARSE, OWN, flt, 100, replace(fusion, when=may), context=True) == plain


def test_the_five_legs_run_their_dense_legs_on_the_named_generation() -> None:
    from episodic.kernel.ports import CONTEXT

    fusion = Fusion(k=3, both_weight=0.5, head=5, head_weight=0.75, context_weight=1.0, both_by_context=True)
    fused = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 100, fusion, "dense_1", context=True)
    dense, _, both, _, _ = fused.legs
    assert isinstance(dense, DenseLeg) and dense.using == "dense_1"
    assert isinstance(both, SparseLeg) and both.using == CONTEXT and both.inner is dense  # re-scored by C


def test_head_is_capped_by_the_leg_limit() -> None:
    fused = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 3, Fusion(head=10, head_weight=1.0))
    assert legs_of(fused)[-1] == ("sparse", 3, False)


def test_zero_weight_legs_are_left_out_under_rrf_but_kept_under_dbsf() -> None:
    rrf = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 10, Fusion(dense_weight=0.0))
    assert legs_of(rrf) == [("sparse", 10, False)]
    assert rrf.weights == (1.0,)
    dbsf = hybrid_prefetch([1.0], SPARSE, OWN, scope_filter(OWN), 10, Fusion(method="dbsf", dense_weight=0.0))
    assert legs_of(dbsf) == [("dense", 10, False), ("sparse", 10, False)]
    assert dbsf.method == "dbsf"


def test_an_empty_sparse_query_leaves_the_lexical_legs_out() -> None:
    fusion = Fusion(both_weight=1.0, head=3, head_weight=1.0)
    fused = hybrid_prefetch([1.0], SparseVec([], []), OWN, scope_filter(OWN), 10, fusion)
    assert legs_of(fused) == [("dense", 10, False)]
    assert fused.limit == 10


def test_all_weights_zero_still_rank_by_the_dense_leg() -> None:
    fusion = Fusion(dense_weight=0.0, sparse_weight=0.0)
    fused = hybrid_prefetch([1.0], SparseVec([], []), OWN, scope_filter(OWN), 10, fusion)
    assert legs_of(fused) == [("dense", 10, False)]
    assert fused.weights == (1.0,)


def test_queries_multiply_by_importance_with_the_neutral_default() -> None:
    q = Query(dense_leg([1.0], Filter(), 5), Filter(), 5)
    assert q.score == TimesImportance("importance_score", 0.5)
    assert q.with_dense is False


class Recorder(Vocabulary):
    """Builds tuples instead of engine objects and counts the calls, to see what is lowered how often."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.acorn: list[bool] = []

    def _rec(self, kind: str, *args: Any) -> tuple[Any, ...]:
        self.calls[kind] += 1
        return (kind, *args)

    def match(self, key: str, value: str) -> Any:
        return self._rec("match", key, value)

    def match_any(self, key: str, values: list[str]) -> Any:
        return self._rec("match_any", key, values)

    def at_least(self, key: str, gte: float) -> Any:
        return self._rec("at_least", key, gte)

    def datetime_range(self, key: str, gte: str | None, gt: str | None, lte: str | None, lt: str | None) -> Any:
        return self._rec("datetime_range", key, gte, gt, lte, lt)

    def has_dense(self) -> Any:
        return self._rec("has_dense")

    def is_empty(self, key: str) -> Any:
        return self._rec("is_empty", key)

    def has_id(self, ids: list[str]) -> Any:
        return self._rec("has_id", ids)

    def filter(self, must: list[Any] | None, should: list[Any] | None, must_not: list[Any] | None) -> Any:
        return self._rec("filter", must, should, must_not)

    def sparse_vector(self, indices: list[int], values: list[float]) -> Any:
        return self._rec("sparse_vector", indices, values)

    def dense_leg(self, vector: list[float], flt: Any, limit: int, using: str = "dense", *, acorn: bool = False) -> Any:
        self.acorn.append(acorn)
        return self._rec("dense_leg", vector, flt, limit)

    def sparse_leg(self, vector: Any, flt: Any, limit: int, idf: Any, inner: Any | None, using: str) -> Any:
        return self._rec("sparse_leg", vector, flt, limit, idf, inner, using)

    def fused(self, legs: list[Any], method: str, k: int, weights: list[float], flt: Any, limit: int) -> Any:
        return self._rec("fused", legs, method, k, weights, flt, limit)

    def piece_prior(self, inner: Any, key: str, penalty: float, flt: Any, limit: int) -> Any:
        return self._rec("piece_prior", inner, key, penalty, flt, limit)

    def times_importance(self, key: str, default: float) -> Any:
        return self._rec("times_importance", key, default)

    def raw_score(self) -> Any:
        return self._rec("raw_score")


def test_lowering_builds_each_shared_node_once_and_reuses_it() -> None:
    vocab = Recorder()
    flt = scope_filter(OWN)
    fusion = Fusion(both_weight=1.0, head=2, head_weight=1.0)
    query = Query(hybrid_prefetch([1.0, 0.0], SPARSE, OWN, flt, 10, fusion), flt, 5)
    lower = Lowering(vocab)
    fused, score, top = lower(query.prefetch), lower(query.score), lower(query.filter)
    # one scope filter (with its agent_id-or-agents filter), one idf filter; one dense leg; one sparse vector
    # for the three BM25 legs
    assert vocab.calls == Counter(
        filter=4, match=4, is_empty=1, dense_leg=1, sparse_vector=1, sparse_leg=3, fused=1, times_importance=1
    )
    kind, legs, method, k, weights, fused_filter, limit = fused
    assert (kind, method, k, weights, limit) == ("fused", "rrf", 60, [1.0, 1.0, 1.0, 1.0], 40)
    assert fused_filter is top
    dense, lexical, both, head = legs
    assert both[5] is dense and lexical[5] is None
    assert lexical[1] is both[1] is head[1]  # the same engine sparse vector
    assert head[3] == 2
    assert score == ("times_importance", "importance_score", 0.5)
    visible = ("filter", None, [("is_empty", "folded_into"), ("match", "fold_scope", "crew")], None)
    mine = ("filter", [("match", "agent_id", "ag"), visible], None, None)
    assert top == ("filter", [("match", "workspace_id", "ws-a"), mine], None, None)


def test_a_piece_penalty_wraps_the_dense_leg_once_and_the_re_scored_leg_reads_the_wrapped_one() -> None:
    vocab = Recorder()
    flt = scope_filter(OWN)
    fusion = Fusion(both_weight=0.5, head=5, head_weight=0.75, piece_penalty=0.08)
    fused = Lowering(vocab)(hybrid_prefetch([1.0, 0.0], SPARSE, OWN, flt, 100, fusion))
    dense, _, both, _ = fused[1]
    kind, inner, key, penalty, prior_filter, limit = dense
    assert (kind, key, penalty, limit) == ("piece_prior", "pieces", 0.08, 100)
    assert inner[0] == "dense_leg" and inner[3] == 200  # the raw top 2 x limit, re-ranked by the prior
    assert prior_filter is inner[2]
    assert both[5] is dense  # the BM25-re-scored leg re-scores the penalised candidates
    assert vocab.calls["dense_leg"] == 1 and vocab.calls["piece_prior"] == 1


def test_the_piece_prior_reads_the_count_of_the_generation_it_ranks() -> None:
    class Named(Recorder):
        def dense_leg(
            self, vector: list[float], flt: Any, limit: int, using: str = "dense", *, acorn: bool = False
        ) -> Any:
            return self._rec("dense_leg", vector, flt, limit, using)

    leg = DenseLeg([1.0], scope_filter(OWN), 10, "dense_1", piece_penalty=0.1)
    kind, inner, key, _, _, limit = Lowering(Named())(leg)
    assert (kind, key, limit, inner[4]) == ("piece_prior", "pieces_dense_1", 10, "dense_1")
    assert Lowering(Named())(DenseLeg([1.0], scope_filter(OWN), 10))[0] == "dense_leg"  # no penalty: as before


def test_lowering_conditions() -> None:
    lower = Lowering(Recorder())
    flt = Filter(must=(MatchAny("links", ("a", "b")), AtLeast("x", 0.5)), must_not=(HasDense(),))
    assert lower(flt) == (
        "filter",
        [("match_any", "links", ["a", "b"]), ("at_least", "x", 0.5)],
        None,
        [("has_dense",)],
    )


def test_lowering_a_datetime_range() -> None:
    lower = Lowering(Recorder())
    flt = Filter(must=(DatetimeRange("ts", gte="2026-01-01T00:00:00Z", lt="2026-02-01T00:00:00Z"),))
    assert lower(flt) == (
        "filter",
        [("datetime_range", "ts", "2026-01-01T00:00:00Z", None, None, "2026-02-01T00:00:00Z")],
        None,
        None,
    )


def test_recall_filters_narrow_the_scope_inside_the_filter() -> None:
    filters = RecallFilter(
        since="2026-01-01T00:00:00Z",
        until="2026-02-01T00:00:00Z",
        entry_types=("peer.escalation", "approval.denied"),
        severities=("warn", "error"),
        run_id="r1",
        exclude_run_id="r0",
        crew_id="c",
    )
    scope = ScopeFilter(workspace_id="ws-a", scope="own", agent_id="ag", filters=filters)
    assert scope_filter(scope) == Filter(
        must=(
            WS,
            MINE,
            DatetimeRange("ts", gte="2026-01-01T00:00:00Z", lt="2026-02-01T00:00:00Z"),
            MatchAny("entry_type", ("peer.escalation", "approval.denied")),
            MatchAny("severity", ("warn", "error")),
            Match("run_id", "r1"),
            Match("crew_id", "c"),
        ),
        must_not=(Match("run_id", "r0"),),
    )
    # only what is given; the scope's own structure (the crew_shared `should`) is kept as it is
    crew = ScopeFilter(workspace_id="ws-a", scope="crew_shared", crew_id="c", agent_id="ag")
    narrowed_crew = ScopeFilter(
        workspace_id="ws-a",
        scope="crew_shared",
        crew_id="c",
        agent_id="ag",
        filters=RecallFilter(since="2026-01-01T00:00:00Z"),
    )
    assert scope_filter(narrowed_crew) == Filter(
        must=(*scope_filter(crew).must, DatetimeRange("ts", gte="2026-01-01T00:00:00Z")),
        should=scope_filter(crew).should,
    )
    assert scope_filter(OWN) == who_filter(OWN)  # no filters: the scope alone


def test_a_selection_is_its_workspace_and_what_it_names() -> None:
    assert selection_filter(Selection("ws-a")) == Filter(must=(WS,))
    sel = Selection("ws-a", agent_id="ag", run_id="r", entry_types=("t1", "t2"))
    assert selection_filter(sel, at_time("2026-01-01T00:00:00Z")) == Filter(
        must=(
            WS,
            Match("agent_id", "ag"),
            Match("run_id", "r"),
            MatchAny("entry_type", ("t1", "t2")),
            DatetimeRange("ts", gte="2026-01-01T00:00:00Z", lte="2026-01-01T00:00:00Z"),
        )
    )
    assert before_time("2026-01-01T00:00:00Z") == DatetimeRange("ts", lt="2026-01-01T00:00:00Z")
    with pytest.raises(ValueError, match="workspace_id"):
        Selection("")


def test_lowering_an_unknown_node_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cannot lower"):
        Lowering(Recorder())(object())  # type: ignore[arg-type]


def test_the_shared_store_modules_import_no_engine() -> None:
    """The store's logic is engine-neutral: only the backends (store.edge, store.qdrant_server) import an engine,
    and the composition root (stack.stores) chooses one."""
    import ast
    from pathlib import Path

    import episodic

    engines = {"qdrant_edge", "qdrant_client", "episodic.store.edge", "episodic.store.qdrant_server"}
    root = Path(episodic.__file__).parent
    for name in ("store/facade.py", "store/query.py", "store/rules.py", "kernel/ports.py"):
        tree = ast.parse((root / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] in engines or m in engines}, name


def test_nearest_filter_is_the_workspace_with_vectors_without_the_memory_itself() -> None:
    assert nearest_filter("ws-a") == Filter(must=(WS, HasDense(), VISIBLE))
    assert nearest_filter("ws-a", ("e1", "alias")) == Filter(
        must=(WS, HasDense(), VISIBLE), must_not=(MatchAny("entry_id", ("e1", "alias")),)
    )


def test_a_raw_score_query_lowers_to_the_engines_raw_score() -> None:
    vocab = Recorder()
    flt = nearest_filter("ws-a", ("e1",))
    query = Query(dense_leg([1.0, 0.0], flt, 3), flt, 3, score=RawScore())
    assert Lowering(vocab)(query.score) == ("raw_score",)
    assert vocab.calls["times_importance"] == 0


def test_the_lexical_factor_counts_rare_term_idfs_and_stays_within_its_floor_and_one() -> None:
    unit = rare_term_idf(1000)
    assert unit == pytest.approx(math.log(1 + 999.5 / 1.5))
    assert lexical_factor(2 * unit, 1000, full=4.0, floor=0.25) == pytest.approx(0.5)  # half of "full"
    assert lexical_factor(9 * unit, 1000, full=4.0, floor=0.25) == 1.0  # a strong match: full weight
    assert lexical_factor(0.1 * unit, 1000, full=4.0, floor=0.25) == 0.25  # nothing distinctive: the floor
    assert lexical_factor(0.0, 0, full=4.0, floor=0.25) == 0.25  # no match, an empty workspace: no error
    assert lexical_factor(0.0, 1000, full=0.0, floor=0.25) == 1.0  # off
    # The same score is less evidence in a bigger workspace (IDF grows with ln N).
    assert lexical_factor(10.0, 100_000, 4.0, 0.25) < lexical_factor(10.0, 500, 4.0, 0.25)


def test_lexically_scaled_scales_every_bm25_based_leg_and_leaves_the_dense_leg() -> None:
    fusion = Fusion(
        k=3,
        dense_weight=2.5,
        sparse_weight=1.0,
        both_weight=0.5,
        head=5,
        head_weight=0.75,
        context_weight=1.0,
        piece_penalty=0.08,
        lexical_full=4.0,
    )
    assert lexically_scaled(fusion, 1.0) is fusion
    half = lexically_scaled(fusion, 0.5)
    assert (half.sparse_weight, half.both_weight, half.head_weight, half.context_weight) == (0.5, 0.25, 0.375, 0.5)
    assert (half.dense_weight, half.k, half.head, half.piece_penalty) == (2.5, 3, 5, 0.08)


def test_acorn_only_where_a_filter_narrows_on_a_field_without_graphs() -> None:
    """A scope alone (workspace, agent, crew, run: `rules.GRAPH_FIELDS`) has graphs of its own, so its dense
    leg searches without ACORN (which costs); a recall filtered by severity, entry type or a time window,
    or the crew's high-value memories (importance), searches with it; exclusions never count."""
    from episodic.kernel.ports import RecallFilter

    assert not off_graph(scope_filter(OWN))
    assert not off_graph(
        scope_filter(
            ScopeFilter(
                workspace_id="ws-a",
                scope="own",
                agent_id="ag",
                filters=RecallFilter(run_id="r1", exclude_run_id="r2", crew_id="c"),
            )
        )
    )
    for narrowed in (
        RecallFilter(severities=("error",)),
        RecallFilter(entry_types=("decision.made",)),
        RecallFilter(since="2026-01-01T00:00:00Z"),
    ):
        assert off_graph(scope_filter(ScopeFilter(workspace_id="ws-a", scope="own", agent_id="ag", filters=narrowed)))
    crew = ScopeFilter(workspace_id="ws-a", scope="crew_shared", agent_id="ag", crew_id="c")
    assert off_graph(scope_filter(crew))  # should: own, or the crew's memories with importance >= high
    assert not off_graph(nearest_filter("ws-a", ("e1", "e2"), "dense"))  # the linker: exclusions only
    vocab = Recorder()
    narrowed_own = ScopeFilter(
        workspace_id="ws-a", scope="own", agent_id="ag", filters=RecallFilter(severities=("warn",))
    )
    Lowering(vocab)(dense_leg([1.0], scope_filter(narrowed_own), 10))
    Lowering(vocab)(dense_leg([1.0], scope_filter(OWN), 10))
    Lowering(vocab)(DenseLeg([1.0], scope_filter(narrowed_own), 10))  # however the leg was made
    assert vocab.acorn == [True, False, True]
